// attnscope: the command-line client of attnscope-server. Each command lives in a file of its own
// and declares its flags on a CLI11 subcommand (commands.h); this file declares what every command
// shares (the connection flags, --help), parses the command line, runs the command and prints its
// output. Exit codes: 0, 1 when a call fails (the gRPC code and the server's message on stderr), 2
// for a mistake in the command line.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/cli/command.h"
#include "client/cli/commands.h"
#include "client/cli/flags.h"
#include "client/cli/terminal.h"
#include "client/cli/usage.h"
#include "client/client.h"

namespace attnscope::cli {
namespace {

constexpr char kDescription[] =
    "The command-line client of attnscope-server. Prints JSON on stdout: tokens, offsets, shapes "
    "and tensor values as nested arrays, or with --npy_dir the paths of .npy files holding the "
    "tensors. When a call fails it prints the gRPC code and the server's message on stderr and "
    "exits 1; a mistake in the command line exits 2.";

// A mistake in the command line, and whether the whole usage should follow it (when the command
// itself is missing or unknown) rather than one line.
struct Mistake {
  std::string message;
  bool show_usage = false;
};

// -h and --help print the usage wherever they are, before any value is checked.
void AddHelpFlag(CLI::App& app) {
  app.add_flag_callback("-h,--help", [] { throw CLI::CallForHelp(); })
      ->group("")
      ->trigger_on_parse();
}

// Flags of other commands, on each command as hidden options of the same arity: CLI11 then parses
// them with their values, and CheckFlagsApply names the commands that do read them.
// CLI11 gives hidden options no name (Option::get_name), so each keeps the one it was added with.
using ForeignFlags =
    std::map<const CLI::App*, std::vector<std::pair<std::string, const CLI::Option*>>>;

ForeignFlags AddForeignFlags(const std::vector<CLI::App*>& commands) {
  ForeignFlags foreign;
  for (CLI::App* command : commands) {
    for (const CLI::App* other : commands) {
      for (const CLI::Option* option : other->get_options()) {
        const std::string name = option->get_name();
        if (option->get_group().empty() || command->get_option_no_throw(name) != nullptr) {
          continue;
        }
        CLI::Option* added = command->add_option(name);
        if (option->get_expected_max() == 0) {
          added->expected(/*value=*/0);
        } else {
          added->expected(/*value_min=*/0, /*value_max=*/1);
        }
        added->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)->group("");
        foreign[command].emplace_back(name, added);
      }
    }
  }
  return foreign;
}

// Refuses what CLI11 left over (an argument that is no flag, a flag no command reads) and flags
// another command reads, naming those commands.
std::optional<Mistake> CheckFlagsApply(const std::vector<CLI::App*>& commands,
                                       const CLI::App& command,
                                       const ForeignFlags::mapped_type& foreign) {
  const std::vector<std::string> stray = command.remaining();
  if (!stray.empty()) {
    const std::string& first = stray.front();
    if (!absl::StartsWith(first, "--")) {
      return Mistake{absl::StrCat("unexpected argument '", first, "'")};
    }
    return Mistake{absl::StrCat("unknown flag ", first.substr(0, first.find('=')))};
  }
  std::vector<std::string> given;
  for (const auto& [name, option] : foreign) {
    const std::vector<std::string>& values = option->results();
    // --rollout=false asks 'models' for nothing, so it is no mistake there.
    const bool off = option->get_expected_max() == 0 &&
                     std::all_of(values.begin(), values.end(),
                                 [](const std::string& value) { return value == "false"; });
    if (option->count() > 0 && !off) given.push_back(name);
  }
  if (given.empty()) return std::nullopt;
  const std::string flag = *std::min_element(given.begin(), given.end());
  std::vector<std::string> users;
  for (const CLI::App* other : commands) {
    const CLI::Option* option = other->get_option_no_throw(flag);
    if (option != nullptr && !option->get_group().empty()) users.push_back(other->get_name());
  }
  std::sort(users.begin(), users.end());
  return Mistake{absl::StrCat(flag, " does not apply to '", command.get_name(),
                              "'; it is read by: ", absl::StrJoin(users, ", "))};
}

int PrintMistake(const Mistake& mistake, CLI::App& app) {
  std::cerr << "attnscope: " << Printable(mistake.message);
  if (mistake.show_usage) {
    std::cerr << "\n\n" << Usage(app);
  } else {
    std::cerr << " (attnscope --help lists the flags)\n";
  }
  return 2;
}

// Runs `command` once its command line has passed the checks, and prints what it answers.
int Run(const Command& command, const ConnectionFlags& connection,
        const std::optional<std::string>& npy_dir, CLI::App& app) {
  absl::StatusOr<ClientOptions> options = ClientOptionsFrom(connection);
  if (!options.ok()) return PrintMistake({std::string(options.status().message())}, app);
  CallOptions call;
  call.timeout = connection.timeout;
  const std::string npy_path = npy_dir.value_or("");
  if (!npy_path.empty()) {
    std::error_code error;
    std::filesystem::create_directories(npy_path, error);
    if (error) {
      std::cerr << "attnscope: cannot create --npy_dir '" << npy_path << "': " << error.message()
                << "\n";
      return 2;
    }
  }
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(*options);
  if (!client.ok()) {
    std::cerr << "attnscope: " << Printable(client.status().message()) << "\n";
    return 2;
  }
  const TensorWriter writer(npy_path);
  absl::StatusOr<Output> out = command.run(CommandContext{**client, call, writer});
  if (!out.ok() && IsUsageError(out.status())) {
    return PrintMistake({std::string(out.status().message())}, app);
  }
  if (!out.ok()) {
    // A gRPC code is the server's or the channel's word; this side's errors (a file that could not
    // be written) are their message alone.
    std::cerr << "attnscope: "
              << (IsCallStatus(out.status())
                      ? absl::StrCat(absl::StatusCodeToString(out.status().code()), ": ")
                      : "")
              << Printable(out.status().message());
    if (out.status().code() == absl::StatusCode::kDeadlineExceeded) {
      std::cerr << " (the call took longer than --timeout="
                << absl::FormatDuration(call.timeout.value_or(options->default_timeout))
                << "; raise --timeout)";
    }
    std::cerr << "\n";
    return 1;
  }
  if (out->text.has_value()) {
    std::cout << ForTerminal(*out->text, IsTerminal(STDOUT_FILENO));
  } else {
    // Token strings come from the server; a stray invalid UTF-8 byte must not abort the output.
    // JSON escapes the C0 controls itself; a C1 control written as \u00NN is the same JSON.
    std::cout << ForTerminal(
                     out->value.dump(/*indent=*/-1, /*indent_char=*/' ',
                                     /*ensure_ascii=*/false, json::error_handler_t::replace),
                     IsTerminal(STDOUT_FILENO))
              << "\n";
  }
  return out->exit_code;
}

int Main(int argc, char** argv) {
  CLI::App app(kDescription, "attnscope");
  // Set before the commands are added, which inherit them: no CLI11 help flag (AddHelpFlag's
  // replaces it), leftovers kept for CheckFlagsApply to name, and one command at most, so that a
  // command's name after another command is a stray argument rather than a second command.
  app.set_help_flag();
  app.allow_extras();
  app.require_subcommand(/*min=*/0, /*max=*/1);

  ConnectionFlags connection;
  std::optional<std::string> npy_dir;
  const std::vector<Command> registered = {
      AddModelsCommand(app),           AddInfoCommand(app),
      AddTokenizeCommand(app),         AddAttentionCommand(app, &npy_dir),
      AddStreamCommand(app, &npy_dir), AddEncodeCommand(app, &npy_dir),
      AddCrossCommand(app, &npy_dir),  AddHeatmapCommand(app),
      AddAttributeCommand(app),        AddGenerateCommand(app, &npy_dir),
      AddHealthCommand(app),           AddBenchCommand(app),
  };
  std::vector<CLI::App*> commands;
  for (const Command& command : registered) {
    AddConnectionFlags(*command.app, &connection);
    AddHelpFlag(*command.app);
    commands.push_back(command.app);
  }
  AddHelpFlag(app);
  ForeignFlags foreign = AddForeignFlags(commands);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << Usage(app);
    return 0;
  } catch (const CLI::ParseError& error) {
    return PrintMistake({error.what(), /*show_usage=*/app.get_subcommands().empty()}, app);
  }
  // Before the command comes nothing but `help`.
  const std::vector<std::string> stray = app.remaining();
  if (!stray.empty() && stray.front() == "help") {
    std::cout << Usage(app);
    return 0;
  }
  // Connection flags belong after the command: a whole usage text would bury that.
  if (!stray.empty() && absl::StartsWith(stray.front(), "-")) {
    return PrintMistake(
        {absl::StrCat("'", stray.front(),
                      "' before the command: write the command first, then its flags "
                      "(attnscope attention --server HOST:PORT ...); attnscope help lists the "
                      "commands"),
         /*show_usage=*/false},
        app);
  }
  if (app.get_subcommands().empty() || !stray.empty()) {
    return PrintMistake(
        {stray.empty() ? "missing COMMAND" : absl::StrCat("unknown command '", stray.front(), "'"),
         /*show_usage=*/true},
        app);
  }
  const CLI::App* parsed = app.get_subcommands().front();
  if (std::optional<Mistake> mistake = CheckFlagsApply(commands, *parsed, foreign[parsed]);
      mistake.has_value()) {
    return PrintMistake(*mistake, app);
  }
  const Command& command = *std::find_if(registered.begin(), registered.end(),
                                         [&](const Command& c) { return c.app == parsed; });
  return Run(command, connection, npy_dir, app);
}

}  // namespace
}  // namespace attnscope::cli

int main(int argc, char** argv) { return attnscope::cli::Main(argc, argv); }

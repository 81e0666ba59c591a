// What the `attnscope` commands share: how one is registered (its CLI11 subcommand, which declares
// its flags, and the function that runs it), what it prints, and how it says that the command line
// was wrong (exit 2) rather than that a call failed (exit 1).
#ifndef ATTNSCOPE_CLIENT_CLI_COMMAND_H_
#define ATTNSCOPE_CLIENT_CLI_COMMAND_H_

#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/cli/answer_json.h"
#include "client/client.h"

namespace attnscope::cli {

using json = nlohmann::json;

// What a command prints on stdout: JSON, or text (--format text).
struct Output {
  json value;
  std::optional<std::string> text;
  // The process's exit code after printing: 'health' exits 1 when the server is not SERVING, so
  // that a probe running it fails.
  int exit_code = 0;
};

Output JsonOutput(json value);
Output TextOutput(std::string text);

// What a command runs with once its flags are parsed.
struct CommandContext {
  Client& client;
  const CallOptions& call;
  // Renders tensors inline, or into the --npy_dir files.
  const TensorWriter& writer;
};

// A registered command: its subcommand, on which it declared its flags, and the function that runs
// it with their values.
struct Command {
  CLI::App* app = nullptr;
  std::function<absl::StatusOr<Output>(const CommandContext&)> run;
};

// InvalidArgument marked as a mistake in the command line: main prints it with a pointer to --help
// and exits 2. Statuses without the mark are calls that failed (exit 1).
absl::Status UsageError(absl::string_view message);
bool IsUsageError(const absl::Status& status);

}  // namespace attnscope::cli

#endif  // ATTNSCOPE_CLIENT_CLI_COMMAND_H_

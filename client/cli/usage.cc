#include "client/cli/usage.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace attnscope::cli {
namespace {

constexpr size_t kWidth = 100;
constexpr char kConnection[] = "Connection";

// `text` wrapped at kWidth after `first`, which ends where the text starts, the lines after the
// first indented by `indent` columns; ends in a line break.
std::string Wrap(const std::string& first, const std::string& text, size_t indent) {
  std::string out = first;
  const size_t line_start = first.rfind('\n');
  size_t column = line_start == std::string::npos ? first.size() : first.size() - line_start - 1;
  bool line_empty = true;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line_empty && column + 1 + word.size() > kWidth) {
      absl::StrAppend(&out, "\n", std::string(indent, ' '));
      column = indent;
      line_empty = true;
    }
    if (!line_empty) {
      out += ' ';
      ++column;
    }
    absl::StrAppend(&out, word);
    column += word.size();
    line_empty = false;
  }
  return out + "\n";
}

std::string Padded(std::string text, size_t width) {
  if (text.size() < width) text.resize(width, ' ');
  return text;
}

bool Listed(const CLI::Option& option) { return !option.get_group().empty(); }

// "--name VALUE", or "--name" for a switch.
std::string Synopsis(const CLI::Option& option) {
  const std::string value = option.get_type_name();
  return option.get_expected_max() == 0 || value.empty()
             ? option.get_name()
             : absl::StrCat(option.get_name(), " ", value);
}

}  // namespace

std::string Usage(CLI::App& app) {
  std::string out = "usage: attnscope COMMAND [--flag=value | --flag value]...\n\n";
  out += Wrap("", app.get_description(), /*indent=*/0);
  const std::vector<CLI::App*> commands = app.get_subcommands([](CLI::App*) { return true; });

  out += "\nCommands, each with the flags it reads besides the connection flags:\n";
  constexpr size_t kCommandIndent = 14;
  for (CLI::App* command : commands) {
    out += Wrap(Padded("  " + command->get_name(), kCommandIndent), command->get_description(),
                kCommandIndent);
    std::vector<std::string> names;
    for (const CLI::Option* option : command->get_options()) {
      if (Listed(*option) && option->get_group() != kConnection) {
        names.push_back(option->get_name());
      }
    }
    if (!names.empty()) {
      out += Wrap(std::string(kCommandIndent, ' '), absl::StrJoin(names, " "), kCommandIndent);
    }
  }

  // Each group's options in the order of their first declaration, one entry per name and help (a
  // flag shared by several commands is declared by one function, with one help).
  std::vector<std::string> groups = {kConnection};
  std::map<std::string, std::vector<const CLI::Option*>> by_group;
  std::set<std::pair<std::string, std::string>> seen;
  for (CLI::App* command : commands) {
    for (const CLI::Option* option : command->get_options()) {
      if (!Listed(*option)) continue;
      if (!seen.insert({option->get_name(), option->get_description()}).second) continue;
      const std::string& group = option->get_group();
      if (std::find(groups.begin(), groups.end(), group) == groups.end()) groups.push_back(group);
      by_group[group].push_back(option);
    }
  }
  constexpr size_t kFlagIndent = 30;
  for (const std::string& group : groups) {
    absl::StrAppend(&out, "\n", group, ":\n");
    for (const CLI::Option* option : by_group[group]) {
      std::string synopsis = "  " + Synopsis(*option);
      synopsis = synopsis.size() < kFlagIndent
                     ? Padded(std::move(synopsis), kFlagIndent)
                     : absl::StrCat(synopsis, "\n", std::string(kFlagIndent, ' '));
      out += Wrap(synopsis, option->get_description(), kFlagIndent);
    }
  }
  return out;
}

}  // namespace attnscope::cli

#include "tests/integration/deploy_util.h"

#include <httplib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {

std::string SourceDir() { return ATTNSCOPE_SOURCE_DIR; }
std::string BinaryDir() { return ATTNSCOPE_BINARY_DIR; }

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream buffer;
  buffer << file.rdbuf();
  return buffer.str();
}

const std::set<std::string>& ServerFlagNames() {
  static const auto* names = [] {
    auto* names = new std::set<std::string>();
    // absl prints the usage on stdout and exits 1 after --help.
    const CommandResult help = RunCommand({ServerBinary(), "--help"}, absl::Seconds(60));
    static const std::regex kFlagLine(R"(^\s+--([a-z_0-9]+) \()");
    std::istringstream lines(help.stdout_text);
    for (std::string line; std::getline(lines, line);) {
      std::smatch match;
      if (std::regex_search(line, match, kFlagLine)) names->insert(match[1]);
    }
    EXPECT_FALSE(names->empty()) << ServerBinary() << " --help listed no flags:\n"
                                 << help.stdout_text << help.stderr_text;
    return names;
  }();
  return *names;
}

std::pair<std::string, std::string> SplitFlag(const std::string& flag) {
  absl::string_view text = flag;
  absl::ConsumePrefix(&text, "--");
  const size_t equals = text.find('=');
  if (equals == absl::string_view::npos) return {std::string(text), ""};
  return {std::string(text.substr(0, equals)), std::string(text.substr(equals + 1))};
}

int PortOf(const std::string& address) {
  int port = -1;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) return -1;
  return port;
}

std::vector<std::string> DockerStage::All(const std::string& keyword) const {
  std::vector<std::string> out;
  for (const DockerInstruction& instruction : instructions) {
    if (instruction.keyword == keyword) out.push_back(instruction.arguments);
  }
  return out;
}

std::vector<DockerStage> ParseDockerfile(const std::string& text) {
  std::vector<DockerStage> stages;
  std::string pending;
  auto finish = [&stages](std::string instruction) {
    instruction = std::string(absl::StripAsciiWhitespace(instruction));
    if (instruction.empty()) return;
    const size_t space = instruction.find_first_of(" \t");
    DockerInstruction parsed;
    parsed.keyword = absl::AsciiStrToUpper(instruction.substr(0, space));
    if (space != std::string::npos) {
      parsed.arguments = std::string(absl::StripAsciiWhitespace(instruction.substr(space)));
    }
    if (parsed.keyword == "FROM") {
      DockerStage stage;
      std::vector<std::string> words =
          absl::StrSplit(parsed.arguments, absl::ByAnyChar(" \t"), absl::SkipEmpty());
      if (!words.empty()) stage.image = words[0];
      if (words.size() == 3 && absl::AsciiStrToUpper(words[1]) == "AS") stage.name = words[2];
      stages.push_back(std::move(stage));
    } else if (!stages.empty()) {
      stages.back().instructions.push_back(std::move(parsed));
    }
  };
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const absl::string_view stripped = absl::StripLeadingAsciiWhitespace(line);
    if (absl::StartsWith(stripped, "#")) continue;
    absl::string_view content = absl::StripTrailingAsciiWhitespace(line);
    if (absl::ConsumeSuffix(&content, "\\")) {
      absl::StrAppend(&pending, content, " ");
      continue;
    }
    absl::StrAppend(&pending, content);
    finish(std::move(pending));
    pending.clear();
  }
  finish(std::move(pending));
  return stages;
}

std::vector<std::string> ExecForm(const std::string& arguments) {
  const size_t bracket = arguments.find('[');
  if (bracket != std::string::npos) {
    const nlohmann::json array =
        nlohmann::json::parse(arguments.substr(bracket), nullptr, /*allow_exceptions=*/false);
    if (array.is_array()) {
      std::vector<std::string> words;
      for (const auto& word : array)
        words.push_back(word.is_string() ? word.get<std::string>() : "");
      return words;
    }
  }
  return absl::StrSplit(arguments, absl::ByAnyChar(" \t"), absl::SkipEmpty());
}

ImageLayout::ImageLayout() {
  namespace fs = std::filesystem;
  fs::create_directories(root() + "/models");
  fs::create_directories(root() + "/dashboard");
  for (const auto& entry : fs::directory_iterator(SourceDir() + "/checkpoints")) {
    if (entry.is_directory() && fs::exists(entry.path() / "config.json")) {
      fs::create_directory_symlink(entry.path(),
                                   root() + "/models/" + entry.path().filename().string());
      model_names_.push_back(entry.path().filename().string());
    }
  }
  std::sort(model_names_.begin(), model_names_.end());
}

namespace {

absl::StatusOr<HttpAnswer> ToAnswer(const httplib::Result& result, int port,
                                    const std::string& path) {
  if (!result) {
    return absl::UnavailableError(absl::StrCat("POST http://127.0.0.1:", port, path, ": ",
                                               httplib::to_string(result.error())));
  }
  return HttpAnswer{result->status, result->body};
}

httplib::Client LoopbackClient(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(10);
  client.set_read_timeout(60);
  return client;
}

}  // namespace

absl::StatusOr<HttpAnswer> HttpPost(int port, const std::string& path, const std::string& body,
                                    const std::string& content_type) {
  httplib::Client client = LoopbackClient(port);
  return ToAnswer(client.Post(path, body, content_type), port, path);
}

absl::StatusOr<HttpAnswer> HttpPostForm(int port, const std::string& path,
                                        const std::multimap<std::string, std::string>& form) {
  httplib::Client client = LoopbackClient(port);
  httplib::Params params(form.begin(), form.end());
  return ToAnswer(client.Post(path, params), port, path);
}

}  // namespace attnscope::testing

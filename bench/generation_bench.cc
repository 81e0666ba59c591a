// Generation benchmark: the latency of each new token against the length of its context, for
// greedy generation over the KV cache and for the same generation recomputing the whole sequence at
// every step (GenerationOptions::use_cache = false), in the same run on the same weights. With the
// cache a step runs one position, so its latency should stay nearly flat as the context grows; the
// recomputation grows with it.
//
// Usage: generation_bench [--model_dir DIR] [--max_new_tokens 500] [--repeats 3] [--threads 1]
//                         [--recompute 0|1]
// DIR is a Llama checkpoint (default ../shared/models/stories260K).
#include <torch/types.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "models/architectures/transformer.h"
#include "models/generation.h"
#include "models/kernels/gemm.h"

namespace attnscope {
namespace {

using bench::CpuName;
using bench::Median;
using bench::Seconds;

struct BenchOptions {
  std::string model_dir = ATTNSCOPE_SOURCE_DIR "/../shared/models/stories260K";
  int64_t max_new_tokens = 500;
  int repeats = 3;
  int threads = 1;
  // 0: the cached side alone, for models where recomputing hundreds of tokens takes minutes.
  int recompute = 1;
};

// Seconds of each token of one greedy generation after <s>: the time from the previous token (the
// first token's includes the prompt's pass).
std::vector<double> TokenSeconds(const TransformerModel& model, int64_t max_new_tokens,
                                 bool use_cache) {
  GenerationOptions options;
  options.max_new_tokens = max_new_tokens;
  options.use_cache = use_cache;
  std::vector<double> seconds;
  auto last = std::chrono::steady_clock::now();
  const absl::StatusOr<GenerationResult> result =
      Generate(model, {model.config().bos_token_id < 0 ? 0 : model.config().bos_token_id}, options,
               [&](const GeneratedToken&) {
                 const auto now = std::chrono::steady_clock::now();
                 seconds.push_back(Seconds(now - last));
                 last = now;
                 return absl::OkStatus();
               });
  if (!result.ok()) {
    std::fprintf(stderr, "generation failed: %s\n", std::string(result.status().message()).c_str());
    std::exit(1);
  }
  return seconds;
}

int Run(const BenchOptions& options) {
  absl::StatusOr<std::unique_ptr<TransformerModel>> model =
      LoadTransformerModel({.model_dir = options.model_dir, .intra_op_threads = options.threads});
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  const int64_t limit = (*model)->config().max_position_embeddings - 1;
  const int64_t new_tokens = std::min(options.max_new_tokens, limit);
  // Per side, the median over the repeats of each token's latency.
  std::vector<double> cached(new_tokens), recomputed(new_tokens);
  for (const bool use_cache : {true, false}) {
    if (!use_cache && options.recompute == 0) break;
    TokenSeconds(**model, std::min<int64_t>(new_tokens, 16), use_cache);  // warm-up
    std::vector<std::vector<double>> runs;
    for (int r = 0; r < options.repeats; ++r) {
      runs.push_back(TokenSeconds(**model, new_tokens, use_cache));
    }
    for (int64_t i = 0; i < new_tokens; ++i) {
      std::vector<double> values;
      for (const auto& run : runs) values.push_back(run[i]);
      (use_cache ? cached : recomputed)[i] = Median(values);
    }
  }
  std::printf("generation_bench: %s, %s, %d thread(s), greedy after <s>, median of %d runs\n",
              options.model_dir.c_str(), CpuName().c_str(), options.threads, options.repeats);
  std::printf("%10s %14s %16s %8s\n", "context", "cached ms", "recomputed ms", "ratio");
  // Each row: the mean over the 16 tokens whose contexts end at `context`; powers of two, then
  // the last tokens.
  std::vector<int64_t> contexts;
  for (int64_t context = 16; context < new_tokens; context *= 2) contexts.push_back(context);
  contexts.push_back(new_tokens);
  for (const int64_t context : contexts) {
    double sum_cached = 0, sum_recomputed = 0;
    for (int64_t i = context - 16; i < context; ++i) {
      sum_cached += cached[i];
      sum_recomputed += recomputed[i];
    }
    if (options.recompute == 0) {
      std::printf("%10lld %14.3f %16s %8s\n", static_cast<long long>(context),
                  1e3 * sum_cached / 16, "-", "-");
      continue;
    }
    std::printf("%10lld %14.3f %16.3f %8.2f\n", static_cast<long long>(context),
                1e3 * sum_cached / 16, 1e3 * sum_recomputed / 16, sum_recomputed / sum_cached);
  }
  double first = 0, last = 0;
  for (int64_t i = 16; i < 32; ++i) first += cached[i] / 16;
  for (int64_t i = new_tokens - 16; i < new_tokens; ++i) last += cached[i] / 16;
  std::printf("cached: the last 16 tokens take %.2fx the time of tokens 16-31\n", last / first);
  return 0;
}

}  // namespace
}  // namespace attnscope

int main(int argc, char** argv) {
  attnscope::ReexecWithRuntimeEnvironment(argv);
  attnscope::BenchOptions options;
  namespace bench = attnscope::bench;
  const int exit_code = bench::ParseFlags(
      argc, argv, "Usage: generation_bench [flags]",
      {{"model_dir", bench::StringFlag(&options.model_dir,
                                       "a Llama checkpoint; default ../shared/models/stories260K")},
       {"max_new_tokens",
        bench::IntFlag(&options.max_new_tokens, /*min=*/32, /*max=*/1024,
                       "tokens generated per run (at most max_position_embeddings - 1); "
                       "default 500")},
       {"repeats",
        bench::IntFlag(&options.repeats, /*min=*/1, /*max=*/1000, "runs of each side; default 3")},
       {"threads", bench::IntFlag(&options.threads, /*min=*/0, /*max=*/1024,
                                  "intra-op threads, 0 = every core; default 1")},
       {"recompute",
        bench::IntFlag(&options.recompute, /*min=*/0, /*max=*/1,
                       "1: also time recomputing the whole sequence at every step; 0: the "
                       "cache alone (for large models); default 1")}});
  if (exit_code >= 0) return exit_code;
  if (!std::ifstream(options.model_dir + "/config.json")) {
    std::fprintf(stderr, "--model_dir '%s': expected a Llama checkpoint directory (config.json)\n",
                 options.model_dir.c_str());
    return 2;
  }
  return attnscope::Run(options);
}

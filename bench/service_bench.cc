// Service benchmark: GetAttention end to end through the client library against a real
// attnscope-server on loopback (BERT-base shape, 128 tokens, every layer and head, float16),
// against the engine's forward pass alone on the same weights and ids in this process, so the cost
// of the service layer (tokenization, post-processing, float16 encoding, gRPC, client decoding) is
// known. Engine and service calls alternate so that both see the same machine load.
//
// Usage: service_bench [--dir DIR] [--repeats 30] [--python /usr/bin/python3]
#include <torch/types.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "client/client.h"
#include "models/architectures/transformer.h"
#include "models/kernels/gemm.h"
#include "models/tokenizers/tokenizer.h"
#include "tests/integration/integration_util.h"

namespace attnscope {
namespace {

using bench::Median;
using bench::Seconds;

struct BenchOptions {
  std::string dir = "/tmp/attnscope-bench-bert-base";
  int repeats = 30;
  std::string python = "/usr/bin/python3";
};

double Mean(const std::vector<double>& values) {
  double sum = 0;
  for (const double value : values) sum += value;
  return values.empty() ? 0 : sum / static_cast<double>(values.size());
}

// The server's own GetAttention handler and forward-pass times, summed over its calls.
struct ServerTimes {
  bool ok = false;
  double count = 0;
  double handler_seconds = 0;
  double forward_seconds = 0;
};

ServerTimes ScrapeServerTimes(int metrics_port) {
  const absl::StatusOr<std::string> body = testing::HttpGet(metrics_port, "/metrics");
  if (!body.ok()) return {};
  const std::vector<testing::MetricSample> samples = testing::ParseMetrics(*body);
  auto value = [&](const std::string& name, const std::string& label, const std::string& is) {
    const std::vector<testing::MetricSample> found =
        testing::FindSamples(samples, name, {{label, is}});
    // Summed over the other labels (transport, model).
    if (found.empty()) return std::optional<double>();
    double sum = 0;
    for (const testing::MetricSample& sample : found) sum += sample.value;
    return std::optional<double>(sum);
  };
  const auto count = value("attnscope_request_duration_seconds_count", "rpc", "GetAttention");
  const auto handler = value("attnscope_request_duration_seconds_sum", "rpc", "GetAttention");
  const auto forward = value("attnscope_inference_duration_seconds_sum", "model", "bert");
  if (!count || !handler || !forward) return {};
  return {true, *count, *handler, *forward};
}

int Run(const BenchOptions& options) {
  const std::string prepare =
      absl::StrCat(options.python, " ", ATTNSCOPE_SOURCE_DIR,
                   "/bench/eager_reference.py --prepare_only --out ", options.dir);
  if (std::system(prepare.c_str()) != 0) {
    std::fprintf(stderr, "could not prepare the checkpoint: %s\n", prepare.c_str());
    return 1;
  }
  // 126 words of the synthetic vocabulary ("w<id>" is token <id>) + [CLS] and [SEP] = 128 tokens.
  std::string text;
  for (int i = 0; i < 126; ++i) absl::StrAppend(&text, i == 0 ? "" : " ", "w", 1000 + 7 * i);

  testing::ServerProcess::Options server_options;
  server_options.models = {"bert=" + options.dir};
  server_options.metrics_port = testing::FreeTcpPort();
  auto server = testing::ServerProcess::Start(server_options);
  if (!server.ok()) {
    std::fprintf(stderr, "server: %s\n", server.status().ToString().c_str());
    return 1;
  }
  const std::unique_ptr<Client> client = (*server)->NewClient();

  auto model = LoadTransformerModel({.model_dir = options.dir});
  auto tokenizer = LoadTokenizer(options.dir);
  if (!model.ok() || !tokenizer.ok()) {
    std::fprintf(stderr, "engine: %s %s\n", model.status().ToString().c_str(),
                 tokenizer.status().ToString().c_str());
    return 1;
  }
  auto encoding = (*tokenizer)->Encode(text, EncodeOptions());
  if (!encoding.ok() || encoding->size() != 128) {
    std::fprintf(stderr, "tokenization gave %zu tokens, expected 128\n",
                 encoding.ok() ? encoding->size() : 0);
    return 1;
  }
  ForwardInput input;
  input.input_ids = torch::tensor(encoding->input_ids, torch::kInt64).unsqueeze(0);
  ForwardOptions forward;
  forward.output_attentions = true;

  v1::GetAttentionRequest request;
  request.set_model("bert");
  request.set_text(text);
  request.set_dtype(v1::DTYPE_FLOAT16);

  std::vector<double> engine_times;
  std::vector<double> service_times;
  std::vector<double> pair_ratios;
  ServerTimes before;
  size_t attention_values = 0;
  for (int i = 0; i < options.repeats + 2; ++i) {
    if (i == 2) before = ScrapeServerTimes((*server)->metrics_port());
    auto start = std::chrono::steady_clock::now();
    auto out = (*model)->Forward(input, forward);
    const double engine = Seconds(std::chrono::steady_clock::now() - start);
    start = std::chrono::steady_clock::now();
    auto answer = client->GetAttention(request);
    const double service = Seconds(std::chrono::steady_clock::now() - start);
    if (!out.ok() || !answer.ok()) {
      std::fprintf(stderr, "call failed: %s %s\n", out.status().ToString().c_str(),
                   answer.status().ToString().c_str());
      return 1;
    }
    attention_values = answer->attentions.values.size();
    if (i >= 2) {  // the first two of each are warm-up
      engine_times.push_back(engine);
      service_times.push_back(service);
      pair_ratios.push_back(service / engine);
    }
  }
  const ServerTimes after = ScrapeServerTimes((*server)->metrics_port());
  const double engine = Median(engine_times);
  const double service = Median(service_times);
  std::printf("GetAttention, BERT-base shape, 128 tokens, 12 layers x 12 heads, float16\n");
  std::printf("attention values per response: %zu (%.1f MB as float16)\n", attention_values,
              attention_values * 2 / 1e6);
  std::printf("engine forward alone:        median %.1f ms\n", engine * 1e3);
  std::printf("GetAttention through client: median %.1f ms\n", service * 1e3);
  std::printf("service overhead: %.1f ms, ratio service / engine %.3f (target <= 1.15)\n",
              (service - engine) * 1e3, service / engine);
  // Engine and service calls alternate; the ratio within each pair cancels load that drifts over
  // the run (neighbours on a shared VM), which the ratio of the two medians does not.
  std::printf("median of the per-call ratios service / engine: %.3f\n", Median(pair_ratios));
  if (after.ok && before.ok && after.count > before.count) {
    const double calls = after.count - before.count;
    const double handler = (after.handler_seconds - before.handler_seconds) / calls;
    const double forward = (after.forward_seconds - before.forward_seconds) / calls;
    std::printf(
        "server side (its /metrics, mean of the measured calls): forward %.1f ms, handler %.1f ms "
        "(%.1f ms beyond the forward); transport and client decoding: %.1f ms; in-process "
        "forward mean %.1f ms\n",
        forward * 1e3, handler * 1e3, (handler - forward) * 1e3,
        (Mean(service_times) - handler) * 1e3, Mean(engine_times) * 1e3);
  }
  return 0;
}

}  // namespace
}  // namespace attnscope

int main(int argc, char** argv) {
  // Measure under the same OpenMP wait policy as attnscope-server.
  attnscope::ReexecWithRuntimeEnvironment(argv);
  attnscope::RetainFreedHeapMemory();
  attnscope::BenchOptions options;
  namespace bench = attnscope::bench;
  const int exit_code = bench::ParseFlags(
      argc, argv, "Usage: service_bench [flags]",
      {{"dir", bench::StringFlag(&options.dir,
                                 "the generated checkpoint, kept between runs; default "
                                 "/tmp/attnscope-bench-bert-base")},
       {"repeats", bench::IntFlag(&options.repeats, /*min=*/1, /*max=*/100000,
                                  "timed calls of each side; default 30")},
       {"python", bench::StringFlag(&options.python,
                                    "the interpreter that makes the checkpoint; default "
                                    "/usr/bin/python3")}});
  if (exit_code >= 0) return exit_code;
  if (!bench::CheckDirAndPython(options.dir, options.python)) return 2;
  return attnscope::Run(options);
}

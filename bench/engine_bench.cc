// Engine benchmark: a base-sized forward pass with attentions (BERT-base, RoBERTa-base or
// GPT-2-small shaped), timed against an eager PyTorch forward of the same weights
// (bench/eager_reference.py, run by this tool in the same run), against ONNX Runtime's CPU forward
// of the same model exported to ONNX (bench/onnxruntime/onnxruntime_reference.js, in rounds
// alternating with the engine's), against the machine's measured GEMM rate and against the floor
// that its measured float32 FMA peak puts under any forward of the model; plus the load time and
// resident memory of the float32 safetensors checkpoint.
//
// Usage: engine_bench [--family bert|roberta|gpt2] [--dir DIR] [--tokens 128] [--repeats 30]
//                     [--threads 0] [--python /usr/bin/python3] [--onnxruntime DIR]
//                     [--compute_dtype float32|bfloat16]
// With --compute_dtype=bfloat16 the engine's timed passes are bfloat16's, and the error of its
// outputs against the same engine in float32 is printed (every layer's attention probabilities,
// the last hidden state).
// DIR keeps the generated checkpoint between runs (default /tmp/attnscope-bench-FAMILY-base).
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/types.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "models/architectures/transformer.h"
#include "models/kernels/blas_check.h"
#include "models/kernels/fused_ops.h"
#include "models/kernels/gemm.h"
#include "nlohmann/json.hpp"

namespace attnscope {
namespace {

using bench::Median;
using bench::Seconds;

struct BenchOptions {
  std::string family = "bert";
  std::string dir;  // empty: /tmp/attnscope-bench-<family>-base
  int64_t tokens = 128;
  int repeats = 30;
  std::string python = "/usr/bin/python3";
  int threads = 0;  // intra-op threads of the engine, 0 = every core
  // The folder whose node_modules hold onnxruntime-node (the onnxruntime_reference target's);
  // empty: no ONNX Runtime side.
  std::string onnxruntime = ATTNSCOPE_ONNXRUNTIME_DIR;
  // The engine's projections: float32, or bfloat16 (then also measured against float32's outputs).
  std::string compute_dtype = "float32";
};

// Runs `command` (a shell line) and parses the last line it prints as JSON; nothing (after
// printing what it said) when it fails.
std::optional<nlohmann::json> RunJsonCommand(const std::string& command, const char* what) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::string output;
  std::array<char, 4096> buffer;
  while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) output += buffer.data();
  if (pclose(pipe) != 0) {
    std::fprintf(stderr, "%s failed (%s):\n%s\n", what, command.c_str(), output.c_str());
    return std::nullopt;
  }
  const size_t last_line = output.find_last_of('\n', output.size() >= 2 ? output.size() - 2 : 0);
  nlohmann::json parsed = nlohmann::json::parse(
      last_line == std::string::npos ? output : output.substr(last_line + 1), nullptr,
      /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    std::fprintf(stderr, "%s: expected a JSON line, got:\n%s\n", what, output.c_str());
    return std::nullopt;
  }
  return parsed;
}

// The largest absolute difference between the engine's outputs and the 16 values of the first
// hidden state and of the last layer's head-0 last attention row a reference printed.
double MaxDifference(const ForwardOutput& out, const nlohmann::json& reference) {
  double max_diff = 0;
  const auto hidden = reference["last_hidden_state_row0"].get<std::vector<double>>();
  const auto row = reference["attention_last_layer_head0_last_row"].get<std::vector<double>>();
  for (size_t i = 0; i < hidden.size(); ++i) {
    max_diff =
        std::max(max_diff, std::abs(out.last_hidden_state[0][0][i].item<double>() - hidden[i]));
  }
  for (size_t i = 0; i < row.size(); ++i) {
    max_diff =
        std::max(max_diff, std::abs(out.attentions.back()[0][0][-1][i].item<double>() - row[i]));
  }
  return max_diff;
}

// kB values of "RssAnon:" / "RssFile:" in /proc/self/status.
int64_t StatusKb(const std::string& key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(key, 0) == 0) return std::atoll(line.c_str() + key.size());
  }
  return -1;
}

// Best-of-`repeats` rate of an n x n x n Sgemm (oneDNN), in GFLOP/s.
double MeasureSgemmGflops(int64_t n, int repeats) {
  const torch::Tensor a = torch::randn({n, n});
  const torch::Tensor b = torch::randn({n, n});
  torch::Tensor c = torch::empty({n, n});
  double best = 1e30;
  for (int i = 0; i <= repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    Sgemm(false, false, n, n, n, 1.0f, a.data_ptr<float>(), n, b.data_ptr<float>(), n, 0.0f,
          c.data_ptr<float>(), n);
    if (i > 0) best = std::min(best, Seconds(std::chrono::steady_clock::now() - start));
  }
  return 2.0 * n * n * n / best / 1e9;
}

// The float32 multiply-add peak of `threads` cores in GFLOP/s: each thread runs chains of FMAs
// with no loads, on 512-bit vectors where the engine's AVX-512 kernels run (HasAvx512()) and on
// 256-bit ones otherwise, 24 independent chains (enough to cover the FMA latency of any x86 core
// with two FMA units); best of `repeats`. No float32 forward can do its products faster.
// GCC 12's AVX-512 headers trip its own -Wuninitialized in set1 (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) double FmaLoopAvx512(int64_t iterations) {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(1e-3f * static_cast<float>(i));
  const __m512 b = _mm512_set1_ps(0.999f);
  const __m512 c = _mm512_set1_ps(1e-6f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_fmadd_ps(acc[i], b, c);
  }
  float sum = 0;
  for (int i = 0; i < 24; ++i) sum += _mm512_reduce_add_ps(acc[i]);
  return static_cast<double>(sum);
}
#pragma GCC diagnostic pop

__attribute__((target("avx2,fma"))) double FmaLoopAvx2(int64_t iterations) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(1e-3f * static_cast<float>(i));
  const __m256 b = _mm256_set1_ps(0.999f);
  const __m256 c = _mm256_set1_ps(1e-6f);
  for (int64_t it = 0; it < 2 * iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], b, c);
  }
  alignas(32) float lanes[8];
  float sum = 0;
  for (int i = 0; i < 12; ++i) {
    _mm256_store_ps(lanes, acc[i]);
    for (const float lane : lanes) sum += lane;
  }
  return static_cast<double>(sum);
}

double MeasureFmaPeakGflops(int threads, int repeats) {
  // 24 FMAs of 16 lanes (or twice 12 of 8) per iteration: 768 floating-point operations.
  constexpr int64_t kIterations = 4'000'000;
  const bool avx512 = HasAvx512();
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    std::vector<double> sums(static_cast<size_t>(threads));
    std::vector<std::thread> workers;
    const auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&sums, t, avx512] {
        sums[static_cast<size_t>(t)] =
            avx512 ? FmaLoopAvx512(kIterations) : FmaLoopAvx2(kIterations);
      });
    }
    for (std::thread& worker : workers) worker.join();
    best = std::min(best, Seconds(std::chrono::steady_clock::now() - start));
    // The sums keep the loops from being optimised away.
    if (sums[0] == 0.123) std::printf(" ");
  }
  return 768.0 * kIterations * threads / best / 1e9;
}

// Median time of `body` over `repeats` runs after one warm-up, in seconds.
template <typename Body>
double MedianSeconds(int repeats, Body&& body) {
  body();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    body();
    times.push_back(Seconds(std::chrono::steady_clock::now() - start));
  }
  return Median(times);
}

// Median time of the projections of `layers` layers as the engine runs them, each layer with its
// own weights: a forward pass streams every layer's weights from memory (about 340 MB at BERT-base
// shape), which timing one layer's 28 MB over and over (partly cache-resident) would hide.
double ProjectionSeconds(int64_t layers, int64_t tokens, int64_t hidden, int64_t inner,
                         int repeats) {
  struct LayerWeights {
    std::vector<torch::Tensor> qkv;
    std::vector<torch::Tensor> qkv_bias;
    torch::Tensor attention_out, up, down, bias, up_bias;
  };
  const torch::Tensor x = torch::randn({1, tokens, hidden});
  const torch::Tensor x_inner = torch::randn({1, tokens, inner});
  std::vector<LayerWeights> weights(static_cast<size_t>(layers));
  for (LayerWeights& w : weights) {
    w.qkv = {torch::randn({hidden, hidden}), torch::randn({hidden, hidden}),
             torch::randn({hidden, hidden})};
    w.qkv_bias = {torch::randn({hidden}), torch::randn({hidden}), torch::randn({hidden})};
    w.attention_out = torch::randn({hidden, hidden});
    w.up = torch::randn({inner, hidden});
    w.down = torch::randn({hidden, inner});
    w.bias = torch::randn({hidden});
    w.up_bias = torch::randn({inner});
  }
  return MedianSeconds(repeats, [&] {
    for (const LayerWeights& w : weights) {
      LinearGroup(x, w.qkv, w.qkv_bias);
      Linear(x, w.attention_out, w.bias, /*residual=*/x);
      Linear(x, w.up, w.up_bias);
      Linear(x_inner, w.down, w.bias, /*residual=*/x);
    }
  });
}

// Best-of-`repeats` rate of reading `bytes` of float32 once (a torch::sum over them), in GB/s.
double MeasureReadGigabytesPerSecond(int64_t bytes, int repeats) {
  const torch::Tensor data = torch::rand({bytes / 4});
  double best = 1e30;
  for (int i = 0; i <= repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const float sum = data.sum().item<float>();
    if (sum < 0) std::abort();  // keeps the read; never true for rand's [0, 1) values
    if (i > 0) best = std::min(best, Seconds(std::chrono::steady_clock::now() - start));
  }
  return static_cast<double>(bytes) / best / 1e9;
}

// The error of `out` (a pass in another compute dtype) against the same pass in float32: largest
// and mean absolute difference of the attention probabilities over every layer and head, and of the
// last hidden state (also relative to its largest magnitude).
void PrintErrorAgainstFloat32(const BenchOptions& options, const ForwardInput& input,
                              const ForwardOutput& out) {
  auto float_model =
      LoadTransformerModel({.model_dir = options.dir, .intra_op_threads = options.threads});
  ForwardOptions forward;
  forward.output_attentions = true;
  forward.output_logits = false;
  const ForwardOutput expected = *(*float_model)->Forward(input, forward);
  const torch::Tensor attentions = torch::stack(out.attentions);
  const torch::Tensor attention_error = (attentions - torch::stack(expected.attentions)).abs();
  const torch::Tensor hidden_error = (out.last_hidden_state - expected.last_hidden_state).abs();
  std::printf(
      "%s against float32: attention probabilities max %.2e, mean %.2e (largest probability "
      "%.3f); last hidden state max %.2e, mean %.2e (%.2e of its largest magnitude %.2f)\n",
      options.compute_dtype.c_str(), attention_error.max().item<double>(),
      attention_error.mean().item<double>(), attentions.max().item<double>(),
      hidden_error.max().item<double>(), hidden_error.mean().item<double>(),
      hidden_error.max().item<double>() / expected.last_hidden_state.abs().max().item<double>(),
      expected.last_hidden_state.abs().max().item<double>());
}

int Run(const BenchOptions& options) {
  // The reference gets as many intra-op threads as the engine will use.
  const int threads = options.threads > 0
                          ? options.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::string script = std::string(ATTNSCOPE_SOURCE_DIR) + "/bench/eager_reference.py";
  const bool with_onnxruntime = !options.onnxruntime.empty();
  const std::string onnx_model = options.dir + "/model-" + std::to_string(options.tokens) + ".onnx";
  std::string command = options.python + " " + script + " --family " + options.family + " --out " +
                        options.dir + " --tokens " + std::to_string(options.tokens) +
                        " --repeats " + std::to_string(options.repeats) + " --threads " +
                        std::to_string(threads);
  if (with_onnxruntime) command += " --onnx " + onnx_model;
  std::fprintf(stderr, "running the eager PyTorch reference: %s\n", command.c_str());
  const std::optional<nlohmann::json> reference =
      RunJsonCommand(command, "the eager PyTorch reference");
  if (!reference) return 1;

  // Load: time and resident memory beyond the mapped file (anonymous pages).
  const int64_t anon_before = StatusKb("RssAnon:");
  const int64_t file_before = StatusKb("RssFile:");
  const auto load_start = std::chrono::steady_clock::now();
  const ComputeDtype compute_dtype = *ParseComputeDtype(options.compute_dtype);
  auto model = LoadTransformerModel({.model_dir = options.dir,
                                     .intra_op_threads = options.threads,
                                     .compute_dtype = compute_dtype});
  const double load_seconds = Seconds(std::chrono::steady_clock::now() - load_start);
  if (!model.ok()) {
    std::fprintf(stderr, "load failed: %s\n", model.status().ToString().c_str());
    return 1;
  }
  const int64_t anon_after_load = StatusKb("RssAnon:");
  const int64_t file_after_load = StatusKb("RssFile:");

  std::ifstream ids_file(options.dir + "/input_ids.json");
  const std::vector<int64_t> ids = nlohmann::json::parse(ids_file).get<std::vector<int64_t>>();
  ForwardInput input;
  input.input_ids = torch::tensor(ids, torch::kInt64).unsqueeze(0);
  ForwardOptions forward;
  forward.output_attentions = true;
  // The reference computes no language-model head (a GetAttention needs none).
  forward.output_logits = false;

  ForwardOutput out;
  for (int i = 0; i < 2; ++i) out = *(*model)->Forward(input, forward);
  // The forward passes and oneDNN's GEMM rate are measured in alternating rounds, so that both see
  // the same machine: this VM's speed drifts by about 15% from minute to minute. torch::mm
  // (OpenBLAS) is measured after them all: its worker threads spin for a while after each call and
  // would slow the next forward passes on a machine with few cores. The bound takes the best rate
  // of all, the engine its median time: the comparison errs against the engine. ONNX Runtime
  // runs in a process of its own in each round (its session made anew, not timed), after the
  // engine's passes: a second process spinning beside the engine would slow both. Each side's
  // timed passes follow kWarmupPasses untimed ones in every round: the first engine pass after the
  // other side's round ran 74-84 ms where the rest ran 62-70, and a new ONNX Runtime session's
  // third and fourth runs 101-130 ms where the rest ran 78-92 (at 512 tokens its first five
  // 700-960 ms where the rest ran 360-550).
  constexpr int kRounds = 5;
  constexpr int kWarmupPasses = 8;
  const int per_round = std::max(1, options.repeats / kRounds);
  const std::string onnxruntime_command =
      "NODE_PATH='" + options.onnxruntime + "/node_modules' '" ATTNSCOPE_NODE "' '" +
      ATTNSCOPE_SOURCE_DIR + "/bench/onnxruntime/onnxruntime_reference.js' --model '" + onnx_model +
      "' --ids '" + options.dir + "/input_ids.json' --threads " + std::to_string(threads) +
      " --repeats " + std::to_string(per_round) + " --warmup " + std::to_string(kWarmupPasses);
  std::vector<double> times;
  std::vector<double> onnxruntime_times;
  nlohmann::json onnxruntime;
  double gemm_gflops = 0;
  double fma_peak_gflops = 0;
  for (int round = 0; round < kRounds; ++round) {
    for (int i = 0; i < kWarmupPasses; ++i) out = *(*model)->Forward(input, forward);
    for (int i = 0; i < per_round; ++i) {
      const auto start = std::chrono::steady_clock::now();
      out = *(*model)->Forward(input, forward);
      times.push_back(Seconds(std::chrono::steady_clock::now() - start));
    }
    if (with_onnxruntime) {
      if (round == 0)
        std::fprintf(stderr, "running ONNX Runtime: %s\n", onnxruntime_command.c_str());
      std::optional<nlohmann::json> answer = RunJsonCommand(onnxruntime_command, "ONNX Runtime");
      if (!answer) return 1;
      onnxruntime = std::move(*answer);
      for (const double seconds : onnxruntime["onnxruntime_seconds"]) {
        onnxruntime_times.push_back(seconds);
      }
    }
    gemm_gflops = std::max({gemm_gflops, MeasureSgemmGflops(/*n=*/768, /*repeats=*/8),
                            MeasureSgemmGflops(/*n=*/1024, /*repeats=*/4)});
    fma_peak_gflops =
        std::max(fma_peak_gflops, MeasureFmaPeakGflops(at::get_num_threads(), /*repeats=*/3));
  }
  gemm_gflops = std::max({gemm_gflops, MeasureMatmulGflops(/*n=*/768, /*repeats=*/20),
                          MeasureMatmulGflops(/*n=*/1024, /*repeats=*/10)});
  const double engine_seconds = Median(times);
  const double engine_min = *std::min_element(times.begin(), times.end());

  // Agreement with the references on the same weights and ids.
  const double max_diff = MaxDifference(out, *reference);
  if (compute_dtype != ComputeDtype::kFloat32) PrintErrorAgainstFloat32(options, input, out);

  // GEMM-bound time: the model's multiply-adds at the measured float32 GEMM rate.
  const ModelConfig& cfg = (*model)->config();
  const double s = static_cast<double>(ids.size());
  const double h = static_cast<double>(cfg.hidden_size);
  const double inner = static_cast<double>(cfg.intermediate_size);
  const double flops = static_cast<double>(cfg.num_hidden_layers) *
                       (2 * s * (4 * h * h + 2 * h * inner) + 2 * 2 * s * s * h);
  const double gemm_bound_seconds = flops / (gemm_gflops * 1e9);
  // The same bound at the model's own GEMM shapes: the projections timed as the engine runs them,
  // the attention products (2 * 2 * s * s * h per layer) at the square-GEMM rate.
  const double attention_flops = static_cast<double>(cfg.num_hidden_layers) * 2 * 2 * s * s * h;
  const double shaped_bound_seconds =
      ProjectionSeconds(cfg.num_hidden_layers, static_cast<int64_t>(s), cfg.hidden_size,
                        cfg.intermediate_size, /*repeats=*/10) +
      attention_flops / (gemm_gflops * 1e9);
  // The projections' weights, which every forward pass reads from memory once.
  const double weight_bytes =
      static_cast<double>(cfg.num_hidden_layers) * (4 * h * h + 2 * h * inner) * sizeof(float);
  const double read_gigabytes_per_second =
      MeasureReadGigabytesPerSecond(static_cast<int64_t>(weight_bytes), /*repeats=*/5);
  const double weight_read_seconds = weight_bytes / (read_gigabytes_per_second * 1e9);
  const double eager_seconds = (*reference)["eager_seconds_median"].get<double>();
  // The floor of any float32 forward of this model: its multiply-adds at the cores' FMA peak.
  const double fma_floor_seconds = flops / (fma_peak_gflops * 1e9);

  std::printf("%s: %lld layers, hidden %lld, %lld heads, %lld tokens, %.2f GFLOP\n",
              options.family.c_str(), static_cast<long long>(cfg.num_hidden_layers),
              static_cast<long long>(cfg.hidden_size),
              static_cast<long long>(cfg.num_attention_heads), static_cast<long long>(ids.size()),
              flops / 1e9);
  std::printf("threads: libtorch %d, python torch %d\n", at::get_num_threads(),
              (*reference)["torch_threads"].get<int>());
  std::printf("engine forward (with attentions): median %.1f ms, min %.1f ms\n",
              engine_seconds * 1e3, engine_min * 1e3);
  std::printf("eager PyTorch forward:            median %.1f ms, min %.1f ms\n",
              eager_seconds * 1e3, (*reference)["eager_seconds_min"].get<double>() * 1e3);
  std::printf("measured GEMM rate: %.1f GFLOP/s -> GEMM-bound time %.1f ms\n", gemm_gflops,
              gemm_bound_seconds * 1e3);
  std::printf("float32 FMA peak (%d threads, %s): %.1f GFLOP/s -> floor of any float32 forward %.1f "
              "ms\n",
              at::get_num_threads(), HasAvx512() ? "512-bit" : "256-bit", fma_peak_gflops,
              fma_floor_seconds * 1e3);
  std::printf("GEMMs at the model's own shapes (engine Linear, median): %.1f ms = %.1f GFLOP/s\n",
              shaped_bound_seconds * 1e3, flops / shaped_bound_seconds / 1e9);
  std::printf(
      "projection weights read per forward: %.0f MB; memory read rate %.1f GB/s -> %.1f ms "
      "(GEMM-bound time + this read: %.1f ms)\n",
      weight_bytes / 1e6, read_gigabytes_per_second, weight_read_seconds * 1e3,
      (gemm_bound_seconds + weight_read_seconds) * 1e3);
  if (with_onnxruntime) {
    const double onnxruntime_seconds = Median(onnxruntime_times);
    std::printf("ONNX Runtime %s forward:        median %.1f ms, min %.1f ms\n",
                onnxruntime["onnxruntime_version"].get<std::string>().c_str(),
                onnxruntime_seconds * 1e3,
                *std::min_element(onnxruntime_times.begin(), onnxruntime_times.end()) * 1e3);
    // The targets: bfloat16 0.5; float32 0.75 on the AVX-512 path, 1.0 on the portable one.
    std::printf("ratio engine / ONNX Runtime: %.3f (target <= %s)\n",
                engine_seconds / onnxruntime_seconds,
                options.compute_dtype == "bfloat16" ? "0.5" : (HasAvx512() ? "0.75" : "1.0"));
    std::printf("ratio float32 floor / ONNX Runtime: %.3f (no float32 forward goes below it)\n",
                fma_floor_seconds / onnxruntime_seconds);
    std::printf("max |engine - ONNX Runtime| on sampled outputs: %.2e\n",
                MaxDifference(out, onnxruntime));
  }
  std::printf("ratio engine / eager PyTorch: %.3f (target <= 0.8)\n",
              engine_seconds / eager_seconds);
  std::printf("ratio engine / float32 floor: %.3f\n", engine_seconds / fma_floor_seconds);
  std::printf("ratio engine / GEMM-bound:    %.3f (target <= 1.3)\n",
              engine_seconds / gemm_bound_seconds);
  std::printf("ratio engine / GEMMs at the model's shapes: %.3f (time outside the GEMMs)\n",
              engine_seconds / shaped_bound_seconds);
  std::printf("max |engine - reference| on sampled outputs: %.2e\n", max_diff);
  std::printf(
      "load: %.3f s; resident memory added: anonymous %.1f MB, file-backed %.1f MB "
      "(checkpoint file %.1f MB)\n",
      load_seconds, (anon_after_load - anon_before) / 1024.0,
      (file_after_load - file_before) / 1024.0,
      static_cast<double>(std::filesystem::file_size(options.dir + "/model.safetensors")) / 1e6);
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
      argc, argv, "Usage: engine_bench [flags]",
      {{"family", bench::StringFlag(&options.family,
                                    "bert (BertModel), roberta (RobertaModel) or gpt2 "
                                    "(GPT2LMHeadModel, without its head); default bert")},
       {"dir", bench::StringFlag(&options.dir,
                                 "the generated checkpoint, kept between runs; default "
                                 "/tmp/attnscope-bench-<family>-base")},
       {"tokens",
        bench::IntFlag(&options.tokens, /*min=*/1, /*max=*/512, "input length; default 128")},
       {"repeats", bench::IntFlag(&options.repeats, /*min=*/1, /*max=*/100000,
                                  "timed forward passes of each side; default 30")},
       {"threads", bench::IntFlag(&options.threads, /*min=*/0, /*max=*/1024,
                                  "intra-op threads of both sides; default 0, every core")},
       {"python", bench::StringFlag(&options.python,
                                    "the interpreter of the PyTorch reference; default "
                                    "/usr/bin/python3")},
       {"onnxruntime", bench::OptionalStringFlag(
                           &options.onnxruntime,
                           "the folder whose node_modules hold onnxruntime-node; default the "
                           "build's (cmake --build build --target onnxruntime_reference); "
                           "empty: no ONNX Runtime side")},
       {"compute_dtype",
        bench::StringFlag(&options.compute_dtype,
                          "the engine's projections: float32 or bfloat16 (needs AVX512_BF16); "
                          "default float32")}});
  if (exit_code >= 0) return exit_code;
  if (options.family != "bert" && options.family != "roberta" && options.family != "gpt2") {
    std::fprintf(stderr, "--family '%s': expected bert, roberta or gpt2\n", options.family.c_str());
    return 2;
  }
  if (const auto dtype = attnscope::ParseComputeDtype(options.compute_dtype); !dtype.ok()) {
    std::fprintf(stderr, "%s\n", std::string(dtype.status().message()).c_str());
    return 2;
  }
  if (options.dir.empty()) options.dir = "/tmp/attnscope-bench-" + options.family + "-base";
  if (!bench::CheckDirAndPython(options.dir, options.python)) return 2;
  if (!options.onnxruntime.empty() &&
      !std::filesystem::exists(options.onnxruntime + "/node_modules/onnxruntime-node")) {
    std::fprintf(stderr,
                 "--onnxruntime '%s': expected node_modules/onnxruntime-node there, got none; "
                 "install it with cmake --build build --target onnxruntime_reference, or pass "
                 "--onnxruntime= to leave ONNX Runtime out\n",
                 options.onnxruntime.c_str());
    return 2;
  }
  return attnscope::Run(options);
}

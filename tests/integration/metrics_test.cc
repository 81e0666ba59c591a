// /metrics scraped over real HTTP (a plain socket GET) after a known number of calls: request
// counters by rpc and code, latency and per-input histogram counts, inference passes by model,
// model info and load time, in-flight gauge and process memory.
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "gtest/gtest.h"
#include "models/kernels/row_kernel.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

// The value of the single matching series; a failure (and -1) when there is none or several.
double Value(const std::vector<MetricSample>& samples, const std::string& name,
             const std::map<std::string, std::string>& labels = {}) {
  const std::vector<MetricSample> found = FindSamples(samples, name, labels);
  EXPECT_EQ(found.size(), 1u) << name;
  return found.size() == 1 ? found[0].value : -1;
}

TEST(MetricsTest, CountersAndHistogramsMatchTheCallsMade) {
  ServerProcess::Options options;
  options.models = {"bert=" + TinyBertDir(), "llama=" + Stories260kDir()};
  options.metrics_port = FreeTcpPort();
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_EQ((*server)->metrics_port(), options.metrics_port);
  std::unique_ptr<Client> client = (*server)->NewClient();

  v1::GetAttentionRequest attention;
  attention.set_model("bert");
  attention.set_text("the capital of france is paris");
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(client->GetAttention(attention).ok());
  ASSERT_TRUE(client->StreamAttention(attention).ok());
  v1::GetAttentionRequest unknown = attention;
  unknown.set_model("missing");
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(client->GetAttention(unknown).status().code(), absl::StatusCode::kNotFound);
  }
  v1::TokenizeRequest tokenize;
  tokenize.set_model("llama");
  tokenize.set_text("Once upon a time");
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(client->Tokenize(tokenize).ok());
  v1::EncodeRequest encode;
  encode.set_model("bert");
  encode.add_inputs()->set_text("paris");
  encode.add_inputs()->set_text("the river");
  ASSERT_TRUE(client->Encode(encode).ok());
  // Health checks are served by gRPC's own service and are not attnscope RPCs.
  ASSERT_TRUE(client->Health().ok());

  absl::StatusOr<std::string> body = HttpGet((*server)->metrics_port(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  const std::vector<MetricSample> samples = ParseMetrics(*body);
  ASSERT_FALSE(samples.empty());

  // The model label is the model's name; a name no model has is counted under "".
  const std::string requests = "attnscope_requests_total";
  const std::pair<std::string, std::string> bert = {"model", "bert"};
  EXPECT_EQ(Value(samples, requests, {{"rpc", "GetAttention"}, bert, {"code", "OK"}}), 3);
  EXPECT_EQ(
      Value(samples, requests, {{"rpc", "GetAttention"}, {"model", ""}, {"code", "NOT_FOUND"}}), 2);
  EXPECT_EQ(Value(samples, requests, {{"rpc", "StreamAttention"}, bert, {"code", "OK"}}), 1);
  EXPECT_EQ(Value(samples, requests, {{"rpc", "Tokenize"}, {"model", "llama"}, {"code", "OK"}}), 4);
  EXPECT_EQ(Value(samples, requests, {{"rpc", "Encode"}, bert, {"code", "OK"}}), 1);
  double total = 0;
  for (const MetricSample& sample : FindSamples(samples, requests)) total += sample.value;
  EXPECT_EQ(total, 11) << "no other RPC or code was counted";

  const std::string duration = "attnscope_request_duration_seconds";
  const std::pair<std::string, std::string> grpc = {"transport", "grpc"};
  EXPECT_EQ(Value(samples, duration + "_count", {{"rpc", "GetAttention"}, grpc, bert}), 3);
  EXPECT_EQ(Value(samples, duration + "_count", {{"rpc", "GetAttention"}, grpc, {"model", ""}}), 2);
  EXPECT_EQ(
      Value(samples, duration + "_bucket", {{"rpc", "GetAttention"}, grpc, bert, {"le", "+Inf"}}),
      3);
  EXPECT_EQ(Value(samples, duration + "_count", {{"rpc", "StreamAttention"}, grpc, bert}), 1);
  EXPECT_EQ(Value(samples, duration + "_count", {{"rpc", "Tokenize"}, grpc, {"model", "llama"}}),
            4);
  EXPECT_EQ(Value(samples, duration + "_count", {{"rpc", "Encode"}, grpc, bert}), 1);
  EXPECT_GT(Value(samples, duration + "_sum", {{"rpc", "GetAttention"}, grpc, bert}), 0);
  // Every (rpc, transport, model) series exists from the start, so that rates of HTTP calls are
  // 0, not absent, before the first one.
  EXPECT_EQ(Value(samples, duration + "_count",
                  {{"rpc", "GetAttention"}, {"transport", "http"}, {"model", "llama"}}),
            0);

  // One tokenization per encoded input: 3 + 1 attention calls, 4 Tokenize, 2 Encode inputs (the
  // NOT_FOUND calls never reach the tokenizer).
  EXPECT_EQ(Value(samples, "attnscope_tokenization_duration_seconds_count"), 10);
  EXPECT_EQ(Value(samples, "attnscope_input_tokens_count"), 10);
  // 8 tokens x 4 attention calls + 2 x 3 for Encode ("[CLS] paris [SEP]", "[CLS] the river [SEP]"
  // is 4) + the llama tokens.
  absl::StatusOr<v1::TokenizeResponse> llama_tokens = client->Tokenize(tokenize);
  ASSERT_TRUE(llama_tokens.ok());
  EXPECT_EQ(Value(samples, "attnscope_input_tokens_sum"),
            8 * 4 + 3 + 4 + 4 * llama_tokens->tokens().tokens_size());
  // One forward pass per attention call and one for the Encode batch, all on bert.
  EXPECT_EQ(Value(samples, "attnscope_inference_duration_seconds_count", {{"model", "bert"}}), 5);
  EXPECT_EQ(Value(samples, "attnscope_inference_duration_seconds_count", {{"model", "llama"}}), 0);
  // Each forward pass waited its turn once.
  EXPECT_EQ(Value(samples, "attnscope_queue_wait_seconds_count", {{"model", "bert"}}), 5);
  EXPECT_EQ(Value(samples, "attnscope_rejected_requests_total", {{"reason", "concurrency_limit"}}),
            0);
  // Every successful call has a response: 3 + 1 + 4 + 1.
  EXPECT_EQ(Value(samples, "attnscope_response_bytes_count"), 9);
  EXPECT_GT(Value(samples, "attnscope_response_bytes_sum"), 3 * 3 * 4 * 8 * 8 * 4);
  EXPECT_EQ(Value(samples, "attnscope_inflight_requests"), 0);

  EXPECT_EQ(Value(samples, "attnscope_model_info",
                  {{"model", "bert"}, {"architecture", "bert"}, {"layers", "3"}, {"heads", "4"}}),
            1);
  EXPECT_EQ(Value(samples, "attnscope_model_info",
                  {{"model", "llama"}, {"architecture", "llama"}, {"layers", "5"}, {"heads", "8"}}),
            1);
  // The kernels the server chose from the CPU, as the test's own environment (which the server
  // inherits) leaves them.
  auto disabled = [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && std::string(value) != "" && std::string(value) != "0";
  };
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    !disabled("ATTNSCOPE_DISABLE_AVX2");
  const std::string kernels =
      avx2 && __builtin_cpu_supports("avx512f") && !disabled("ATTNSCOPE_DISABLE_AVX512")
          ? "avx512"
          : (avx2 ? "avx2" : "libtorch");
  EXPECT_EQ(Value(samples, "attnscope_kernels_info",
                  {{"kernels", kernels}, {"bfloat16", Bf16KernelsName()}}),
            1);
  EXPECT_GT(Value(samples, "attnscope_model_load_seconds", {{"model", "bert"}}), 0);
  EXPECT_GT(Value(samples, "attnscope_model_load_seconds", {{"model", "llama"}}), 0);
  EXPECT_GT(Value(samples, "attnscope_process_resident_memory_bytes"), 10e6);

  // A second scrape sees the Tokenize call made after the first one.
  body = HttpGet((*server)->metrics_port(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(Value(ParseMetrics(*body), requests, {{"rpc", "Tokenize"}, {"code", "OK"}}), 5);
}

}  // namespace
}  // namespace attnscope::testing

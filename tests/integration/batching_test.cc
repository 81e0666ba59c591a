// Dynamic batching end to end: concurrent calls to a real attnscope-server on loopback that holds
// each pass until its batch fills (--max_queue_delay_microseconds) get what a server without
// batching (--max_batch_size 1) answers, and /metrics shows the batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "client/client.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

std::unique_ptr<ServerProcess> StartServer(const std::vector<std::string>& flags) {
  ServerProcess::Options options;
  options.models = {"bert=" + TinyBertDir(), "llama=" + Stories260kDir()};
  options.metrics_port = FreeTcpPort();
  options.extra_flags = flags;
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

// Within 1e-5 of the tensor's scale (its largest magnitude, when above 1), as
// tests/unit/requests/batcher_test.cc checks.
void ExpectClose(const DecodedTensor& actual, const DecodedTensor& expected,
                 const std::string& what) {
  ASSERT_EQ(actual.shape, expected.shape) << what;
  ASSERT_EQ(actual.values.size(), expected.values.size()) << what;
  float scale = 1;
  float difference = 0;
  for (size_t i = 0; i < expected.values.size(); ++i) {
    scale = std::max(scale, std::abs(expected.values[i]));
    difference = std::max(difference, std::abs(actual.values[i] - expected.values[i]));
  }
  EXPECT_LE(difference, 1e-5 * scale) << what;
}

const std::vector<std::string> kTexts = {
    "paris", "the capital of france is paris",
    "one day a little girl named lily found a needle in her room",
    "the cat sat on the mat and the dog sat on the log"};

struct Answers {
  std::vector<AttentionResult> attention;
  std::vector<EncodeResponse> encode;
  std::vector<CrossAttentionResult> cross;
};

// For each text: GetAttention on both models, Encode with mean pooling, CrossAttention against two
// documents; concurrently (a thread per call) or one after another.
Answers Ask(const ServerProcess& server, bool concurrently) {
  Answers answers;
  const size_t n = kTexts.size();
  answers.attention.resize(2 * n);
  answers.encode.resize(n);
  answers.cross.resize(n);
  std::vector<std::function<void()>> calls;
  for (size_t i = 0; i < n; ++i) {
    for (size_t m = 0; m < 2; ++m) {
      calls.push_back([&, i, m] {
        v1::GetAttentionRequest request;
        request.set_model(m == 0 ? "bert" : "llama");
        request.set_text(kTexts[i]);
        absl::StatusOr<AttentionResult> answer = server.NewClient()->GetAttention(request);
        ASSERT_TRUE(answer.ok()) << answer.status();
        answers.attention[2 * i + m] = *std::move(answer);
      });
    }
    calls.push_back([&, i] {
      v1::EncodeRequest request;
      request.set_model("bert");
      request.add_inputs()->set_text(kTexts[i]);
      request.add_inputs()->set_text(kTexts[(i + 1) % n]);
      request.set_pooling(v1::POOLING_MEAN);
      absl::StatusOr<EncodeResponse> answer = server.NewClient()->Encode(request);
      ASSERT_TRUE(answer.ok()) << answer.status();
      answers.encode[i] = *std::move(answer);
    });
    calls.push_back([&, i] {
      v1::CrossAttentionRequest request;
      request.set_model("bert");
      request.set_query(kTexts[i]);
      request.add_documents(kTexts[(i + 2) % n]);
      request.add_documents(kTexts[(i + 3) % n]);
      absl::StatusOr<CrossAttentionResult> answer = server.NewClient()->CrossAttention(request);
      ASSERT_TRUE(answer.ok()) << answer.status();
      answers.cross[i] = *std::move(answer);
    });
  }
  if (concurrently) {
    std::vector<std::thread> threads;
    for (const auto& call : calls) threads.emplace_back(call);
    for (std::thread& thread : threads) thread.join();
  } else {
    for (const auto& call : calls) call();
  }
  return answers;
}

TEST(BatchingTest, ConcurrentCallsShareForwardPassesAndGetTheUnbatchedAnswers) {
  std::unique_ptr<ServerProcess> unbatched = StartServer({"--max_batch_size=1"});
  std::unique_ptr<ServerProcess> batched = StartServer({"--max_queue_delay_microseconds=5000000"});
  ASSERT_NE(unbatched, nullptr);
  ASSERT_NE(batched, nullptr);
  const Answers expected = Ask(*unbatched, /*concurrently=*/false);
  const Answers actual = Ask(*batched, /*concurrently=*/true);

  for (size_t i = 0; i < expected.attention.size(); ++i) {
    ExpectClose(actual.attention[i].attentions, expected.attention[i].attentions,
                "GetAttention " + std::to_string(i));
  }
  for (size_t i = 0; i < expected.encode.size(); ++i) {
    for (size_t r = 0; r < 2; ++r) {
      const std::string what = "Encode " + std::to_string(i) + "." + std::to_string(r);
      ExpectClose(actual.encode[i].results[r].last_hidden_state,
                  expected.encode[i].results[r].last_hidden_state, what);
      ExpectClose(*actual.encode[i].results[r].pooled, *expected.encode[i].results[r].pooled,
                  what + " pooled");
    }
  }
  for (size_t i = 0; i < expected.cross.size(); ++i) {
    for (size_t d = 0; d < 2; ++d) {
      const DocumentAttentionResult& a = actual.cross[i].documents[d];
      const DocumentAttentionResult& e = expected.cross[i].documents[d];
      const std::string what = "CrossAttention " + std::to_string(i) + "." + std::to_string(d);
      ExpectClose(a.query_to_document, e.query_to_document, what);
      ASSERT_EQ(a.logits.size(), e.logits.size()) << what;
      for (size_t k = 0; k < e.logits.size(); ++k) EXPECT_NEAR(a.logits[k], e.logits[k], 1e-5);
    }
  }

  // 16 calls, 24 inputs (20 of them bert's): the batched server ran them in one pass per model
  // (GetAttention, Encode and CrossAttention share one), the other in one pass per call.
  for (const auto& [server, passes_bert, passes_llama] :
       {std::make_tuple(unbatched.get(), 12, 4), std::make_tuple(batched.get(), 1, 1)}) {
    absl::StatusOr<std::string> body = HttpGet(server->metrics_port(), "/metrics");
    ASSERT_TRUE(body.ok()) << body.status();
    const std::vector<MetricSample> samples = ParseMetrics(*body);
    auto value = [&](const std::string& name, const std::string& model) {
      const std::vector<MetricSample> found = FindSamples(samples, name, {{"model", model}});
      EXPECT_EQ(found.size(), 1u) << name << " " << model;
      return found.size() == 1 ? found[0].value : -1;
    };
    EXPECT_EQ(value("attnscope_batch_size_count", "bert"), passes_bert);
    EXPECT_EQ(value("attnscope_batch_size_sum", "bert"), 20);
    EXPECT_EQ(value("attnscope_batch_size_count", "llama"), passes_llama);
    EXPECT_EQ(value("attnscope_batch_size_sum", "llama"), 4);
    EXPECT_EQ(value("attnscope_inference_duration_seconds_count", "bert"), passes_bert);
    EXPECT_EQ(value("attnscope_queue_wait_seconds_count", "bert"), 12);
    EXPECT_GT(value("attnscope_batch_tokens_sum", "bert"), 20);
  }
}

}  // namespace
}  // namespace attnscope::testing

// Dynamic batching (models/requests/batcher.h) through the request layer, on real model files: a
// BERT classifier (tests/data/tiny-bert) and a trained Llama (../shared/models/stories260K's
// weights, read with tiny-bert's WordPiece vocabulary; see testing::LlamaDir()).
// Concurrent calls held in the queue until their batch fills must get what each gets alone, with
// the batcher off (max_batch_size 1), within 1e-5.
#include "models/requests/batcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "models/requests/requests.h"
#include "tests/unit/requests/request_test_util.h"
#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

// Records every forward pass as (calls, sequences, padded tokens).
class PassRecorder : public RequestObserver {
 public:
  struct Pass {
    int64_t calls;
    int64_t sequences;
    int64_t padded_tokens;
  };
  void OnTokenized(double, int64_t) override {}
  void OnQueueWait(const std::string&, double) override {}
  void OnForward(const std::string&, int64_t calls, int64_t sequences, int64_t padded_tokens,
                 double) override {
    absl::MutexLock lock(&mutex_);
    passes_.push_back({calls, sequences, padded_tokens});
  }
  std::vector<Pass> passes() {
    absl::MutexLock lock(&mutex_);
    return passes_;
  }

 private:
  absl::Mutex mutex_;
  std::vector<Pass> passes_ ABSL_GUARDED_BY(mutex_);
};

std::unique_ptr<RequestRunner> NewRunner(const ForwardBatcher::Options& batching,
                                         RequestObserver* observer) {
  std::vector<std::unique_ptr<LoadedModel>> models;
  models.push_back(testing::LoadModel("bert", testing::TestDataDir() + "/tiny-bert"));
  models.push_back(testing::LoadModel("llama", testing::LlamaDir()));
  RequestRunner::Options options;
  options.batching = batching;
  return std::make_unique<RequestRunner>(options, std::move(models), observer);
}

// Runs every function on its own thread at once and waits for all.
void RunConcurrently(const std::vector<std::function<void()>>& calls) {
  std::vector<std::thread> threads;
  for (const auto& call : calls) threads.emplace_back(call);
  for (std::thread& thread : threads) thread.join();
}

// Within 1e-5 of the tensor's scale (its largest magnitude, when above 1): pre-softmax scores reach
// tens, and the products that make them round at about 1e-7 of that.
void ExpectClose(const torch::Tensor& actual, const torch::Tensor& expected,
                 const std::string& what) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const float scale = std::max(1.0f, expected.abs().max().item<float>());
  const float difference = (actual - expected).abs().max().item<float>();
  EXPECT_LE(difference, 1e-5 * scale) << what << ": largest value " << scale;
}

// Texts of different lengths, so that the shorter ones are padded in a batch.
const std::vector<std::string>& Texts() {
  static const auto* texts =
      new std::vector<std::string>{"paris", "the capital of france is paris",
                                   "one day a little girl named lily found a needle in her room",
                                   "the cat sat on the mat and the dog sat on the log"};
  return *texts;
}

struct Results {
  std::vector<AttentionAnswer> attention;
  std::vector<EncodeAnswer> encode;
  std::vector<CrossAttentionAnswer> cross;
};

// Per text: GetAttention (with scores and rollout) on both models, Encode with mean pooling (the
// attention mask matters there) and every hidden state, CrossAttention of the text against two
// documents. All at once, each call on its own thread.
Results RunMixedLoad(RequestRunner& runner) {
  const size_t n = Texts().size();
  Results results;
  results.attention.resize(2 * n);
  results.encode.resize(n);
  results.cross.resize(n);
  std::vector<std::function<void()>> calls;
  for (size_t i = 0; i < n; ++i) {
    for (size_t m = 0; m < 2; ++m) {
      calls.push_back([&, i, m] {
        AttentionQuery query;
        query.model = m == 0 ? "bert" : "llama";
        query.input.text = Texts()[i];
        query.include_scores = true;
        query.rollout = true;
        absl::StatusOr<AttentionAnswer> answer = runner.RunAttention(query, {}, Delivery::kUnary);
        ASSERT_TRUE(answer.ok()) << answer.status();
        results.attention[2 * i + m] = *std::move(answer);
      });
    }
    calls.push_back([&, i] {
      EncodeQuery query;
      query.model = "bert";
      query.inputs = {{Texts()[i], std::nullopt}, {Texts()[(i + 1) % n], std::nullopt}};
      query.pooling = Pooling::kMean;
      query.output_hidden_states = true;
      absl::StatusOr<EncodeAnswer> answer = runner.RunEncode(query, {});
      ASSERT_TRUE(answer.ok()) << answer.status();
      results.encode[i] = *std::move(answer);
    });
    calls.push_back([&, i] {
      CrossAttentionQuery query;
      query.model = "bert";
      query.query = Texts()[i];
      query.documents = {Texts()[(i + 2) % n], Texts()[(i + 3) % n]};
      query.include_document_to_query = true;
      absl::StatusOr<CrossAttentionAnswer> answer = runner.RunCrossAttention(query, {});
      ASSERT_TRUE(answer.ok()) << answer.status();
      results.cross[i] = *std::move(answer);
    });
  }
  RunConcurrently(calls);
  return results;
}

TEST(BatcherTest, BatchedResultsEqualEachCallRunAlone) {
  PassRecorder alone_passes;
  ForwardBatcher::Options off;
  off.max_batch_size = 1;
  std::unique_ptr<RequestRunner> alone = NewRunner(off, &alone_passes);
  const Results expected = RunMixedLoad(*alone);

  PassRecorder batched_passes;
  ForwardBatcher::Options on;
  on.max_batch_size = 64;
  // Long enough that every call of the load queues before the first pass starts: a pass waits
  // until its batch is full or the delay has passed, and these batches never fill.
  on.max_queue_delay = absl::Seconds(5);
  std::unique_ptr<RequestRunner> batched = NewRunner(on, &batched_passes);
  const Results actual = RunMixedLoad(*batched);

  for (const PassRecorder::Pass& pass : alone_passes.passes()) EXPECT_EQ(pass.calls, 1);
  // Three passes when all 16 calls queue in time: BERT and Llama attentions with scores, and one
  // BERT pass without scores for Encode (hidden states) and CrossAttention (attentions, logits).
  const std::vector<PassRecorder::Pass> passes = batched_passes.passes();
  EXPECT_EQ(passes.size(), 3u);
  int64_t calls = 0;
  for (const PassRecorder::Pass& pass : passes) {
    EXPECT_GT(pass.calls, 1);
    calls += pass.calls;
  }
  EXPECT_EQ(calls, 16);

  for (size_t i = 0; i < expected.attention.size(); ++i) {
    const AttentionAnswer& a = actual.attention[i];
    const AttentionAnswer& e = expected.attention[i];
    ASSERT_EQ(a.attentions.size(), e.attentions.size());
    for (size_t l = 0; l < e.attentions.size(); ++l) {
      ExpectClose(a.attentions[l], e.attentions[l], "attention " + std::to_string(i));
      ExpectClose(a.scores[l], e.scores[l], "scores " + std::to_string(i));
    }
    ExpectClose(a.rollout, e.rollout, "rollout " + std::to_string(i));
  }
  for (size_t i = 0; i < expected.encode.size(); ++i) {
    for (size_t r = 0; r < 2; ++r) {
      const EncodedInput& a = actual.encode[i].results[r];
      const EncodedInput& e = expected.encode[i].results[r];
      const std::string what = "encode " + std::to_string(i) + "." + std::to_string(r);
      ExpectClose(a.last_hidden_state, e.last_hidden_state, what);
      ExpectClose(a.pooled, e.pooled, what + " pooled");
      ASSERT_EQ(a.hidden_states.size(), e.hidden_states.size());
      for (size_t l = 0; l < e.hidden_states.size(); ++l) {
        ExpectClose(a.hidden_states[l], e.hidden_states[l], what + " layer " + std::to_string(l));
      }
    }
  }
  for (size_t i = 0; i < expected.cross.size(); ++i) {
    for (size_t d = 0; d < 2; ++d) {
      const DocumentAnswer& a = actual.cross[i].documents[d];
      const DocumentAnswer& e = expected.cross[i].documents[d];
      const std::string what = "cross " + std::to_string(i) + "." + std::to_string(d);
      for (size_t l = 0; l < e.query_to_document.size(); ++l) {
        ExpectClose(a.query_to_document[l], e.query_to_document[l], what);
        ExpectClose(a.document_to_query[l], e.document_to_query[l], what);
      }
      ASSERT_EQ(a.logits.size(), e.logits.size());
      for (size_t k = 0; k < e.logits.size(); ++k) EXPECT_NEAR(a.logits[k], e.logits[k], 1e-5);
    }
  }
}

TEST(BatcherTest, PassesStayWithinTheSizeAndTokenBounds) {
  PassRecorder passes;
  ForwardBatcher::Options options;
  options.max_batch_size = 3;
  options.max_batch_tokens = 40;
  options.max_queue_delay = absl::Seconds(5);
  std::unique_ptr<RequestRunner> runner = NewRunner(options, &passes);
  std::vector<std::function<void()>> calls;
  for (int i = 0; i < 7; ++i) {
    calls.push_back([&, i] {
      EncodeQuery query;
      query.model = "bert";
      query.inputs = {{Texts()[i % 2], std::nullopt}};  // 3 and 8 tokens
      ASSERT_TRUE(runner->RunEncode(query, {}).ok());
    });
  }
  // One call over both bounds (an Encode of 5 inputs) still runs, alone.
  calls.push_back([&] {
    EncodeQuery query;
    query.model = "bert";
    for (int i = 0; i < 5; ++i) query.inputs.push_back({Texts()[3], std::nullopt});
    ASSERT_TRUE(runner->RunEncode(query, {}).ok());
  });
  RunConcurrently(calls);
  int64_t sequences = 0;
  for (const PassRecorder::Pass& pass : passes.passes()) {
    if (pass.calls > 1) {
      EXPECT_LE(pass.sequences, 3);
      EXPECT_LE(pass.padded_tokens, 40);
    }
    sequences += pass.sequences;
  }
  EXPECT_EQ(sequences, 12);
  EXPECT_GE(passes.passes().size(), 4u);  // 7 short calls need 3 passes; the big one its own
}

TEST(BatcherTest, AShortCallIsNotPaddedToALongOne) {
  PassRecorder passes;
  ForwardBatcher::Options options;
  options.max_queue_delay = absl::Seconds(5);
  std::unique_ptr<RequestRunner> runner = NewRunner(options, &passes);
  std::vector<int64_t> lengths(3);
  std::vector<std::function<void()>> calls;
  for (int i = 0; i < 3; ++i) {
    calls.push_back([&, i] {
      AttentionQuery query;
      query.model = "llama";
      // About 270, 3 and 190 tokens (27 a sentence with tiny-bert's vocabulary).
      for (int j = 0; j < (i == 1 ? 1 : i == 0 ? 10 : 7); ++j) {
        query.input.text += "once upon a time there was a little girl ";
      }
      if (i == 1) query.input.text = "a";
      absl::StatusOr<AttentionAnswer> answer = runner->RunAttention(query, {}, Delivery::kUnary);
      ASSERT_TRUE(answer.ok()) << answer.status();
      lengths[i] = static_cast<int64_t>(answer->tokens.encoding.size());
    });
  }
  RunConcurrently(calls);
  ASSERT_GT(lengths[0], 200);
  ASSERT_LT(lengths[1], 5);
  ASSERT_GT(lengths[2], lengths[0] / 2);
  // The two long calls share a pass; the short one is not padded to 270 tokens.
  std::vector<int64_t> calls_per_pass;
  for (const PassRecorder::Pass& pass : passes.passes()) calls_per_pass.push_back(pass.calls);
  std::sort(calls_per_pass.begin(), calls_per_pass.end());
  EXPECT_EQ(calls_per_pass, (std::vector<int64_t>{1, 2}));
  for (const PassRecorder::Pass& pass : passes.passes()) {
    EXPECT_EQ(pass.padded_tokens, pass.calls == 2 ? 2 * lengths[0] : lengths[1]);
  }
}

TEST(BatcherTest, ACallThatStopsIsAnsweredAtOnceAndTheRestOfItsPassGoesOn) {
  PassRecorder passes;
  ForwardBatcher::Options options;
  options.max_batch_size = 2;
  options.max_queue_delay = absl::Seconds(5);
  std::unique_ptr<RequestRunner> runner = NewRunner(options, &passes);
  std::atomic<int> checks_after_stop{0};
  std::atomic<bool> stopped{false};
  std::thread::id check_thread;
  absl::Status cancelled_status;
  absl::Status kept_status;
  RunConcurrently({
      [&] {
        AttentionQuery query;
        query.model = "bert";
        query.input.text = Texts()[1];
        CallCheck check = [&](absl::string_view when) {
          check_thread = std::this_thread::get_id();
          if (stopped) ++checks_after_stop;
          if (when == "after layer 0") {
            stopped = true;
            return absl::CancelledError("the client cancelled the call");
          }
          return absl::OkStatus();
        };
        cancelled_status = runner->RunAttention(query, check, Delivery::kUnary).status();
      },
      [&] {
        AttentionQuery query;
        query.model = "bert";
        query.input.text = Texts()[2];
        kept_status = runner->RunAttention(query, {}, Delivery::kUnary).status();
      },
  });
  EXPECT_EQ(cancelled_status.code(), absl::StatusCode::kCancelled) << cancelled_status;
  EXPECT_TRUE(kept_status.ok()) << kept_status;
  EXPECT_EQ(checks_after_stop, 0);
  EXPECT_NE(check_thread, std::this_thread::get_id());
  ASSERT_EQ(passes.passes().size(), 1u);
  EXPECT_EQ(passes.passes()[0].calls, 2);
}

// The next pass goes to the client served the longest ago: with one client's pass running and
// two more of its calls queued before another client's call, that call's pass comes second, not
// last (one call a pass here).
TEST(BatcherTest, PassesGoRoundTheClients) {
  PassRecorder passes;
  ForwardBatcher::Options options;
  options.max_batch_size = 1;
  std::unique_ptr<RequestRunner> runner = NewRunner(options, &passes);
  absl::Notification running;
  absl::Notification release;
  absl::Mutex mutex;
  std::vector<int> order;
  std::atomic<int> waiting_checks[3] = {0, 0, 0};
  const std::string clients[3] = {"a", "a", "b"};
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    AttentionQuery query;
    query.model = "bert";
    query.input.text = Texts()[0];
    const CallCheck hold = [&](absl::string_view when) {
      if (when == "after layer 0" && !running.HasBeenNotified()) {
        running.Notify();
        release.WaitForNotification();
      }
      return absl::OkStatus();
    };
    EXPECT_TRUE(runner->RunAttention(query, hold, Delivery::kUnary, /*client=*/"a").ok());
  });
  running.WaitForNotification();
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      AttentionQuery query;
      query.model = "bert";
      query.input.text = Texts()[1];
      const CallCheck record = [&, i](absl::string_view when) {
        if (when == "while waiting for its forward pass") ++waiting_checks[i];
        if (when == "before the forward pass") {
          absl::MutexLock lock(&mutex);
          order.push_back(i);
        }
        return absl::OkStatus();
      };
      EXPECT_TRUE(runner->RunAttention(query, record, Delivery::kUnary, clients[i]).ok());
    });
    // Checked while it waits: queued.
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (waiting_checks[i] == 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
    ASSERT_GT(waiting_checks[i], 0) << "call " << i << " was not queued in 30 s";
  }
  release.Notify();
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(order, (std::vector<int>{0, 2, 1}));
}

// A call that expires while it waits for its batch to fill leaves the queue then, not when the
// queue delay is over: with a 5 s delay, a call whose deadline passes after 0.2 s is answered
// long before 5 s.
TEST(BatcherTest, ACallThatExpiresWhileItWaitsLeavesTheQueueAtOnce) {
  PassRecorder passes;
  ForwardBatcher::Options options;
  options.max_batch_size = 2;
  options.max_queue_delay = absl::Seconds(5);
  std::unique_ptr<RequestRunner> runner = NewRunner(options, &passes);
  AttentionQuery query;
  query.model = "bert";
  query.input.text = Texts()[1];
  const absl::Time deadline = absl::Now() + absl::Milliseconds(200);
  std::string stopped_when;
  const absl::Status status = runner
                                  ->RunAttention(
                                      query,
                                      [&](absl::string_view when) {
                                        if (absl::Now() < deadline) return absl::OkStatus();
                                        stopped_when = std::string(when);
                                        return absl::DeadlineExceededError("the deadline passed");
                                      },
                                      Delivery::kUnary)
                                  .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_EQ(stopped_when, "while waiting for its forward pass");
  EXPECT_LT(absl::Now() - deadline, absl::Seconds(2));
  EXPECT_TRUE(passes.passes().empty());
}

TEST(BatcherTest, APassWhoseOnlyCallStopsEndsAfterThatLayer) {
  std::unique_ptr<RequestRunner> runner = NewRunner({}, nullptr);
  std::vector<std::string> moments;
  AttentionQuery query;
  query.model = "llama";  // 5 layers
  query.input.text = Texts()[2];
  const absl::Status status =
      runner
          ->RunAttention(
              query,
              [&](absl::string_view when) {
                // A busy machine may leave the call in the queue for a check or two.
                if (when == "while waiting for its forward pass") return absl::OkStatus();
                moments.emplace_back(when);
                return when == "after layer 1"
                           ? absl::DeadlineExceededError("deadline passed after layer 1")
                           : absl::OkStatus();
              },
              Delivery::kUnary)
          .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_EQ(moments, (std::vector<std::string>{"before the forward pass", "after layer 0",
                                               "after layer 1"}));
}

}  // namespace
}  // namespace attnscope

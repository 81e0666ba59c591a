// RunGenerate (models/requests/generate.cc) in process: what it refuses, the order of its
// callbacks, and a callback's error ending the generation.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/requests/request_test_util.h"

namespace attnscope {
namespace {

using ::testing::HasSubstr;
using testing::NewRunner;
using testing::NoCheck;

GenerateQuery Greedy(int64_t tokens) {
  GenerateQuery query;
  query.model = "llama";
  query.prompt = "the fox";
  query.generation.max_new_tokens = tokens;
  query.ignore_eos = true;
  return query;
}

TEST(RequestGenerateTest, EncoderOnlyModelsAreRefused) {
  GenerateQuery query = Greedy(3);
  query.model = "bert";
  int headers = 0;
  absl::StatusOr<GenerateSummary> summary = NewRunner()->RunGenerate(
      query, NoCheck(),
      [&](const GenerateHeader&) {
        ++headers;
        return absl::OkStatus();
      },
      [](const GenerateStep&) { return absl::OkStatus(); });
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(headers, 0);
}

TEST(RequestGenerateTest, OneHeaderThenOneStepPerToken) {
  GenerateQuery query = Greedy(4);
  query.output_attentions = true;
  query.layers = {-1};
  query.head_aggregation = HeadAggregation::kMean;
  std::vector<std::string> events;
  std::vector<int64_t> ids;
  int64_t prompt = 0;
  absl::StatusOr<GenerateSummary> summary = NewRunner()->RunGenerate(
      query, NoCheck(),
      [&](const GenerateHeader& header) {
        events.push_back("header");
        prompt = static_cast<int64_t>(header.prompt_tokens.encoding.size());
        EXPECT_EQ(header.layers.size(), 1u);
        return absl::OkStatus();
      },
      [&](const GenerateStep& step) {
        events.push_back("step");
        EXPECT_EQ(step.index, static_cast<int64_t>(ids.size()));
        EXPECT_EQ(step.position, prompt + step.index);
        // [layer, head, key_token] over the tokens before it, heads averaged.
        EXPECT_EQ(step.attention.sizes().vec(), (std::vector<int64_t>{1, 1, step.position}));
        ids.push_back(step.id);
        return absl::OkStatus();
      });
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(events, (std::vector<std::string>{"header", "step", "step", "step", "step"}));
  EXPECT_EQ(summary->ids, ids);
  EXPECT_EQ(summary->finish_reason, FinishReason::kLength);
}

TEST(RequestGenerateTest, AStepCallbacksErrorEndsTheGeneration) {
  int steps = 0;
  absl::StatusOr<GenerateSummary> summary = NewRunner()->RunGenerate(
      Greedy(6), NoCheck(), [](const GenerateHeader&) { return absl::OkStatus(); },
      [&](const GenerateStep&) {
        ++steps;
        return absl::CancelledError("the client went away");
      });
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(summary.status().message(), HasSubstr("the client went away"));
  EXPECT_EQ(steps, 1);
}

}  // namespace
}  // namespace attnscope

// RunAttribute (models/requests/attribute.cc) in process: the models and options it refuses
// before any pass, and the answer's word sums and convergence delta against its token values.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/requests/request_test_util.h"
#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

using ::testing::HasSubstr;
using testing::NewRunner;
using testing::NoCheck;

AttributeQuery Pair() {
  AttributeQuery query;
  query.model = "bert";
  query.input = {"where is the fox", std::string("the quick brown fox jumps")};
  query.integrated_gradients_steps = 8;
  return query;
}

TEST(RequestAttributeTest, RefusedBeforeAnyPass) {
  testing::TokenizationCounter counter;
  std::unique_ptr<RequestRunner> runner = NewRunner({}, &counter);
  AttributeQuery decoder = Pair();
  decoder.model = "llama";
  absl::StatusOr<AttributeAnswer> answer = runner->RunAttribute(decoder, NoCheck());
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kUnimplemented);

  AttributeQuery steps = Pair();
  steps.integrated_gradients_steps = kMaxIntegratedGradientsSteps + 1;
  answer = runner->RunAttribute(steps, NoCheck());
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(answer.status().message(), HasSubstr("integrated_gradients_steps 1001"));

  AttributeQuery target = Pair();
  target.target = 1;
  answer = runner->RunAttribute(target, NoCheck());
  ASSERT_FALSE(answer.ok());
  EXPECT_THAT(answer.status().message(), HasSubstr("target 1: expected a classifier label"));
  EXPECT_EQ(counter.tokenized(), 0);

  RequestRunner::Options options;
  options.max_call_tokens = 50;
  answer = NewRunner(options)->RunAttribute(Pair(), NoCheck());
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(answer.status().message(), HasSubstr("--max_call_tokens"));
}

// An XLM-R cross-encoder (tests/data/tiny-roberta) is attributed too: its vocabulary spells the
// occlusion tokens <mask> and <unk>, and the score is its logit for the pair (the goldens').
TEST(RequestAttributeTest, RobertaCrossEncoderOccludesWithItsOwnTokens) {
  const std::string dir = testing::TestDataDir() + "/tiny-roberta";
  std::vector<std::unique_ptr<LoadedModel>> models;
  models.push_back(testing::LoadModel("xlmr", dir));
  RequestRunner runner({}, std::move(models), nullptr);
  const nlohmann::json pair =
      nlohmann::json::parse(testing::ReadFileBytes(dir + "/golden.json"))["pair"];
  AttributeQuery query;
  query.model = "xlmr";
  query.input = {pair["text"].get<std::string>(), pair["text_pair"].get<std::string>()};
  query.integrated_gradients_steps = 8;
  for (const OcclusionToken token : {OcclusionToken::kMask, OcclusionToken::kUnk}) {
    query.occlusion_token = token;
    absl::StatusOr<AttributeAnswer> answer = runner.RunAttribute(query, NoCheck());
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_NEAR(answer->score, pair["logits"][0][0].get<double>(), 1e-5);
    EXPECT_EQ(answer->occlusion.size(), pair["input_ids"][0].size());
  }
}

TEST(RequestAttributeTest, WordsSumTheirTokensAndTheDeltaIsTheGap) {
  absl::StatusOr<AttributeAnswer> answer = NewRunner()->RunAttribute(Pair(), NoCheck());
  ASSERT_TRUE(answer.ok()) << answer.status();
  const size_t length = answer->tokens.encoding.size();
  ASSERT_EQ(answer->occlusion.size(), length);
  ASSERT_EQ(answer->gradient_x_input.size(), length);
  ASSERT_EQ(answer->integrated_gradients.size(), length);
  EXPECT_EQ(answer->integrated_gradients_steps, 8);

  double total = 0;
  for (const float value : answer->integrated_gradients) total += value;
  ASSERT_TRUE(answer->convergence_delta.has_value());
  EXPECT_NEAR(*answer->convergence_delta, total - (answer->score - answer->baseline_score), 1e-4);

  ASSERT_FALSE(answer->words.empty());
  for (const AttributedWord& word : answer->words) {
    SCOPED_TRACE(word.word.text);
    double gradient_x_input = 0;
    for (int64_t t = word.word.tokens.token_start; t < word.word.tokens.token_end; ++t) {
      gradient_x_input += answer->gradient_x_input[t];
    }
    ASSERT_TRUE(word.gradient_x_input.has_value());
    EXPECT_NEAR(*word.gradient_x_input, gradient_x_input, 1e-5);
    EXPECT_GE(word.word.sequence_id, 0);
  }
}

}  // namespace
}  // namespace attnscope

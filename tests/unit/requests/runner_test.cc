// RequestRunner's shared steps (models/requests/requests.cc) in process: finding a model and
// Tokenize's checks.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/requests/request_test_util.h"

namespace attnscope {
namespace {

using ::testing::HasSubstr;
using testing::NewRunner;

TEST(RequestRunnerTest, FindsModelsByNameTheFirstByDefault) {
  std::unique_ptr<RequestRunner> runner = NewRunner();
  absl::StatusOr<const LoadedModel*> first = runner->FindModel("");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->name(), "bert");
  absl::StatusOr<const LoadedModel*> bart = runner->FindModel("bart");
  ASSERT_TRUE(bart.ok()) << bart.status();
  EXPECT_EQ((*bart)->name(), "bart");
  absl::StatusOr<const LoadedModel*> missing = runner->FindModel(std::string(500, 'x'));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("loaded models: bert, llama, bart"));
  // A long name is echoed in part only.
  EXPECT_THAT(missing.status().message(), HasSubstr("(500 bytes)"));
}

TEST(RequestRunnerTest, TokenizeChecksTheTextAndItsOptions) {
  std::unique_ptr<RequestRunner> runner = NewRunner();
  TokenizeQuery query;
  query.input.text = "caf\xC3";
  absl::StatusOr<TokenizeAnswer> answer = runner->Tokenize(query);
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(answer.status().message(), HasSubstr("text: "));

  query.input.text = "a text";
  query.tokenization.max_length = 4;
  answer = runner->Tokenize(query);
  ASSERT_FALSE(answer.ok());
  EXPECT_THAT(answer.status().message(), HasSubstr("only applies with truncation"));

  query.tokenization.truncation = Truncation::kLongestFirst;
  query.input.text = "one two three four five six";
  answer = runner->Tokenize(query);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->tokens.encoding.size(), 4u);
  EXPECT_EQ(answer->tokens.original_texts.size(), 4u);
}

}  // namespace
}  // namespace attnscope

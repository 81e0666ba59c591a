// RunEncode (models/requests/encode.cc) in process: its checks, the size estimate against the
// tensors it returns, and each input's results in query order, unpadded.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/requests/request_test_util.h"
#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

using testing::BytesOf;
using ::testing::HasSubstr;
using testing::LoadModel;
using testing::NewRunner;
using testing::NoCheck;
using ::testing::Not;
using testing::PassRecorder;
using testing::TestDataDir;

EncodeQuery TwoInputs() {
  EncodeQuery query;
  query.model = "bert";
  query.inputs.push_back({"a short text", std::nullopt});
  query.inputs.push_back({"a somewhat longer text than the first one", std::string("and a pair")});
  return query;
}

TEST(RequestEncodeTest, BadQueriesNameTheField) {
  RequestRunner::Options options;
  options.max_inputs_per_request = 1;
  std::unique_ptr<RequestRunner> runner = NewRunner(options);
  absl::StatusOr<EncodeAnswer> answer = runner->RunEncode(TwoInputs(), NoCheck());
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(answer.status().message(), HasSubstr("--max_inputs_per_request"));

  runner = NewRunner();
  EncodeQuery normalize = TwoInputs();
  normalize.normalize = true;
  answer = runner->RunEncode(normalize, NoCheck());
  ASSERT_FALSE(answer.ok());
  EXPECT_THAT(answer.status().message(), HasSubstr("normalize: L2 normalisation"));

  EncodeQuery cls_without_cls = TwoInputs();
  cls_without_cls.pooling = Pooling::kCls;
  cls_without_cls.tokenization.skip_special_tokens = true;
  answer = runner->RunEncode(cls_without_cls, NoCheck());
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(answer.status().message(),
              HasSubstr("expected tokenization.skip_special_tokens false, got true"));
  cls_without_cls.pooling = Pooling::kMean;
  EXPECT_TRUE(runner->RunEncode(cls_without_cls, NoCheck()).ok());
  // A decoder's first position sees itself only.
  EncodeQuery cls_of_a_decoder = TwoInputs();
  cls_of_a_decoder.model = "llama";
  cls_of_a_decoder.inputs.pop_back();
  cls_of_a_decoder.pooling = Pooling::kCls;
  answer = runner->RunEncode(cls_of_a_decoder, NoCheck());
  ASSERT_FALSE(answer.ok());
  EXPECT_THAT(answer.status().message(), HasSubstr("model 'llama' is a decoder"));
  cls_of_a_decoder.pooling = Pooling::kMean;
  EXPECT_TRUE(runner->RunEncode(cls_of_a_decoder, NoCheck()).ok());

  EncodeQuery empty_pair = TwoInputs();
  empty_pair.inputs[1].text_pair = "";
  answer = runner->RunEncode(empty_pair, NoCheck());
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(answer.status().message(), HasSubstr("inputs[1].text_pair"));
}

// Marian's tokenizer puts no special token first (it ends the text with </s>): CLS pooling
// would pool the first word.
TEST(RequestEncodeTest, ClsPoolingNeedsASpecialTokenFirst) {
  std::vector<std::unique_ptr<LoadedModel>> models;
  models.push_back(LoadModel("marian", TestDataDir() + "/tiny-marian"));
  ASSERT_NE(models.back(), nullptr);
  RequestRunner runner(RequestRunner::Options(), std::move(models), nullptr);
  EncodeQuery query;
  query.model = "marian";
  query.inputs.push_back({"hello there", std::nullopt});
  query.pooling = Pooling::kCls;
  absl::StatusOr<EncodeAnswer> answer = runner.RunEncode(query, NoCheck());
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(answer.status().message(),
              HasSubstr("inputs[0]: pooling POOLING_CLS pools the first token, expected a special "
                        "token ([CLS] or <s>) there, got '"));
  query.pooling = Pooling::kMean;
  EXPECT_TRUE(runner.RunEncode(query, NoCheck()).ok());
}

TEST(RequestEncodeTest, SizeEstimateIsTheAnswersSize) {
  EncodeQuery query = TwoInputs();
  query.output_hidden_states = true;
  query.pooling = Pooling::kMean;
  query.dtype = OutputDType::kFloat16;
  absl::StatusOr<EncodeAnswer> answer = NewRunner()->RunEncode(query, NoCheck());
  ASSERT_TRUE(answer.ok()) << answer.status();
  int64_t bytes = 0;
  for (const EncodedInput& result : answer->results) {
    bytes += BytesOf({result.last_hidden_state, result.pooled}, /*bytes_per_element=*/2) +
             BytesOf(result.hidden_states, /*bytes_per_element=*/2);
  }
  RequestRunner::Options at_cap;
  at_cap.max_response_bytes = bytes;
  EXPECT_TRUE(NewRunner(at_cap)->RunEncode(query, NoCheck()).ok());
  RequestRunner::Options below;
  below.max_response_bytes = bytes - 1;
  absl::StatusOr<EncodeAnswer> refused = NewRunner(below)->RunEncode(query, NoCheck());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(),
              HasSubstr(absl::StrCat("Encode response would be ", bytes, " bytes")));
  // The call asks for float16 already: that is not advised again.
  EXPECT_THAT(refused.status().message(),
              HasSubstr("send fewer inputs per call, or leave output_hidden_states off"));
  EXPECT_THAT(refused.status().message(), Not(HasSubstr("DTYPE_FLOAT16")));
  query.dtype = OutputDType::kFloat32;
  refused = NewRunner(below)->RunEncode(query, NoCheck());
  EXPECT_THAT(refused.status().message(), HasSubstr(kEncodeFixes));
}

// Batched together, each input gets what it gets alone: its own tokens, its unpadded states, and
// a pooled vector of unit length with normalize.
TEST(RequestEncodeTest, EachInputGetsWhatItGetsAlone) {
  std::unique_ptr<RequestRunner> runner = NewRunner();
  EncodeQuery query = TwoInputs();
  query.pooling = Pooling::kCls;
  query.normalize = true;
  absl::StatusOr<EncodeAnswer> both = runner->RunEncode(query, NoCheck());
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ(both->results.size(), 2u);
  for (size_t i = 0; i < query.inputs.size(); ++i) {
    SCOPED_TRACE(i);
    EncodeQuery alone = query;
    alone.inputs = {query.inputs[i]};
    absl::StatusOr<EncodeAnswer> single = runner->RunEncode(alone, NoCheck());
    ASSERT_TRUE(single.ok()) << single.status();
    const EncodedInput& batched = both->results[i];
    const EncodedInput& expected = single->results[0];
    EXPECT_EQ(batched.tokens.encoding.input_ids, expected.tokens.encoding.input_ids);
    const int64_t length = static_cast<int64_t>(batched.tokens.encoding.size());
    EXPECT_EQ(batched.last_hidden_state.size(0), length);
    EXPECT_TRUE(torch::allclose(batched.last_hidden_state, expected.last_hidden_state,
                                /*rtol=*/1e-4, /*atol=*/1e-5));
    EXPECT_NEAR(batched.pooled.norm().item<double>(), 1.0, 1e-5);
  }
}

TEST(RequestEncodeTest, InputsOverMaxBatchTokensRunInPassesWithinIt) {
  EncodeQuery query;
  query.model = "bert";
  query.pooling = Pooling::kMean;
  for (const char* text :
       {"paris", "the capital of france is paris", "a text of a few more words than the others",
        "berlin", "rome is in italy", "madrid is the capital of spain and its largest city"}) {
    query.inputs.push_back({text, std::nullopt});
  }
  absl::StatusOr<EncodeAnswer> together = NewRunner()->RunEncode(query, NoCheck());
  ASSERT_TRUE(together.ok()) << together.status();
  int64_t longest = 0;
  for (const EncodedInput& result : together->results) {
    longest = std::max<int64_t>(longest, result.tokens.encoding.size());
  }
  // Room for two inputs of the longest a pass.
  PassRecorder recorder;
  RequestRunner::Options options;
  options.batching.max_batch_tokens = 2 * longest;
  absl::StatusOr<EncodeAnswer> split = NewRunner(options, &recorder)->RunEncode(query, NoCheck());
  ASSERT_TRUE(split.ok()) << split.status();
  int64_t sequences = 0;
  for (const auto& [inputs, padded_tokens] : recorder.passes()) {
    EXPECT_LE(padded_tokens, 2 * longest);
    sequences += inputs;
  }
  EXPECT_GE(recorder.passes().size(), 3u);
  EXPECT_EQ(sequences, 6);
  ASSERT_EQ(split->results.size(), 6u);
  for (size_t i = 0; i < split->results.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(split->results[i].tokens.encoding.input_ids,
              together->results[i].tokens.encoding.input_ids);
    EXPECT_TRUE(torch::allclose(split->results[i].last_hidden_state,
                                together->results[i].last_hidden_state, /*rtol=*/1e-4,
                                /*atol=*/1e-5));
    EXPECT_TRUE(torch::allclose(split->results[i].pooled, together->results[i].pooled,
                                /*rtol=*/1e-4, /*atol=*/1e-5));
  }
}

}  // namespace
}  // namespace attnscope

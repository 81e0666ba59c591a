// RunCrossAttention (models/requests/cross_attention.cc) in process: its checks, the query and
// document positions it reports, and the relevance score against Attribute's score of the same
// pair, which reaches the classifier through autograd rather than the batched inference kernels.
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/requests/request_test_util.h"

namespace attnscope {
namespace {

using ::testing::HasSubstr;
using testing::NewRunner;
using testing::NoCheck;
using testing::PassRecorder;

CrossAttentionQuery TwoDocuments() {
  CrossAttentionQuery query;
  query.model = "bert";
  query.query = "where is the fox";
  query.documents = {"the quick brown fox jumps over the lazy dog", "nothing about it"};
  return query;
}

TEST(RequestCrossAttentionTest, BadQueriesNameTheField) {
  std::unique_ptr<RequestRunner> runner = NewRunner();
  CrossAttentionQuery skip = TwoDocuments();
  skip.tokenization.skip_special_tokens = true;
  absl::StatusOr<CrossAttentionAnswer> answer = runner->RunCrossAttention(skip, NoCheck());
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(answer.status().message(), HasSubstr("skip_special_tokens"));

  CrossAttentionQuery none = TwoDocuments();
  none.documents.clear();
  answer = runner->RunCrossAttention(none, NoCheck());
  ASSERT_FALSE(answer.ok());
  EXPECT_THAT(answer.status().message(), HasSubstr("documents: expected at least one document"));

  CrossAttentionQuery causal = TwoDocuments();
  causal.model = "llama";
  causal.include_document_to_query = true;
  answer = runner->RunCrossAttention(causal, NoCheck());
  ASSERT_FALSE(answer.ok());
  EXPECT_THAT(answer.status().message(), HasSubstr("is causal"));

  RequestRunner::Options options;
  options.max_call_tokens = 10;
  answer = NewRunner(options)->RunCrossAttention(TwoDocuments(), NoCheck());
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(answer.status().message(), HasSubstr("--max_call_tokens"));
}

TEST(RequestCrossAttentionTest, BlocksAndScoresOfEachDocument) {
  std::unique_ptr<RequestRunner> runner = NewRunner();
  CrossAttentionQuery query = TwoDocuments();
  query.include_document_to_query = true;
  absl::StatusOr<CrossAttentionAnswer> answer = runner->RunCrossAttention(query, NoCheck());
  ASSERT_TRUE(answer.ok()) << answer.status();
  ASSERT_EQ(answer->documents.size(), 2u);
  const int64_t heads = static_cast<int64_t>(answer->heads.size());
  for (size_t d = 0; d < answer->documents.size(); ++d) {
    SCOPED_TRACE(d);
    const DocumentAnswer& document = answer->documents[d];
    const Encoding& encoding = document.tokens.encoding;
    for (const int64_t position : document.query_positions) {
      EXPECT_EQ(encoding.sequence_ids[position], 0);
      EXPECT_EQ(encoding.special_tokens_mask[position], 0);
    }
    for (const int64_t position : document.document_positions) {
      EXPECT_EQ(encoding.sequence_ids[position], 1);
      EXPECT_EQ(encoding.special_tokens_mask[position], 0);
    }
    const int64_t queries = static_cast<int64_t>(document.query_positions.size());
    const int64_t documents = static_cast<int64_t>(document.document_positions.size());
    ASSERT_EQ(document.query_to_document.size(), answer->layers.size());
    ASSERT_EQ(document.document_to_query.size(), answer->layers.size());
    EXPECT_EQ(document.query_to_document[0].sizes().vec(),
              (std::vector<int64_t>{heads, queries, documents}));
    EXPECT_EQ(document.document_to_query[0].sizes().vec(),
              (std::vector<int64_t>{heads, documents, queries}));

    ASSERT_TRUE(document.relevance_score.has_value());
    AttributeQuery attribute;
    attribute.model = "bert";
    attribute.input = {query.query, query.documents[d]};
    attribute.methods = {AttributionMethod::kGradientXInput};
    absl::StatusOr<AttributeAnswer> scored = runner->RunAttribute(attribute, NoCheck());
    ASSERT_TRUE(scored.ok()) << scored.status();
    EXPECT_NEAR(*document.relevance_score, scored->score, 1e-4);
  }
}

// Truncation is CrossAttention's default, so each document says whether the model read all of the
// query and of itself; max_length counts the joint input's three special tokens too.
TEST(RequestCrossAttentionTest, EachDocumentSaysWhetherTruncationCutIt) {
  std::unique_ptr<RequestRunner> runner = NewRunner();
  CrossAttentionQuery query = TwoDocuments();
  // The tiny vocabulary spells most words in pieces: the query is 6 tokens, the documents 31 and
  // 13. 22 tokens leave the second whole and cut the first, the longer, to 13.
  query.tokenization.truncation = Truncation::kLongestFirst;
  query.tokenization.max_length = 22;
  absl::StatusOr<CrossAttentionAnswer> answer = runner->RunCrossAttention(query, NoCheck());
  ASSERT_TRUE(answer.ok()) << answer.status();
  ASSERT_EQ(answer->documents.size(), 2u);
  EXPECT_EQ(answer->documents[0].query_positions.size(), 6u);
  EXPECT_EQ(answer->documents[0].document_positions.size(), 13u);
  EXPECT_FALSE(answer->documents[0].query_truncated);
  EXPECT_TRUE(answer->documents[0].document_truncated);
  EXPECT_EQ(answer->documents[1].document_positions.size(), 13u);
  EXPECT_FALSE(answer->documents[1].query_truncated);
  EXPECT_FALSE(answer->documents[1].document_truncated);

  // 11 tokens leave 8 for the texts: longest_first takes from the longer text each time, so the
  // query is cut too once the second document is down to its length (4 and 4).
  query.tokenization.max_length = 11;
  answer = runner->RunCrossAttention(query, NoCheck());
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->documents[1].query_positions.size(), 4u);
  EXPECT_EQ(answer->documents[1].document_positions.size(), 4u);
  EXPECT_TRUE(answer->documents[1].query_truncated);
  EXPECT_TRUE(answer->documents[1].document_truncated);

  // A document far over the model's limit, at the model's own limit: tokenization stops early,
  // and the answer still says the model read only its start.
  query = TwoDocuments();
  std::string long_document;
  for (int i = 0; i < 2000; ++i) long_document += "fox ";
  query.documents = {long_document};
  answer = runner->RunCrossAttention(query, NoCheck());
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_FALSE(answer->documents[0].query_truncated);
  EXPECT_TRUE(answer->documents[0].document_truncated);
}

// Every layer's full maps of a pass are held until the blocks are cut out: 64 long documents in
// one pass held gigabytes. The documents go through in groups under max_pass_attention_bytes, and
// the answer is the same as in one pass.
TEST(RequestCrossAttentionTest, PassesHoldAttentionMapsUnderTheBound) {
  CrossAttentionQuery query = TwoDocuments();
  query.documents.clear();
  for (int i = 0; i < 12; ++i) {
    std::string document = "the quick brown fox";
    for (int j = 0; j < i; ++j) document += " jumps over the lazy dog";
    query.documents.push_back(document);
  }
  std::unique_ptr<RequestRunner> whole = NewRunner();
  absl::StatusOr<CrossAttentionAnswer> expected = whole->RunCrossAttention(query, NoCheck());
  ASSERT_TRUE(expected.ok()) << expected.status();

  RequestRunner::Options options;
  options.max_pass_attention_bytes = 200 << 10;
  PassRecorder recorder;
  std::unique_ptr<RequestRunner> grouped = NewRunner(options, &recorder);
  absl::StatusOr<CrossAttentionAnswer> answer = grouped->RunCrossAttention(query, NoCheck());
  ASSERT_TRUE(answer.ok()) << answer.status();

  const ModelConfig& config = answer->model->config();
  const int64_t per_square_token = config.num_hidden_layers * config.num_attention_heads * 4;
  const std::vector<std::pair<int64_t, int64_t>> passes = recorder.passes();
  EXPECT_GT(passes.size(), 2u);
  int64_t sequences = 0;
  for (const auto& [count, padded] : passes) {
    const int64_t longest = padded / count;
    if (count > 1) {
      EXPECT_LE(count * longest * longest * per_square_token, options.max_pass_attention_bytes)
          << count << " documents of up to " << longest << " tokens";
    }
    sequences += count;
  }
  EXPECT_EQ(sequences, 12);

  ASSERT_EQ(answer->documents.size(), expected->documents.size());
  for (size_t d = 0; d < answer->documents.size(); ++d) {
    SCOPED_TRACE(d);
    const DocumentAnswer& got = answer->documents[d];
    const DocumentAnswer& want = expected->documents[d];
    ASSERT_EQ(got.query_to_document.size(), want.query_to_document.size());
    for (size_t l = 0; l < got.query_to_document.size(); ++l) {
      EXPECT_TRUE(torch::allclose(got.query_to_document[l], want.query_to_document[l],
                                  /*rtol=*/1e-5, /*atol=*/1e-6));
    }
    ASSERT_TRUE(got.relevance_score.has_value() && want.relevance_score.has_value());
    EXPECT_NEAR(*got.relevance_score, *want.relevance_score, 1e-5);
  }
}

}  // namespace
}  // namespace attnscope

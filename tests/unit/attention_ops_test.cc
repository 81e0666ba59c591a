#include "models/attention_ops.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace attnscope {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<float> Values(const torch::Tensor& tensor) {
  const torch::Tensor flat = tensor.contiguous().to(torch::kFloat32).flatten();
  return std::vector<float>(flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
}

TEST(ResolveIndicesTest, EmptySelectsAllAndNegativeCountsFromTheEnd) {
  EXPECT_THAT(*ResolveIndices({}, 3, "layer", "layers"), ElementsAre(0, 1, 2));
  EXPECT_THAT(*ResolveIndices({-1, 0, -2}, 3, "layer", "layers"), ElementsAre(2, 0, 1));
}

// A repeated index, as itself or counted from the end: 4 million repeats of one layer in a 4 MB
// StreamAttention request streamed for minutes, and 10 000 of one head took gigabytes.
TEST(ResolveIndicesTest, EachIndexAtMostOnce) {
  for (const std::vector<int32_t>& repeated :
       {std::vector<int32_t>{0, 0}, std::vector<int32_t>{2, 1, -1}}) {
    const absl::StatusOr<std::vector<int64_t>> result =
        ResolveIndices(repeated, 3, "head", "heads");
    ASSERT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(result.status().message(), HasSubstr("expected each head at most once"));
    EXPECT_THAT(result.status().message(), HasSubstr("`heads`"));
  }
}

TEST(ResolveIndicesTest, OutOfRangeNamesTheValidRangeAndOption) {
  for (const int32_t bad : {3, -4}) {
    const absl::StatusOr<std::vector<int64_t>> result = ResolveIndices({bad}, 3, "head", "heads");
    ASSERT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(result.status().message(), HasSubstr("expected an index in [-3, 3)"));
    EXPECT_THAT(result.status().message(), HasSubstr("`heads`"));
  }
}

TEST(ResolveWindowTest, ZeroEndMeansTheEnd) {
  const AttentionWindow window = *ResolveWindow({1, 0, 2, 4}, 5);
  EXPECT_EQ(window.query_start, 1);
  EXPECT_EQ(window.query_end, 5);
  EXPECT_EQ(window.key_start, 2);
  EXPECT_EQ(window.key_end, 4);
}

TEST(ResolveWindowTest, OutsideTheSequenceIsInvalid) {
  EXPECT_THAT(ResolveWindow({0, 6, 0, 0}, 5).status().message(),
              HasSubstr("the sequence has 5 tokens"));
  EXPECT_EQ(ResolveWindow({5, 0, 0, 0}, 5).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveWindow({0, 0, 3, 2}, 5).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveWindow({-1, 0, 0, 0}, 5).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(StripPaddingTest, KeepsTheRealTokensOfOneItem) {
  const torch::Tensor layer = torch::arange(2 * 1 * 3 * 3, torch::kFloat32).view({2, 1, 3, 3});
  const torch::Tensor item = StripPadding(layer, 1, 2);
  EXPECT_THAT(item.sizes(), ElementsAre(1, 2, 2));
  EXPECT_THAT(Values(item), ElementsAre(9, 10, 12, 13));
}

TEST(SelectHeadsTest, AllHeadsInOrderIsAView) {
  const torch::Tensor layer = torch::rand({3, 4, 4});
  const torch::Tensor selected = *SelectHeads(layer, {0, 1, 2}, HeadAggregation::kNone, {});
  EXPECT_EQ(selected.data_ptr(), layer.data_ptr());
  EXPECT_TRUE(selected.equal(layer));
}

TEST(SelectHeadsTest, SelectsAggregatesAndWindows) {
  // Head h, row q, column k holds 100 h + 10 q + k.
  const torch::Tensor layer = (torch::arange(3).view({3, 1, 1}) * 100 +
                               torch::arange(4).view({1, 4, 1}) * 10 + torch::arange(4))
                                  .to(torch::kFloat32);
  const AttentionWindow window{1, 3, 2, 4};
  EXPECT_THAT(Values(*SelectHeads(layer, {2, 0}, HeadAggregation::kNone, window)),
              ElementsAre(212, 213, 222, 223, 12, 13, 22, 23));
  EXPECT_THAT(Values(*SelectHeads(layer, {2, 0}, HeadAggregation::kMean, window)),
              ElementsAre(112, 113, 122, 123));
  const torch::Tensor max = *SelectHeads(layer, {0, 1}, HeadAggregation::kMax, window);
  EXPECT_THAT(max.sizes(), ElementsAre(1, 2, 2));
  EXPECT_THAT(Values(max), ElementsAre(112, 113, 122, 123));
}

TEST(AttentionRolloutTest, MatchesAHandComputedTwoLayerCase) {
  // Two layers, two heads, three tokens of row-stochastic attention.
  const std::vector<std::vector<std::vector<std::vector<double>>>> attention = {
      {{{1.0, 0.0, 0.0}, {0.5, 0.5, 0.0}, {0.2, 0.3, 0.5}},
       {{0.6, 0.2, 0.2}, {0.1, 0.8, 0.1}, {0.0, 0.0, 1.0}}},
      {{{0.3, 0.3, 0.4}, {0.9, 0.05, 0.05}, {0.25, 0.25, 0.5}},
       {{0.1, 0.1, 0.8}, {0.4, 0.4, 0.2}, {0.7, 0.2, 0.1}}},
  };
  // Reference with plain loops: A~ = 0.5 mean_heads(A) + 0.5 I, rows normalised, R = A~1 A~0.
  double mixed[2][3][3];
  for (int l = 0; l < 2; ++l) {
    for (int q = 0; q < 3; ++q) {
      double row_sum = 0;
      for (int k = 0; k < 3; ++k) {
        mixed[l][q][k] =
            0.5 * (attention[l][0][q][k] + attention[l][1][q][k]) / 2 + (q == k ? 0.5 : 0.0);
        row_sum += mixed[l][q][k];
      }
      for (int k = 0; k < 3; ++k) mixed[l][q][k] /= row_sum;
    }
  }
  std::vector<float> expected;
  for (int q = 0; q < 3; ++q) {
    for (int k = 0; k < 3; ++k) {
      double sum = 0;
      for (int j = 0; j < 3; ++j) sum += mixed[1][q][j] * mixed[0][j][k];
      expected.push_back(static_cast<float>(sum));
    }
  }
  std::vector<torch::Tensor> layers;
  for (const auto& layer : attention) {
    std::vector<float> flat;
    for (const auto& head : layer) {
      for (const auto& row : head) flat.insert(flat.end(), row.begin(), row.end());
    }
    layers.push_back(torch::tensor(flat).view({2, 3, 3}));
  }
  const torch::Tensor rollout = *AttentionRollout(layers);
  EXPECT_THAT(rollout.sizes(), ElementsAre(3, 3));
  const std::vector<float> actual = Values(rollout);
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-6) << i;
  for (const float sum : Values(rollout.sum(-1))) EXPECT_NEAR(sum, 1.0f, 1e-6);
}

TEST(AttentionRolloutTest, RejectsNoLayersAndMixedShapes) {
  EXPECT_EQ(AttentionRollout({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AttentionRollout({torch::rand({2, 3, 3}), torch::rand({2, 4, 4})}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TopKPerRowTest, DescendingValuesWithAbsoluteIndicesAndStableTies) {
  const torch::Tensor rows =
      torch::tensor({0.1f, 0.3f, 0.3f, 0.2f, 0.0f, 0.0f, 1.0f, 0.0f}).view({1, 1, 2, 4});
  const RowTopK top = *TopKPerRow(rows, 3, /*key_offset=*/5);
  EXPECT_THAT(top.values.sizes(), ElementsAre(1, 1, 2, 3));
  EXPECT_THAT(Values(top.values), ElementsAre(0.3f, 0.3f, 0.2f, 1.0f, 0.0f, 0.0f));
  ASSERT_EQ(top.indices.scalar_type(), torch::kInt32);
  const torch::Tensor indices = top.indices.contiguous();
  EXPECT_THAT(std::vector<int32_t>(indices.data_ptr<int32_t>(), indices.data_ptr<int32_t>() + 6),
              ElementsAre(6, 7, 8, 7, 5, 6));
}

TEST(TopKPerRowTest, RejectsKOutsideTheRow) {
  const torch::Tensor rows = torch::rand({2, 4});
  EXPECT_THAT(TopKPerRow(rows, 5, 0).status().message(), HasSubstr("expected a value in [1, 4]"));
  EXPECT_EQ(TopKPerRow(rows, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TopKPerRow(rows, -2, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PoolingTest, MeanCountsRealTokensOnly) {
  const torch::Tensor hidden =
      torch::tensor({1.0f, 2.0f, 3.0f, 4.0f, 100.0f, 100.0f, 5.0f, 6.0f, 0.0f, 0.0f, 0.0f, 0.0f})
          .view({2, 3, 2});
  const torch::Tensor mask = torch::tensor({1, 1, 0, 1, 0, 0}, torch::kInt64).view({2, 3});
  EXPECT_THAT(Values(*PoolHiddenStates(hidden, mask, Pooling::kMean)),
              ElementsAre(2.0f, 3.0f, 5.0f, 6.0f));
  EXPECT_THAT(Values(*PoolHiddenStates(hidden, mask, Pooling::kCls)),
              ElementsAre(1.0f, 2.0f, 5.0f, 6.0f));
}

TEST(L2NormalizeTest, UnitRowsAndZeroStaysZero) {
  const torch::Tensor vectors = torch::tensor({3.0f, 4.0f, 0.0f, 0.0f}).view({2, 2});
  EXPECT_THAT(Values(*L2Normalize(vectors)), ElementsAre(0.6f, 0.8f, 0.0f, 0.0f));
}

TEST(CrossAttentionTest, BlockOfQueryRowsAndDocumentColumns) {
  // [CLS] q q [SEP] d d d [SEP]
  const std::vector<int64_t> sequence_ids = {-1, 0, 0, -1, 1, 1, 1, -1};
  const std::vector<int64_t> query = PositionsOfSequence(sequence_ids, 0);
  const std::vector<int64_t> document = PositionsOfSequence(sequence_ids, 1);
  EXPECT_THAT(query, ElementsAre(1, 2));
  EXPECT_THAT(document, ElementsAre(4, 5, 6));
  const torch::Tensor layer = torch::arange(2 * 8 * 8, torch::kFloat32).view({2, 8, 8});
  const torch::Tensor block = *AttentionBlock(layer, query, document);
  EXPECT_THAT(block.sizes(), ElementsAre(2, 2, 3));
  EXPECT_THAT(Values(block), ElementsAre(12, 13, 14, 20, 21, 22, 76, 77, 78, 84, 85, 86));
  EXPECT_EQ(AttentionBlock(layer, {}, document).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AttentionBlock(layer, {8}, document).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// [start, end) of each word.
std::vector<std::pair<int64_t, int64_t>> Spans(const std::vector<WordSpan>& words) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const WordSpan& word : words) spans.emplace_back(word.token_start, word.token_end);
  return spans;
}

TEST(WordSpansTest, RunsOfAWordIdSpecialTokensAloneAndEachWordMarkStartsAWord) {
  using Spans_ = std::vector<std::pair<int64_t, int64_t>>;
  // [CLS] un ##able to [SEP] go [SEP]: a pair's second text numbers its words from 0 again.
  EXPECT_EQ(Spans(WordSpans({-1, 0, 0, 1, -1, 0, -1}, {-1, 0, 0, 0, -1, 1, -1})),
            (Spans_{{0, 1}, {1, 3}, {3, 4}, {4, 5}, {5, 6}, {6, 7}}));
  // <s> ▁Once ▁up on ▁a, one word id for the whole text (a tokenizer.json without a
  // pre-tokenizer): without the tokens one word, with them a word at each "▁".
  const std::vector<int64_t> word_ids = {-1, 0, 0, 0, 0};
  const std::vector<int64_t> sequence_ids = {-1, 0, 0, 0, 0};
  EXPECT_EQ(Spans(WordSpans(word_ids, sequence_ids)), (Spans_{{0, 1}, {1, 5}}));
  const std::vector<std::string> tokens = {"<s>", "\u2581Once", "\u2581up", "on", "\u2581a"};
  EXPECT_EQ(Spans(WordSpans(word_ids, sequence_ids, tokens)),
            (Spans_{{0, 1}, {1, 2}, {2, 4}, {4, 5}}));
}

}  // namespace
}  // namespace attnscope

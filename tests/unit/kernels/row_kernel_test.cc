// The row kernel's attention products (models/kernels/row_kernel.h) against float64 LibTorch:
// one head's scaled scores and its context, at lengths that fill whole tiles of 64 keys and
// lengths that end inside a vector of 16, heads of 16 to 128 dimensions, and rows read with the
// strides of a [token, hidden] projection; on AVX-512 and (portable/row_kernel_test) on AVX2.
#include "models/kernels/row_kernel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "models/kernels/fused_ops.h"

namespace attnscope {
namespace {

// length, head_dim
class RowKernelAttentionTest : public testing::TestWithParam<std::tuple<int64_t, int64_t>> {
 protected:
  void SetUp() override {
    if (!RowKernelAttentionApplies(/*head_dim=*/64)) {
      GTEST_SKIP() << "the row kernel needs AVX2";
    }
  }
};

constexpr int64_t kHeads = 3;  // the head under test is the middle one of a [token, hidden] row

TEST_P(RowKernelAttentionTest, ScoresMatchScaledDotProducts) {
  const auto [length, head_dim] = GetParam();
  torch::manual_seed(3);
  const int64_t hidden = kHeads * head_dim;
  const torch::Tensor query = torch::randn({length, hidden});
  const torch::Tensor key = torch::randn({length, hidden});
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int64_t stride = (length + 15) / 16 * 16;
  // A value the kernel must overwrite, and past each row's vectors one it must leave alone.
  std::vector<float> scores(static_cast<size_t>(length * stride + 16), -7.0f);
  RowKernelScores(query.data_ptr<float>() + head_dim, hidden, key.data_ptr<float>() + head_dim,
                  hidden, /*queries=*/length, /*keys=*/length, head_dim, scale, scores.data(),
                  stride);
  const torch::Tensor q = query.narrow(1, head_dim, head_dim).to(torch::kFloat64);
  const torch::Tensor k = key.narrow(1, head_dim, head_dim).to(torch::kFloat64);
  const torch::Tensor expected = torch::matmul(q, k.t()) * scale;
  const torch::Tensor got =
      torch::from_blob(scores.data(), {length, stride}).narrow(1, 0, length).to(torch::kFloat64);
  EXPECT_LT((got - expected).abs().max().item<double>(), 1e-4);
  // The rest of each row's last vector (16 keys on AVX-512, 8 on AVX2) holds the zero keys'
  // products, and the kernel leaves the stride's padding past it alone.
  const int64_t vector_keys = HasAvx512() ? 16 : 8;
  const int64_t written = (length + vector_keys - 1) / vector_keys * vector_keys;
  for (int64_t t = 0; t < length; ++t) {
    for (int64_t j = length; j < written; ++j) EXPECT_EQ(scores[t * stride + j], 0.0f);
    for (int64_t j = written; j < stride; ++j) EXPECT_EQ(scores[t * stride + j], -7.0f);
  }
  EXPECT_EQ(scores[length * stride], -7.0f);
}

TEST_P(RowKernelAttentionTest, ContextMatchesProbabilitiesTimesValues) {
  const auto [length, head_dim] = GetParam();
  torch::manual_seed(5);
  const int64_t hidden = kHeads * head_dim;
  const torch::Tensor probs = torch::softmax(torch::randn({length, length}), /*dim=*/-1);
  const torch::Tensor value = torch::randn({length, hidden});
  torch::Tensor context = torch::full({length, hidden}, -7.0f);
  RowKernelContext(probs.data_ptr<float>(), length, value.data_ptr<float>() + head_dim, hidden,
                   /*queries=*/length, /*keys=*/length, head_dim,
                   context.data_ptr<float>() + head_dim, hidden);
  const torch::Tensor expected = torch::matmul(
      probs.to(torch::kFloat64), value.narrow(1, head_dim, head_dim).to(torch::kFloat64));
  EXPECT_LT((context.narrow(1, head_dim, head_dim).to(torch::kFloat64) - expected)
                .abs()
                .max()
                .item<double>(),
            1e-5);
  // The other heads' columns are untouched.
  EXPECT_TRUE(torch::all(context.narrow(1, 0, head_dim) == -7.0f).item<bool>());
  EXPECT_TRUE(torch::all(context.narrow(1, 2 * head_dim, head_dim) == -7.0f).item<bool>());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RowKernelAttentionTest,
    testing::Values(std::make_tuple(int64_t{1}, int64_t{64}),    // one token
                    std::make_tuple(int64_t{128}, int64_t{64}),  // BERT-base at 128 tokens
                    std::make_tuple(int64_t{100}, int64_t{64}),  // a tile and a vector not full
                    std::make_tuple(int64_t{17}, int64_t{16}),
                    std::make_tuple(int64_t{37}, int64_t{32}),
                    std::make_tuple(int64_t{300}, int64_t{128}),  // two tiles of head_dim
                    std::make_tuple(int64_t{513}, int64_t{80})));

TEST(RowKernelAttentionAppliesTest, NeedsWholeVectorsOfHeadDim) {
  EXPECT_FALSE(RowKernelAttentionApplies(/*head_dim=*/8));
  EXPECT_FALSE(RowKernelAttentionApplies(/*head_dim=*/0));
  EXPECT_EQ(RowKernelAttentionApplies(/*head_dim=*/64), RowKernelApplies(/*rows=*/1, /*in=*/64));
}

}  // namespace
}  // namespace attnscope

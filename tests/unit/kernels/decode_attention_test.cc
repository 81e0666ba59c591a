// DecodeAttention (models/kernels/decode_attention.h) against transformers' eager attention written
// with LibTorch's operators in float64: the key/value heads repeated for their query heads
// (repeat_kv), softmax(q k^T * scale), then the weighted values. CTest runs this binary twice: as
// built for this CPU, and with ATTNSCOPE_DISABLE_AVX512 set (the portable softmax).
#include "models/kernels/decode_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>

namespace attnscope {
namespace {

double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

struct Shape {
  int64_t batch;
  int64_t heads;
  int64_t kv_heads;
  int64_t head_dim;
  int64_t length;
};

TEST(DecodeAttentionTest, MatchesEagerGroupedQueryAttentionOverACacheView) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    GTEST_SKIP() << "DecodeAttention needs AVX2 and FMA, which this CPU lacks";
  }
  torch::manual_seed(11);
  // stories260K (8 heads over 4, head_dim 8), a Llama-style 64-wide head with 4 query heads per
  // key/value head, head_dim 80 (not a multiple of the 32-float block), multi-head attention
  // (G = 1), a batch of two, and key counts around the 8-key blocks.
  for (const Shape& shape :
       {Shape{1, 8, 4, 8, 511}, Shape{1, 12, 3, 64, 100}, Shape{1, 4, 1, 80, 9},
        Shape{2, 2, 2, 16, 1}, Shape{2, 6, 2, 32, 8}, Shape{1, 8, 4, 8, 7}}) {
    const int64_t capacity = shape.length + 5;  // the cache holds more positions than are filled
    const torch::Tensor query = torch::randn({shape.batch, 1, shape.heads * shape.head_dim});
    const torch::Tensor key_storage =
        torch::randn({shape.batch, shape.kv_heads, capacity, shape.head_dim}) * 2;
    const torch::Tensor value_storage =
        torch::randn({shape.batch, shape.kv_heads, capacity, shape.head_dim});
    const torch::Tensor keys = key_storage.narrow(2, 0, shape.length);
    const torch::Tensor values = value_storage.narrow(2, 0, shape.length);
    const double scale = 1.0 / std::sqrt(static_cast<double>(shape.head_dim));
    ASSERT_TRUE(DecodeAttentionApplies(query, keys, values));
    const DecodeAttentionOutput got =
        DecodeAttention(query, keys, values, static_cast<float>(scale));

    const int64_t group = shape.heads / shape.kv_heads;
    const torch::Tensor q = query.to(torch::kFloat64)
                                .view({shape.batch, 1, shape.heads, shape.head_dim})
                                .transpose(1, 2);
    const torch::Tensor k = keys.to(torch::kFloat64).repeat_interleave(group, /*dim=*/1);
    const torch::Tensor v = values.to(torch::kFloat64).repeat_interleave(group, /*dim=*/1);
    const torch::Tensor probs = torch::softmax(torch::matmul(q, k.transpose(-1, -2)) * scale, -1);
    const torch::Tensor context =
        torch::matmul(probs, v).transpose(1, 2).reshape({shape.batch, 1, -1});

    ASSERT_EQ(got.probs.sizes(), probs.sizes());
    ASSERT_EQ(got.context.sizes(), context.sizes());
    EXPECT_LT(MaxAbsDiff(got.probs, probs), 1e-6) << "length " << shape.length;
    EXPECT_LT(MaxAbsDiff(got.context, context), 2e-6) << "length " << shape.length;
    // The probabilities are real weights, not all mass on one key or spread evenly.
    EXPECT_NEAR(got.probs.sum(-1).max().item<double>(), 1.0, 1e-5);
  }
}

TEST(DecodeAttentionTest, DoesNotApplyWhereItsLayoutDoesNotHold) {
  const torch::Tensor query = torch::randn({1, 1, 8 * 12});
  const torch::Tensor keys = torch::randn({1, 4, 10, 12});  // head_dim 12: not a multiple of 8
  EXPECT_FALSE(DecodeAttentionApplies(query, keys, keys));
  const torch::Tensor two_positions = torch::randn({1, 2, 8 * 8});
  const torch::Tensor keys8 = torch::randn({1, 4, 10, 8});
  EXPECT_FALSE(DecodeAttentionApplies(two_positions, keys8, keys8));
  // Rows of the keys not contiguous (head_dim strided).
  const torch::Tensor strided = torch::randn({1, 4, 8, 10}).transpose(2, 3);
  EXPECT_FALSE(DecodeAttentionApplies(torch::randn({1, 1, 8 * 8}), strided, strided));
}

}  // namespace
}  // namespace attnscope

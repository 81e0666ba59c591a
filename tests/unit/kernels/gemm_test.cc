// Linear and FeedForward (models/kernels/gemm.h) against torch::linear, the nn.Linear reference,
// for the shapes where it splits the output columns across threads (and where it does not), and on
// both of its kernels: models/kernels/row_kernel.h for up to 256 rows of a multiple of 16 inputs on
// AVX-512 CPUs, oneDNN otherwise; and with bfloat16 weights, on the row kernel's AMX or
// AVX512_BF16 variant (CTest runs it with ATTNSCOPE_DISABLE_AMX too, tests named no_amx/...) or
// its oneDNN fallback.
#include "models/kernels/gemm.h"

#include <gtest/gtest.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "models/kernels/fused_ops.h"
#include "models/kernels/row_kernel.h"

namespace attnscope {
namespace {

// rows, in, out
class LinearTest : public testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t>> {
 protected:
  void SetUp() override {
    // Two threads at least, so that wide outputs take the column-split path.
    ConfigureIntraOpThreads(/*num_threads=*/2);
    torch::manual_seed(7);
    const auto [rows, in, out] = GetParam();
    x_ = torch::randn({rows, in});
    // Scaled so that every output is of order 1 and one tolerance fits all depths.
    weight_ = torch::randn({out, in}) / std::sqrt(static_cast<double>(in));
    bias_ = torch::randn({out});
    residual_ = torch::randn({rows, out});
  }

  torch::Tensor x_, weight_, bias_, residual_;
};

constexpr double kTolerance = 1e-4;

TEST_P(LinearTest, MatchesTorchLinear) {
  ASSERT_GE(at::get_num_threads(), 2);
  const torch::Tensor expected = torch::linear(x_, weight_, bias_);
  const torch::Tensor got = Linear(x_, weight_, bias_);
  ASSERT_EQ(got.sizes(), expected.sizes());
  EXPECT_LT((got - expected).abs().max().item<double>(), kTolerance);
}

TEST_P(LinearTest, WithoutBias) {
  const torch::Tensor expected = torch::linear(x_, weight_);
  EXPECT_LT((Linear(x_, weight_, torch::Tensor()) - expected).abs().max().item<double>(),
            kTolerance);
}

TEST_P(LinearTest, FusesTheResidual) {
  const torch::Tensor expected = torch::linear(x_, weight_, bias_) + residual_;
  const torch::Tensor got = Linear(x_, weight_, bias_, residual_);
  EXPECT_LT((got - expected).abs().max().item<double>(), kTolerance);
  // The residual is read, not written.
  EXPECT_FALSE(got.data_ptr() == residual_.data_ptr());
}

TEST_P(LinearTest, SameResultInsideAParallelRegion) {
  // Inside at::parallel_for Linear runs one undivided product per call.
  const torch::Tensor outside = Linear(x_, weight_, bias_);
  torch::Tensor inside;
  at::parallel_for(0, 1, 1, [&](int64_t, int64_t) { inside = Linear(x_, weight_, bias_); });
  EXPECT_LT((inside - outside).abs().max().item<double>(), kTolerance);
}

// A plain float32 loop, the rounding any implementation gets without blocking, and independent of
// the BLAS LibTorch finds (two Debian roots on one machine gave torch::linear errors 2x apart):
// each output summed in order with fused multiply-adds, then the bias.
torch::Tensor SequentialFloat32Linear(const torch::Tensor& x, const torch::Tensor& weight,
                                      const torch::Tensor& bias) {
  const int64_t rows = x.size(0), in = x.size(1), out = weight.size(0);
  torch::Tensor y = torch::empty({rows, out});
  const auto xa = x.accessor<float, 2>();
  const auto wa = weight.accessor<float, 2>();
  const auto ba = bias.accessor<float, 1>();
  auto ya = y.accessor<float, 2>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      float sum = 0.0f;
      for (int64_t i = 0; i < in; ++i) sum = std::fma(xa[r][i], wa[o][i], sum);
      ya[r][o] = sum + ba[o];
    }
  }
  return y;
}

TEST_P(LinearTest, AsCloseToFloat64AsABlockedSum) {
  // Root-mean-square errors over every output: the largest single error depends on where the
  // rounding happens to fall, the mean much less. From 512 inputs a blocked sum has at most
  // 0.72x the loop's error on both paths of an AVX-512 CPU (0.28x at 3072 inputs); a kernel that
  // lost its depth blocks would sit at the loop's. Below that the order of a sum matters little
  // and any order is allowed half as much error again as the loop's.
  const auto [rows, in, out] = GetParam();
  const torch::Tensor exact =
      torch::linear(x_.to(torch::kFloat64), weight_.to(torch::kFloat64), bias_.to(torch::kFloat64));
  auto rms_error = [&exact](const torch::Tensor& got) {
    return (got.to(torch::kFloat64) - exact).pow(2).mean().sqrt().item<double>();
  };
  const double loop_error = rms_error(SequentialFloat32Linear(x_, weight_, bias_));
  const double error = rms_error(Linear(x_, weight_, bias_));
  const double bound = in >= 512 ? 0.85 : 1.5;
  EXPECT_LE(error, bound * loop_error + 1e-9) << "a float32 loop's error " << loop_error;
}

TEST_P(LinearTest, Bfloat16WeightsMultiplyTheRoundedOperandsExactly) {
  // With bfloat16 weights Linear rounds x to bfloat16 too and sums in float32
  // (RowKernelLinearBf16, or the oneDNN fallback): the float64 product of the two rounded operands
  // is the reference, to float32 summation error. Against the unrounded operands the difference
  // is bfloat16's, 2^-9 relative per operand, far above that.
  auto rounded = [](const torch::Tensor& t) { return t.to(torch::kBFloat16).to(torch::kFloat64); };
  const torch::Tensor expected =
      torch::linear(rounded(x_), rounded(weight_), bias_.to(torch::kFloat64)) +
      residual_.to(torch::kFloat64);
  const torch::Tensor got =
      Linear(x_, weight_.to(torch::kBFloat16), bias_, residual_).to(torch::kFloat64);
  ASSERT_EQ(got.sizes(), expected.sizes());
  EXPECT_LT((got - expected).abs().max().item<double>(), kTolerance);
  const torch::Tensor unrounded = torch::linear(x_, weight_, bias_) + residual_;
  EXPECT_GT((got - unrounded).abs().max().item<double>(), 1e-3);
}

TEST(Bf16KernelsTest, NameTheProductsOfThisCpuAndEnvironment) {
  const auto disabled = &DisabledByEnvironment;
  const bool avx512_bf16 =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16") &&
      !disabled("ATTNSCOPE_DISABLE_AVX512") && !disabled("ATTNSCOPE_DISABLE_AVX2");
  const bool amx = __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16") &&
                   !disabled("ATTNSCOPE_DISABLE_AMX");
  EXPECT_STREQ(Bf16KernelsName(), !avx512_bf16 ? "none" : (amx ? "amx" : "avx512_bf16"));
}

TEST(LinearGroupTest, EachProductMatchesTorchLinear) {
  ConfigureIntraOpThreads(/*num_threads=*/2);
  torch::manual_seed(11);
  for (const std::vector<int64_t>& outs :
       {std::vector<int64_t>{768, 768, 768}, {100, 37, 200}, {8, 8}, {1000}}) {
    const int64_t in = 96;
    const torch::Tensor x = torch::randn({2, 65, in});
    std::vector<torch::Tensor> weights;
    std::vector<torch::Tensor> biases;
    for (size_t i = 0; i < outs.size(); ++i) {
      weights.push_back(torch::randn({outs[i], in}) / std::sqrt(static_cast<double>(in)));
      // The second product has no bias.
      biases.push_back(i == 1 ? torch::Tensor() : torch::randn({outs[i]}));
    }
    const std::vector<torch::Tensor> got = LinearGroup(x, weights, biases);
    ASSERT_EQ(got.size(), outs.size());
    for (size_t i = 0; i < outs.size(); ++i) {
      const torch::Tensor expected = torch::linear(x, weights[i], biases[i]);
      ASSERT_EQ(got[i].sizes(), expected.sizes());
      EXPECT_LT((got[i] - expected).abs().max().item<double>(), kTolerance)
          << "product " << i << " of " << outs.size();
    }
  }
}

// rows, in, inner, out
class FeedForwardTest
    : public testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t, int64_t>> {};

TEST_P(FeedForwardTest, MatchesTwoTorchLinearsAroundTheActivation) {
  ConfigureIntraOpThreads(/*num_threads=*/2);
  torch::manual_seed(13);
  const auto [rows, in, inner, out] = GetParam();
  const torch::Tensor x = torch::randn({1, rows, in});
  const torch::Tensor up_weight = torch::randn({inner, in}) / std::sqrt(static_cast<double>(in));
  const torch::Tensor up_bias = torch::randn({inner});
  const torch::Tensor down_weight =
      torch::randn({out, inner}) / std::sqrt(static_cast<double>(inner));
  const torch::Tensor down_bias = torch::randn({out});
  const torch::Tensor residual = torch::randn({1, rows, out});
  auto f64 = [](const torch::Tensor& t) { return t.to(torch::kFloat64); };
  for (const Activation activation : {Activation::kGelu, Activation::kGeluTanh}) {
    const torch::Tensor inner_expected =
        torch::gelu(torch::linear(f64(x), f64(up_weight), f64(up_bias)),
                    activation == Activation::kGelu ? "none" : "tanh");
    const torch::Tensor expected =
        torch::linear(inner_expected, f64(down_weight), f64(down_bias)) + f64(residual);
    const torch::Tensor got =
        FeedForward(x, up_weight, up_bias, activation, down_weight, down_bias, residual);
    ASSERT_EQ(got.sizes(), expected.sizes());
    EXPECT_LT((f64(got) - expected).abs().max().item<double>(), kTolerance)
        << (activation == Activation::kGelu ? "gelu" : "gelu tanh");
  }
  // Without biases or residual.
  const torch::Tensor expected =
      torch::linear(torch::gelu(torch::linear(f64(x), f64(up_weight))), f64(down_weight));
  const torch::Tensor got = FeedForward(x, up_weight, torch::Tensor(), Activation::kGelu,
                                        down_weight, torch::Tensor(), torch::Tensor());
  EXPECT_LT((f64(got) - expected).abs().max().item<double>(), kTolerance);
}

TEST_P(FeedForwardTest, Bfloat16GivesTheBitsOfTheTwoLinears) {
  // With bfloat16 weights the row kernel keeps the inner activations as the bfloat16 pairs the
  // second product multiplies, rounded where the second Linear would round them: the same bits.
  if (!HasAvx512Bf16()) GTEST_SKIP() << "no AVX512_BF16: Linear rounds and multiplies on oneDNN";
  ConfigureIntraOpThreads(/*num_threads=*/2);
  torch::manual_seed(19);
  const auto [rows, in, inner, out] = GetParam();
  const torch::Tensor x = torch::randn({1, rows, in});
  const torch::Tensor up_weight =
      (torch::randn({inner, in}) / std::sqrt(static_cast<double>(in))).to(torch::kBFloat16);
  const torch::Tensor up_bias = torch::randn({inner});
  const torch::Tensor down_weight =
      (torch::randn({out, inner}) / std::sqrt(static_cast<double>(inner))).to(torch::kBFloat16);
  const torch::Tensor down_bias = torch::randn({out});
  const torch::Tensor residual = torch::randn({1, rows, out});
  for (const Activation activation : {Activation::kGelu, Activation::kGeluTanh}) {
    const torch::Tensor expected =
        Linear(Linear(x, up_weight, up_bias, /*residual=*/torch::Tensor(), activation), down_weight,
               down_bias, residual);
    EXPECT_TRUE(torch::equal(
        FeedForward(x, up_weight, up_bias, activation, down_weight, down_bias, residual), expected))
        << (activation == Activation::kGelu ? "gelu" : "gelu tanh");
  }
  // Against float64 of the rounded operands: the inner activations are rounded to bfloat16 once.
  auto f64 = [](const torch::Tensor& t) { return t.to(torch::kFloat64); };
  auto rounded = [](const torch::Tensor& t) { return t.to(torch::kBFloat16).to(torch::kFloat64); };
  const torch::Tensor inner_expected =
      torch::gelu(torch::linear(rounded(x), f64(up_weight), f64(up_bias)));
  const torch::Tensor expected =
      torch::linear(rounded(inner_expected), f64(down_weight), f64(down_bias)) + f64(residual);
  const torch::Tensor got =
      FeedForward(x, up_weight, up_bias, Activation::kGelu, down_weight, down_bias, residual);
  // One bfloat16 rounding of an inner activation can still flip (float32 sums near a tie).
  EXPECT_LT((f64(got) - expected).abs().max().item<double>(), 1e-2);
}

// A request batched with others (more rows beside its own, up to the row kernel's 256 in one call
// and in blocks of 128 beyond) gets exactly the bits it gets alone, from Linear, LinearGroup and
// FeedForward, in float32 and bfloat16: the products sum every row in the same order whatever the
// row count and wherever the row lies.
TEST(RowCountTest, ARowsResultDoesNotDependOnTheRowsBesideIt) {
  if (!RowKernelApplies(/*rows=*/256, /*in=*/768)) {
    GTEST_SKIP() << "no AVX2: oneDNN blocks its sums by the row count";
  }
  ConfigureIntraOpThreads(/*num_threads=*/2);
  torch::manual_seed(17);
  const int64_t in = 768;
  const int64_t inner = 3072;
  const torch::Tensor alone = torch::randn({1, 17, in});
  const torch::Tensor up_weight = torch::randn({inner, in}) / std::sqrt(static_cast<double>(in));
  const torch::Tensor up_bias = torch::randn({inner});
  const torch::Tensor down_weight =
      torch::randn({in, inner}) / std::sqrt(static_cast<double>(inner));
  const torch::Tensor down_bias = torch::randn({in});
  // Rows of other requests before and after the 17: 17 to 256 rows in one call, then 257 (two
  // blocks of 128 and one row), and 512 with the 17 across the boundary of the third block.
  const std::vector<std::pair<int64_t, int64_t>> others = {{0, 0},   {0, 47},  {30, 113},
                                                           {0, 239}, {0, 240}, {370, 125}};
  for (const auto& [before, after] : others) {
    const torch::Tensor batch =
        torch::cat({torch::randn({1, before, in}), alone, torch::randn({1, after, in})},
                   /*dim=*/1)
            .contiguous();
    auto own_rows = [before = before](const torch::Tensor& t) {
      return t.narrow(/*dim=*/1, before, 17);
    };
    const std::string rows = std::to_string(before) + " + 17 + " + std::to_string(after) + " rows";
    for (const bool bf16 : {false, true}) {
      const torch::Tensor up = bf16 ? up_weight.to(torch::kBFloat16) : up_weight;
      const torch::Tensor down = bf16 ? down_weight.to(torch::kBFloat16) : down_weight;
      if (bf16 && !HasAvx512Bf16()) continue;
      EXPECT_TRUE(torch::equal(own_rows(Linear(batch, up, up_bias)), Linear(alone, up, up_bias)))
          << "Linear, " << rows << ", bfloat16 " << bf16;
      EXPECT_TRUE(torch::equal(own_rows(LinearGroup(batch, {up, up}, {up_bias, up_bias})[1]),
                               LinearGroup(alone, {up, up}, {up_bias, up_bias})[1]))
          << "LinearGroup, " << rows << ", bfloat16 " << bf16;
      EXPECT_TRUE(torch::equal(
          own_rows(FeedForward(batch, up, up_bias, Activation::kGelu, down, down_bias, batch)),
          FeedForward(alone, up, up_bias, Activation::kGelu, down, down_bias, alone)))
          << "FeedForward, " << rows << ", bfloat16 " << bf16;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FeedForwardTest,
    testing::Values(std::make_tuple(int64_t{1}, int64_t{768}, int64_t{3072}, int64_t{768}),
                    std::make_tuple(int64_t{128}, int64_t{768}, int64_t{3072}, int64_t{768}),
                    // Tokens short of a whole tile and of a whole vector: the feature-major
                    // inner activations' padding must not reach the result.
                    std::make_tuple(int64_t{100}, int64_t{768}, int64_t{3072}, int64_t{768}),
                    std::make_tuple(int64_t{17}, int64_t{48}, int64_t{64}, int64_t{23}),
                    // Over 128 rows the second product sums its depth in blocks.
                    std::make_tuple(int64_t{200}, int64_t{64}, int64_t{3072}, int64_t{32}),
                    std::make_tuple(int64_t{256}, int64_t{32}, int64_t{128}, int64_t{48}),
                    // Over 256 rows, in blocks of 128: a last block of one row, and of 44.
                    std::make_tuple(int64_t{257}, int64_t{32}, int64_t{128}, int64_t{48}),
                    std::make_tuple(int64_t{300}, int64_t{64}, int64_t{3072}, int64_t{32}),
                    // Shapes the row kernel leaves to oneDNN: an input or inner width that is no
                    // multiple of 16.
                    std::make_tuple(int64_t{3}, int64_t{40}, int64_t{50}, int64_t{7}),
                    std::make_tuple(int64_t{5}, int64_t{32}, int64_t{50}, int64_t{7})));

INSTANTIATE_TEST_SUITE_P(
    Shapes, LinearTest,
    testing::Values(std::make_tuple(int64_t{1}, int64_t{768}, int64_t{768}),     // one row
                    std::make_tuple(int64_t{128}, int64_t{768}, int64_t{3072}),  // BERT-base FFN in
                    std::make_tuple(int64_t{128}, int64_t{3072}, int64_t{768}),  // FFN out
                    std::make_tuple(int64_t{37}, int64_t{64}, int64_t{200}),  // columns not aligned
                    std::make_tuple(int64_t{9}, int64_t{32}, int64_t{100}),   // too narrow to split
                    std::make_tuple(int64_t{4}, int64_t{16}, int64_t{1}),     // classifier logit
                    // Row kernel edges: a depth over the kernel's input block at 200 rows, the
                    // most rows it takes in one call and one more (blocks of 128), 512 rows,
                    // partial tiles and weight-row blocks, and an input size it leaves to oneDNN.
                    std::make_tuple(int64_t{200}, int64_t{3072}, int64_t{768}),
                    std::make_tuple(int64_t{256}, int64_t{768}, int64_t{96}),
                    std::make_tuple(int64_t{257}, int64_t{768}, int64_t{96}),
                    std::make_tuple(int64_t{512}, int64_t{3072}, int64_t{768}),
                    std::make_tuple(int64_t{17}, int64_t{48}, int64_t{23}),
                    std::make_tuple(int64_t{3}, int64_t{40}, int64_t{50})));

}  // namespace
}  // namespace attnscope

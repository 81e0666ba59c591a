// LayerNorm, SoftmaxRows, CopyToOutput (models/kernels/fused_ops.h) and Linear's fused GELU
// (models/kernels/gemm.h) against LibTorch's own torch::layer_norm, torch::softmax and torch::gelu,
// the references the Python modules use. CTest runs this binary three times: as built for this
// CPU, with ATTNSCOPE_DISABLE_AVX512 set (the AVX2 kernels of CPUs without AVX-512), and with
// ATTNSCOPE_DISABLE_AVX2 set (LibTorch's own operations, for CPUs with neither).
#include "models/kernels/fused_ops.h"

#include <gtest/gtest.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "models/kernels/gemm.h"

namespace attnscope {
namespace {

double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

// Whether the variable is set to a value other than "" and "0", read here directly.
bool SetInEnvironment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::string(value) != "" && std::string(value) != "0";
}

TEST(HasAvx512Test, FollowsTheCpuAndTheEnvironment) {
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    !SetInEnvironment("ATTNSCOPE_DISABLE_AVX2");
  EXPECT_EQ(HasAvx2(), avx2);
  const bool avx512 =
      avx2 && __builtin_cpu_supports("avx512f") && !SetInEnvironment("ATTNSCOPE_DISABLE_AVX512");
  EXPECT_EQ(HasAvx512(), avx512);
  EXPECT_STREQ(KernelsName(), avx512 ? "avx512" : (avx2 ? "avx2" : "libtorch"));
}

TEST(DisabledByEnvironmentTest, EmptyAndZeroLeaveTheKernelsOn) {
  ASSERT_EQ(setenv("ATTNSCOPE_TEST_SWITCH", "0", /*overwrite=*/1), 0);
  EXPECT_FALSE(DisabledByEnvironment("ATTNSCOPE_TEST_SWITCH"));
  ASSERT_EQ(setenv("ATTNSCOPE_TEST_SWITCH", "", /*overwrite=*/1), 0);
  EXPECT_FALSE(DisabledByEnvironment("ATTNSCOPE_TEST_SWITCH"));
  ASSERT_EQ(setenv("ATTNSCOPE_TEST_SWITCH", "1", /*overwrite=*/1), 0);
  EXPECT_TRUE(DisabledByEnvironment("ATTNSCOPE_TEST_SWITCH"));
  ASSERT_EQ(unsetenv("ATTNSCOPE_TEST_SWITCH"), 0);
  EXPECT_FALSE(DisabledByEnvironment("ATTNSCOPE_TEST_SWITCH"));
}

TEST(LayerNormTest, MatchesTorchLayerNorm) {
  ConfigureIntraOpThreads(/*num_threads=*/2);
  torch::manual_seed(3);
  // BERT-base's rows, a width that is not a multiple of 16, and enough rows to run in parallel.
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{1, 128, 768}, {3, 5, 100}, {2, 1000, 768}, {1, 1, 8}}) {
    const int64_t hidden = shape.back();
    // An offset mean and a spread unlike 1 exercise both moments.
    const torch::Tensor x = torch::randn(shape) * 3 + 0.5;
    const torch::Tensor weight = torch::randn({hidden});
    const torch::Tensor bias = torch::randn({hidden});
    for (const double eps : {1e-12, 1e-5}) {
      const torch::Tensor expected = torch::layer_norm(x, {hidden}, weight, bias, eps);
      const torch::Tensor got = LayerNorm(x, weight, bias, eps);
      ASSERT_EQ(got.sizes(), expected.sizes());
      EXPECT_LT(MaxAbsDiff(got, expected), 5e-6) << "shape " << x.sizes() << " eps " << eps;
    }
  }
}

// Softmax of a [rows, columns] tensor through SoftmaxRows.
torch::Tensor Softmax(const torch::Tensor& scores, const torch::Tensor& mask) {
  torch::Tensor probs = torch::empty_like(scores);
  SoftmaxRows(scores.data_ptr<float>(), mask.defined() ? mask.data_ptr<float>() : nullptr,
              scores.size(0), scores.size(1), probs.data_ptr<float>());
  return probs;
}

TEST(SoftmaxRowsTest, MatchesTorchSoftmax) {
  torch::manual_seed(5);
  for (const int64_t columns : {128, 45, 16, 1, 300}) {
    for (const double spread : {1.0, 30.0, 1000.0}) {
      const torch::Tensor scores = torch::randn({37, columns}) * spread;
      const torch::Tensor expected = torch::softmax(scores, /*dim=*/-1);
      const torch::Tensor got = Softmax(scores, torch::Tensor());
      EXPECT_LT(MaxAbsDiff(got, expected), 1e-6) << columns << " columns, spread " << spread;
      EXPECT_LT((got.sum(/*dim=*/-1) - 1).abs().max().item<double>(), 1e-6);
      EXPECT_TRUE(torch::isfinite(got).all().item<bool>());
    }
  }
}

TEST(SoftmaxRowsTest, MaskedKeysGetExactlyZero) {
  torch::manual_seed(6);
  const int64_t columns = 50;
  const torch::Tensor scores = torch::randn({20, columns}) * 5;
  // transformers' additive mask: 0 for real keys, float32's lowest value for padding.
  torch::Tensor mask = torch::zeros({columns});
  mask.narrow(/*dim=*/0, /*start=*/33, /*length=*/17).fill_(std::numeric_limits<float>::lowest());
  mask[3] = std::numeric_limits<float>::lowest();
  const torch::Tensor expected = torch::softmax(scores + mask, /*dim=*/-1);
  const torch::Tensor got = Softmax(scores, mask);
  EXPECT_LT(MaxAbsDiff(got, expected), 1e-6);
  EXPECT_EQ(got.narrow(/*dim=*/1, /*start=*/33, /*length=*/17).abs().max().item<float>(), 0.0f);
  EXPECT_EQ(got.select(/*dim=*/1, /*index=*/3).abs().max().item<float>(), 0.0f);
  EXPECT_LT((got.sum(/*dim=*/-1) - 1).abs().max().item<double>(), 1e-6);
}

TEST(SoftmaxRowsTest, TinyProbabilitiesKeepTheirValueDownToSubnormals) {
  // e^-80 is a normal float32, e^-95 and e^-100 are subnormal (the AVX2 kernel's 2^n there is the
  // product of two factors), e^-110 rounds to 0.
  const torch::Tensor scores =
      torch::tensor({0.0f, -20.0f, -80.0f, -95.0f, -100.0f, -110.0f, -1e4f, 1.0f}).view({1, 8});
  const torch::Tensor got = Softmax(scores, torch::Tensor());
  const torch::Tensor exact =
      torch::softmax(scores.to(torch::kFloat64), /*dim=*/-1).to(torch::kFloat32);
  for (int64_t j = 0; j < 8; ++j) {
    const float want = exact[0][j].item<float>();
    // 2e-7 relative (float32's rounding and the polynomial's), or one subnormal step.
    EXPECT_NEAR(got[0][j].item<float>(), want,
                std::max(2e-7f * want, std::numeric_limits<float>::denorm_min()))
        << "column " << j;
  }
  EXPECT_GT(got[0][4].item<float>(), 0.0f);
  EXPECT_EQ(got[0][5].item<float>(), 0.0f);
  EXPECT_EQ(got[0][6].item<float>(), 0.0f);
}

TEST(SoftmaxRowsTest, KeepsNan) {
  torch::Tensor scores = torch::randn({2, 20});
  scores[0][7] = std::numeric_limits<float>::quiet_NaN();
  const torch::Tensor got = Softmax(scores, torch::Tensor());
  EXPECT_TRUE(torch::isnan(got[0]).any().item<bool>()) << "a NaN score must not vanish";
  EXPECT_TRUE(torch::isfinite(got[1]).all().item<bool>());
}

TEST(CopyToOutputTest, CopiesEveryElementAlignedOrNot) {
  torch::manual_seed(8);
  const torch::Tensor source = torch::randn({1100});
  // torch's CPU allocations are 64-byte aligned: offset 0 streams, offset 3 takes the plain copy.
  for (const int64_t offset : {0, 3}) {
    for (const int64_t count : {0, 5, 16, 17, 1000}) {
      torch::Tensor destination = torch::full({1100}, -7.0f);
      CopyToOutput(source.data_ptr<float>(), count, destination.data_ptr<float>() + offset);
      EXPECT_TRUE(torch::equal(destination.narrow(0, offset, count), source.narrow(0, 0, count)))
          << "offset " << offset << " count " << count;
      EXPECT_EQ(destination.narrow(0, offset + count, 1100 - offset - count)
                    .ne(-7.0f)
                    .sum()
                    .item<int64_t>(),
                0)
          << "wrote past the end";
    }
  }
}

TEST(LinearGeluTest, MatchesTorchGelu) {
  ConfigureIntraOpThreads(/*num_threads=*/2);
  torch::manual_seed(9);
  // 128 rows take the row kernel where the CPU has AVX-512; 300 rows take oneDNN everywhere.
  for (const int64_t rows : {128, 300, 7}) {
    const torch::Tensor x = torch::randn({rows, 64});
    const torch::Tensor weight = torch::randn({200, 64}) * 0.5;
    const torch::Tensor bias = torch::randn({200});
    const torch::Tensor expected = torch::gelu(torch::linear(x, weight, bias));
    const torch::Tensor got = Linear(x, weight, bias, torch::Tensor(), Activation::kGelu);
    EXPECT_LT(MaxAbsDiff(got, expected), 2e-5) << rows << " rows";
  }
}

TEST(LinearGeluTest, MatchesTheExactErfFormAcrossItsRange) {
  // With an identity weight Linear's result is GELU of x itself; compare with erf in float64.
  const torch::Tensor x = torch::linspace(-12, 12, /*steps=*/96 * 16).view({96, 16});
  const torch::Tensor got =
      Linear(x, torch::eye(16), torch::Tensor(), torch::Tensor(), Activation::kGelu);
  const torch::Tensor x64 = x.to(torch::kFloat64);
  const torch::Tensor exact = 0.5 * x64 * (1 + torch::erf(x64 / std::sqrt(2.0)));
  // Abramowitz and Stegun 7.1.26's 1.5e-7 on erf, times |x| / 2, plus float32 rounding.
  EXPECT_LT(((got.to(torch::kFloat64) - exact).abs() / (1 + x64.abs())).max().item<double>(), 2e-7);
  EXPECT_EQ(got[0][0].item<float>(), 0.0f) << "GELU(-12) is -0 in float32";
}

TEST(LinearGeluTest, TanhFormMatchesTorchAndItsFloat64FormulaAcrossItsRange) {
  ConfigureIntraOpThreads(/*num_threads=*/2);
  torch::manual_seed(10);
  for (const int64_t rows : {128, 300, 7}) {
    const torch::Tensor x = torch::randn({rows, 64});
    const torch::Tensor weight = torch::randn({200, 64}) * 0.5;
    const torch::Tensor bias = torch::randn({200});
    const torch::Tensor expected = torch::gelu(torch::linear(x, weight, bias), "tanh");
    const torch::Tensor got = Linear(x, weight, bias, torch::Tensor(), Activation::kGeluTanh);
    EXPECT_LT(MaxAbsDiff(got, expected), 2e-5) << rows << " rows";
  }
  // transformers' NewGELUActivation in float64, from far below to far above its bend.
  const torch::Tensor x = torch::linspace(-60, 60, /*steps=*/96 * 16).view({96, 16});
  const torch::Tensor got =
      Linear(x, torch::eye(16), torch::Tensor(), torch::Tensor(), Activation::kGeluTanh);
  const torch::Tensor x64 = x.to(torch::kFloat64);
  const torch::Tensor exact =
      0.5 * x64 * (1 + torch::tanh(std::sqrt(2.0 / M_PI) * (x64 + 0.044715 * x64.pow(3))));
  EXPECT_LT(((got.to(torch::kFloat64) - exact).abs() / (1 + x64.abs())).max().item<double>(), 5e-7);
  EXPECT_EQ(got[0][0].item<float>(), 0.0f);
  EXPECT_EQ(got[95][15].item<float>(), 60.0f);
}

}  // namespace
}  // namespace attnscope

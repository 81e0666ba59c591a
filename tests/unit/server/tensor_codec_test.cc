#include "server/tensor_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace attnscope::server {
namespace {

using ::testing::ElementsAre;

template <typename T>
std::vector<T> Decode(const v1::Tensor& tensor) {
  std::vector<T> values(tensor.data().size() / sizeof(T));
  std::memcpy(values.data(), tensor.data().data(), tensor.data().size());
  return values;
}

TEST(TensorCodecTest, Float32IsLittleEndianRowMajor) {
  const torch::Tensor tensor = torch::tensor({1.0f, -2.0f, 0.5f, 3.25f, 7.0f, 8.0f}).view({2, 3});
  v1::Tensor out;
  ASSERT_TRUE(SerializeTensor(tensor, {"row", "column"}, v1::DTYPE_UNSPECIFIED, &out).ok());
  EXPECT_EQ(out.dtype(), v1::DTYPE_FLOAT32);
  EXPECT_THAT(out.shape(), ElementsAre(2, 3));
  EXPECT_THAT(out.dim_names(), ElementsAre("row", "column"));
  ASSERT_EQ(out.data().size(), 24u);
  // 1.0f is 0x3F800000: least significant byte first.
  EXPECT_EQ(out.data().substr(0, 4), std::string("\x00\x00\x80\x3f", 4));
  EXPECT_THAT(Decode<float>(out), ElementsAre(1.0f, -2.0f, 0.5f, 3.25f, 7.0f, 8.0f));
}

TEST(TensorCodecTest, StridedViewsAreWrittenRowMajor) {
  const torch::Tensor base = torch::arange(12, torch::kFloat32).view({3, 4});
  v1::Tensor out;
  ASSERT_TRUE(SerializeTensor(base.t().narrow(0, 1, 2), {"a", "b"}, v1::DTYPE_FLOAT32, &out).ok());
  EXPECT_THAT(out.shape(), ElementsAre(2, 3));
  EXPECT_THAT(Decode<float>(out), ElementsAre(1, 5, 9, 2, 6, 10));
}

// Values that round differently in half and bfloat16, including ties and subnormals.
torch::Tensor RoundingProbe() {
  return torch::tensor({1.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 1.0f + 1.0f / 256,
                        1.0f + 3.0f / 256, 65504.0f, 1e-7f, 0.3333333f, -2.71828f, 70000.0f});
}

TEST(TensorCodecTest, Float16MatchesTorchConversionBitForBit) {
  const torch::Tensor probe = RoundingProbe();
  v1::Tensor out;
  ASSERT_TRUE(SerializeTensor(probe, {"i"}, v1::DTYPE_FLOAT16, &out).ok());
  EXPECT_EQ(out.dtype(), v1::DTYPE_FLOAT16);
  const torch::Tensor expected = probe.to(torch::kFloat16).contiguous();
  ASSERT_EQ(out.data().size(), static_cast<size_t>(expected.numel() * 2));
  EXPECT_EQ(std::memcmp(out.data().data(), expected.data_ptr(), out.data().size()), 0);
  // IEEE binary16: 1.0 is 0x3C00; 1 + 2^-11 is a tie that rounds to even (1.0).
  const std::vector<uint16_t> bits = Decode<uint16_t>(out);
  EXPECT_EQ(bits[0], 0x3C00);
  EXPECT_EQ(bits[1], 0x3C00);
  EXPECT_EQ(bits[2], 0x3C02);
  EXPECT_EQ(bits[5], 0x7BFF);  // the largest finite half
  EXPECT_EQ(bits[9], 0x7C00);  // overflow to +inf
}

TEST(TensorCodecTest, BFloat16MatchesTorchConversionBitForBit) {
  const torch::Tensor probe = RoundingProbe();
  v1::Tensor out;
  ASSERT_TRUE(SerializeTensor(probe, {"i"}, v1::DTYPE_BFLOAT16, &out).ok());
  const torch::Tensor expected = probe.to(torch::kBFloat16).contiguous();
  EXPECT_EQ(std::memcmp(out.data().data(), expected.data_ptr(), out.data().size()), 0);
  // bfloat16 is the upper half of binary32: 1.0 is 0x3F80; 1 + 2^-8 is a tie rounding to 1.0,
  // 1 + 3 * 2^-8 rounds up to 1 + 2^-6.
  const std::vector<uint16_t> bits = Decode<uint16_t>(out);
  EXPECT_EQ(bits[0], 0x3F80);
  EXPECT_EQ(bits[3], 0x3F80);
  EXPECT_EQ(bits[4], 0x3F82);
}

TEST(TensorCodecTest, Int32Indices) {
  const torch::Tensor indices = torch::tensor({0, 7, -1, 65536}, torch::kInt32);
  v1::Tensor out;
  ASSERT_TRUE(SerializeTensor(indices, {"k"}, v1::DTYPE_INT32, &out).ok());
  EXPECT_EQ(out.dtype(), v1::DTYPE_INT32);
  EXPECT_THAT(Decode<int32_t>(out), ElementsAre(0, 7, -1, 65536));
}

TEST(TensorCodecTest, StackedPartsEqualTorchStack) {
  const std::vector<torch::Tensor> layers = {torch::rand({2, 3, 3}),
                                             torch::rand({4, 3, 3}).narrow(0, 1, 2)};
  v1::Tensor out;
  ASSERT_TRUE(SerializeStacked(layers, {"layer", "head", "query_token", "key_token"},
                               v1::DTYPE_FLOAT16, &out)
                  .ok());
  EXPECT_THAT(out.shape(), ElementsAre(2, 2, 3, 3));
  EXPECT_EQ(EncodedBytes({2, 2, 3, 3}, v1::DTYPE_FLOAT16), 72);
  const torch::Tensor expected = torch::stack(layers).to(torch::kFloat16).contiguous();
  ASSERT_EQ(out.data().size(), 72u);
  EXPECT_EQ(std::memcmp(out.data().data(), expected.data_ptr(), 72), 0);
}

TEST(TensorCodecTest, RejectsMismatchedShapesAndNames) {
  v1::Tensor out;
  EXPECT_EQ(
      SerializeStacked({torch::rand({2}), torch::rand({3})}, {"a", "b"}, v1::DTYPE_FLOAT32, &out)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SerializeTensor(torch::rand({2, 2}), {"a"}, v1::DTYPE_FLOAT32, &out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SerializeTensor(torch::rand({2}), {"a"}, static_cast<v1::DType>(99), &out).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace attnscope::server

// Encoder-decoders (models/encoder_decoder.cc) against tests/data/make_encoder_decoder.py: random
// MarianMTModel and BartForConditionalGeneration checkpoints whose golden encoder output, encoder
// self-attention, decoder self-attention, cross-attention, decoder output and logits come from a
// reference built of PyTorch modules (nn.MultiheadAttention, nn.LayerNorm) in float64.
#include <torch/torch.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/transformer.h"
#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

using Json = nlohmann::json;
using ::testing::HasSubstr;

constexpr double kTolerance = 1e-5;

// A nested JSON array of numbers as a float64 tensor.
torch::Tensor ToTensor(const Json& json) {
  if (!json.is_array()) return torch::tensor(json.get<double>(), torch::kFloat64);
  std::vector<torch::Tensor> parts;
  for (const Json& part : json) parts.push_back(ToTensor(part));
  return torch::stack(parts);
}

torch::Tensor Ids(const Json& json) {
  std::vector<torch::Tensor> rows;
  for (const Json& row : json) rows.push_back(torch::tensor(row.get<std::vector<int64_t>>()));
  return torch::stack(rows);
}

double MaxDifference(const torch::Tensor& got, const torch::Tensor& want) {
  EXPECT_EQ(got.sizes(), want.sizes());
  if (got.sizes() != want.sizes()) return 1e9;
  return (got.to(torch::kFloat64) - want).abs().max().item<double>();
}

class EncoderDecoderTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::string Dir() const { return testing::TestDataDir() + "/tiny-" + GetParam(); }
};

TEST_P(EncoderDecoderTest, MatchesThePyTorchReference) {
  absl::StatusOr<std::unique_ptr<TransformerModel>> model =
      LoadTransformerModel({.model_dir = Dir()});
  ASSERT_TRUE(model.ok()) << model.status();
  const ModelConfig& config = (*model)->config();
  EXPECT_TRUE(config.is_encoder_decoder);
  EXPECT_EQ(config.num_hidden_layers, 2);
  EXPECT_EQ(config.decoder_layers, 2);
  EXPECT_FALSE((*model)->is_decoder());
  std::ifstream in(Dir() + "/golden.json");
  const Json golden = Json::parse(in);
  for (const auto& [name, c] : golden.items()) {
    SCOPED_TRACE(name);
    ForwardInput input;
    input.input_ids = Ids(c["input_ids"]);
    input.attention_mask = Ids(c["attention_mask"]);
    input.decoder_input_ids = Ids(c["decoder_input_ids"]);
    absl::StatusOr<ForwardOutput> out = (*model)->Forward(input, ForwardOptions());
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_LE(
        MaxDifference(out->encoder_last_hidden_state, ToTensor(c["encoder_last_hidden_state"])),
        kTolerance);
    EXPECT_LE(MaxDifference(out->last_hidden_state, ToTensor(c["decoder_last_hidden_state"])),
              kTolerance);
    EXPECT_LE(MaxDifference(out->logits, ToTensor(c["logits"])), kTolerance);
    for (const auto& [key, got] :
         std::vector<std::pair<const char*, const std::vector<torch::Tensor>*>>{
             {"encoder_attentions", &out->attentions},
             {"decoder_attentions", &out->decoder_attentions},
             {"cross_attentions", &out->cross_attentions}}) {
      ASSERT_EQ(got->size(), c[key].size()) << key;
      for (size_t layer = 0; layer < got->size(); ++layer) {
        EXPECT_LE(MaxDifference((*got)[layer], ToTensor(c[key][layer])), kTolerance)
            << key << " layer " << layer;
      }
    }
    // The decoder never sees the future; cross-attention never sees source padding.
    const int64_t target = input.decoder_input_ids.size(1);
    const torch::Tensor future = torch::ones({target, target}, torch::kBool).triu(1);
    const torch::Tensor padding =
        (input.attention_mask == 0).view({input.input_ids.size(0), 1, 1, -1});
    for (size_t layer = 0; layer < out->decoder_attentions.size(); ++layer) {
      const torch::Tensor& self = out->decoder_attentions[layer];
      const torch::Tensor& cross = out->cross_attentions[layer];
      EXPECT_EQ(self.masked_select(future.expand_as(self)).abs().max().item<float>(), 0.0f);
      EXPECT_LE((cross.sum(-1) - 1).abs().max().item<double>(), 1e-6);
      if (padding.any().item<bool>()) {
        EXPECT_EQ(cross.masked_select(padding.expand_as(cross)).abs().max().item<float>(), 0.0f);
      }
    }
    // Without decoder_input_ids the encoder alone runs, with the same results.
    ForwardInput encoder_only = input;
    encoder_only.decoder_input_ids = torch::Tensor();
    absl::StatusOr<ForwardOutput> encoded = (*model)->Forward(encoder_only, ForwardOptions());
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    EXPECT_TRUE(torch::equal(encoded->last_hidden_state, out->encoder_last_hidden_state));
    EXPECT_TRUE(encoded->cross_attentions.empty());
    EXPECT_FALSE(encoded->logits.defined());
  }
}

TEST_P(EncoderDecoderTest, RefusesBadDecoderInput) {
  absl::StatusOr<std::unique_ptr<TransformerModel>> model =
      LoadTransformerModel({.model_dir = Dir()});
  ASSERT_TRUE(model.ok()) << model.status();
  ForwardInput input;
  input.input_ids = torch::tensor({{5, 9, 2}});
  const int64_t vocab_size = (*model)->config().vocab_size;
  input.decoder_input_ids = torch::tensor({{int64_t{0}, vocab_size}});
  absl::Status status = (*model)->Forward(input, ForwardOptions()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("decoder_input_ids: expected values in [0, ",
                                                       vocab_size, ")")));
  input.decoder_input_ids = torch::tensor({{0, 4}, {0, 5}});  // two rows for one source
  status = (*model)->Forward(input, ForwardOptions()).status();
  EXPECT_THAT(status.message(), HasSubstr("decoder_input_ids: expected int64 [1, T > 0]"));
}

INSTANTIATE_TEST_SUITE_P(Architectures, EncoderDecoderTest, ::testing::Values("marian", "bart"));

TEST(EncoderDecoderConfigTest, DecoderInputOnAnEncoderOnlyModelIsRefused) {
  absl::StatusOr<std::unique_ptr<TransformerModel>> bert =
      LoadTransformerModel({.model_dir = testing::TestDataDir() + "/tiny-bert"});
  ASSERT_TRUE(bert.ok()) << bert.status();
  ForwardInput input;
  input.input_ids = torch::tensor({{2, 10, 3}});
  input.decoder_input_ids = torch::tensor({{2, 10}});
  const absl::Status status = (*bert)->Forward(input, ForwardOptions()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("decoder_input_ids: expected none for model_type 'bert'"));
}

}  // namespace
}  // namespace attnscope

// Encoder-decoders (models/architectures/encoder_decoder.cc, models/architectures/t5.cc) against
// tests/data/make_encoder_decoder.py: random MarianMTModel, BartForConditionalGeneration and
// T5ForConditionalGeneration checkpoints whose golden encoder output, encoder self-attention,
// decoder self-attention, cross-attention, decoder output and logits (and for T5 the encoder's
// hidden states) come from a reference built of PyTorch modules (nn.MultiheadAttention,
// nn.LayerNorm; for T5 bias-free nn.Linear, RMS norms and relative position buckets written from
// modeling_t5.py) in float64. tiny-t5 is gated-gelu with an untied lm_head, tiny-t5/relu-tied the
// relu feed-forward with lm_head tied to the scaled shared embeddings.
#include <torch/types.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/architectures/transformer.h"
#include "nlohmann/json.hpp"
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

// The largest MaxDifference of the current test, recorded as its "max_abs_diff" property
// (--gtest_output=json shows how close to the tolerance the goldens are).
double worst_difference = 0;

double MaxDifference(const torch::Tensor& got, const torch::Tensor& want) {
  EXPECT_EQ(got.sizes(), want.sizes());
  if (got.sizes() != want.sizes()) return 1e9;
  const double difference = (got.to(torch::kFloat64) - want).abs().max().item<double>();
  worst_difference = std::max(worst_difference, difference);
  return difference;
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
  // T5's num_decoder_layers differs from num_layers here.
  const bool t5 = config.architecture == Architecture::kT5;
  EXPECT_EQ(config.decoder_layers, t5 ? 3 : 2);
  EXPECT_FALSE((*model)->is_decoder());
  std::ifstream in(Dir() + "/golden.json");
  const Json golden = Json::parse(in);
  worst_difference = 0;
  for (const auto& [name, c] : golden.items()) {
    SCOPED_TRACE(name);
    ForwardInput input;
    input.input_ids = Ids(c["input_ids"]);
    input.attention_mask = Ids(c["attention_mask"]);
    input.decoder_input_ids = Ids(c["decoder_input_ids"]);
    ForwardOptions options;
    options.output_hidden_states = c.contains("encoder_hidden_states");
    std::vector<int64_t> layers_done;
    options.on_layer_done = [&](int64_t layer) {
      layers_done.push_back(layer);
      return absl::OkStatus();
    };
    absl::StatusOr<ForwardOutput> out = (*model)->Forward(input, options);
    ASSERT_TRUE(out.ok()) << out.status();
    // Every encoder layer, then every decoder layer, numbered on.
    ASSERT_EQ(layers_done.size(),
              static_cast<size_t>(config.num_hidden_layers + config.decoder_layers));
    for (size_t i = 0; i < layers_done.size(); ++i) EXPECT_EQ(layers_done[i], i);
    if (options.output_hidden_states) {
      // Each encoder block's input, then the final_layer_norm output (transformers' T5Stack).
      const Json& want = c["encoder_hidden_states"];
      ASSERT_EQ(out->hidden_states.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_LE(MaxDifference(out->hidden_states[i], ToTensor(want[i])), kTolerance)
            << "hidden state " << i;
      }
    }
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
  RecordProperty("max_abs_diff", absl::StrCat(worst_difference));
}

// The encoder's pre-softmax scores are what its softmax read: softmax over the unpadded keys gives
// the attentions the reference checks (for T5 the scores include the position bias).
TEST_P(EncoderDecoderTest, EncoderScoresAreWhatTheSoftmaxRead) {
  absl::StatusOr<std::unique_ptr<TransformerModel>> model =
      LoadTransformerModel({.model_dir = Dir()});
  ASSERT_TRUE(model.ok()) << model.status();
  std::ifstream in(Dir() + "/golden.json");
  const Json golden = Json::parse(in);
  for (const auto& [name, c] : golden.items()) {
    SCOPED_TRACE(name);
    ForwardInput input;
    input.input_ids = Ids(c["input_ids"]);
    input.attention_mask = Ids(c["attention_mask"]);
    ForwardOptions options;
    options.output_attention_scores = true;
    absl::StatusOr<ForwardOutput> out = (*model)->Forward(input, options);
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->attention_scores.size(), out->attentions.size());
    const torch::Tensor padded = input.attention_mask.eq(0).view(
        {input.attention_mask.size(0), 1, 1, input.attention_mask.size(1)});
    for (size_t layer = 0; layer < out->attentions.size(); ++layer) {
      const torch::Tensor& scores = out->attention_scores[layer];
      ASSERT_EQ(scores.sizes(), out->attentions[layer].sizes());
      const torch::Tensor probs =
          torch::softmax(scores.masked_fill(padded, -std::numeric_limits<float>::infinity()), -1);
      EXPECT_LE(MaxDifference(probs, out->attentions[layer]), 1e-6) << "layer " << layer;
    }
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

INSTANTIATE_TEST_SUITE_P(Architectures, EncoderDecoderTest,
                         ::testing::Values("marian", "bart", "t5", "t5/relu-tied"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '/', '_');
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// A checkpoint that does not fit config.json is refused before serving, naming the tensor and
// both shapes; T5's inner attention size is num_heads * d_kv, not d_model.
TEST(T5CheckpointTest, RefusesTensorsThatDoNotFitTheConfig) {
  const std::string source = testing::TestDataDir() + "/tiny-t5";
  const std::string dir = testing::MakeTempDir();
  testing::WriteFileBytes(dir + "/model.safetensors",
                          testing::ReadFileBytes(source + "/model.safetensors"));
  Json config = Json::parse(testing::ReadFileBytes(source + "/config.json"));
  config["d_kv"] = 8;
  testing::WriteFileBytes(dir + "/config.json", config.dump());
  absl::Status status = LoadTransformerModel({.model_dir = dir}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("encoder.block.0.layer.0.SelfAttention.q.weight"));
  EXPECT_THAT(status.message(), HasSubstr("[32, 32]"));
  EXPECT_THAT(status.message(), HasSubstr("[24, 32]"));
  // An untied checkpoint needs its lm_head; declaring relu wants wi, which a gated one lacks.
  config = Json::parse(testing::ReadFileBytes(source + "/config.json"));
  config["feed_forward_proj"] = "relu";
  testing::WriteFileBytes(dir + "/config.json", config.dump());
  status = LoadTransformerModel({.model_dir = dir}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("encoder.block.0.layer.1.DenseReluDense.wi.weight"));
  EXPECT_THAT(status.message(), HasSubstr("wi_0.weight"));
}

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

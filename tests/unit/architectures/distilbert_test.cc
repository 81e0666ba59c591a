// DistilBERT against goldens from PyTorch's own modules (tests/data/make_tiny_distilbert.py): a
// DistilBertForSequenceClassification cross-encoder with two labels, the layouts of a saved
// DistilBertModel and a DistilBertForMaskedLM, and what is refused.
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/architectures/transformer.h"
#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr double kTolerance = 1e-5;

std::string ModelDir() { return testing::TestDataDir() + "/tiny-distilbert"; }

double MaxDifference(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kFloat64) - want.to(torch::kFloat64)).abs().max().item<double>();
}

// The largest difference over the rows of real (unpadded) queries, the query dimension of `got`
// and the golden being `query_dim`.
double DifferenceAtRealTokens(const torch::Tensor& got, const Json& want, const torch::Tensor& mask,
                              int64_t query_dim) {
  const torch::Tensor expected = testing::TensorFromJson(want, torch::kFloat64);
  EXPECT_EQ(got.sizes(), expected.sizes());
  if (got.sizes() != expected.sizes()) return INFINITY;
  double worst = 0;
  for (int64_t b = 0; b < mask.size(0); ++b) {
    const int64_t real = mask[b].sum().item<int64_t>();
    worst = std::max(worst, MaxDifference(got[b].narrow(query_dim - 1, 0, real),
                                          expected[b].narrow(query_dim - 1, 0, real)));
  }
  return worst;
}

std::unique_ptr<TransformerModel> Load(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<TransformerModel>> model =
      LoadTransformerModel({.model_dir = dir});
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

TEST(DistilBertTest, ReadsDistilBertConfigAsACrossEncoder) {
  const std::unique_ptr<TransformerModel> model = Load(ModelDir());
  ASSERT_NE(model, nullptr);
  const ModelConfig& config = model->config();
  EXPECT_EQ(config.architecture, Architecture::kDistilBert);
  // DistilBertConfig's names: dim, n_layers, n_heads, hidden_dim.
  EXPECT_EQ(config.hidden_size, 32);
  EXPECT_EQ(config.num_hidden_layers, 3);
  EXPECT_EQ(config.num_attention_heads, 4);
  EXPECT_EQ(config.intermediate_size, 64);
  EXPECT_EQ(config.type_vocab_size, 0);
  EXPECT_TRUE(model->has_classifier());
  EXPECT_EQ(config.num_labels, 2);
  EXPECT_EQ(config.id2label.at(1), "RELEVANT");
}

TEST(DistilBertTest, MatchesPyTorchModules) {
  const std::unique_ptr<TransformerModel> model = Load(ModelDir());
  ASSERT_NE(model, nullptr);
  const Json golden = Json::parse(testing::ReadFileBytes(ModelDir() + "/golden.json"));
  double worst_hidden = 0, worst_attention = 0, worst_logit = 0;
  for (const auto& [name, c] : golden.items()) {
    SCOPED_TRACE(name);
    ForwardInput input;
    input.input_ids = testing::TensorFromJson(c["input_ids"], torch::kInt64);
    input.attention_mask = testing::TensorFromJson(c["attention_mask"], torch::kInt64);
    ForwardOptions options;
    options.output_hidden_states = true;
    absl::StatusOr<ForwardOutput> out = model->Forward(input, options);
    ASSERT_TRUE(out.ok()) << out.status();
    const torch::Tensor& mask = input.attention_mask;
    worst_hidden = std::max(worst_hidden, DifferenceAtRealTokens(out->last_hidden_state,
                                                                 c["last_hidden_state"], mask, 1));
    ASSERT_EQ(out->hidden_states.size(), c["hidden_states"].size());
    for (size_t i = 0; i < out->hidden_states.size(); ++i) {
      worst_hidden = std::max(
          worst_hidden, DifferenceAtRealTokens(out->hidden_states[i], c["hidden_states"][i], mask,
                                               /*query_dim=*/1));
    }
    ASSERT_EQ(out->attentions.size(), c["attentions"].size());
    for (size_t i = 0; i < out->attentions.size(); ++i) {
      worst_attention = std::max(
          worst_attention,
          DifferenceAtRealTokens(out->attentions[i], c["attentions"][i], mask, /*query_dim=*/2));
    }
    EXPECT_FALSE(out->pooler_output.defined());
    const torch::Tensor logits = testing::TensorFromJson(c["logits"], torch::kFloat64);
    ASSERT_EQ(out->logits.sizes(), logits.sizes());
    worst_logit = std::max(worst_logit, MaxDifference(out->logits, logits));
  }
  EXPECT_LE(worst_hidden, kTolerance);
  EXPECT_LE(worst_attention, kTolerance);
  EXPECT_LE(worst_logit, kTolerance);
  std::printf(
      "distilbert: largest differences from the goldens: hidden states %.3g, attentions "
      "%.3g, logits %.3g\n",
      worst_hidden, worst_attention, worst_logit);
}

TEST(DistilBertTest, LoadsASavedDistilBertModelAndAMaskedLmWithoutTheirHeads) {
  std::map<std::string, torch::Tensor> encoder;
  for (const auto& [name, tensor] : testing::ReadCheckpointTensors(ModelDir())) {
    if (absl::StartsWith(name, "distilbert.")) {
      encoder[std::string(absl::StripPrefix(name, "distilbert."))] = tensor;
    }
  }
  const std::string bare = testing::CopyToTempDir(ModelDir());
  testing::WriteSafetensors(bare + "/model.safetensors", encoder);
  testing::PatchJsonFile(bare + "/config.json", {{"architectures", {"DistilBertModel"}}});
  const std::unique_ptr<TransformerModel> model = Load(bare);
  ASSERT_NE(model, nullptr);
  EXPECT_FALSE(model->has_classifier());

  // DistilBertForMaskedLM: the encoder under "distilbert." and the vocab_* head, unused.
  std::map<std::string, torch::Tensor> masked_lm;
  for (const auto& [name, tensor] : encoder) masked_lm["distilbert." + name] = tensor;
  masked_lm["vocab_transform.weight"] = torch::zeros({32, 32});
  masked_lm["vocab_transform.bias"] = torch::zeros({32});
  masked_lm["vocab_layer_norm.weight"] = torch::ones({32});
  masked_lm["vocab_layer_norm.bias"] = torch::zeros({32});
  masked_lm["vocab_projector.bias"] =
      torch::zeros({encoder["embeddings.word_embeddings.weight"].size(0)});
  const std::string mlm = testing::CopyToTempDir(ModelDir());
  testing::WriteSafetensors(mlm + "/model.safetensors", masked_lm);
  const std::unique_ptr<TransformerModel> masked = Load(mlm);
  ASSERT_NE(masked, nullptr);
  EXPECT_FALSE(masked->has_classifier());

  ForwardInput input;
  input.input_ids = torch::tensor({2, 60, 61, 3}, torch::kInt64).unsqueeze(0);
  absl::StatusOr<ForwardOutput> a = model->Forward(input, ForwardOptions());
  absl::StatusOr<ForwardOutput> b = masked->Forward(input, ForwardOptions());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(torch::equal(a->last_hidden_state, b->last_hidden_state));
}

TEST(DistilBertTest, RefusesAHeadWithoutItsPreClassifierAndOtherActivations) {
  std::map<std::string, torch::Tensor> tensors = testing::ReadCheckpointTensors(ModelDir());
  tensors.erase("pre_classifier.weight");
  tensors.erase("distilbert.transformer.layer.2.ffn.lin1.bias");
  const std::string dir = testing::CopyToTempDir(ModelDir());
  testing::WriteSafetensors(dir + "/model.safetensors", tensors);
  absl::Status status = LoadTransformerModel({.model_dir = dir}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("pre_classifier.weight"));
  EXPECT_THAT(status.message(), HasSubstr("distilbert.transformer.layer.2.ffn.lin1.bias"));

  const std::string relu = testing::CopyToTempDir(ModelDir());
  testing::PatchJsonFile(relu + "/config.json", {{"activation", "relu"}});
  status = LoadTransformerModel({.model_dir = relu}).status();
  EXPECT_THAT(status.message(), HasSubstr("field 'activation': expected \"gelu\", got \"relu\""));
}

}  // namespace
}  // namespace attnscope

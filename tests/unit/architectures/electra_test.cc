// ELECTRA against goldens from PyTorch's own modules (tests/data/make_tiny_electra.py): an
// ElectraForSequenceClassification cross-encoder whose embeddings are narrower than its layers
// (embeddings_project), the layouts of a saved ElectraModel and an ElectraForPreTraining
// discriminator, and what is refused.
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
#include "models/tokenizers/tokenizer.h"
#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr double kTolerance = 1e-5;

std::string ModelDir() { return testing::TestDataDir() + "/tiny-electra"; }

double MaxDifference(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kFloat64) - want.to(torch::kFloat64)).abs().max().item<double>();
}

// The largest difference over the rows of real (unpadded) queries, the query dimension of `got`
// and the golden being `query_dim`: what the model computes for padded queries is never served.
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

Json Golden() { return Json::parse(testing::ReadFileBytes(ModelDir() + "/golden.json")); }

ForwardInput InputOf(const Json& c) {
  ForwardInput input;
  input.input_ids = testing::TensorFromJson(c["input_ids"], torch::kInt64);
  input.attention_mask = testing::TensorFromJson(c["attention_mask"], torch::kInt64);
  input.token_type_ids = testing::TensorFromJson(c["token_type_ids"], torch::kInt64);
  return input;
}

absl::StatusOr<ForwardOutput> ForwardAll(const TransformerModel& model, const ForwardInput& input) {
  ForwardOptions options;
  options.output_hidden_states = true;
  return model.Forward(input, options);
}

TEST(ElectraTest, ReadsElectraConfigAsACrossEncoder) {
  const std::unique_ptr<TransformerModel> model = Load(ModelDir());
  ASSERT_NE(model, nullptr);
  const ModelConfig& config = model->config();
  EXPECT_EQ(config.architecture, Architecture::kElectra);
  EXPECT_EQ(ArchitectureName(config.architecture), "electra");
  EXPECT_EQ(config.embedding_size, 16);
  EXPECT_EQ(config.hidden_size, 32);
  EXPECT_EQ(config.num_hidden_layers, 3);
  EXPECT_EQ(config.num_attention_heads, 4);
  EXPECT_EQ(config.type_vocab_size, 2);
  EXPECT_EQ(config.max_input_tokens(), 64);
  EXPECT_TRUE(model->has_classifier());
  EXPECT_EQ(config.num_labels, 2);
}

TEST(ElectraTest, MatchesPyTorchModules) {
  const std::unique_ptr<TransformerModel> model = Load(ModelDir());
  ASSERT_NE(model, nullptr);
  double worst_hidden = 0, worst_attention = 0, worst_logit = 0;
  const Json golden = Golden();
  for (const auto& [name, c] : golden.items()) {
    SCOPED_TRACE(name);
    const ForwardInput input = InputOf(c);
    absl::StatusOr<ForwardOutput> out = ForwardAll(*model, input);
    ASSERT_TRUE(out.ok()) << out.status();
    const torch::Tensor& mask = input.attention_mask;
    worst_hidden = std::max(worst_hidden, DifferenceAtRealTokens(out->last_hidden_state,
                                                                 c["last_hidden_state"], mask, 1));
    // hidden_states[0] is the projected embeddings, hidden_size wide.
    ASSERT_EQ(out->hidden_states.size(), c["hidden_states"].size());
    EXPECT_EQ(out->hidden_states[0].size(2), 32);
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
      "electra: largest differences from the goldens: hidden states %.3g, attentions %.3g, "
      "logits %.3g\n",
      worst_hidden, worst_attention, worst_logit);
}

// The goldens' ids are tiny-bert's vocabulary looked up word by word with BERT's template, which
// the vocab.txt beside the checkpoint gives.
TEST(ElectraTest, TokenizerGivesTheGoldenPairIds) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(ModelDir());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<Encoding> encoding =
      (*tokenizer)->EncodePair("capital of france", "paris is the capital", EncodeOptions());
  ASSERT_TRUE(encoding.ok()) << encoding.status();
  const Json golden = Golden();
  EXPECT_EQ(encoding->input_ids, golden["pair"]["input_ids"][0].get<std::vector<int64_t>>());
  EXPECT_EQ(encoding->token_type_ids,
            golden["pair"]["token_type_ids"][0].get<std::vector<int64_t>>());
}

// A saved ElectraModel (no "electra." prefix, no head) and an ElectraForPreTraining discriminator
// (discriminator_predictions.*, unused): the same encoder, without a classifier head.
TEST(ElectraTest, LoadsASavedElectraModelAndADiscriminatorWithoutTheirHeads) {
  const std::map<std::string, torch::Tensor> all = testing::ReadCheckpointTensors(ModelDir());
  std::map<std::string, torch::Tensor> encoder;
  std::map<std::string, torch::Tensor> discriminator;
  for (const auto& [name, tensor] : all) {
    if (absl::StartsWith(name, "electra.")) {
      encoder[std::string(absl::StripPrefix(name, "electra."))] = tensor;
      discriminator[name] = tensor;
    }
  }
  discriminator["discriminator_predictions.dense.weight"] = torch::zeros({32, 32});
  discriminator["discriminator_predictions.dense.bias"] = torch::zeros({32});
  discriminator["discriminator_predictions.dense_prediction.weight"] = torch::zeros({1, 32});
  discriminator["discriminator_predictions.dense_prediction.bias"] = torch::zeros({1});
  std::vector<std::unique_ptr<TransformerModel>> models;
  for (const auto& [architecture, tensors] :
       std::vector<std::pair<std::string, std::map<std::string, torch::Tensor>>>{
           {"ElectraModel", encoder}, {"ElectraForPreTraining", discriminator}}) {
    SCOPED_TRACE(architecture);
    const std::string dir = testing::CopyToTempDir(ModelDir());
    testing::WriteSafetensors(dir + "/model.safetensors", tensors);
    testing::PatchJsonFile(
        dir + "/config.json",
        {{"architectures", {architecture}}, {"id2label", nullptr}, {"label2id", nullptr}});
    models.push_back(Load(dir));
    ASSERT_NE(models.back(), nullptr);
    EXPECT_FALSE(models.back()->has_classifier());
  }
  const Json golden = Golden();
  const ForwardInput input = InputOf(golden["padded_batch"]);
  absl::StatusOr<ForwardOutput> a = ForwardAll(*models[0], input);
  absl::StatusOr<ForwardOutput> b = ForwardAll(*models[1], input);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LE(
      DifferenceAtRealTokens(a->last_hidden_state, golden["padded_batch"]["last_hidden_state"],
                             input.attention_mask, 1),
      kTolerance);
  EXPECT_TRUE(torch::equal(a->last_hidden_state, b->last_hidden_state));
}

TEST(ElectraTest, RefusesAMissingProjectionAndAWrongEmbeddingSize) {
  std::map<std::string, torch::Tensor> tensors = testing::ReadCheckpointTensors(ModelDir());
  tensors.erase("electra.embeddings_project.weight");
  tensors.erase("classifier.dense.bias");
  const std::string dir = testing::CopyToTempDir(ModelDir());
  testing::WriteSafetensors(dir + "/model.safetensors", tensors);
  absl::Status status = LoadTransformerModel({.model_dir = dir}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("electra.embeddings_project.weight"));
  EXPECT_THAT(status.message(), HasSubstr("classifier.dense.bias"));

  const std::string wide = testing::CopyToTempDir(ModelDir());
  testing::PatchJsonFile(wide + "/config.json", {{"embedding_size", 32}});
  status = LoadTransformerModel({.model_dir = wide}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("field 'embedding_size': expected 16 (tensor "
                                          "'electra.embeddings.word_embeddings.weight'"));
}

}  // namespace
}  // namespace attnscope

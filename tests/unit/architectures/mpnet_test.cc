// MPNet against goldens from PyTorch's own modules (tests/data/make_tiny_mpnet.py): an
// MPNetForSequenceClassification cross-encoder whose relative position bias is added to every
// layer's scores, its tokenizer.json in MPNet's layout, the layouts of a saved MPNetModel and an
// MPNetForMaskedLM, and what is refused.
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

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

std::string ModelDir() { return testing::TestDataDir() + "/tiny-mpnet"; }

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
  return input;
}

absl::StatusOr<ForwardOutput> ForwardAll(const TransformerModel& model, const ForwardInput& input) {
  ForwardOptions options;
  options.output_hidden_states = true;
  options.output_attention_scores = true;
  return model.Forward(input, options);
}

TEST(MpnetTest, ReadsMpnetConfigAsACrossEncoder) {
  const std::unique_ptr<TransformerModel> model = Load(ModelDir());
  ASSERT_NE(model, nullptr);
  const ModelConfig& config = model->config();
  EXPECT_EQ(config.architecture, Architecture::kMpnet);
  EXPECT_EQ(ArchitectureName(config.architecture), "mpnet");
  EXPECT_EQ(config.hidden_size, 32);
  EXPECT_EQ(config.num_hidden_layers, 3);
  EXPECT_EQ(config.num_attention_heads, 4);
  EXPECT_EQ(config.type_vocab_size, 0);
  EXPECT_EQ(config.relative_attention_num_buckets, 32);
  EXPECT_EQ(config.pad_token_id, 1);
  // RoBERTa's positions: 64 rows hold 62 tokens.
  EXPECT_EQ(config.max_input_tokens(), 62);
  EXPECT_TRUE(model->has_classifier());
  EXPECT_EQ(config.num_labels, 1);
}

TEST(MpnetTest, MatchesPyTorchModules) {
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
    ASSERT_EQ(out->hidden_states.size(), c["hidden_states"].size());
    for (size_t i = 0; i < out->hidden_states.size(); ++i) {
      worst_hidden = std::max(
          worst_hidden, DifferenceAtRealTokens(out->hidden_states[i], c["hidden_states"][i], mask,
                                               /*query_dim=*/1));
    }
    // Every layer, every head: [batch, head, query, key].
    ASSERT_EQ(out->attentions.size(), 3);
    ASSERT_EQ(out->attentions.size(), c["attentions"].size());
    for (size_t i = 0; i < out->attentions.size(); ++i) {
      EXPECT_EQ(out->attentions[i].size(1), 4);
      worst_attention = std::max(
          worst_attention,
          DifferenceAtRealTokens(out->attentions[i], c["attentions"][i], mask, /*query_dim=*/2));
      // The kept scores are what the softmax read, the position bias included: over the real
      // keys they give the probabilities back.
      const torch::Tensor keys = mask.to(torch::kBool).view({mask.size(0), 1, 1, mask.size(1)});
      const torch::Tensor from_scores =
          torch::softmax(out->attention_scores[i].masked_fill(keys.logical_not(), -INFINITY), -1);
      EXPECT_LE(MaxDifference(from_scores, out->attentions[i]), 1e-6);
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
      "mpnet: largest differences from the goldens: hidden states %.3g, attentions %.3g, logits "
      "%.3g\n",
      worst_hidden, worst_attention, worst_logit);
}

// The goldens' ids are looked up word by word in MPNet's template; the loader picks
// tokenizer.json's WordPiece reader, which must give the same, <s> A </s> </s> B </s> for a pair.
TEST(MpnetTest, TokenizerGivesTheGoldenIds) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(ModelDir());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->kind(), TokenizerKind::kWordPiece);
  EXPECT_EQ((*tokenizer)->pad_token_id(), 1);
  const Json golden = Golden();
  for (const auto& [name, c] : golden.items()) {
    SCOPED_TRACE(name);
    for (size_t b = 0; b < c["texts"].size(); ++b) {
      const Json& texts = c["texts"][b];
      const std::string text = texts[0].get<std::string>();
      absl::StatusOr<Encoding> encoding =
          texts[1].is_null()
              ? (*tokenizer)->Encode(text, EncodeOptions())
              : (*tokenizer)->EncodePair(text, texts[1].get<std::string>(), EncodeOptions());
      ASSERT_TRUE(encoding.ok()) << encoding.status();
      std::vector<int64_t> want = c["input_ids"][b].get<std::vector<int64_t>>();
      want.resize(encoding->input_ids.size());
      EXPECT_EQ(encoding->input_ids, want);
      EXPECT_EQ(c["attention_mask"][b][encoding->input_ids.size() - 1], 1);
    }
  }
}

// A saved MPNetModel (no "mpnet." prefix, a pooler) and an
// MPNetForMaskedLM (lm_head.*, unused): the same encoder, without a classifier head.
TEST(MpnetTest, LoadsASavedMpnetModelWithItsPoolerAndAMaskedLmWithoutItsHead) {
  const std::map<std::string, torch::Tensor> all = testing::ReadCheckpointTensors(ModelDir());
  std::map<std::string, torch::Tensor> encoder;
  for (const auto& [name, tensor] : all) {
    if (absl::StartsWith(name, "mpnet.")) {
      encoder[std::string(absl::StripPrefix(name, "mpnet."))] = tensor;
    }
  }
  encoder["pooler.dense.weight"] = all.at("classifier.dense.weight");
  encoder["pooler.dense.bias"] = all.at("classifier.dense.bias");
  const std::string bare = testing::CopyToTempDir(ModelDir());
  testing::WriteSafetensors(bare + "/model.safetensors", encoder);
  testing::PatchJsonFile(
      bare + "/config.json",
      {{"architectures", {"MPNetModel"}}, {"id2label", nullptr}, {"label2id", nullptr}});
  const std::unique_ptr<TransformerModel> model = Load(bare);
  ASSERT_NE(model, nullptr);
  EXPECT_FALSE(model->has_classifier());

  std::map<std::string, torch::Tensor> masked_lm;
  for (const auto& [name, tensor] : all) {
    if (absl::StartsWith(name, "mpnet.")) masked_lm[name] = tensor;
  }
  masked_lm["lm_head.dense.weight"] = torch::zeros({32, 32});
  masked_lm["lm_head.bias"] =
      torch::zeros({all.at("mpnet.embeddings.word_embeddings.weight").size(0)});
  const std::string mlm = testing::CopyToTempDir(ModelDir());
  testing::WriteSafetensors(mlm + "/model.safetensors", masked_lm);
  testing::PatchJsonFile(
      mlm + "/config.json",
      {{"architectures", {"MPNetForMaskedLM"}}, {"id2label", nullptr}, {"label2id", nullptr}});
  const std::unique_ptr<TransformerModel> masked = Load(mlm);
  ASSERT_NE(masked, nullptr);
  EXPECT_FALSE(masked->has_classifier());

  const Json golden = Golden();
  const ForwardInput input = InputOf(golden["padded_batch"]);
  absl::StatusOr<ForwardOutput> a = ForwardAll(*model, input);
  absl::StatusOr<ForwardOutput> b = ForwardAll(*masked, input);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LE(
      DifferenceAtRealTokens(a->last_hidden_state, golden["padded_batch"]["last_hidden_state"],
                             input.attention_mask, 1),
      kTolerance);
  EXPECT_TRUE(torch::equal(a->last_hidden_state, b->last_hidden_state));
  // The pooler output is tanh(dense(h_<s>)): the classifier head's features, here.
  ASSERT_TRUE(a->pooler_output.defined());
  EXPECT_LE(
      MaxDifference(a->pooler_output, torch::tanh(torch::linear(a->last_hidden_state.select(1, 0),
                                                                all.at("classifier.dense.weight"),
                                                                all.at("classifier.dense.bias")))),
      1e-6);
}

TEST(MpnetTest, RefusesAMissingPositionBiasAndATooSmallBucketTable) {
  std::map<std::string, torch::Tensor> tensors = testing::ReadCheckpointTensors(ModelDir());
  tensors.erase("mpnet.encoder.relative_attention_bias.weight");
  tensors.erase("mpnet.encoder.layer.1.attention.attn.o.bias");
  const std::string dir = testing::CopyToTempDir(ModelDir());
  testing::WriteSafetensors(dir + "/model.safetensors", tensors);
  absl::Status status = LoadTransformerModel({.model_dir = dir}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("mpnet.encoder.relative_attention_bias.weight"));
  EXPECT_THAT(status.message(), HasSubstr("mpnet.encoder.layer.1.attention.attn.o.bias"));

  // transformers buckets into 32 rows whatever the table holds.
  const std::string small = testing::CopyToTempDir(ModelDir());
  testing::PatchJsonFile(small + "/config.json", {{"relative_attention_num_buckets", 16}});
  status = LoadTransformerModel({.model_dir = small}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("field 'relative_attention_num_buckets'"));
  EXPECT_THAT(status.message(), HasSubstr("got 16"));
}

}  // namespace
}  // namespace attnscope

// RoBERTa / XLM-R against goldens from PyTorch's own modules (tests/data/make_tiny_roberta.py): an
// XLMRobertaForSequenceClassification cross-encoder, its positions counted from pad_token_id + 1,
// its token limit, and the other layouts of the family's checkpoints (a saved RobertaModel, a
// *ForMaskedLM) and what is refused.
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/architectures/bert.h"
#include "models/architectures/transformer.h"
#include "models/engine.h"
#include "models/tokenizers/tokenizer.h"
#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr double kTolerance = 1e-5;
constexpr int64_t kPad = 1;

std::string ModelDir() { return testing::TestDataDir() + "/tiny-roberta"; }

std::unique_ptr<TransformerModel> Load(const std::string& dir) {
  auto model = LoadTransformerModel({.model_dir = dir});
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

// A copy of tiny-roberta whose weights are `tensors`.
std::string CopyWithTensors(const std::map<std::string, torch::Tensor>& tensors) {
  const std::string dir = testing::CopyToTempDir(ModelDir());
  testing::WriteSafetensors(dir + "/model.safetensors", tensors);
  return dir;
}

double MaxDifference(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kFloat64) - want.to(torch::kFloat64)).abs().max().item<double>();
}

class RobertaGoldenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = Load(ModelDir()).release();
    golden_ = new Json(Json::parse(testing::ReadFileBytes(ModelDir() + "/golden.json")));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete golden_;
  }

  // The golden's ids and mask, and no token type ids: RoBERTa's tokenizers return none.
  static ForwardInput InputOf(const Json& c) {
    ForwardInput input;
    input.input_ids = testing::TensorFromJson(c["input_ids"], torch::kInt64);
    input.attention_mask = testing::TensorFromJson(c["attention_mask"], torch::kInt64);
    return input;
  }

  static ForwardOutput Run(const TransformerModel& model, const ForwardInput& input) {
    ForwardOptions options;
    options.output_hidden_states = true;
    options.output_attention_scores = true;
    auto out = model.Forward(input, options);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *std::move(out) : ForwardOutput();
  }

  // The largest difference from the golden at real (unpadded) query positions: what the model
  // computes for padded queries is never served, and nn.MultiheadAttention and transformers differ
  // there.
  static double DifferenceAtRealTokens(const torch::Tensor& got, const Json& want,
                                       const torch::Tensor& mask, int query_dim) {
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

  static TransformerModel* model_;
  static Json* golden_;
};

TransformerModel* RobertaGoldenTest::model_ = nullptr;
Json* RobertaGoldenTest::golden_ = nullptr;

const char* const kCases[] = {"single", "pair", "padded_batch", "typed_pad"};

TEST_F(RobertaGoldenTest, LoadsAsXlmRobertaCrossEncoder) {
  ASSERT_NE(model_, nullptr);
  EXPECT_EQ(model_->config().architecture, Architecture::kRoberta);
  EXPECT_EQ(model_->config().model_type, "xlm-roberta");
  EXPECT_TRUE(model_->has_classifier());
  EXPECT_EQ(model_->config().num_labels, 1);
  EXPECT_EQ(model_->config().type_vocab_size, 1);
  EXPECT_EQ(model_->config().pad_token_id, kPad);
}

TEST_F(RobertaGoldenTest, MatchesPyTorchModules) {
  double worst_hidden = 0, worst_attention = 0, worst_logit = 0;
  for (const char* name : kCases) {
    SCOPED_TRACE(name);
    const Json& c = (*golden_)[name];
    const ForwardInput input = InputOf(c);
    const ForwardOutput out = Run(*model_, input);
    const torch::Tensor& mask = input.attention_mask;
    worst_hidden = std::max(worst_hidden, DifferenceAtRealTokens(out.last_hidden_state,
                                                                 c["last_hidden_state"], mask, 1));
    ASSERT_EQ(out.hidden_states.size(), c["hidden_states"].size());
    for (size_t i = 0; i < out.hidden_states.size(); ++i) {
      worst_hidden = std::max(worst_hidden, DifferenceAtRealTokens(out.hidden_states[i],
                                                                   c["hidden_states"][i], mask, 1));
    }
    ASSERT_EQ(out.attentions.size(), c["attentions"].size());
    for (size_t i = 0; i < out.attentions.size(); ++i) {
      worst_attention = std::max(
          worst_attention, DifferenceAtRealTokens(out.attentions[i], c["attentions"][i], mask, 2));
    }
    // RobertaForSequenceClassification has no pooler.
    EXPECT_FALSE(out.pooler_output.defined());
    const torch::Tensor logits = testing::TensorFromJson(c["logits"], torch::kFloat64);
    ASSERT_TRUE(out.logits.defined());
    ASSERT_EQ(out.logits.sizes(), logits.sizes());
    worst_logit = std::max(worst_logit, MaxDifference(out.logits, logits));
  }
  EXPECT_LE(worst_hidden, kTolerance);
  EXPECT_LE(worst_attention, kTolerance);
  EXPECT_LE(worst_logit, kTolerance);
  std::printf(
      "largest differences from the goldens: hidden states %.3g, attentions %.3g, "
      "logits %.3g\n",
      worst_hidden, worst_attention, worst_logit);
}

// create_position_ids_from_input_ids, read through a table whose row i holds i.
TEST_F(RobertaGoldenTest, PositionsCountRealTokensFromPadPlusOne) {
  BertLayout layout;
  layout.padding_idx = kPad;
  const torch::Tensor table =
      torch::arange(model_->config().max_position_embeddings, torch::kFloat32).unsqueeze(1);
  for (const char* name : kCases) {
    SCOPED_TRACE(name);
    const Json& c = (*golden_)[name];
    const torch::Tensor positions = BertPositionEmbeddings(
        layout, table, testing::TensorFromJson(c["input_ids"], torch::kInt64));
    EXPECT_TRUE(torch::equal(positions.squeeze(-1).to(torch::kInt64),
                             testing::TensorFromJson(c["position_ids"], torch::kInt64)));
  }
}

// The goldens' ids are SentencePiece's; the loader picks tokenizer.json's Unigram reader, which
// must give the same.
TEST_F(RobertaGoldenTest, TokenizerGivesTheGoldenIds) {
  auto tokenizer = LoadTokenizer(ModelDir());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->kind(), TokenizerKind::kSentencePiece);
  EXPECT_EQ((*tokenizer)->pad_token_id(), kPad);
  for (const char* name : {"single", "pair"}) {
    SCOPED_TRACE(name);
    const Json& c = (*golden_)[name];
    const std::string text = c["text"].get<std::string>();
    auto encoding =
        c["text_pair"].is_null()
            ? (*tokenizer)->Encode(text, EncodeOptions())
            : (*tokenizer)->EncodePair(text, c["text_pair"].get<std::string>(), EncodeOptions());
    ASSERT_TRUE(encoding.ok()) << encoding.status();
    EXPECT_EQ(encoding->input_ids, c["input_ids"][0].get<std::vector<int64_t>>());
    // One token type: every id 0, also in the pair.
    EXPECT_EQ(encoding->token_type_ids, std::vector<int64_t>(encoding->input_ids.size(), 0));
  }
}

// Each input of the padded batch alone, and again with more padding than the batch gave it: the
// real positions' outputs do not change.
TEST_F(RobertaGoldenTest, PaddingAndBatchingChangeNothing) {
  const ForwardInput input = InputOf((*golden_)["padded_batch"]);
  const ForwardOutput batched = Run(*model_, input);
  const int64_t length = input.input_ids.size(1);
  for (int64_t b = 0; b < input.input_ids.size(0); ++b) {
    SCOPED_TRACE(b);
    const int64_t real = input.attention_mask[b].sum().item<int64_t>();
    ForwardInput alone;
    alone.input_ids = input.input_ids[b].narrow(0, 0, real).unsqueeze(0);
    const ForwardOutput single = Run(*model_, alone);
    ForwardInput padded;
    padded.input_ids = torch::full({1, length + 5}, kPad, torch::kInt64);
    padded.input_ids.narrow(1, 0, real).copy_(alone.input_ids);
    padded.attention_mask = torch::zeros({1, length + 5}, torch::kInt64);
    padded.attention_mask.narrow(1, 0, real).fill_(1);
    const ForwardOutput more = Run(*model_, padded);
    for (const ForwardOutput* other : {&batched, &more}) {
      const int64_t row = other == &batched ? b : 0;
      EXPECT_LE(MaxDifference(other->last_hidden_state[row].narrow(0, 0, real),
                              single.last_hidden_state[0]),
                1e-5);
      for (size_t layer = 0; layer < single.attentions.size(); ++layer) {
        const torch::Tensor part =
            other->attentions[layer][row].narrow(1, 0, real).narrow(2, 0, real);
        EXPECT_LE(MaxDifference(part, single.attentions[layer][0]), 1e-5);
      }
      EXPECT_LE(MaxDifference(other->logits[row], single.logits[0]), 1e-5);
    }
  }
}

// 66 position rows hold 64 tokens: rows 0 and 1 are below the first real position.
TEST_F(RobertaGoldenTest, LongestInputIsMaxPositionsLessPadLessOne) {
  const ModelConfig& config = model_->config();
  ASSERT_EQ(config.max_position_embeddings, 66);
  EXPECT_EQ(model_->max_positions(), config.max_position_embeddings - config.pad_token_id - 1);
  ForwardInput longest;
  longest.input_ids = torch::full({1, 64}, 5, torch::kInt64);
  EXPECT_TRUE(model_->Forward(longest, ForwardOptions()).ok());
  ForwardInput too_long;
  too_long.input_ids = torch::full({1, 65}, 5, torch::kInt64);
  const absl::Status status = model_->Forward(too_long, ForwardOptions()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("expected at most 64 tokens (max_position_embeddings - pad_token_id - 1), "
                        "got 65"));

  // The server's limit is the model's.
  LoadedModel::Options options;
  options.name = "xlmr";
  options.model_dir = ModelDir();
  auto loaded = LoadedModel::Create(options);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->max_tokens(), 64);
  std::string text;
  for (int i = 0; i < 40; ++i) text += "Insert a table ";
  EXPECT_THAT((*loaded)->Encode(text, std::nullopt, TextOptions()).status().message(),
              HasSubstr("expected at most 64 tokens"));
  TextOptions truncate;
  truncate.truncation = Truncation::kLongestFirst;
  auto encoding = (*loaded)->Encode(text, std::nullopt, truncate);
  ASSERT_TRUE(encoding.ok()) << encoding.status();
  ASSERT_EQ(encoding->size(), 64u);
  auto output = (*loaded)->Run({*encoding}, ForwardOptions());
  ASSERT_TRUE(output.ok()) << output.status();
}

// model_type "roberta" is the same architecture as "xlm-roberta".
TEST_F(RobertaGoldenTest, RobertaModelTypeGivesTheSameModel) {
  const std::string dir = testing::CopyToTempDir(ModelDir());
  testing::PatchJsonFile(
      dir + "/config.json",
      {{"model_type", "roberta"}, {"architectures", {"RobertaForSequenceClassification"}}});
  const std::unique_ptr<TransformerModel> roberta = Load(dir);
  ASSERT_NE(roberta, nullptr);
  EXPECT_EQ(roberta->config().architecture, Architecture::kRoberta);
  const ForwardInput input = InputOf((*golden_)["padded_batch"]);
  const ForwardOutput want = Run(*model_, input);
  const ForwardOutput got = Run(*roberta, input);
  EXPECT_TRUE(torch::equal(got.last_hidden_state, want.last_hidden_state));
  EXPECT_TRUE(torch::equal(got.logits, want.logits));
}

// A saved RobertaModel: no "roberta." prefix, a pooler and no classifier head.
TEST_F(RobertaGoldenTest, LoadsASavedRobertaModelWithItsPooler) {
  const std::map<std::string, torch::Tensor> all = testing::ReadCheckpointTensors(ModelDir());
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& [name, tensor] : all) {
    if (name.rfind("roberta.", 0) == 0) tensors[name.substr(8)] = tensor;
  }
  // The classifier's dense layer stands in for the pooler's weights.
  tensors["pooler.dense.weight"] = all.at("classifier.dense.weight");
  tensors["pooler.dense.bias"] = all.at("classifier.dense.bias");
  const std::string dir = CopyWithTensors(tensors);
  testing::PatchJsonFile(
      dir + "/config.json",
      {{"architectures", {"XLMRobertaModel"}}, {"id2label", nullptr}, {"label2id", nullptr}});
  const std::unique_ptr<TransformerModel> encoder = Load(dir);
  ASSERT_NE(encoder, nullptr);
  EXPECT_FALSE(encoder->has_classifier());
  const ForwardInput input = InputOf((*golden_)["pair"]);
  const ForwardOutput out = Run(*encoder, input);
  EXPECT_LE(DifferenceAtRealTokens(out.last_hidden_state, (*golden_)["pair"]["last_hidden_state"],
                                   input.attention_mask, 1),
            kTolerance);
  EXPECT_FALSE(out.logits.defined());
  // The pooler output is tanh(dense(h_<s>)): the classifier head's features, here.
  ASSERT_TRUE(out.pooler_output.defined());
  const torch::Tensor first = out.last_hidden_state.select(1, 0);
  EXPECT_LE(MaxDifference(out.pooler_output,
                          torch::tanh(torch::linear(first, all.at("classifier.dense.weight"),
                                                    all.at("classifier.dense.bias")))),
            1e-6);
}

// XLMRobertaForMaskedLM: the masked-LM head (lm_head.*) is not served and is ignored.
TEST_F(RobertaGoldenTest, LoadsAMaskedLmCheckpointWithoutItsHead) {
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& [name, tensor] : testing::ReadCheckpointTensors(ModelDir())) {
    if (name.rfind("classifier.", 0) != 0) tensors[name] = tensor;
  }
  const int64_t hidden = 16, vocab = 5002;
  tensors["lm_head.dense.weight"] = torch::zeros({hidden, hidden});
  tensors["lm_head.dense.bias"] = torch::zeros({hidden});
  tensors["lm_head.layer_norm.weight"] = torch::ones({hidden});
  tensors["lm_head.layer_norm.bias"] = torch::zeros({hidden});
  tensors["lm_head.decoder.weight"] = torch::zeros({vocab, hidden});
  tensors["lm_head.decoder.bias"] = torch::zeros({vocab});
  tensors["lm_head.bias"] = torch::zeros({vocab});
  const std::string dir = CopyWithTensors(tensors);
  testing::PatchJsonFile(
      dir + "/config.json",
      {{"architectures", {"XLMRobertaForMaskedLM"}}, {"id2label", nullptr}, {"label2id", nullptr}});
  const std::unique_ptr<TransformerModel> masked_lm = Load(dir);
  ASSERT_NE(masked_lm, nullptr);
  EXPECT_FALSE(masked_lm->has_classifier());
  const ForwardInput input = InputOf((*golden_)["single"]);
  const ForwardOutput out = Run(*masked_lm, input);
  EXPECT_LE(DifferenceAtRealTokens(out.last_hidden_state, (*golden_)["single"]["last_hidden_state"],
                                   input.attention_mask, 1),
            kTolerance);
  EXPECT_FALSE(out.logits.defined());
  EXPECT_FALSE(out.pooler_output.defined());
}

// Every tensor that does not fit, in one error naming each.
TEST_F(RobertaGoldenTest, RefusesWrongAndMissingTensorsInOneError) {
  std::map<std::string, torch::Tensor> tensors = testing::ReadCheckpointTensors(ModelDir());
  tensors.erase("classifier.out_proj.bias");
  tensors.erase("roberta.encoder.layer.1.attention.self.key.weight");
  tensors["classifier.dense.weight"] = torch::zeros({16, 8});
  tensors["classifier.weight"] = torch::zeros({1, 16});  // BERT's head in a RoBERTa checkpoint
  const std::string dir = CopyWithTensors(tensors);
  const absl::Status status = LoadTransformerModel({.model_dir = dir}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("(4 problem(s))"));
  EXPECT_THAT(status.message(),
              HasSubstr("missing tensor 'classifier.out_proj.bias': expected shape [1]"));
  EXPECT_THAT(status.message(),
              HasSubstr("missing tensor 'roberta.encoder.layer.1.attention.self.key.weight': "
                        "expected shape [16, 16]"));
  EXPECT_THAT(status.message(),
              HasSubstr("tensor 'classifier.dense.weight' in '" + dir +
                        "/model.safetensors': expected shape [16, 16], got [16, 8]"));
  EXPECT_THAT(status.message(), HasSubstr("unexpected tensor 'classifier.weight'"));

  // A head without its output layer is refused for the missing layer, not served without a head.
  tensors = testing::ReadCheckpointTensors(ModelDir());
  tensors.erase("classifier.out_proj.weight");
  tensors.erase("classifier.out_proj.bias");
  const absl::Status headless =
      LoadTransformerModel({.model_dir = CopyWithTensors(tensors)}).status();
  EXPECT_EQ(headless.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(headless.message(), HasSubstr("(2 problem(s))"));
  EXPECT_THAT(headless.message(),
              HasSubstr("missing tensor 'classifier.out_proj.weight': expected shape [1, 16]"));
}

}  // namespace
}  // namespace attnscope

// BERT against goldens from PyTorch's own modules (tests/data/make_tiny_bert.py), plus the
// attention invariants every model must keep.
#include <torch/types.h>

#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "models/architectures/transformer.h"
#include "models/tokenizers/tokenizer.h"
#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

using Json = nlohmann::json;

constexpr double kTolerance = 1e-5;

class BertGoldenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = testing::TestDataDir() + "/tiny-bert";
    auto model = LoadTransformerModel({.model_dir = dir});
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = model->release();
    golden_ = new Json(Json::parse(testing::ReadFileBytes(dir + "/golden.json")));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete golden_;
  }

  static ForwardInput InputOf(const Json& c) {
    ForwardInput input;
    input.input_ids = testing::TensorFromJson(c["input_ids"], torch::kInt64);
    input.attention_mask = testing::TensorFromJson(c["attention_mask"], torch::kInt64);
    input.token_type_ids = testing::TensorFromJson(c["token_type_ids"], torch::kInt64);
    return input;
  }

  static ForwardOutput Run(const ForwardInput& input) {
    ForwardOptions options;
    options.output_hidden_states = true;
    options.output_attention_scores = true;
    auto out = model_->Forward(input, options);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *std::move(out) : ForwardOutput();
  }

  // Golden tensors at real (unpadded) query positions only: what the model computes for padded
  // queries is never served, and nn.MultiheadAttention and transformers differ there.
  static void ExpectNearAtRealTokens(const torch::Tensor& got, const Json& want,
                                     const torch::Tensor& mask, int query_dim,
                                     const std::string& what) {
    SCOPED_TRACE(what);
    const torch::Tensor expected = testing::TensorFromJson(want, torch::kFloat64);
    ASSERT_EQ(got.sizes(), expected.sizes());
    for (int64_t b = 0; b < mask.size(0); ++b) {
      const int64_t real = mask[b].sum().item<int64_t>();
      const torch::Tensor g = got[b].narrow(query_dim - 1, 0, real).to(torch::kFloat64);
      const torch::Tensor e = expected[b].narrow(query_dim - 1, 0, real);
      const double max_error = (g - e).abs().max().item<double>();
      EXPECT_LE(max_error, kTolerance) << "batch row " << b;
    }
  }

  static TransformerModel* model_;
  static Json* golden_;
};

TransformerModel* BertGoldenTest::model_ = nullptr;
Json* BertGoldenTest::golden_ = nullptr;

TEST_F(BertGoldenTest, LoadsAsCrossEncoder) {
  EXPECT_TRUE(model_->has_classifier());
  EXPECT_EQ(model_->config().num_labels, 1);
  EXPECT_EQ(model_->config().num_hidden_layers, 3);
  EXPECT_EQ(model_->config().num_attention_heads, 4);
}

TEST_F(BertGoldenTest, MatchesPyTorchModules) {
  for (const char* name : {"single", "pair", "padded_batch"}) {
    SCOPED_TRACE(name);
    const Json& c = (*golden_)[name];
    const ForwardInput input = InputOf(c);
    const ForwardOutput out = Run(input);
    const torch::Tensor& mask = input.attention_mask;
    ExpectNearAtRealTokens(out.last_hidden_state, c["last_hidden_state"], mask, 1,
                           "last_hidden_state");
    ASSERT_EQ(out.hidden_states.size(), c["hidden_states"].size());
    for (size_t i = 0; i < out.hidden_states.size(); ++i) {
      ExpectNearAtRealTokens(out.hidden_states[i], c["hidden_states"][i], mask, 1,
                             "hidden_states[" + std::to_string(i) + "]");
    }
    ASSERT_EQ(out.attentions.size(), c["attentions"].size());
    for (size_t i = 0; i < out.attentions.size(); ++i) {
      ExpectNearAtRealTokens(out.attentions[i], c["attentions"][i], mask, 2,
                             "attentions[" + std::to_string(i) + "]");
    }
    const torch::Tensor pooled = testing::TensorFromJson(c["pooler_output"], torch::kFloat64);
    EXPECT_LE((out.pooler_output.to(torch::kFloat64) - pooled).abs().max().item<double>(),
              kTolerance);
    const torch::Tensor logits = testing::TensorFromJson(c["logits"], torch::kFloat64);
    ASSERT_TRUE(out.logits.defined());
    EXPECT_EQ(out.logits.sizes(), logits.sizes());
    EXPECT_LE((out.logits.to(torch::kFloat64) - logits).abs().max().item<double>(), kTolerance);
  }
}

TEST_F(BertGoldenTest, TokenizerGivesTheGoldenPairIds) {
  const Json& c = (*golden_)["pair"];
  auto tokenizer = LoadTokenizer(testing::TestDataDir() + "/tiny-bert");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto encoding = (*tokenizer)
                      ->EncodePair(c["text"].get<std::string>(), c["text_pair"].get<std::string>(),
                                   EncodeOptions());
  ASSERT_TRUE(encoding.ok()) << encoding.status();
  EXPECT_EQ(encoding->input_ids, c["input_ids"][0].get<std::vector<int64_t>>());
  EXPECT_EQ(encoding->token_type_ids, c["token_type_ids"][0].get<std::vector<int64_t>>());
}

TEST_F(BertGoldenTest, AttentionInvariants) {
  const ForwardInput input = InputOf((*golden_)["padded_batch"]);
  const ForwardOutput out = Run(input);
  ASSERT_EQ(out.hidden_states.size(), 4u);  // layers + 1
  ASSERT_EQ(out.attentions.size(), 3u);
  ASSERT_EQ(out.attention_scores.size(), 3u);
  const torch::Tensor padded_keys = (input.attention_mask == 0).view({3, 1, 1, -1});
  for (size_t layer = 0; layer < out.attentions.size(); ++layer) {
    SCOPED_TRACE(layer);
    const torch::Tensor& probs = out.attentions[layer];
    EXPECT_LE((probs.sum(-1) - 1).abs().max().item<double>(), 1e-6);
    // Exactly zero, not merely small.
    EXPECT_EQ(probs.masked_select(padded_keys.expand_as(probs)).abs().max().item<float>(), 0.0f);
    // The probabilities are the softmax of the returned scores under the mask.
    const torch::Tensor recomputed =
        torch::softmax(out.attention_scores[layer].masked_fill(
                           padded_keys, -std::numeric_limits<float>::infinity()),
                       -1);
    EXPECT_LE((recomputed - probs).abs().max().item<double>(), 1e-6);
  }
}

TEST_F(BertGoldenTest, PaddedBatchEqualsEachInputAlone) {
  const ForwardInput input = InputOf((*golden_)["padded_batch"]);
  const ForwardOutput batched = Run(input);
  for (int64_t b = 0; b < 3; ++b) {
    SCOPED_TRACE(b);
    const int64_t real = input.attention_mask[b].sum().item<int64_t>();
    ForwardInput alone;
    alone.input_ids = input.input_ids[b].narrow(0, 0, real).unsqueeze(0);
    alone.token_type_ids = input.token_type_ids[b].narrow(0, 0, real).unsqueeze(0);
    const ForwardOutput single = Run(alone);
    EXPECT_LE((batched.last_hidden_state[b].narrow(0, 0, real) - single.last_hidden_state[0])
                  .abs()
                  .max()
                  .item<double>(),
              1e-5);
    for (size_t layer = 0; layer < single.attentions.size(); ++layer) {
      const torch::Tensor part = batched.attentions[layer][b].narrow(1, 0, real).narrow(2, 0, real);
      EXPECT_LE((part - single.attentions[layer][0]).abs().max().item<double>(), 1e-5);
    }
    EXPECT_LE((batched.logits[b] - single.logits[0]).abs().max().item<double>(), 1e-5);
  }
}

TEST_F(BertGoldenTest, IsDeterministicAndThreadSafe) {
  const ForwardInput input = InputOf((*golden_)["padded_batch"]);
  const ForwardOutput first = Run(input);
  std::vector<ForwardOutput> outputs(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    threads.emplace_back([&, i] { outputs[i] = Run(input); });
  }
  for (std::thread& thread : threads) thread.join();
  for (const ForwardOutput& out : outputs) {
    EXPECT_TRUE(torch::equal(out.last_hidden_state, first.last_hidden_state));
    EXPECT_TRUE(torch::equal(out.attentions.back(), first.attentions.back()));
    // Logits too: a forward pass that wrote into its weights would drift from call to call.
    EXPECT_TRUE(torch::equal(out.logits, first.logits));
  }
}

TEST_F(BertGoldenTest, LayerCallbackStopsThePass) {
  ForwardOptions options;
  int64_t layers_seen = 0;
  options.on_layer_done = [&](int64_t layer) {
    ++layers_seen;
    return layer == 1 ? absl::CancelledError("client went away") : absl::OkStatus();
  };
  auto out = model_->Forward(InputOf((*golden_)["single"]), options);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(layers_seen, 2);
}

TEST_F(BertGoldenTest, RejectsBadInputs) {
  ForwardInput input = InputOf((*golden_)["single"]);
  input.input_ids = input.input_ids.clone();
  input.input_ids[0][1] = 1000;  // beyond vocab_size
  auto out = model_->Forward(input, ForwardOptions());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("vocab_size"), std::string::npos) << out.status();

  ForwardInput too_long;
  too_long.input_ids = torch::zeros({1, 65}, torch::kInt64);
  out = model_->Forward(too_long, ForwardOptions());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("max_position_embeddings"), std::string::npos);

  ForwardInput wrong_dtype;
  wrong_dtype.input_ids = torch::zeros({1, 4}, torch::kInt32);
  out = model_->Forward(wrong_dtype, ForwardOptions());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace attnscope

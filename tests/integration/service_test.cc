// Every RPC and every GetAttention option through the client library against the real
// attnscope-server serving ../shared/models/stories260K ("llama") and tests/data/tiny-bert
// ("bert"). Expected values come from the engine run in this process (reference.h): float32 results
// must be bit-identical, float16/bfloat16 within half an ulp of their precision, and derived
// quantities that involve a different summation order (head mean, rollout) within float32 rounding.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/integration_util.h"
#include "tests/integration/reference.h"

namespace attnscope::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

constexpr char kBertText[] = "what is the capital of france? paris is the capital";
constexpr char kBertPair[] = "paris is the most populous city in france";
constexpr char kLlamaText[] = "Once upon a time, there was a little girl named Lily.";

// Half an ulp of float16 (11 significant bits) relative, and of its smallest subnormal absolute.
constexpr double kHalfRel = 1.0 / 2048;
constexpr double kHalfAbs = 1.0 / (1 << 25);
// bfloat16 keeps 8 significant bits.
constexpr double kBFloat16Rel = 1.0 / 256;
// Head means and rollout may sum in another order than the reference.
constexpr double kFloatRel = 1e-5;
constexpr double kFloatAbs = 1e-6;

class ServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ServerProcess::Options options;
    options.models = {"llama=" + Stories260kDir(), "bert=" + TinyBertDir()};
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    llama_ = new Reference(Stories260kDir());
    bert_ = new Reference(TinyBertDir());
  }
  static void TearDownTestSuite() {
    delete server_;
    delete llama_;
    delete bert_;
    server_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr) << "the server did not start";
    client_ = server_->NewClient();
  }

  static const Reference& Ref(const std::string& model) {
    return model == "bert" ? *bert_ : *llama_;
  }

  static v1::GetAttentionRequest AttentionRequest(const std::string& model) {
    v1::GetAttentionRequest request;
    request.set_model(model);
    request.set_text(model == "bert" ? kBertText : kLlamaText);
    return request;
  }

  // Runs `request` unary and streamed and checks both against the reference. Tolerances apply to
  // attentions and scores; `dtype` tolerances are added by the caller through rel/abs.
  void CheckAttention(const v1::GetAttentionRequest& request, double abs_tol = 0,
                      double rel_tol = 0) {
    const ExpectedAttention expected = Ref(request.model()).Attention(request);
    for (bool stream : {false, true}) {
      SCOPED_TRACE(stream ? "StreamAttention" : "GetAttention");
      absl::StatusOr<AttentionResult> result =
          stream ? client_->StreamAttention(request) : client_->GetAttention(request);
      ASSERT_TRUE(result.ok()) << result.status();
      EXPECT_EQ(result->model, request.model());
      EXPECT_TRUE(TokensEq(result->tokens, expected.encoding));
      EXPECT_THAT(result->layers, ElementsAreArray(expected.layers));
      EXPECT_THAT(result->heads, ElementsAreArray(expected.heads));
      EXPECT_EQ(result->query_start, expected.query_start);
      EXPECT_EQ(result->key_start, expected.key_start);
      const char* last_dim = request.top_k() > 0 ? "k" : "key_token";
      EXPECT_THAT(result->attentions.dim_names,
                  ElementsAre("layer", "head", "query_token", last_dim));
      const v1::DType dtype =
          request.dtype() == v1::DTYPE_UNSPECIFIED ? v1::DTYPE_FLOAT32 : request.dtype();
      EXPECT_EQ(result->attentions.wire_dtype, dtype);
      EXPECT_TRUE(TensorNear(result->attentions, expected.attentions, abs_tol, rel_tol));
      ASSERT_EQ(result->scores.has_value(), request.include_scores());
      if (request.include_scores()) {
        EXPECT_TRUE(TensorNear(*result->scores, expected.scores, abs_tol, rel_tol));
      }
      ASSERT_EQ(result->top_k_indices.has_value(), request.top_k() > 0);
      if (request.top_k() > 0) {
        EXPECT_EQ(result->top_k_indices->wire_dtype, v1::DTYPE_INT32);
        CheckTopKIndices(request, expected, *result);
      }
      ASSERT_EQ(result->rollout.has_value(), request.rollout());
      if (request.rollout()) {
        EXPECT_TRUE(TensorNear(*result->rollout, expected.rollout, abs_tol + kFloatAbs,
                               rel_tol + kFloatRel));
      }
    }
  }

  // Ties (the zeros above a causal diagonal) make the chosen indices ambiguous, so each index is
  // checked to point at an entry equal to its value, and the indices of a row to be distinct.
  static void CheckTopKIndices(const v1::GetAttentionRequest& request,
                               const ExpectedAttention& expected, const AttentionResult& result) {
    ASSERT_EQ(result.top_k_indices->shape, result.attentions.shape);
    v1::GetAttentionRequest dense = request;
    dense.set_top_k(0);
    dense.set_dtype(v1::DTYPE_FLOAT32);
    const torch::Tensor full = Ref(request.model()).Attention(dense).attentions;
    const int64_t k = request.top_k();
    const int64_t rows = result.attentions.num_elements() / k;
    const torch::Tensor flat_full = full.reshape({rows, -1});
    const torch::Tensor flat_expected = expected.attentions.reshape({rows, k});
    for (int64_t row = 0; row < rows; ++row) {
      std::vector<int32_t> seen;
      for (int64_t j = 0; j < k; ++j) {
        const int32_t index = result.top_k_indices->int_values[row * k + j];
        const int64_t column = index - expected.key_start;
        ASSERT_GE(column, 0);
        ASSERT_LT(column, flat_full.size(1));
        EXPECT_EQ(flat_full[row][column].item<float>(), flat_expected[row][j].item<float>())
            << "row " << row << " rank " << j << " index " << index;
        EXPECT_EQ(std::count(seen.begin(), seen.end(), index), 0) << "row " << row;
        // The proto: equal values come in key order.
        if (j > 0 &&
            flat_expected[row][j].item<float>() == flat_expected[row][j - 1].item<float>()) {
          EXPECT_GT(index, seen.back()) << "row " << row << " rank " << j;
        }
        seen.push_back(index);
      }
    }
  }

  static ServerProcess* server_;
  static Reference* llama_;
  static Reference* bert_;
  std::unique_ptr<Client> client_;
};

ServerProcess* ServiceTest::server_ = nullptr;
Reference* ServiceTest::llama_ = nullptr;
Reference* ServiceTest::bert_ = nullptr;

std::string Sha256Sum(const std::string& path) {
  const CommandResult result = RunCommand({"/usr/bin/sha256sum", path});
  return result.stdout_text.substr(0, 64);
}

TEST_F(ServiceTest, ListModelsAndGetModelInfo) {
  absl::StatusOr<std::vector<v1::ModelInfo>> models = client_->ListModels();
  ASSERT_TRUE(models.ok()) << models.status();
  ASSERT_EQ(models->size(), 2u);
  const v1::ModelInfo& llama = (*models)[0];
  const v1::ModelInfo& bert = (*models)[1];
  EXPECT_EQ(llama.name(), "llama");
  EXPECT_EQ(llama.architecture(), "llama");
  EXPECT_THAT(llama.architectures(), ElementsAre("LlamaForCausalLM"));
  EXPECT_EQ(llama.num_hidden_layers(), 5);
  EXPECT_EQ(llama.num_attention_heads(), 8);
  EXPECT_EQ(llama.num_key_value_heads(), 4);
  EXPECT_EQ(llama.hidden_size(), 64);
  EXPECT_EQ(llama.head_dim(), 8);
  EXPECT_EQ(llama.vocab_size(), 512);
  EXPECT_EQ(llama.max_position_embeddings(), 512);
  EXPECT_EQ(llama.tokenizer_kind(), "sentencepiece");
  EXPECT_FALSE(llama.has_classifier());
  EXPECT_TRUE(llama.is_causal());
  EXPECT_EQ(llama.weights_checksum(), Sha256Sum(Stories260kDir() + "/model.safetensors"));

  EXPECT_EQ(bert.name(), "bert");
  EXPECT_EQ(bert.architecture(), "bert");
  EXPECT_THAT(bert.architectures(), ElementsAre("BertForSequenceClassification"));
  EXPECT_EQ(bert.num_hidden_layers(), 3);
  EXPECT_EQ(bert.num_attention_heads(), 4);
  EXPECT_EQ(bert.num_key_value_heads(), 4);
  EXPECT_EQ(bert.hidden_size(), 32);
  EXPECT_EQ(bert.head_dim(), 8);
  EXPECT_EQ(bert.vocab_size(), 137);
  EXPECT_EQ(bert.max_position_embeddings(), 64);
  EXPECT_EQ(bert.tokenizer_kind(), "wordpiece");
  EXPECT_TRUE(bert.has_classifier());
  EXPECT_THAT(bert.labels(), ElementsAre("LABEL_0"));
  EXPECT_FALSE(bert.is_causal());
  EXPECT_EQ(bert.weights_checksum(), Sha256Sum(TinyBertDir() + "/model.safetensors"));

  absl::StatusOr<v1::ModelInfo> info = client_->GetModelInfo("bert");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->SerializeAsString(), bert.SerializeAsString());
  info = client_->GetModelInfo("");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->name(), "llama") << "an empty name selects the first model";
}

TEST_F(ServiceTest, HealthIsServing) {
  absl::StatusOr<ServingStatus> status = client_->Health();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, grpc::health::v1::HealthCheckResponse::SERVING);
  status = client_->Health("attnscope.v1.AttentionService");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(client_->Health("no.such.Service").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ServiceTest, TokenizeMatchesTokenizer) {
  struct Case {
    std::string model;
    std::string text;
    std::optional<std::string> pair;
    v1::Truncation truncation;
    int max_length;
    bool skip_special;
  };
  const std::vector<Case> cases = {
      {"bert", kBertText, std::nullopt, v1::TRUNCATION_UNSPECIFIED, 0, false},
      {"bert", kBertText, kBertPair, v1::TRUNCATION_UNSPECIFIED, 0, false},
      {"bert", kBertText, kBertPair, v1::TRUNCATION_LONGEST_FIRST, 12, false},
      {"bert", kBertText, kBertPair, v1::TRUNCATION_ONLY_SECOND, 16, false},
      {"bert", kBertText, std::nullopt, v1::TRUNCATION_UNSPECIFIED, 0, true},
      {"llama", kLlamaText, std::nullopt, v1::TRUNCATION_UNSPECIFIED, 0, false},
      {"llama", kLlamaText, std::nullopt, v1::TRUNCATION_LONGEST_FIRST, 5, false},
      {"llama", "Tôi yêu Việt Nam quá", std::nullopt, v1::TRUNCATION_UNSPECIFIED, 0, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.model, " '", c.text, "' pair=", c.pair.value_or("-"),
                              " truncation=", c.truncation, " max_length=", c.max_length));
    v1::TokenizeRequest request;
    request.set_model(c.model);
    request.set_text(c.text);
    if (c.pair) request.set_text_pair(*c.pair);
    request.mutable_tokenization()->set_truncation(c.truncation);
    request.mutable_tokenization()->set_max_length(c.max_length);
    request.mutable_tokenization()->set_skip_special_tokens(c.skip_special);
    absl::StatusOr<v1::TokenizeResponse> response = client_->Tokenize(request);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->model(), c.model);
    const Encoding expected = Ref(c.model).Encode(c.text, c.pair, request.tokenization());
    EXPECT_TRUE(TokensEq(response->tokens(), expected));
    if (c.max_length > 0) {
      EXPECT_LE(response->tokens().tokens_size(), c.max_length);
    }
  }
}

TEST_F(ServiceTest, FullAttentionIsExactlyTheEnginesFloat32) {
  for (const std::string model : {"bert", "llama"}) {
    SCOPED_TRACE(model);
    CheckAttention(AttentionRequest(model));
  }
}

TEST_F(ServiceTest, AttentionRowsAreDistributionsAndCausalForLlama) {
  absl::StatusOr<AttentionResult> result = client_->GetAttention(AttentionRequest("llama"));
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<int64_t>& shape = result->attentions.shape;
  ASSERT_EQ(shape.size(), 4u);
  EXPECT_EQ(shape[0], 5);
  EXPECT_EQ(shape[1], 8);
  for (int64_t l = 0; l < shape[0]; ++l) {
    for (int64_t h = 0; h < shape[1]; ++h) {
      for (int64_t q = 0; q < shape[2]; ++q) {
        double sum = 0;
        for (int64_t k = 0; k < shape[3]; ++k) {
          const float value = result->attentions.At({l, h, q, k});
          if (k > q) {
            EXPECT_EQ(value, 0.0f) << l << " " << h << " " << q << " " << k;
          }
          sum += value;
        }
        EXPECT_NEAR(sum, 1.0, 1e-5);
      }
    }
  }
}

TEST_F(ServiceTest, LayerAndHeadSelectionWithNegativeIndices) {
  for (const std::string model : {"bert", "llama"}) {
    SCOPED_TRACE(model);
    v1::GetAttentionRequest request = AttentionRequest(model);
    request.add_layers(-1);
    request.add_layers(0);
    request.add_heads(2);
    request.add_heads(-1);
    request.add_heads(0);
    CheckAttention(request);
  }
}

TEST_F(ServiceTest, HeadAggregation) {
  for (const std::string model : {"bert", "llama"}) {
    SCOPED_TRACE(model);
    v1::GetAttentionRequest request = AttentionRequest(model);
    request.set_head_aggregation(v1::HEAD_AGGREGATION_NONE);
    CheckAttention(request);
    request.set_head_aggregation(v1::HEAD_AGGREGATION_MAX);
    CheckAttention(request);  // max picks an element: exact
    request.set_head_aggregation(v1::HEAD_AGGREGATION_MEAN);
    CheckAttention(request, kFloatAbs, kFloatRel);
    request.add_heads(1);
    request.add_heads(-1);
    request.add_layers(1);
    CheckAttention(request, kFloatAbs, kFloatRel);
  }
}

TEST_F(ServiceTest, Rollout) {
  for (const std::string model : {"bert", "llama"}) {
    SCOPED_TRACE(model);
    v1::GetAttentionRequest request = AttentionRequest(model);
    request.set_rollout(true);
    CheckAttention(request);
    // Rollout always spans all layers, whatever the layer selection.
    request.add_layers(0);
    CheckAttention(request);
  }
}

TEST_F(ServiceTest, PreSoftmaxScores) {
  for (const std::string model : {"bert", "llama"}) {
    SCOPED_TRACE(model);
    v1::GetAttentionRequest request = AttentionRequest(model);
    request.set_include_scores(true);
    CheckAttention(request);
    request.add_layers(-2);
    request.add_heads(1);
    CheckAttention(request);
  }
}

TEST_F(ServiceTest, Float16AndBFloat16) {
  for (const std::string model : {"bert", "llama"}) {
    SCOPED_TRACE(model);
    v1::GetAttentionRequest request = AttentionRequest(model);
    request.set_include_scores(true);
    request.set_rollout(true);
    request.set_dtype(v1::DTYPE_FLOAT16);
    CheckAttention(request, kHalfAbs, kHalfRel);
    request.set_dtype(v1::DTYPE_BFLOAT16);
    CheckAttention(request, 0, kBFloat16Rel);
  }
}

TEST_F(ServiceTest, TopK) {
  for (const std::string model : {"bert", "llama"}) {
    SCOPED_TRACE(model);
    v1::GetAttentionRequest request = AttentionRequest(model);
    request.set_top_k(3);
    CheckAttention(request);
    request.set_dtype(v1::DTYPE_FLOAT16);
    request.add_layers(-1);
    CheckAttention(request, kHalfAbs, kHalfRel);
  }
}

TEST_F(ServiceTest, Window) {
  for (const std::string model : {"bert", "llama"}) {
    SCOPED_TRACE(model);
    v1::GetAttentionRequest request = AttentionRequest(model);
    v1::Window* window = request.mutable_window();
    window->set_query_start(2);
    window->set_query_end(5);
    window->set_key_start(1);
    window->set_key_end(0);  // to the end
    CheckAttention(request);
    // Rollout and scores are cut by the same window; top-k indices stay absolute positions.
    request.set_rollout(true);
    request.set_include_scores(true);
    CheckAttention(request);
    request.set_include_scores(false);
    request.set_rollout(false);
    window->set_key_end(6);
    request.set_top_k(5);  // exactly the window's row length
    CheckAttention(request);
  }
}

TEST_F(ServiceTest, TextPairWithTruncation) {
  v1::GetAttentionRequest request = AttentionRequest("bert");
  request.set_text_pair(kBertPair);
  CheckAttention(request);
  request.mutable_tokenization()->set_truncation(v1::TRUNCATION_LONGEST_FIRST);
  request.mutable_tokenization()->set_max_length(10);
  CheckAttention(request);
  request.set_top_k(2);
  request.add_layers(-1);
  CheckAttention(request);
}

TEST_F(ServiceTest, EncodeMatchesForward) {
  for (const std::string model : {"bert", "llama"}) {
    SCOPED_TRACE(model);
    const Reference& ref = Ref(model);
    const std::string text = model == "bert" ? kBertText : kLlamaText;
    v1::EncodeRequest request;
    request.set_model(model);
    request.add_inputs()->set_text(text);
    request.set_output_hidden_states(true);
    request.set_pooling(v1::POOLING_CLS);
    if (model == "llama") {
      // A decoder's first position sees no other token: CLS pooling would not depend on the text.
      const absl::StatusOr<EncodeResponse> refused = client_->Encode(request);
      EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
      request.set_pooling(v1::POOLING_NONE);
    }
    absl::StatusOr<EncodeResponse> response = client_->Encode(request);
    ASSERT_TRUE(response.ok()) << response.status();
    ASSERT_EQ(response->results.size(), 1u);
    const Encoding encoding = ref.Encode(text, std::nullopt, request.tokenization());
    const ForwardOutput output = ref.Forward(encoding);
    const EncodeResult& result = response->results[0];
    EXPECT_TRUE(TokensEq(result.tokens, encoding));
    const torch::Tensor last = output.last_hidden_state[0];
    EXPECT_TRUE(TensorNear(result.last_hidden_state, last));
    EXPECT_THAT(result.last_hidden_state.dim_names, ElementsAre("token", "hidden"));
    ASSERT_TRUE(result.hidden_states.has_value());
    EXPECT_TRUE(TensorNear(*result.hidden_states, torch::stack(output.hidden_states).select(1, 0)));
    if (model == "bert") {
      ASSERT_TRUE(result.pooled.has_value());
      EXPECT_TRUE(TensorNear(*result.pooled, last[0]));
    }

    request.set_output_hidden_states(false);
    request.set_pooling(v1::POOLING_MEAN);
    request.set_normalize(true);
    request.set_dtype(v1::DTYPE_FLOAT16);
    response = client_->Encode(request);
    ASSERT_TRUE(response.ok()) << response.status();
    const EncodeResult& half = response->results[0];
    EXPECT_FALSE(half.hidden_states.has_value());
    EXPECT_EQ(half.last_hidden_state.wire_dtype, v1::DTYPE_FLOAT16);
    EXPECT_TRUE(TensorNear(half.last_hidden_state, last, kHalfAbs, kHalfRel));
    const torch::Tensor mean = last.mean(0);
    ASSERT_TRUE(half.pooled.has_value());
    EXPECT_TRUE(
        TensorNear(*half.pooled, mean / mean.norm(), kHalfAbs + kFloatAbs, kHalfRel + kFloatRel));
  }
}

TEST_F(ServiceTest, EncodeBatchKeepsOrderAndDropsPadding) {
  const Reference& ref = Ref("bert");
  const std::vector<std::string> texts = {"paris", kBertText, "the river"};
  v1::EncodeRequest request;
  request.set_model("bert");
  for (const std::string& text : texts) request.add_inputs()->set_text(text);
  request.add_inputs()->set_text("what is the capital");
  request.mutable_inputs(3)->set_text_pair("berlin");
  absl::StatusOr<EncodeResponse> response = client_->Encode(request);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->results.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    std::optional<std::string> pair;
    if (i == 3) pair = "berlin";
    const Encoding encoding = ref.Encode(request.inputs(i).text(), pair, request.tokenization());
    EXPECT_TRUE(TokensEq(response->results[i].tokens, encoding));
    // Padded batches run GEMMs of another shape, so only float32 rounding is allowed to differ.
    EXPECT_TRUE(TensorNear(response->results[i].last_hidden_state,
                           ref.Forward(encoding).last_hidden_state[0], 1e-5, 1e-5));
  }
}

TEST_F(ServiceTest, CrossAttentionForCrossEncoder) {
  const Reference& ref = Ref("bert");
  const std::string query = "capital of france";
  const std::vector<std::string> documents = {"paris is the capital of france",
                                              "the river is long"};
  v1::CrossAttentionRequest request;
  request.set_model("bert");
  request.set_query(query);
  for (const std::string& document : documents) request.add_documents(document);
  request.set_include_document_to_query(true);
  absl::StatusOr<CrossAttentionResult> result = client_->CrossAttention(request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(result->layers, ElementsAre(0, 1, 2));
  EXPECT_THAT(result->heads, ElementsAre(0, 1, 2, 3));
  ASSERT_EQ(result->documents.size(), 2u);
  v1::TokenizationOptions longest_first;
  longest_first.set_truncation(v1::TRUNCATION_LONGEST_FIRST);
  for (size_t d = 0; d < documents.size(); ++d) {
    SCOPED_TRACE(d);
    const DocumentAttentionResult& document = result->documents[d];
    const Encoding encoding = ref.Encode(query, documents[d], longest_first);
    EXPECT_TRUE(TokensEq(document.tokens, encoding));
    std::vector<int64_t> query_positions;
    std::vector<int64_t> document_positions;
    for (size_t i = 0; i < encoding.size(); ++i) {
      if (encoding.sequence_ids[i] == 0) query_positions.push_back(static_cast<int64_t>(i));
      if (encoding.sequence_ids[i] == 1) document_positions.push_back(static_cast<int64_t>(i));
    }
    EXPECT_THAT(document.query_positions, ElementsAreArray(query_positions));
    EXPECT_THAT(document.document_positions, ElementsAreArray(document_positions));
    const ForwardOutput output = ref.Forward(encoding);
    const torch::Tensor all = torch::stack(output.attentions).select(1, 0);
    const torch::Tensor q = torch::tensor(query_positions);
    const torch::Tensor k = torch::tensor(document_positions);
    // The documents may run as one padded batch, whose GEMMs round differently from the
    // reference's unpadded pass; a single document is checked bit-exact below.
    EXPECT_TRUE(TensorNear(document.query_to_document, all.index_select(2, q).index_select(3, k),
                           kFloatAbs, kFloatRel));
    ASSERT_TRUE(document.document_to_query.has_value());
    EXPECT_TRUE(TensorNear(*document.document_to_query, all.index_select(2, k).index_select(3, q),
                           kFloatAbs, kFloatRel));
    ASSERT_EQ(document.logits.size(), 1u);
    EXPECT_NEAR(document.logits[0], output.logits[0][0].item<float>(), 1e-5);
    ASSERT_TRUE(document.relevance_score.has_value());
    EXPECT_EQ(*document.relevance_score, document.logits[0]);
  }

  // One document: no padding, so the block is the engine's float32 bit for bit. Selection and
  // aggregation apply as in GetAttention.
  request.mutable_documents()->DeleteSubrange(1, 1);
  request.add_layers(-1);
  request.add_heads(0);
  request.add_heads(3);
  request.set_head_aggregation(v1::HEAD_AGGREGATION_MAX);
  request.set_include_document_to_query(false);
  result = client_->CrossAttention(request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(result->layers, ElementsAre(2));
  EXPECT_THAT(result->heads, ElementsAre(0, 3));
  const DocumentAttentionResult& document = result->documents[0];
  EXPECT_FALSE(document.document_to_query.has_value());
  const Encoding encoding = ref.Encode(query, documents[0], longest_first);
  const ForwardOutput output = ref.Forward(encoding);
  EXPECT_EQ(document.logits.at(0), output.logits[0][0].item<float>());
  const torch::Tensor last = output.attentions[2][0];  // [N, S, S]
  const torch::Tensor q = torch::tensor(
      std::vector<int64_t>(document.query_positions.begin(), document.query_positions.end()));
  const torch::Tensor k = torch::tensor(
      std::vector<int64_t>(document.document_positions.begin(), document.document_positions.end()));
  const torch::Tensor heads = torch::tensor(std::vector<int64_t>{0, 3});
  const torch::Tensor expected =
      std::get<0>(last.index_select(0, heads).max(0, true)).index_select(1, q).index_select(2, k);
  EXPECT_TRUE(TensorNear(document.query_to_document, expected.unsqueeze(0)));
}

// An XLMRobertaForSequenceClassification reranker (bge-reranker-v2-m3's layout, random weights,
// tests/data/tiny-roberta) with its XLM-R Unigram tokenizer.json, on the tutorials' Korean and
// Vietnamese pairs: each pair's ids are Hugging Face tokenizers' and its relevance score the
// PyTorch reference's (tests/data/make_reranker_golden.py), whatever the documents sent with it.
TEST(RerankerTest, XlmRobertaScoresTheTutorialPairsAsThePyTorchReference) {
  const std::string dir = TestDataDir() + "/tiny-roberta";
  ServerProcess::Options options;
  options.models = {"reranker=" + dir};
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<Client> client = (*server)->NewClient();
  std::ifstream file(dir + "/reranker_golden.json");
  const nlohmann::json golden = nlohmann::json::parse(file);
  std::map<std::string, std::vector<nlohmann::json>> by_query;
  for (const nlohmann::json& pair : golden["pairs"]) {
    by_query[pair["query"].get<std::string>()].push_back(pair);
  }
  ASSERT_EQ(by_query.size(), 3u);
  for (const auto& [query, pairs] : by_query) {
    SCOPED_TRACE(query);
    v1::CrossAttentionRequest request;
    request.set_model("reranker");
    request.set_query(query);
    for (const nlohmann::json& pair : pairs) request.add_documents(pair["document"]);
    absl::StatusOr<CrossAttentionResult> result = client->CrossAttention(request);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->documents.size(), pairs.size());
    for (size_t d = 0; d < pairs.size(); ++d) {
      SCOPED_TRACE(pairs[d]["document"].get<std::string>());
      const DocumentAttentionResult& document = result->documents[d];
      EXPECT_THAT(document.tokens.input_ids(),
                  ElementsAreArray(pairs[d]["input_ids"].get<std::vector<int64_t>>()));
      ASSERT_TRUE(document.relevance_score.has_value());
      EXPECT_NEAR(*document.relevance_score, pairs[d]["score"].get<double>(), 1e-5);
    }
  }
}

// attnscope-server serving the cross-encoder `dir` of `architecture` alone, whose golden.json
// (from PyTorch modules) has the case "pair" for `words` and `text_pair`: the tokens, every
// layer's and head's attention of GetAttention and the relevance score of CrossAttention (the last
// label's logit) are the reference's. Attribute's occlusion of each of `words` (one token each) is
// the drop of that score when the word is written as the model's mask token `mask`.
void ExpectServedAsTheReference(const std::string& architecture, const std::string& dir,
                                const std::vector<std::string>& words, const std::string& text_pair,
                                int max_positions, const std::string& mask) {
  const std::string text = absl::StrJoin(words, " ");
  ServerProcess::Options options;
  options.models = {"model=" + dir};
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<Client> client = (*server)->NewClient();
  std::ifstream file(dir + "/golden.json");
  const nlohmann::json golden = nlohmann::json::parse(file);
  const nlohmann::json& pair = golden["pair"];

  absl::StatusOr<v1::ModelInfo> info = client->GetModelInfo("model");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->architecture(), architecture);
  EXPECT_TRUE(info->has_classifier());
  EXPECT_EQ(info->max_position_embeddings(), max_positions);

  v1::GetAttentionRequest request;
  request.set_model("model");
  request.set_text(text);
  request.set_text_pair(text_pair);
  absl::StatusOr<AttentionResult> result = client->GetAttention(request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(result->tokens.input_ids(),
              ElementsAreArray(pair["input_ids"][0].get<std::vector<int64_t>>()));
  EXPECT_THAT(result->layers, ElementsAre(0, 1, 2));
  EXPECT_THAT(result->heads, ElementsAre(0, 1, 2, 3));
  // The goldens are [layer][batch, head, query, key]; the answer [layer, head, query, key].
  std::vector<float> values;
  for (const nlohmann::json& layer : pair["attentions"]) {
    for (const nlohmann::json& head : layer[0]) {
      for (const nlohmann::json& row : head) {
        for (const nlohmann::json& value : row) values.push_back(value.get<float>());
      }
    }
  }
  const int64_t tokens = static_cast<int64_t>(pair["input_ids"][0].size());
  EXPECT_TRUE(TensorNear(result->attentions, torch::tensor(values).view({3, 4, tokens, tokens}),
                         /*abs_tol=*/1e-5));

  v1::CrossAttentionRequest cross;
  cross.set_model("model");
  cross.set_query(text);
  cross.add_documents(text_pair);
  absl::StatusOr<CrossAttentionResult> scored = client->CrossAttention(cross);
  ASSERT_TRUE(scored.ok()) << scored.status();
  ASSERT_EQ(scored->documents.size(), 1u);
  ASSERT_TRUE(scored->documents[0].relevance_score.has_value());
  const double score = *scored->documents[0].relevance_score;
  EXPECT_NEAR(score, pair["logits"][0].back().get<double>(), 1e-5);

  v1::AttributeRequest attribute;
  attribute.set_model("model");
  attribute.set_text(text);
  attribute.set_text_pair(text_pair);
  attribute.set_target(static_cast<int32_t>(pair["logits"][0].size()) - 1);
  attribute.add_methods(v1::ATTRIBUTION_METHOD_OCCLUSION);
  absl::StatusOr<v1::AttributeResponse> attributed = client->Attribute(attribute);
  ASSERT_TRUE(attributed.ok()) << attributed.status();
  EXPECT_NEAR(attributed->score(), score, 1e-5);
  ASSERT_EQ(attributed->occlusion_size(), tokens);
  for (size_t w = 0; w < words.size(); ++w) {
    std::vector<std::string> occluded = words;
    occluded[w] = mask;
    v1::CrossAttentionRequest masked = cross;
    masked.set_query(absl::StrJoin(occluded, " "));
    absl::StatusOr<CrossAttentionResult> drop = client->CrossAttention(masked);
    ASSERT_TRUE(drop.ok()) << drop.status();
    ASSERT_TRUE(drop->documents[0].relevance_score.has_value());
    // Token 0 is the template's first special token.
    EXPECT_NEAR(attributed->occlusion(static_cast<int>(w) + 1),
                score - *drop->documents[0].relevance_score, 1e-4)
        << words[w];
  }
}

// tests/data/make_tiny_mpnet.py's MPNet cross-encoder: its tokenizer.json's template
// (<s> A </s> </s> B </s>) and the relative position bias in every layer; occlusion writes its
// <mask>, not the BERT [MASK] its vocabulary also holds.
TEST(FamilyServedTest, MpnetAttentionOfEveryLayerAndHeadAndTheScoreAreThePyTorchReferences) {
  ExpectServedAsTheReference("mpnet", TestDataDir() + "/tiny-mpnet", {"capital", "of", "france"},
                             "paris is the capital", /*max_positions=*/62, /*mask=*/"<mask>");
}

// tests/data/make_tiny_electra.py's ELECTRA cross-encoder: embeddings projected to the layers'
// width, the GELU head.
TEST(FamilyServedTest, ElectraAttentionOfEveryLayerAndHeadAndTheScoreAreThePyTorchReferences) {
  ExpectServedAsTheReference("electra", TestDataDir() + "/tiny-electra",
                             {"capital", "of", "france"}, "paris is the capital",
                             /*max_positions=*/64, /*mask=*/"[MASK]");
}

TEST_F(ServiceTest, CrossAttentionForDecoderPutsTheDocumentFirst) {
  const Reference& ref = Ref("llama");
  v1::CrossAttentionRequest request;
  request.set_model("llama");
  request.set_query("Who is Lily?");
  request.add_documents("Lily was a little girl who liked to play.");
  absl::StatusOr<CrossAttentionResult> result = client_->CrossAttention(request);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->documents.size(), 1u);
  const DocumentAttentionResult& document = result->documents[0];
  ASSERT_FALSE(document.query_positions.empty());
  ASSERT_FALSE(document.document_positions.empty());
  // The query comes after the document so that, under the causal mask, it can attend to it.
  EXPECT_GT(document.query_positions.front(), document.document_positions.back());
  EXPECT_TRUE(document.logits.empty());
  EXPECT_FALSE(document.relevance_score.has_value());
  // The block equals the engine's attention over the joint input the server reports.
  Encoding encoding;
  for (int i = 0; i < document.tokens.input_ids_size(); ++i) {
    encoding.input_ids.push_back(document.tokens.input_ids(i));
    encoding.token_type_ids.push_back(0);
  }
  const torch::Tensor all = torch::stack(ref.Forward(encoding).attentions).select(1, 0);
  const torch::Tensor q = torch::tensor(
      std::vector<int64_t>(document.query_positions.begin(), document.query_positions.end()));
  const torch::Tensor k = torch::tensor(
      std::vector<int64_t>(document.document_positions.begin(), document.document_positions.end()));
  EXPECT_TRUE(TensorNear(document.query_to_document, all.index_select(2, q).index_select(3, k)));
  // And the reported tokens are the tokenizer's own for the document and the query.
  v1::TokenizationOptions no_specials;
  no_specials.set_skip_special_tokens(true);
  const Encoding doc_tokens = ref.Encode(request.documents(0), std::nullopt, no_specials);
  const Encoding query_tokens = ref.Encode(request.query(), std::nullopt, no_specials);
  ASSERT_EQ(document.document_positions.size(), doc_tokens.size());
  ASSERT_EQ(document.query_positions.size(), query_tokens.size());
  for (size_t i = 0; i < doc_tokens.size(); ++i) {
    EXPECT_EQ(document.tokens.input_ids(document.document_positions[i]), doc_tokens.input_ids[i]);
  }
  for (size_t i = 0; i < query_tokens.size(); ++i) {
    EXPECT_EQ(document.tokens.input_ids(document.query_positions[i]), query_tokens.input_ids[i]);
  }
}

}  // namespace
}  // namespace attnscope::testing

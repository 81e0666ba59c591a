// Teacher-forced attention of an encoder-decoder through a real attnscope-server on loopback:
// GetAttention with decoder_text on tests/data/tiny-marian returns the encoder's self-attention,
// the decoder's causal self-attention and the cross-attention equal to the PyTorch reference of
// tests/data/make_encoder_decoder.py (its "texts" case: the Marian tokenizer's encoding of a
// source and a target text, make_marian_tokenizer.py); the selection options shape all three;
// StreamAttention, HTTP and the CLI give the same; bad input is INVALID_ARGUMENT naming the field.
#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;

std::string MarianDir() { return TestDataDir() + "/tiny-marian"; }

json ReadJson(const std::string& path) {
  std::ifstream file(path);
  std::stringstream bytes;
  bytes << file.rdbuf();
  return json::parse(bytes.str());
}

// The reference's "texts" case: input_ids, decoder_input_ids and [layer][batch][head][q][k]
// attentions in float64.
const json& Golden() {
  static const json* golden = new json(ReadJson(MarianDir() + "/golden.json")["texts"]);
  return *golden;
}

const json& MarianConfig() {
  static const json* config = new json(ReadJson(MarianDir() + "/config.json"));
  return *config;
}

// Checks a decoded [layer, head, query, key] tensor against the reference's
// [layer][0][head][query][key], with the answer's layer and head selection and window offsets.
void ExpectReference(const DecodedTensor& got, const json& expected,
                     const std::vector<int32_t>& layers, const std::vector<int32_t>& heads,
                     int64_t query_start, int64_t key_start) {
  ASSERT_EQ(got.shape.size(), 4u);
  ASSERT_EQ(got.shape[0], static_cast<int64_t>(layers.size()));
  ASSERT_EQ(got.shape[1], static_cast<int64_t>(heads.size()));
  double worst = 0;
  for (int64_t l = 0; l < got.shape[0]; ++l) {
    for (int64_t h = 0; h < got.shape[1]; ++h) {
      for (int64_t q = 0; q < got.shape[2]; ++q) {
        for (int64_t k = 0; k < got.shape[3]; ++k) {
          const double want =
              expected[layers[l]][0][heads[h]][query_start + q][key_start + k].get<double>();
          const float value =
              got.values[((l * got.shape[1] + h) * got.shape[2] + q) * got.shape[3] + k];
          worst = std::max(worst, std::abs(value - want));
        }
      }
    }
  }
  EXPECT_LE(worst, 1e-5);
}

std::vector<int64_t> Ids(const v1::Tokens& tokens) {
  return {tokens.input_ids().begin(), tokens.input_ids().end()};
}

class Seq2SeqAttentionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ServerProcess::Options options;
    options.models = {"marian=" + MarianDir(), "bert=" + TinyBertDir()};
    options.extra_flags = {"--dashboard_dir="};
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    client_ = server_->NewClient().release();
  }
  static void TearDownTestSuite() {
    delete client_;
    delete server_;
  }

  static v1::GetAttentionRequest Request() {
    v1::GetAttentionRequest request;
    request.set_model("marian");
    request.set_text(Golden()["source_text"].get<std::string>());
    request.set_decoder_text(Golden()["target_text"].get<std::string>());
    return request;
  }

  static ServerProcess* server_;
  static Client* client_;
};

ServerProcess* Seq2SeqAttentionTest::server_ = nullptr;
Client* Seq2SeqAttentionTest::client_ = nullptr;

TEST_F(Seq2SeqAttentionTest, ModelInfoDescribesTheDecoder) {
  absl::StatusOr<v1::ModelInfo> info = client_->GetModelInfo("marian");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->architecture(), "marian");
  EXPECT_TRUE(info->is_encoder_decoder());
  EXPECT_EQ(info->decoder_layers(), 2);
  EXPECT_EQ(info->decoder_attention_heads(), 4);
  EXPECT_EQ(info->tokenizer_kind(), "sentencepiece");
}

TEST_F(Seq2SeqAttentionTest, TeacherForcedAttentionEqualsTheReference) {
  absl::StatusOr<AttentionResult> result = client_->GetAttention(Request());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(Ids(result->tokens), Golden()["input_ids"][0].get<std::vector<int64_t>>());
  ASSERT_TRUE(result->decoder.has_value());
  const AttentionResult::Decoder& decoder = *result->decoder;
  EXPECT_EQ(Ids(decoder.tokens), Golden()["decoder_input_ids"][0].get<std::vector<int64_t>>());
  // The start token is special (no offsets); the rest are the target's, with their text.
  EXPECT_EQ(decoder.tokens.tokens(0), "<pad>");
  EXPECT_EQ(decoder.tokens.special_tokens_mask(0), 1);
  EXPECT_EQ(decoder.tokens.original_texts(1), "Ch");
  // What each position writes: transformers' labels, from which the input is shifted right.
  std::vector<int64_t> labels = Golden()["decoder_input_ids"][0].get<std::vector<int64_t>>();
  labels.erase(labels.begin());
  labels.push_back(MarianConfig()["eos_token_id"].get<int64_t>());
  EXPECT_EQ(Ids(decoder.labels), labels);
  EXPECT_EQ(decoder.labels.tokens(0), decoder.tokens.tokens(1));
  EXPECT_EQ(decoder.labels.original_texts(0), "Ch");
  EXPECT_EQ(decoder.labels.tokens(decoder.labels.tokens_size() - 1), "</s>");
  EXPECT_EQ(decoder.labels.special_tokens_mask(decoder.labels.tokens_size() - 1), 1);
  EXPECT_EQ(decoder.layers, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(decoder.heads, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(decoder.attentions.dim_names,
            (std::vector<std::string>{"layer", "head", "decoder_token", "decoder_token"}));
  EXPECT_EQ(decoder.cross_attentions.dim_names,
            (std::vector<std::string>{"layer", "head", "decoder_token", "encoder_token"}));
  ExpectReference(result->attentions, Golden()["encoder_attentions"], result->layers, result->heads,
                  0, 0);
  ExpectReference(decoder.attentions, Golden()["decoder_attentions"], decoder.layers, decoder.heads,
                  0, 0);
  ExpectReference(decoder.cross_attentions, Golden()["cross_attentions"], decoder.layers,
                  decoder.heads, 0, 0);
}

TEST_F(Seq2SeqAttentionTest, SelectionWindowsAndTopKApplyToEveryBlock) {
  v1::GetAttentionRequest request = Request();
  request.add_layers(-1);
  request.add_heads(2);
  request.add_heads(0);
  request.mutable_window()->set_key_start(1);
  request.mutable_decoder_window()->set_query_start(2);
  request.mutable_decoder_window()->set_query_end(5);
  absl::StatusOr<AttentionResult> result = client_->GetAttention(request);
  ASSERT_TRUE(result.ok()) << result.status();
  const AttentionResult::Decoder& decoder = *result->decoder;
  EXPECT_EQ(decoder.layers, (std::vector<int32_t>{1}));
  EXPECT_EQ(decoder.heads, (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(decoder.query_start, 2);
  EXPECT_EQ(decoder.attentions.shape, (std::vector<int64_t>{1, 2, 3, 9}));
  EXPECT_EQ(decoder.cross_attentions.shape, (std::vector<int64_t>{1, 2, 3, 6}));
  ExpectReference(decoder.attentions, Golden()["decoder_attentions"], decoder.layers, decoder.heads,
                  2, 0);
  ExpectReference(decoder.cross_attentions, Golden()["cross_attentions"], decoder.layers,
                  decoder.heads, 2, 1);

  // top_k: each decoder row's 2 most attended source tokens, absolute encoder positions.
  v1::GetAttentionRequest top = Request();
  top.set_top_k(2);
  top.set_head_aggregation(v1::HEAD_AGGREGATION_MEAN);
  absl::StatusOr<AttentionResult> sparse = client_->GetAttention(top);
  ASSERT_TRUE(sparse.ok()) << sparse.status();
  ASSERT_TRUE(sparse->decoder->cross_top_k_indices.has_value());
  const DecodedTensor& values = sparse->decoder->cross_attentions;
  const DecodedTensor& indices = *sparse->decoder->cross_top_k_indices;
  EXPECT_EQ(values.shape, (std::vector<int64_t>{2, 1, 9, 2}));
  const json& cross = Golden()["cross_attentions"];
  for (int64_t row = 0; row < 9; ++row) {
    // The reference's mean over heads of layer 0, row `row`: its largest entry comes first.
    std::vector<double> mean(7, 0.0);
    for (int head = 0; head < 4; ++head) {
      for (int key = 0; key < 7; ++key) mean[key] += cross[0][0][head][row][key].get<double>() / 4;
    }
    const int32_t first = indices.int_values[row * 2];
    EXPECT_NEAR(values.values[row * 2], mean[first], 1e-5);
    EXPECT_EQ(mean[first], *std::max_element(mean.begin(), mean.end())) << "row " << row;
  }
}

TEST_F(Seq2SeqAttentionTest, StreamAndHttpGiveTheSameAnswer) {
  absl::StatusOr<AttentionResult> unary = client_->GetAttention(Request());
  absl::StatusOr<AttentionResult> stream = client_->StreamAttention(Request());
  ASSERT_TRUE(unary.ok() && stream.ok()) << stream.status();
  ASSERT_TRUE(stream->decoder.has_value());
  EXPECT_EQ(stream->attentions.values, unary->attentions.values);
  EXPECT_EQ(stream->decoder->attentions.values, unary->decoder->attentions.values);
  EXPECT_EQ(stream->decoder->cross_attentions.values, unary->decoder->cross_attentions.values);
  EXPECT_EQ(stream->decoder->cross_attentions.shape, unary->decoder->cross_attentions.shape);
  EXPECT_EQ(Ids(stream->decoder->tokens), Ids(unary->decoder->tokens));

  httplib::Client http("127.0.0.1", server_->http_port());
  const json body = {{"model", "marian"},
                     {"text", Golden()["source_text"]},
                     {"decoder_text", Golden()["target_text"]}};
  const httplib::Result response =
      http.Post("/attnscope.v1.AttentionService/GetAttention", body.dump(), "application/json");
  ASSERT_TRUE(response);
  ASSERT_EQ(response->status, 200) << response->body;
  const json answer = json::parse(response->body);
  EXPECT_EQ(answer["decoderTokens"]["tokens"][0], "<pad>");
  EXPECT_EQ(answer["crossAttentions"]["shape"],
            json::array({"2", "4", "9", "7"}));  // int64 as JSON strings (proto JSON mapping)
}

TEST_F(Seq2SeqAttentionTest, CliPrintsCrossAttention) {
  const CommandResult text =
      RunCommand({CliBinary(), "attention", "--server", server_->address(), "--model", "marian",
                  "--text", Golden()["source_text"].get<std::string>(), "--decoder_text",
                  Golden()["target_text"].get<std::string>(), "--layers=1", "--aggregate=mean",
                  "--format", "text", "--top", "1"});
  ASSERT_EQ(text.exit_code, 0) << text.stderr_text;
  EXPECT_THAT(text.stdout_text, HasSubstr("encoder self-attention, layer 1, mean of heads 0-3:"));
  EXPECT_THAT(text.stdout_text, HasSubstr("decoder self-attention, layer 1, mean of heads 0-3:"));
  EXPECT_THAT(text.stdout_text, HasSubstr("cross-attention, layer 1, mean of heads 0-3:"));
  // The decoder self-attention's rows are the tokens read, from the start token; the
  // cross-attention's the tokens written, to the end-of-sequence token.
  const std::string self_rows = text.stdout_text.substr(
      text.stdout_text.find("decoder self-attention, layer 1, mean of heads 0-3:\n"));
  EXPECT_EQ(self_rows.substr(self_rows.find('\n') + 1, 5), "<pad>");
  const std::string cross_rows = text.stdout_text.substr(
      text.stdout_text.find("cross-attention, layer 1, mean of heads 0-3:\n"));
  EXPECT_EQ(cross_rows.substr(cross_rows.find('\n') + 1, 2), "Ch");
  EXPECT_THAT(cross_rows, Not(HasSubstr("<pad>")));
  EXPECT_THAT(cross_rows, HasSubstr("\n</s>"));
  const std::string png = absl::StrCat(::testing::TempDir(), "/cross.png");
  const CommandResult heatmap = RunCommand(
      {CliBinary(), "heatmap", "--server", server_->address(), "--model", "marian", "--text",
       Golden()["source_text"].get<std::string>(), "--decoder_text",
       Golden()["target_text"].get<std::string>(), "--layers=0", "--heads=0", "--out", png});
  ASSERT_EQ(heatmap.exit_code, 0) << heatmap.stderr_text;
  EXPECT_EQ(json::parse(heatmap.stdout_text)["panels"], 1);
}

// Generate with a source text: the greedy translation and each token's cross-attention equal
// the reference's greedy search from the same source ids (make_encoder_decoder.py).
TEST_F(Seq2SeqAttentionTest, GenerateTranslatesTheSourceText) {
  std::ifstream file(MarianDir() + "/generation.json");
  std::stringstream bytes;
  bytes << file.rdbuf();
  const std::vector<int64_t> source = Golden()["input_ids"][0];
  const json cases = json::parse(bytes.str())["cases"];
  json expected;
  for (const json& c : cases) {
    if (c["method"] == "greedy" && c["source_ids"].get<std::vector<int64_t>>() == source) {
      expected = c;
    }
  }
  ASSERT_FALSE(expected.is_null());
  v1::GenerateRequest request;
  request.set_model("marian");
  request.set_prompt(Golden()["source_text"].get<std::string>());
  request.set_max_new_tokens(expected["max_new_tokens"].get<int>());
  request.set_output_attentions(true);
  absl::StatusOr<GenerateResult> result = client_->Generate(request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->header.encoder_decoder());
  EXPECT_EQ(Ids(result->header.prompt_tokens()), source);
  ASSERT_EQ(result->tokens.size(), expected["tokens"].size());
  for (size_t i = 0; i < result->tokens.size(); ++i) {
    const json& want = expected["tokens"][i];
    const GeneratedTokenResult& got = result->tokens[i];
    EXPECT_EQ(got.token.id(), want["id"].get<int64_t>()) << "token " << i;
    EXPECT_EQ(got.token.position(), static_cast<int32_t>(i) + 1);
    EXPECT_NEAR(got.token.logprob(), want["logprob"].get<double>(), 1e-4);
    // [layer, head, encoder_token]: the decoder's cross-attention over the source.
    ASSERT_TRUE(got.attention.has_value());
    ASSERT_EQ(got.attention->shape, (std::vector<int64_t>{2, 4, 7}));
    for (int64_t layer = 0; layer < 2; ++layer) {
      for (int64_t head = 0; head < 4; ++head) {
        for (int64_t key = 0; key < 7; ++key) {
          EXPECT_NEAR(got.attention->values[(layer * 4 + head) * 7 + key],
                      want["attention"][layer][head][key].get<double>(), 1e-5);
        }
      }
    }
  }
  request.set_prompt("");
  const absl::Status empty = client_->Generate(request).status();
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.message(), HasSubstr("prompt: expected a non-empty UTF-8 text"));
}

TEST_F(Seq2SeqAttentionTest, BadInputIsInvalidArgumentNamingTheField) {
  struct Case {
    std::function<void(v1::GetAttentionRequest&)> change;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](v1::GetAttentionRequest& r) { r.set_model("bert"); },
       "decoder_text: model 'bert' (model_type 'bert') is not an encoder-decoder"},
      {[](v1::GetAttentionRequest& r) { r.set_decoder_text(""); },
       "decoder_text: expected a non-empty UTF-8 text"},
      {[](v1::GetAttentionRequest& r) { r.set_decoder_text("   "); },
       "decoder_text: expected text that yields at least one token"},
      {[](v1::GetAttentionRequest& r) { r.set_decoder_text("ab\xff"); }, "UTF-8"},
      {[](v1::GetAttentionRequest& r) {
         std::string long_text;
         for (int i = 0; i < 100; ++i) long_text += "a ";
         r.set_decoder_text(long_text);
       },
       "decoder_text: expected at most 64 tokens"},
      {[](v1::GetAttentionRequest& r) { r.set_rollout(true); }, "rollout with decoder_text"},
      {[](v1::GetAttentionRequest& r) { r.set_include_scores(true); },
       "include_scores with decoder_text"},
      {[](v1::GetAttentionRequest& r) { r.add_layers(2); },
       "layer 2: expected an index in [-2, 2)"},
      {[](v1::GetAttentionRequest& r) { r.mutable_decoder_window()->set_query_end(50); },
       "fix `decoder_window.query_start` / `decoder_window.query_end`"},
      // A window of no decoder would be ignored.
      {[](v1::GetAttentionRequest& r) {
         r.clear_decoder_text();
         r.mutable_decoder_window()->set_query_start(1);
       },
       "decoder_window: expected only with decoder_text"},
  };
  for (const Case& c : cases) {
    v1::GetAttentionRequest request = Request();
    c.change(request);
    const absl::Status status = client_->GetAttention(request).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(status.message(), HasSubstr(c.message));
  }
  // The server keeps serving.
  EXPECT_TRUE(client_->GetAttention(Request()).ok());
}

}  // namespace
}  // namespace attnscope::testing

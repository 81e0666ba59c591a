// What displays read besides attention, through the client library against a real server: each
// token's original text, how the tokenizer normalises, word-level attention (checked against word
// sums computed here from the token-level answer), checkpoint tensors and training records.
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kVietnamese[] = "Tôi yêu Việt Nam quá";
constexpr char kKorean[] = "나는 오늘 랭체인을 공부한다";

class DisplayDataTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ServerProcess::Options options;
    options.models = {"bert=" + TinyBertDir(), "llama=" + Stories260kDir(),
                      "default=" + DefaultModelDir()};
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() { delete server_; }
  void SetUp() override { client_ = server_->NewClient(); }

  static ServerProcess* server_;
  std::unique_ptr<Client> client_;
};

ServerProcess* DisplayDataTest::server_ = nullptr;

TEST_F(DisplayDataTest, OriginalTextsAreTheCallersTextAtEachTokensBytes) {
  v1::TokenizeRequest request;
  request.set_model("default");
  request.set_text(kVietnamese);
  request.set_text_pair(kKorean);
  absl::StatusOr<v1::TokenizeResponse> response = client_->Tokenize(request);
  ASSERT_TRUE(response.ok()) << response.status();
  const v1::Tokens& tokens = response->tokens();
  ASSERT_EQ(tokens.original_texts_size(), tokens.tokens_size());
  std::string first;
  std::string second;
  for (int i = 0; i < tokens.tokens_size(); ++i) {
    const std::string& text = tokens.original_texts(i);
    if (tokens.sequence_ids(i) < 0) {
      EXPECT_EQ(text, "") << "special token " << tokens.tokens(i);
      continue;
    }
    const std::string& source = tokens.sequence_ids(i) == 0 ? request.text() : request.text_pair();
    const v1::Offset& bytes = tokens.byte_offsets(i);
    EXPECT_EQ(text, source.substr(bytes.start(), bytes.end() - bytes.start()));
    (tokens.sequence_ids(i) == 0 ? first : second) += text;
  }
  EXPECT_EQ(first, "TôiyêuViệtNamquá");
  // The default model keeps Hangul syllables whole ("나" "##는"), so each token shows its own
  // syllables and together they give the text back.
  EXPECT_EQ(second, "나는오늘랭체인을공부한다");
}

TEST_F(DisplayDataTest, ModelInfoSaysHowTheTokenizerNormalises) {
  absl::StatusOr<v1::ModelInfo> bert = client_->GetModelInfo("default");
  ASSERT_TRUE(bert.ok()) << bert.status();
  // checkpoints/default/tokenizer.json: normalizer Sequence [NFC, BertNormalizer(lowercase,
  // strip_accents false)].
  EXPECT_TRUE(bert->normalization().lowercase());
  EXPECT_FALSE(bert->normalization().strip_accents());
  EXPECT_EQ(bert->normalization().unicode_form(), "NFC");
  EXPECT_THAT(bert->normalization().description(), HasSubstr("'Tôi' becomes 'tôi'"));

  absl::StatusOr<v1::ModelInfo> llama = client_->GetModelInfo("llama");
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_FALSE(llama->normalization().lowercase());
  EXPECT_FALSE(llama->normalization().strip_accents());
  // llama2.c's tokenizer.model is trained with SentencePiece's "identity" normalizer.
  EXPECT_EQ(llama->normalization().unicode_form(), "");
  EXPECT_THAT(llama->normalization().description(), HasSubstr("'identity'"));
}

// Word-level attention from the token-level answer, as Clark et al. 2019 define it: mean over a
// word's rows, sum over its columns.
std::vector<float> WordAttention(const std::vector<float>& tokens, int64_t length,
                                 const std::vector<std::pair<int, int>>& words) {
  const size_t count = words.size();
  std::vector<float> out(count * count, 0);
  for (size_t q = 0; q < count; ++q) {
    for (size_t k = 0; k < count; ++k) {
      double sum = 0;
      for (int i = words[q].first; i < words[q].second; ++i) {
        for (int j = words[k].first; j < words[k].second; ++j) sum += tokens[i * length + j];
      }
      out[q * count + k] = static_cast<float>(sum / (words[q].second - words[q].first));
    }
  }
  return out;
}

TEST_F(DisplayDataTest, WordLevelAttentionAveragesRowsAndSumsColumns) {
  v1::GetAttentionRequest request;
  request.set_model("default");
  request.set_text(kKorean);
  request.add_layers(-1);
  request.add_heads(1);
  absl::StatusOr<AttentionResult> tokens = client_->GetAttention(request);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  const int64_t length = tokens->tokens.tokens_size();

  request.set_aggregate_words(true);
  request.set_rollout(true);
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "StreamAttention" : "GetAttention");
    absl::StatusOr<AttentionResult> words =
        stream ? client_->StreamAttention(request) : client_->GetAttention(request);
    ASSERT_TRUE(words.ok()) << words.status();
    std::vector<std::string> texts;
    std::vector<std::pair<int, int>> spans;
    for (const v1::Word& word : words->words) {
      texts.push_back(word.text());
      spans.emplace_back(word.token_start(), word.token_end());
    }
    EXPECT_THAT(texts, ElementsAre("[CLS]", "나는", "오늘", "랭체인을", "공부한다", "[SEP]"));
    // Every token belongs to one word, in order.
    ASSERT_EQ(spans.front().first, 0);
    ASSERT_EQ(spans.back().second, length);
    for (size_t i = 1; i < spans.size(); ++i) EXPECT_EQ(spans[i].first, spans[i - 1].second);
    EXPECT_THAT(words->attentions.dim_names,
                ElementsAre("layer", "head", "query_word", "key_word"));
    EXPECT_THAT(words->attentions.shape, ElementsAre(1, 1, 6, 6));
    const std::vector<float> expected = WordAttention(tokens->attentions.values, length, spans);
    ASSERT_EQ(words->attentions.values.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_NEAR(words->attentions.values[i], expected[i], 1e-6) << "cell " << i;
    }
    for (int q = 0; q < 6; ++q) {
      double row = 0;
      for (int k = 0; k < 6; ++k) row += words->attentions.values[q * 6 + k];
      EXPECT_NEAR(row, 1.0, 1e-5) << "rows of word-level attention still sum to 1";
    }
    ASSERT_TRUE(words->rollout.has_value());
    EXPECT_THAT(words->rollout->shape, ElementsAre(6, 6));
  }

  // Windows and top-k count words.
  request.set_rollout(false);
  request.mutable_window()->set_query_start(3);
  request.mutable_window()->set_query_end(4);
  request.set_top_k(2);
  absl::StatusOr<AttentionResult> top = client_->GetAttention(request);
  ASSERT_TRUE(top.ok()) << top.status();
  EXPECT_THAT(top->attentions.shape, ElementsAre(1, 1, 1, 2));
  EXPECT_EQ(top->query_start, 3);
  ASSERT_TRUE(top->top_k_indices.has_value());
  EXPECT_THAT(top->top_k_indices->dim_names, ElementsAre("layer", "head", "query_word", "k"));

  request.set_top_k(0);
  request.set_include_scores(true);
  absl::StatusOr<AttentionResult> refused = client_->GetAttention(request);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("aggregate_words"));
}

TEST_F(DisplayDataTest, ParametersAreTheCheckpointsTensors) {
  absl::StatusOr<std::vector<v1::ParameterInfo>> parameters = client_->ListParameters("default");
  ASSERT_TRUE(parameters.ok()) << parameters.status();
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(DefaultModelDir());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  std::vector<std::string> names;
  for (const v1::ParameterInfo& parameter : *parameters) names.push_back(parameter.name());
  EXPECT_EQ(names, (*checkpoint)->Names());

  const std::string name = "bert.embeddings.position_embeddings.weight";
  v1::GetParameterRequest request;
  request.set_model("default");
  request.set_name(name);
  request.set_row_start(5);
  request.set_row_end(9);
  absl::StatusOr<ParameterResult> rows = client_->GetParameter(request);
  ASSERT_TRUE(rows.ok()) << rows.status();
  const torch::Tensor expected = (*checkpoint)->Get(name).narrow(0, 5, 4).contiguous();
  EXPECT_EQ(rows->row_start, 5);
  EXPECT_THAT(rows->tensor.dim_names, ElementsAre("row", "column"));
  ASSERT_EQ(rows->tensor.shape, expected.sizes().vec());
  EXPECT_EQ(rows->tensor.values, std::vector<float>(expected.data_ptr<float>(),
                                                    expected.data_ptr<float>() + expected.numel()));

  request.set_name("embeddings.position_embeddings.weight");
  absl::StatusOr<ParameterResult> missing = client_->GetParameter(request);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("did you mean " + name));

  request.set_name(name);
  request.set_row_end(1000);
  EXPECT_EQ(client_->GetParameter(request).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(DisplayDataTest, TrainingRecordHasTheRecordedSteps) {
  absl::StatusOr<v1::TrainingRecord> record = client_->GetTrainingRecord("default");
  ASSERT_TRUE(record.ok()) << record.status();
  std::ifstream file(DefaultModelDir() + "/training_record.json");
  std::stringstream text;
  text << file.rdbuf();
  const nlohmann::json json = nlohmann::json::parse(text.str());
  EXPECT_EQ(record->record_json(), text.str());
  // The trainer's history: the mean losses of every 50 steps and the learning rate, to the end.
  const nlohmann::json& history = json["history"];
  ASSERT_EQ(record->points_size(), static_cast<int>(history.size()));
  for (size_t i = 0; i < history.size(); ++i) {
    EXPECT_EQ(record->points(i).step(), history[i]["step"].get<int64_t>());
    EXPECT_EQ(record->points(i).values().at("loss"), history[i]["loss"].get<double>());
    EXPECT_EQ(record->points(i).values().at("learning_rate"),
              history[i]["learning_rate"].get<double>());
  }
  EXPECT_EQ(record->points(0).step(), 50);
  EXPECT_EQ(record->points(record->points_size() - 1).step(), json["steps_done"].get<int64_t>());

  EXPECT_EQ(client_->GetTrainingRecord("bert").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace attnscope::testing

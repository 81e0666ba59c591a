// The committed default model (checkpoints/default), evaluated with the inference engine only
// (LoadTransformerModel + LoadTokenizer, never the training code) on the held-out set
// tests/data/default-model-heldout.jsonl: help pages the training never saw, in English, Vietnamese
// and Korean. The figures printed here are the ones in checkpoints/default/MODEL_CARD.md.
// ATTNSCOPE_EVAL_MODEL_DIR evaluates another checkpoint (a candidate being trained) instead.
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/file_util.h"
#include "gtest/gtest.h"
#include "models/architectures/transformer.h"
#include "models/checkpoint/checkpoint.h"
#include "models/tokenizers/tokenizer.h"
#include "models/tokenizers/unicode.h"
#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

constexpr int64_t kMaxLength = 128;
constexpr int64_t kBatch = 32;
const char* const kLanguages[] = {"en", "vi", "ko"};

std::string DefaultModelDir() {
  const char* override_dir = std::getenv("ATTNSCOPE_EVAL_MODEL_DIR");
  return override_dir != nullptr ? std::string(override_dir)
                                 : testing::TestDataDir() + "/../../checkpoints/default";
}

class DefaultModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string model_dir = DefaultModelDir();
    if (!FileExists(JoinPath(model_dir, "model.safetensors"))) {
      GTEST_SKIP() << model_dir << " has no trained weights yet: scripts/make_default_model.sh "
                   << "makes them";
    }
    ModelOptions options;
    options.model_dir = model_dir;
    options.intra_op_threads = 2;
    absl::StatusOr<std::unique_ptr<TransformerModel>> model = LoadTransformerModel(options);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = model->release();
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(model_dir);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = tokenizer->release();
    absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(model_dir);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    checkpoint_ = checkpoint->release();
    heldout_ = new std::vector<nlohmann::json>(
        testing::ReadJsonLines(testing::TestDataDir() + "/default-model-heldout.jsonl"));
  }

  // SetUpTestSuite skipped (no weights) or failed (reported there): nothing to evaluate.
  void SetUp() override {
    if (model_ == nullptr || tokenizer_ == nullptr || checkpoint_ == nullptr) GTEST_SKIP();
  }

  static void TearDownTestSuite() {
    delete model_;
    delete tokenizer_;
    delete checkpoint_;
    delete heldout_;
  }

  // Runs encodings (already padded to one length) through the engine.
  static ForwardOutput Run(const std::vector<Encoding>& encodings, bool attentions) {
    const auto rows = static_cast<int64_t>(encodings.size());
    const auto cols = static_cast<int64_t>(encodings[0].size());
    ForwardInput input;
    input.input_ids = torch::empty({rows, cols}, torch::kLong);
    input.attention_mask = torch::empty({rows, cols}, torch::kLong);
    input.token_type_ids = torch::empty({rows, cols}, torch::kLong);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        input.input_ids[r][c] = encodings[r].input_ids[c];
        input.attention_mask[r][c] = encodings[r].attention_mask[c];
        input.token_type_ids[r][c] = encodings[r].token_type_ids[c];
      }
    }
    ForwardOptions options;
    options.output_attentions = attentions;
    absl::StatusOr<ForwardOutput> output = model_->Forward(input, options);
    EXPECT_TRUE(output.ok()) << output.status();
    return output.ok() ? *std::move(output) : ForwardOutput();
  }

  static std::vector<nlohmann::json> Items(const std::string& kind, const std::string& lang) {
    std::vector<nlohmann::json> out;
    for (const nlohmann::json& item : *heldout_) {
      if (item["kind"] == kind && item["lang"] == lang) out.push_back(item);
    }
    return out;
  }

  // Pads a group of encodings to their longest.
  static void PadAll(std::vector<Encoding>* encodings) {
    size_t longest = 0;
    for (const Encoding& e : *encodings) longest = std::max(longest, e.size());
    for (Encoding& e : *encodings) {
      while (e.size() < longest) {
        e.input_ids.push_back(tokenizer_->pad_token_id());
        e.attention_mask.push_back(0);
        e.token_type_ids.push_back(0);
        e.tokens.push_back("[PAD]");
        e.special_tokens_mask.push_back(1);
      }
    }
  }

  // Relevance logits of `query` with each of `documents`, in one forward pass.
  static std::vector<float> Scores(const std::string& query,
                                   const std::vector<std::string>& documents) {
    std::vector<Encoding> encodings;
    for (const std::string& document : documents) {
      absl::StatusOr<Encoding> encoding = tokenizer_->EncodePair(query, document, Truncating());
      EXPECT_TRUE(encoding.ok()) << encoding.status();
      if (!encoding.ok()) return {};
      encodings.push_back(*std::move(encoding));
    }
    PadAll(&encodings);
    const torch::Tensor logits = Run(encodings, /*attentions=*/false).logits.select(1, 0);
    return std::vector<float>(logits.data_ptr<float>(), logits.data_ptr<float>() + logits.numel());
  }

  static EncodeOptions Truncating() {
    EncodeOptions options;
    options.truncation = Truncation::kLongestFirst;
    options.max_length = kMaxLength;
    return options;
  }

  static TransformerModel* model_;
  static Tokenizer* tokenizer_;
  static Checkpoint* checkpoint_;
  static std::vector<nlohmann::json>* heldout_;
};

TransformerModel* DefaultModelTest::model_ = nullptr;
Tokenizer* DefaultModelTest::tokenizer_ = nullptr;
Checkpoint* DefaultModelTest::checkpoint_ = nullptr;
std::vector<nlohmann::json>* DefaultModelTest::heldout_ = nullptr;

// The sentences of README's tutorials, as a Vietnamese or Korean reader must be able to read their
// tokens: accents kept, whole Hangul syllables (no conjoining jamo), every piece a piece of the
// lower-cased text.
TEST(DefaultModelTokenizerTest, TutorialSentencesTokenizeIntoReadablePieces) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(DefaultModelDir());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<std::pair<std::string, std::vector<std::string>>> sentences = {
      {"Tôi yêu Việt Nam quá", {"tôi", "yêu", "việt", "nam"}},
      {"나는 오늘 랭체인을 공부한다", {"랭", "##체", "##인", "##을"}},
      {"랭체인 뭐야", {"랭", "##체"}},
      {"오늘 저녁에는 김치찌개를 먹었다", {}},
      {"랭체인은 대규모 언어 모델로 애플리케이션을 만드는 프레임워크입니다", {"랭"}},
      {"làm sao chèn bảng", {"làm", "sao", "chèn", "bảng"}},
      {"표를 어떻게 넣나요", {}},
  };
  for (const auto& [sentence, whole_words] : sentences) {
    absl::StatusOr<TokenizedText> tokens = (*tokenizer)->Tokenize(sentence);
    ASSERT_TRUE(tokens.ok()) << tokens.status();
    std::string joined;
    std::string shown;
    for (const std::string& token : tokens->tokens) {
      shown += token + " ";
      EXPECT_NE(token, "[UNK]") << sentence;
      const std::string piece = token.rfind("##", 0) == 0 ? token.substr(2) : token;
      absl::StatusOr<unicode::DecodedText> decoded = unicode::DecodeUtf8(piece);
      ASSERT_TRUE(decoded.ok());
      for (char32_t c : decoded->code_points) {
        EXPECT_FALSE(c >= 0x1100 && c <= 0x11FF) << "conjoining jamo in '" << token << "'";
        EXPECT_FALSE(c >= 0x0300 && c <= 0x036F) << "combining mark in '" << token << "'";
      }
      joined += token.rfind("##", 0) == 0 ? piece : (joined.empty() ? "" : " ") + piece;
    }
    std::printf("%s -> %s\n", sentence.c_str(), shown.c_str());
    // Pieces glued back give the text, lower-cased (all of these are lower case but "Tôi ... Nam").
    EXPECT_EQ(joined, sentence == "Tôi yêu Việt Nam quá" ? "tôi yêu việt nam quá" : sentence);
    for (const std::string& word : whole_words) {
      EXPECT_NE(std::find(tokens->tokens.begin(), tokens->tokens.end(), word), tokens->tokens.end())
          << "'" << word << "' is not one token of '" << sentence << "'";
    }
  }
}

// Needs only the committed vocabulary, so it runs even before the weights exist.
TEST(DefaultModelTokenizerTest, FewUnknownTokensInEveryLanguage) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(DefaultModelDir());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<nlohmann::json> heldout =
      testing::ReadJsonLines(testing::TestDataDir() + "/default-model-heldout.jsonl");
  for (const char* lang : kLanguages) {
    int64_t unknown = 0;
    int64_t total = 0;
    for (const nlohmann::json& item : heldout) {
      if (item["lang"] != lang) continue;
      for (const char* field : {"query", "positive", "negative", "text"}) {
        if (!item.contains(field)) continue;
        absl::StatusOr<TokenizedText> tokens =
            (*tokenizer)->Tokenize(item[field].get<std::string>());
        ASSERT_TRUE(tokens.ok()) << tokens.status();
        total += static_cast<int64_t>(tokens->size());
        unknown += std::count(tokens->tokens.begin(), tokens->tokens.end(), "[UNK]");
      }
    }
    const double rate = static_cast<double>(unknown) / static_cast<double>(total);
    std::printf("%s: %lld held-out tokens, unknown %.3f%%\n", lang, static_cast<long long>(total),
                100.0 * rate);
    ASSERT_GT(total, 1000) << lang;
    EXPECT_LE(rate, 0.01) << lang;
  }
}

// The share of held-out (query, positive, negative) items of `kind` whose positive document gets
// the higher relevance logit.
double PairwiseAccuracy(
    const std::vector<nlohmann::json>& items,
    const std::function<torch::Tensor(std::vector<Encoding>&)>& logits_of,
    const std::function<Encoding(const std::string&, const std::string&)>& encode,
    int64_t* correct) {
  *correct = 0;
  for (size_t begin = 0; begin < items.size(); begin += kBatch / 2) {
    std::vector<Encoding> encodings;
    const size_t end = std::min(items.size(), begin + kBatch / 2);
    for (size_t i = begin; i < end; ++i) {
      for (const char* document : {"positive", "negative"}) {
        encodings.push_back(
            encode(items[i]["query"].get<std::string>(), items[i][document].get<std::string>()));
      }
    }
    const torch::Tensor logits = logits_of(encodings);
    for (size_t i = 0; i < end - begin; ++i) {
      *correct += logits[2 * i].item<float>() > logits[2 * i + 1].item<float>();
    }
  }
  return static_cast<double>(*correct) / static_cast<double>(items.size());
}

TEST_F(DefaultModelTest, RanksTheRelevantDocumentFirst) {
  // Headings and titles against help paragraphs ("pair"), and short questions a user types, made
  // from task headings ("question": "how do I insert a table", "làm sao chèn bảng"). The model
  // scores 91.5-96.0% on pairs (90.5-91.5% after stage 1; 90% is what its recipe aims at), and
  // 93.5-95.5% on questions, of which there are only 46-94 per language (one item is 1-2 points),
  // so 85% guards those.
  for (const auto& [kind, min_items, min_accuracy] :
       std::vector<std::tuple<const char*, size_t, double>>{{"pair", 200, 0.90},
                                                            {"question", 40, 0.85}}) {
    for (const char* lang : kLanguages) {
      const std::vector<nlohmann::json> items = Items(kind, lang);
      ASSERT_GE(items.size(), min_items) << kind << " " << lang;
      int64_t correct = 0;
      const double accuracy = PairwiseAccuracy(
          items,
          [](std::vector<Encoding>& encodings) {
            PadAll(&encodings);
            return Run(encodings, /*attentions=*/false).logits.select(1, 0);
          },
          [](const std::string& query, const std::string& document) {
            absl::StatusOr<Encoding> encoding =
                tokenizer_->EncodePair(query, document, Truncating());
            EXPECT_TRUE(encoding.ok()) << encoding.status();
            return encoding.ok() ? *std::move(encoding) : Encoding();
          },
          &correct);
      std::printf("%s %s: relevance pairwise accuracy %.1f%% (%lld/%zu, chance 50%%)\n", kind, lang,
                  100.0 * accuracy, static_cast<long long>(correct), items.size());
      EXPECT_GE(accuracy, min_accuracy) << kind << " " << lang;
    }
  }
}

// Text far from the help pages: tests/data/general-domain-heldout.jsonl, 30 short questions per
// language across six topics (software, weather, food, travel, study, news), each against its
// answer and five answers of the other topics; no training text is copied from it
// (scripts/extract_general_text.py stops if it finds one). After help text alone, the model
// ranks the answer first in 76.7 / 76.7 / 56.7% of the questions (chance 16.7%); with the
// general-domain stage 100 / 96.7 / 100% (MODEL_CARD.md, "General text"). The floor is the 90%
// a general reranker needs: 27 of 30 in every language.
TEST_F(DefaultModelTest, RanksTheAnswerFirstOnGeneralText) {
  const std::vector<nlohmann::json> items =
      testing::ReadJsonLines(testing::TestDataDir() + "/general-domain-heldout.jsonl");
  constexpr int64_t kMinFirst = 27;
  for (const char* lang : kLanguages) {
    int64_t total = 0;
    int64_t first = 0;
    for (const nlohmann::json& item : items) {
      if (item["lang"] != lang) continue;
      std::vector<std::string> documents = {item["relevant"].get<std::string>()};
      for (const nlohmann::json& unrelated : item["unrelated"]) {
        documents.push_back(unrelated.get<std::string>());
      }
      ASSERT_EQ(documents.size(), 6u) << item.dump();
      const std::vector<float> scores = Scores(item["query"].get<std::string>(), documents);
      ASSERT_EQ(scores.size(), documents.size());
      ++total;
      if (std::max_element(scores.begin(), scores.end()) == scores.begin()) {
        ++first;
      } else {
        const auto best = std::max_element(scores.begin() + 1, scores.end());
        std::printf("%s miss: '%s' (answer %.2f; %.2f '%s')\n", lang,
                    item["query"].get<std::string>().c_str(), scores[0], *best,
                    documents[best - scores.begin()].c_str());
      }
    }
    ASSERT_EQ(total, 30) << lang;
    std::printf("general %s: answer ranked first %.1f%% (%lld/%lld, chance 16.7%%)\n", lang,
                100.0 * static_cast<double>(first) / static_cast<double>(total),
                static_cast<long long>(first), static_cast<long long>(total));
    EXPECT_GE(first, kMinFirst) << lang;
  }

  // README's cross-attention tutorial and its Vietnamese and English counterparts, whose names the
  // training text never contains: the answer ranks first, and the unrelated sentence scores below
  // 0 (the logit: judged irrelevant on its own, not only below the answer).
  for (const auto& [query, answer, unrelated] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"랭체인 뭐야", "랭체인은 LLM을 쉽게 다루는 도구", "오늘 날씨가 정말 좋다"},
           {"LangChain là gì",
            "LangChain là một framework để xây dựng ứng dụng với mô hình ngôn ngữ lớn",
            "Hôm nay trời đẹp quá"},
           {"what is LangChain",
            "LangChain is a framework for building applications with large language models",
            "the weather is really nice today"}}) {
    const std::vector<float> scores = Scores(query, {answer, unrelated});
    ASSERT_EQ(scores.size(), 2u);
    std::printf("%s: answer %.3f, unrelated %.3f\n", query.c_str(), scores[0], scores[1]);
    EXPECT_GT(scores[0], scores[1]) << query;
    EXPECT_LT(scores[1], 0.0f) << query;
  }
}

// Masks 15% of each held-out sentence's tokens (a fixed draw), predicts them with the masked-LM
// head stored under cls.predictions.* (applied here to the engine's last hidden state, the decoder
// being the word embeddings) and compares with the best unigram guess: the most frequent of the
// masked tokens themselves, an upper bound of any context-free predictor. "Well above" is
// read as at least twice that bound.
TEST_F(DefaultModelTest, PredictsMaskedTokensFarAboveUnigram) {
  const torch::Tensor dense_w = checkpoint_->Get("cls.predictions.transform.dense.weight");
  const torch::Tensor dense_b = checkpoint_->Get("cls.predictions.transform.dense.bias");
  const torch::Tensor norm_w = checkpoint_->Get("cls.predictions.transform.LayerNorm.weight");
  const torch::Tensor norm_b = checkpoint_->Get("cls.predictions.transform.LayerNorm.bias");
  const torch::Tensor bias = checkpoint_->Get("cls.predictions.bias");
  const torch::Tensor embeddings = checkpoint_->Get("bert.embeddings.word_embeddings.weight");
  ASSERT_TRUE(dense_w.defined() && norm_w.defined() && bias.defined() && embeddings.defined());
  const int64_t mask_id = [&] {
    for (int64_t id = 0; id < tokenizer_->vocab_size(); ++id) {
      if (tokenizer_->IdToToken(id) == "[MASK]") return id;
    }
    return int64_t{-1};
  }();
  ASSERT_GE(mask_id, 0);

  for (const char* lang : kLanguages) {
    const std::vector<nlohmann::json> sentences = Items("sentence", lang);
    ASSERT_GE(sentences.size(), 100u) << lang;
    std::mt19937_64 rng(7);
    std::bernoulli_distribution masked(0.15);
    int64_t correct = 0;
    std::map<int64_t, int64_t> target_counts;
    int64_t targets_total = 0;
    for (size_t begin = 0; begin < sentences.size(); begin += kBatch) {
      std::vector<Encoding> encodings;
      std::vector<std::vector<std::pair<int64_t, int64_t>>> targets;  // (position, original id)
      for (size_t i = begin; i < std::min(sentences.size(), begin + kBatch); ++i) {
        absl::StatusOr<Encoding> encoding =
            tokenizer_->Encode(sentences[i]["text"].get<std::string>(), Truncating());
        ASSERT_TRUE(encoding.ok()) << encoding.status();
        std::vector<std::pair<int64_t, int64_t>> chosen;
        for (size_t p = 0; p < encoding->size(); ++p) {
          if (encoding->special_tokens_mask[p] == 0 && masked(rng)) {
            chosen.emplace_back(p, encoding->input_ids[p]);
            encoding->input_ids[p] = mask_id;
          }
        }
        encodings.push_back(*std::move(encoding));
        targets.push_back(std::move(chosen));
      }
      PadAll(&encodings);
      const torch::Tensor hidden = Run(encodings, /*attentions=*/false).last_hidden_state;
      torch::NoGradGuard no_grad;
      const torch::Tensor states =
          torch::layer_norm(torch::gelu(torch::linear(hidden, dense_w, dense_b)), {hidden.size(2)},
                            norm_w, norm_b, 1e-12);
      const torch::Tensor predictions = (torch::matmul(states, embeddings.t()) + bias).argmax(-1);
      for (size_t r = 0; r < targets.size(); ++r) {
        for (const auto& [position, id] : targets[r]) {
          correct += predictions[r][position].item<int64_t>() == id;
          ++target_counts[id];
          ++targets_total;
        }
      }
    }
    int64_t most_frequent = 0;
    for (const auto& [id, count] : target_counts) most_frequent = std::max(most_frequent, count);
    const double accuracy = static_cast<double>(correct) / static_cast<double>(targets_total);
    const double unigram = static_cast<double>(most_frequent) / static_cast<double>(targets_total);
    std::printf(
        "%s: masked-token accuracy %.1f%% over %lld masked tokens, unigram baseline %.1f%%\n", lang,
        100.0 * accuracy, static_cast<long long>(targets_total), 100.0 * unigram);
    EXPECT_GE(accuracy, 2.0 * unigram) << lang;
  }
}

// Mean entropy of the attention rows of each head over the held-out sentences of all languages,
// against the entropy of uniform attention over the same rows (log of the number of keys). Checked
// per layer, as the model card reports it: the mean over a layer's heads at most 90% of uniform.
// (Freshly initialised weights give 100%: 3.27 of 3.27 nats. Single heads may stay broad.)
TEST_F(DefaultModelTest, AttentionIsFarFromUniform) {
  const int64_t layers = model_->config().num_hidden_layers;
  const int64_t heads = model_->config().num_attention_heads;
  torch::Tensor entropy_sum = torch::zeros({layers, heads}, torch::kDouble);
  double uniform_sum = 0;
  int64_t rows = 0;
  for (const char* lang : kLanguages) {
    const std::vector<nlohmann::json> sentences = Items("sentence", lang);
    for (size_t begin = 0; begin < sentences.size(); begin += kBatch) {
      std::vector<Encoding> encodings;
      for (size_t i = begin; i < std::min(sentences.size(), begin + kBatch); ++i) {
        absl::StatusOr<Encoding> encoding =
            tokenizer_->Encode(sentences[i]["text"].get<std::string>(), Truncating());
        ASSERT_TRUE(encoding.ok()) << encoding.status();
        encodings.push_back(*std::move(encoding));
      }
      std::vector<int64_t> lengths;
      for (const Encoding& e : encodings) lengths.push_back(static_cast<int64_t>(e.size()));
      PadAll(&encodings);
      const ForwardOutput output = Run(encodings, /*attentions=*/true);
      torch::NoGradGuard no_grad;
      for (int64_t layer = 0; layer < layers; ++layer) {
        const torch::Tensor& probs = output.attentions[layer];  // [B, N, S, S]
        for (size_t b = 0; b < lengths.size(); ++b) {
          const int64_t n = lengths[b];
          const torch::Tensor p =
              probs[b].narrow(1, 0, n).narrow(2, 0, n).to(torch::kDouble);        // [N, n, n]
          const torch::Tensor entropy = -(p * p.clamp_min(1e-30).log()).sum(-1);  // [N, n]
          entropy_sum[layer] += entropy.sum(-1);
          if (layer == 0) {
            uniform_sum += static_cast<double>(n) * std::log(static_cast<double>(n));
            rows += n;
          }
        }
      }
    }
  }
  const double uniform = uniform_sum / static_cast<double>(rows);
  const torch::Tensor mean = entropy_sum / static_cast<double>(rows);
  for (int64_t layer = 0; layer < layers; ++layer) {
    std::printf("layer %lld: mean entropy per head", static_cast<long long>(layer));
    for (int64_t head = 0; head < heads; ++head) {
      std::printf(" %.2f", mean[layer][head].item<double>());
    }
    std::printf(" nats (uniform %.2f)\n", uniform);
  }
  for (int64_t layer = 0; layer < layers; ++layer) {
    EXPECT_LE(mean[layer].mean().item<double>(), 0.9 * uniform) << "layer " << layer;
  }
}

}  // namespace
}  // namespace attnscope

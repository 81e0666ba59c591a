// The translation trainer on a tiny model: the loss falls, the checkpoint it saves gives the
// engine the trainer's own logits (the test that the twin computes what the engine computes), and
// greedy generation in the engine reproduces pairs the model learnt.
#include "tools/train/marian_trainer.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "models/architectures/transformer.h"
#include "models/generation.h"
#include "models/tokenizers/tokenizer.h"

namespace attnscope::train {
namespace {

// A word-level tokenizer with a Marian vocabulary layout ("</s>" 0, "<unk>" 1, the language
// tokens, words, "<pad>" last) and Marian's template "$A </s>", so that the trainer does not
// depend on the SentencePiece files.
class WordTokenizer : public Tokenizer {
 public:
  explicit WordTokenizer(const std::vector<std::string>& words)
      : Tokenizer(Template(), static_cast<int64_t>(words.size()) + 4, kNoMaxLength) {
    vocab_ = {"</s>", "<unk>", ">>vie<<", ">>kor<<"};
    vocab_.insert(vocab_.end(), words.begin(), words.end());
    vocab_.push_back("<pad>");
    for (size_t id = 0; id < vocab_.size(); ++id) ids_[vocab_[id]] = static_cast<int64_t>(id);
  }

  absl::StatusOr<TokenizedText> Tokenize(std::string_view text) const override {
    TokenizedText out;
    int64_t start = 0;
    const std::string whole(text);
    for (absl::string_view word : absl::StrSplit(whole, ' ', absl::SkipEmpty())) {
      start = static_cast<int64_t>(whole.find(std::string(word), start));
      const auto found = ids_.find(std::string(word));
      out.ids.push_back(found == ids_.end() ? 1 : found->second);
      out.tokens.emplace_back(word);
      const Offset offset{start, start + static_cast<int64_t>(word.size())};
      out.offsets.push_back(offset);
      out.byte_offsets.push_back(offset);
      out.word_ids.push_back(static_cast<int64_t>(out.word_ids.size()));
      start = offset.end;
    }
    return out;
  }

  std::string Decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override {
    std::string text;
    for (int64_t id : ids) {
      if (skip_special_tokens && (id == 0 || id == pad_token_id())) continue;
      text += (text.empty() ? "" : " ") + IdToToken(id);
    }
    return text;
  }

  TokenizerKind kind() const override { return TokenizerKind::kSentencePiece; }
  TokenizerNormalization normalization() const override { return {}; }
  int64_t vocab_size() const override { return static_cast<int64_t>(vocab_.size()); }
  std::string IdToToken(int64_t id) const override {
    return id >= 0 && id < vocab_size() ? vocab_[id] : "";
  }
  int64_t Id(const std::string& token) const { return ids_.at(token); }

 private:
  static PostProcessorTemplate Template() {
    TemplatePiece text;
    text.kind = TemplatePiece::Kind::kFirst;
    TemplatePiece eos;
    eos.token = "</s>";
    return {{text, eos}, {}};
  }

  std::vector<std::string> vocab_;
  std::map<std::string, int64_t> ids_;
};

const std::vector<TranslationExample>& Pairs() {
  static const auto* pairs = new std::vector<TranslationExample>{
      {"vi", "insert table", "chèn bảng"},
      {"ko", "insert table", "표 삽입"},
      {"vi", "delete the table", "xóa bảng"},
      {"ko", "delete the table", "표 삭제"},
      {"vi", "save", "lưu"},
      {"ko", "open the file", "파일 열기"},
  };
  return *pairs;
}

WordTokenizer MakeTokenizer() {
  return WordTokenizer({"insert", "table", "delete", "the", "save", "open", "file", "chèn", "bảng",
                        "xóa", "lưu", "표", "삽입", "삭제", "파일", "열기"});
}

MarianConfig TinyConfig() {
  MarianConfig config;
  config.d_model = 32;
  config.encoder_layers = 2;
  config.decoder_layers = 2;
  config.attention_heads = 4;
  config.ffn_dim = 64;
  config.max_position_embeddings = 32;
  config.max_length = 16;
  config.dropout = 0;
  config.batch_size = 3;
  config.steps = 150;
  config.warmup_steps = 10;
  config.peak_lr = 3e-3;
  config.length_bucket_batches = 1;
  return config;
}

std::string TempDir(const std::string& name) {
  const std::string dir = testing::TempDir() + "/marian_trainer_test_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// [rows, longest] int64 right-padded with `pad`, and its mask.
std::pair<torch::Tensor, torch::Tensor> Padded(const std::vector<std::vector<int64_t>>& rows,
                                               int64_t pad) {
  size_t longest = 0;
  for (const auto& row : rows) longest = std::max(longest, row.size());
  torch::Tensor ids = torch::full(
      {static_cast<int64_t>(rows.size()), static_cast<int64_t>(longest)}, pad, torch::kLong);
  torch::Tensor mask = torch::zeros_like(ids);
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t c = 0; c < rows[r].size(); ++c) {
      ids[r][c] = rows[r][c];
      mask[r][c] = 1;
    }
  }
  return {ids, mask};
}

std::vector<int64_t> SourceIds(const Tokenizer& tokenizer, const TranslationExample& example) {
  const absl::StatusOr<std::string> source = PrefixedSource(example);
  EXPECT_TRUE(source.ok()) << source.status();
  const absl::StatusOr<Encoding> encoding = tokenizer.Encode(*source, EncodeOptions());
  EXPECT_TRUE(encoding.ok()) << encoding.status();
  return encoding->input_ids;
}

std::vector<int64_t> TargetIds(const Tokenizer& tokenizer, const TranslationExample& example) {
  const absl::StatusOr<Encoding> encoding = tokenizer.EncodeTarget(example.target, EncodeOptions());
  EXPECT_TRUE(encoding.ok()) << encoding.status();
  return encoding->input_ids;
}

std::unique_ptr<MarianTrainer> MakeTrainer(const Tokenizer& tokenizer, const MarianConfig& config,
                                           std::string tokenizer_dir = "") {
  absl::StatusOr<std::unique_ptr<MarianTrainer>> trainer =
      MarianTrainer::Create(config, tokenizer, Pairs(), std::move(tokenizer_dir));
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

TEST(MarianTrainerTest, TheLossFalls) {
  const WordTokenizer tokenizer = MakeTokenizer();
  MarianConfig config = TinyConfig();
  config.steps = 60;
  std::unique_ptr<MarianTrainer> trainer = MakeTrainer(tokenizer, config);
  ASSERT_NE(trainer, nullptr);
  EXPECT_EQ(trainer->config().pad_token_id, tokenizer.Id("<pad>"));
  EXPECT_EQ(trainer->config().eos_token_id, 0);
  double first = 0, last = 0;
  for (int step = 1; step <= 60; ++step) {
    const TranslationStepStats stats = trainer->Step();
    EXPECT_GT(stats.target_tokens, 0);
    if (step <= 5) first += stats.nll / 5;
    if (step > 55) last += stats.nll / 5;
  }
  EXPECT_LT(last, 0.5 * first) << "first steps " << first << ", last steps " << last;
}

TEST(MarianTrainerTest, TheEngineLoadsTheCheckpointAndGivesTheTrainersLogits) {
  const WordTokenizer tokenizer = MakeTokenizer();
  MarianConfig config = TinyConfig();
  config.dropout = 0.1;  // on in training, off in the logits compared
  std::unique_ptr<MarianTrainer> trainer = MakeTrainer(tokenizer, config);
  ASSERT_NE(trainer, nullptr);
  for (int step = 0; step < 20; ++step) trainer->Step();
  const std::string dir = TempDir("logits");
  ASSERT_TRUE(trainer->Save(dir).ok());

  ModelOptions options;
  options.model_dir = dir;
  options.intra_op_threads = 1;
  absl::StatusOr<std::unique_ptr<TransformerModel>> model = LoadTransformerModel(options);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->config().architecture, Architecture::kMarian);
  EXPECT_EQ((*model)->config().decoder_start_token_id, tokenizer.pad_token_id());

  // Two pairs of different lengths in one padded batch, decoder input = start token + labels
  // shifted right.
  const int64_t pad = tokenizer.pad_token_id();
  std::vector<std::vector<int64_t>> sources, decoder_inputs;
  for (const TranslationExample& example : {Pairs()[2], Pairs()[4]}) {
    sources.push_back(SourceIds(tokenizer, example));
    std::vector<int64_t> decoder = {pad};
    const std::vector<int64_t> labels = TargetIds(tokenizer, example);
    decoder.insert(decoder.end(), labels.begin(), labels.end() - 1);
    decoder_inputs.push_back(decoder);
  }
  const auto [source_ids, source_mask] = Padded(sources, pad);
  const auto [decoder_ids, decoder_mask] = Padded(decoder_inputs, pad);
  const torch::Tensor expected =
      trainer->Logits(source_ids, source_mask, decoder_ids, decoder_mask);

  ForwardInput input;
  input.input_ids = source_ids;
  input.attention_mask = source_mask;
  input.decoder_input_ids = decoder_ids;
  input.decoder_attention_mask = decoder_mask;
  ForwardOptions forward;
  forward.output_attentions = false;
  absl::StatusOr<ForwardOutput> out = (*model)->Forward(input, forward);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->logits.sizes(), expected.sizes());
  const torch::Tensor real = decoder_mask.to(torch::kBool);
  const double difference =
      (out->logits.index({real}) - expected.index({real})).abs().max().item<double>();
  EXPECT_LT(difference, 1e-4);
  EXPECT_GT(expected.abs().max().item<double>(), 1.0) << "logits too small to tell anything";
}

TEST(MarianTrainerTest, GreedyGenerationInTheEngineTranslatesLearntPairs) {
  const WordTokenizer tokenizer = MakeTokenizer();
  std::unique_ptr<MarianTrainer> trainer = MakeTrainer(tokenizer, TinyConfig());
  ASSERT_NE(trainer, nullptr);
  for (int step = 0; step < TinyConfig().steps; ++step) trainer->Step();
  const std::string dir = TempDir("generate");
  ASSERT_TRUE(trainer->Save(dir).ok());
  ModelOptions options;
  options.model_dir = dir;
  options.intra_op_threads = 1;
  absl::StatusOr<std::unique_ptr<TransformerModel>> model = LoadTransformerModel(options);
  ASSERT_TRUE(model.ok()) << model.status();

  GenerationOptions generation;
  generation.method = DecodingMethod::kGreedy;
  generation.max_new_tokens = 8;
  generation.eos_token_ids = (*model)->config().eos_token_ids;
  for (const TranslationExample& example : Pairs()) {
    absl::StatusOr<GenerationResult> result =
        Generate(**model, SourceIds(tokenizer, example), generation,
                 [](const GeneratedToken&) { return absl::OkStatus(); });
    ASSERT_TRUE(result.ok()) << result.status();
    std::vector<int64_t> ids;
    for (const GeneratedToken& token : result->tokens) ids.push_back(token.id);
    EXPECT_EQ(result->finish_reason, FinishReason::kEos) << example.source;
    EXPECT_EQ(tokenizer.Decode(ids, /*skip_special_tokens=*/true), example.target)
        << example.lang << ": " << example.source;
  }
}

TEST(MarianTrainerTest, SaveCopiesTheTokenizerFilesAndTheConfigRoundTrips) {
  const WordTokenizer tokenizer = MakeTokenizer();
  const std::string tokenizer_dir = TempDir("tokenizer");
  for (const char* name : {"source.spm", "target.spm", "vocab.json", "tokenizer_config.json"}) {
    std::ofstream(tokenizer_dir + "/" + name) << name;
  }
  std::unique_ptr<MarianTrainer> trainer = MakeTrainer(tokenizer, TinyConfig(), tokenizer_dir);
  ASSERT_NE(trainer, nullptr);
  const std::string dir = TempDir("copy");
  ASSERT_TRUE(trainer->Save(dir).ok());
  for (const char* name : {"source.spm", "target.spm", "vocab.json", "tokenizer_config.json"}) {
    std::ifstream in(dir + "/" + name);
    std::string text;
    std::getline(in, text);
    EXPECT_EQ(text, name);
  }
  // Saving into the tokenizer's own folder leaves its files alone.
  ASSERT_TRUE(trainer->Save(tokenizer_dir).ok());

  absl::StatusOr<MarianConfig> read = MarianConfig::FromJson(trainer->config().ToJson());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->ToJson(), trainer->config().ToJson());
}

TEST(MarianTrainerTest, LanguageTokensAndRefusals) {
  EXPECT_EQ(*PrefixedSource({"vi", "Inserting Tables", ""}), ">>vie<< Inserting Tables");
  EXPECT_EQ(*PrefixedSource({"ko", "Inserting Tables", ""}), ">>kor<< Inserting Tables");
  EXPECT_EQ(LanguageToken("de").status().code(), absl::StatusCode::kInvalidArgument);

  const WordTokenizer tokenizer = MakeTokenizer();
  MarianConfig config = TinyConfig();
  config.max_length = 2;  // every source is ">>xxx<< word(s) </s>", at least 3 tokens
  absl::StatusOr<std::unique_ptr<MarianTrainer>> trainer =
      MarianTrainer::Create(config, tokenizer, Pairs(), "");
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kInvalidArgument);
  config = TinyConfig();
  config.attention_heads = 5;
  trainer = MarianTrainer::Create(config, tokenizer, Pairs(), "");
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace attnscope::train

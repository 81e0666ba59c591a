// attnscope-train: builds the vocabulary of the default model and trains it (see
// scripts/make_default_model.sh for the whole recipe), and trains and evaluates the translation
// model (scripts/make_translation_model.sh).
//
//   attnscope-train vocab --corpus=vocab_corpus.txt --heldout=heldout.jsonl
//       --model_dir=checkpoints/default
//   attnscope-train train --data=train.jsonl --model_dir=checkpoints/default --steps=N
//       --record_examples=tests/data/default-model-first-steps.jsonl
//   attnscope-train tokens --heldout=heldout.jsonl --model_dir=DIR   # [UNK] rate, tokens per word
//   attnscope-train translate --data=train.jsonl --model_dir=checkpoints/translation --steps=N
//       --heldout=tests/data/translation-heldout.jsonl   # trains, then evaluates
//   attnscope-train evaluate --model_dir=checkpoints/translation
//       --heldout=tests/data/translation-heldout.jsonl   # greedy translations, chrF
#include <malloc.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "models/engine.h"
#include "models/generation.h"
#include "models/tokenizers/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tools/train/bert_trainer.h"
#include "tools/train/chrf.h"
#include "tools/train/marian_trainer.h"
#include "tools/train/translation_eval.h"
#include "tools/train/vocab_builder.h"

ABSL_FLAG(std::string, model_dir, "checkpoints/default", "the checkpoint directory written");
ABSL_FLAG(std::string, corpus, "", "vocab: training texts, one a line");
ABSL_FLAG(std::string, heldout, "",
          "vocab, tokens, translate, evaluate: held-out JSONL whose texts the unknown-token rate "
          "and tokens per word are measured on (vocab, tokens), or whose pairs are translated and "
          "scored (translate, evaluate)");
ABSL_FLAG(int64_t, vocab_size, 8000, "vocab: entries including special tokens");
ABSL_FLAG(std::string, required_tokens, "",
          "vocab: tokens the vocabulary must hold whatever their count in --corpus, one a line "
          "(\"##\" for continuations; NFC, lower-cased), e.g. whole Hangul syllables and "
          "Vietnamese syllables, so that text outside the corpus does not fall apart or become "
          "[UNK]");
ABSL_FLAG(std::string, data, "",
          "train, translate: train.jsonl from scripts/extract_help_text.py (train) or "
          "scripts/extract_parallel_text.py (translate)");
ABSL_FLAG(int64_t, steps, 14000, "train, translate: optimiser steps");
ABSL_FLAG(int64_t, warmup_steps, 400, "train, translate: linear warm-up steps");
ABSL_FLAG(bool, linear_decay, false,
          "train: after the warm-up, decay the learning rate linearly to 0 at --steps (default: "
          "peak_lr * sqrt(warmup_steps / step), which does not depend on --steps)");
ABSL_FLAG(double, peak_lr, 1e-3, "train, translate: learning rate at the end of the warm-up");
ABSL_FLAG(int64_t, batch_size, 32, "train, translate: sequences (sentence pairs) per step");
ABSL_FLAG(int64_t, single_every, 1,
          "train: keep every n-th single-text (masked-LM only) example (1: all); pairs are all "
          "kept, and are masked too");
ABSL_FLAG(int64_t, length_bucket_batches, 64,
          "train, translate: sort windows of this many batches by length before batching (1: no "
          "sorting)");
ABSL_FLAG(int32_t, threads, 1, "train, translate: intra-op threads (fixed for reproducible sums)");
ABSL_FLAG(double, tied_query_key_init, 0,
          "train: start each query projection as a copy of the key projection, both with this "
          "times the usual deviation (0: independent)");
ABSL_FLAG(double, query_mask_prob, 0,
          "train: masking rate of a pair's query tokens (0: the usual 15%)");
ABSL_FLAG(double, relevance_weight, 2.0, "train: weight of the relevance loss");
ABSL_FLAG(double, dropout, 0.1,
          "train, translate: dropout rate of the embeddings, attention probabilities and layer "
          "outputs (BERT's hidden_dropout_prob and attention_probs_dropout_prob); for translate "
          "MarianConfig's dropout, of the embeddings and layer outputs only");
ABSL_FLAG(std::string, init_from, "",
          "train: start from this checkpoint's weights (a further stage) instead of the seeded "
          "initialisation");
ABSL_FLAG(std::string, record_name, "training_record.json",
          "train, translate: file in --model_dir for the recipe and recorded losses");
ABSL_FLAG(int64_t, log_every, 20, "train, translate: steps between progress lines");
ABSL_FLAG(int64_t, history_every, 50,
          "train, translate: steps between the points of the record's \"history\" (mean losses "
          "of those steps and the learning rate), the series GetTrainingRecord serves");
ABSL_FLAG(int64_t, save_every, 500,
          "train, translate: steps between checkpoints (also saved at the end)");
ABSL_FLAG(int64_t, record_steps, 8,
          "train: steps whose losses (and examples) are recorded for the reproducibility test");
ABSL_FLAG(std::string, record_examples, "",
          "train: where the examples of the recorded steps go (default: not written)");
ABSL_FLAG(int64_t, d_model, 256, "translate: hidden size of the encoder and decoder");
ABSL_FLAG(int64_t, encoder_layers, 3, "translate: encoder layers");
ABSL_FLAG(int64_t, decoder_layers, 3, "translate: decoder layers");
ABSL_FLAG(int64_t, attention_heads, 4,
          "translate: attention heads of every layer (a divisor of --d_model)");
ABSL_FLAG(int64_t, ffn_dim, 1024, "translate: feed-forward size of every layer");
ABSL_FLAG(int64_t, max_length, 128,
          "translate: pairs whose source or target has more tokens (</s> included) are left out");
ABSL_FLAG(double, label_smoothing, 0.1,
          "translate: probability mass spread over the vocabulary in the training targets");
ABSL_FLAG(int64_t, max_new_tokens, 64,
          "translate, evaluate: most tokens a held-out translation may have");
ABSL_FLAG(std::string, evaluation_name, "evaluation.json",
          "translate, evaluate: file in --model_dir for the held-out translations and scores");

namespace attnscope::train {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write '", path, "'"));
  return absl::OkStatus();
}

// Fraction of [UNK] among the tokens of the held-out texts and tokens per word, per language,
// with the engine's own tokenizer loaded from `model_dir`. Words are the pre-tokenizer's: runs of
// letters and digits, and each punctuation mark on its own.
absl::Status ReportTokenization(const std::string& model_dir, const std::string& heldout) {
  ATTNSCOPE_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, LoadTokenizer(model_dir));
  std::ifstream in(heldout);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", heldout, "'"));
  struct Counts {
    int64_t unknown = 0;
    int64_t tokens = 0;
    int64_t words = 0;
  };
  std::map<std::string, Counts> counts;  // by language
  std::string line;
  while (std::getline(in, line)) {
    const json object = json::parse(line);
    for (const char* field : {"query", "positive", "negative", "text"}) {
      if (!object.contains(field)) continue;
      ATTNSCOPE_ASSIGN_OR_RETURN(TokenizedText tokens,
                                 tokenizer->Tokenize(object[field].get<std::string>()));
      Counts& count = counts[object["lang"].get<std::string>()];
      count.tokens += static_cast<int64_t>(tokens.size());
      count.unknown += std::count(tokens.tokens.begin(), tokens.tokens.end(), "[UNK]");
      if (!tokens.word_ids.empty()) {
        count.words += *std::max_element(tokens.word_ids.begin(), tokens.word_ids.end()) + 1;
      }
    }
  }
  for (const auto& [lang, count] : counts) {
    std::printf(
        "held-out %s: %lld tokens, %lld unknown (%.3f%%), %lld words, %.3f tokens per word\n",
        lang.c_str(), static_cast<long long>(count.tokens), static_cast<long long>(count.unknown),
        100.0 * static_cast<double>(count.unknown) / static_cast<double>(count.tokens),
        static_cast<long long>(count.words),
        static_cast<double>(count.tokens) / static_cast<double>(count.words));
  }
  return absl::OkStatus();
}

// The tokenizer.json of the vocabulary (Hugging Face `tokenizers` format), which is what makes
// Hugging Face and attnscope compose text to NFC before BertNormalizer: tokenizer_config.json
// alone cannot ask for it.
json TokenizerJson(const std::vector<std::string>& vocab, const WordPieceOptions& options) {
  json added_tokens = json::array();
  for (size_t id = 0; id < SpecialTokens().size(); ++id) {
    added_tokens.push_back({{"id", id},
                            {"content", SpecialTokens()[id]},
                            {"single_word", false},
                            {"lstrip", false},
                            {"rstrip", false},
                            {"normalized", false},
                            {"special", true}});
  }
  json vocab_map = json::object();
  for (size_t id = 0; id < vocab.size(); ++id) vocab_map[vocab[id]] = id;
  auto special = [](const char* token, int type_id) {
    return json{{"SpecialToken", {{"id", token}, {"type_id", type_id}}}};
  };
  auto sequence = [](const char* id, int type_id) {
    return json{{"Sequence", {{"id", id}, {"type_id", type_id}}}};
  };
  auto special_entry = [&](const std::string& token) {
    const int64_t id = std::find(vocab.begin(), vocab.end(), token) - vocab.begin();
    return json{{"id", token}, {"ids", {id}}, {"tokens", {token}}};
  };
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added_tokens},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "NFC"}},
              {{"type", "BertNormalizer"},
               {"clean_text", options.clean_text},
               {"handle_chinese_chars", options.handle_chinese_chars},
               {"strip_accents", options.strip_accents.value_or(options.lowercase)},
               {"lowercase", options.lowercase}}}}}},
          {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", {special("[CLS]", 0), sequence("A", 0), special("[SEP]", 0)}},
            {"pair",
             {special("[CLS]", 0), sequence("A", 0), special("[SEP]", 0), sequence("B", 1),
              special("[SEP]", 1)}},
            {"special_tokens",
             {{"[CLS]", special_entry("[CLS]")}, {"[SEP]", special_entry("[SEP]")}}}}},
          {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
          {"model",
           {{"type", "WordPiece"},
            {"unk_token", "[UNK]"},
            {"continuing_subword_prefix", "##"},
            {"max_input_chars_per_word", 100},
            {"vocab", vocab_map}}}};
}

absl::Status BuildVocab() {
  const std::string model_dir = absl::GetFlag(FLAGS_model_dir);
  std::ifstream in(absl::GetFlag(FLAGS_corpus));
  if (!in)
    return absl::NotFoundError(
        absl::StrCat("cannot open --corpus '", absl::GetFlag(FLAGS_corpus), "'"));
  // NFC and lower-casing, accents kept: Vietnamese keeps its diacritics ("tôi", "tới" and "tối"
  // stay three words) and Hangul its syllables, which BERT's uncased normalisation (NFD, marks
  // dropped) would break into base letters and conjoining jamo.
  WordPieceOptions normalization;
  normalization.nfc = true;
  normalization.lowercase = true;
  normalization.strip_accents = false;
  ATTNSCOPE_ASSIGN_OR_RETURN(WordCounter counter, WordCounter::Create(normalization));
  std::string line;
  while (std::getline(in, line)) ATTNSCOPE_RETURN_IF_ERROR(counter.Add(line));
  std::vector<std::string> required_tokens;
  if (!absl::GetFlag(FLAGS_required_tokens).empty()) {
    std::ifstream required(absl::GetFlag(FLAGS_required_tokens));
    for (std::string token; std::getline(required, token);) {
      if (!token.empty()) required_tokens.push_back(token);
    }
  }
  const std::vector<std::string> vocab =
      BuildWordPieceVocab(counter.counts(), absl::GetFlag(FLAGS_vocab_size), required_tokens);
  std::string text;
  for (const std::string& token : vocab) text += token + "\n";
  ATTNSCOPE_RETURN_IF_ERROR(WriteText(JoinPath(model_dir, "vocab.txt"), text));
  ATTNSCOPE_RETURN_IF_ERROR(WriteText(JoinPath(model_dir, "tokenizer.json"),
                                      TokenizerJson(vocab, normalization).dump(2) + "\n"));
  const json tokenizer_config = {{"do_lower_case", true},
                                 {"strip_accents", false},
                                 {"model_max_length", 128},
                                 {"tokenizer_class", "BertTokenizer"}};
  ATTNSCOPE_RETURN_IF_ERROR(
      WriteText(JoinPath(model_dir, "tokenizer_config.json"), tokenizer_config.dump(2) + "\n"));
  std::printf("%zu distinct words, %zu required tokens -> vocabulary of %zu tokens in %s\n",
              counter.counts().size(), required_tokens.size(), vocab.size(), model_dir.c_str());
  if (absl::GetFlag(FLAGS_heldout).empty()) return absl::OkStatus();
  return ReportTokenization(model_dir, absl::GetFlag(FLAGS_heldout));
}

// Refuses what a run would otherwise ignore or trip over late: a flag of the other command, a
// number out of its range, a file that is not there. Every flag of this file is checked here.
absl::Status CheckFlags(const std::string& command) {
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!absl::EndsWith(flag->Filename(), "tools/train/main.cc")) continue;
    const std::string help = flag->Help();
    // Help texts start with the commands that read the flag ("vocab, tokens: ..."); model_dir's
    // has none, as every command reads it.
    const std::string readers = help.substr(0, help.find(':'));
    const bool other_command = help.find(':') != std::string::npos &&
                               !absl::StrContains(absl::StrCat(readers, ","), command + ",");
    if (other_command && flag->CurrentValue() != flag->DefaultValue()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": 'attnscope-train ", command, "' does not read it (",
                       help.substr(0, help.find(':')), " only); leave it out"));
    }
  }
  auto at_least = [](const char* name, double value, double min) {
    return value >= min ? absl::OkStatus()
                        : absl::InvalidArgumentError(
                              absl::StrCat("--", name, " ", value, ": expected at least ", min));
  };
  auto fraction = [](const char* name, double value) {
    return value >= 0 && value < 1 ? absl::OkStatus()
                                   : absl::InvalidArgumentError(absl::StrCat(
                                         "--", name, " ", value, ": expected 0 <= value < 1"));
  };
  auto readable = [](const char* name, const std::string& path) {
    return std::ifstream(path) ? absl::OkStatus()
                               : absl::NotFoundError(absl::StrCat("--", name, " '", path,
                                                                  "': expected a readable file"));
  };
  auto file_name = [](const char* name, const std::string& value) {
    return !value.empty() && !absl::StrContains(value, '/')
               ? absl::OkStatus()
               : absl::InvalidArgumentError(
                     absl::StrCat("--", name, " '", value,
                                  "': expected a file name in --model_dir, without '/'"));
  };
  const std::string model_dir = absl::GetFlag(FLAGS_model_dir);
  if (!std::filesystem::is_directory(model_dir)) {
    return absl::NotFoundError(
        absl::StrCat("--model_dir '", model_dir, "': expected an existing directory"));
  }
  if (command == "translate" || command == "evaluate") {
    ATTNSCOPE_RETURN_IF_ERROR(file_name("evaluation_name", absl::GetFlag(FLAGS_evaluation_name)));
  }
  if (command == "tokens") {
    return readable("heldout", absl::GetFlag(FLAGS_heldout));
  }
  if (command == "vocab") {
    ATTNSCOPE_RETURN_IF_ERROR(readable("corpus", absl::GetFlag(FLAGS_corpus)));
    if (!absl::GetFlag(FLAGS_required_tokens).empty()) {
      ATTNSCOPE_RETURN_IF_ERROR(readable("required_tokens", absl::GetFlag(FLAGS_required_tokens)));
    }
    if (!absl::GetFlag(FLAGS_heldout).empty()) {
      ATTNSCOPE_RETURN_IF_ERROR(readable("heldout", absl::GetFlag(FLAGS_heldout)));
    }
    // [PAD], [UNK], [CLS], [SEP], [MASK] and at least one character.
    return at_least("vocab_size", absl::GetFlag(FLAGS_vocab_size), 6);
  }
  if (command == "evaluate") {
    ATTNSCOPE_RETURN_IF_ERROR(readable("heldout", absl::GetFlag(FLAGS_heldout)));
    if (!std::ifstream(JoinPath(model_dir, "model.safetensors"))) {
      return absl::NotFoundError(absl::StrCat("--model_dir '", model_dir,
                                              "': expected model.safetensors there; run "
                                              "'attnscope-train translate' first"));
    }
    return at_least("max_new_tokens", absl::GetFlag(FLAGS_max_new_tokens), 1);
  }
  ATTNSCOPE_RETURN_IF_ERROR(readable("data", absl::GetFlag(FLAGS_data)));
  if (command == "train" && !std::ifstream(JoinPath(model_dir, "vocab.txt"))) {
    return absl::NotFoundError(absl::StrCat("--model_dir '", model_dir,
                                            "': expected vocab.txt there; run "
                                            "'attnscope-train vocab' first"));
  }
  if (command == "translate") {
    for (const char* name : {"source.spm", "target.spm", "vocab.json"}) {
      if (!std::ifstream(JoinPath(model_dir, name))) {
        return absl::NotFoundError(
            absl::StrCat("--model_dir '", model_dir, "': expected ", name,
                         " there; run 'scripts/extract_parallel_text.py tokenizer' first"));
      }
    }
    if (!absl::GetFlag(FLAGS_heldout).empty()) {
      ATTNSCOPE_RETURN_IF_ERROR(readable("heldout", absl::GetFlag(FLAGS_heldout)));
    }
    for (const auto& [name, value, min] : std::vector<std::tuple<const char*, double, double>>{
             {"d_model", absl::GetFlag(FLAGS_d_model), 2},
             {"encoder_layers", absl::GetFlag(FLAGS_encoder_layers), 1},
             {"decoder_layers", absl::GetFlag(FLAGS_decoder_layers), 1},
             {"attention_heads", absl::GetFlag(FLAGS_attention_heads), 1},
             {"ffn_dim", absl::GetFlag(FLAGS_ffn_dim), 1},
             // ">>xxx<<", a token and </s>.
             {"max_length", absl::GetFlag(FLAGS_max_length), 3},
             {"max_new_tokens", absl::GetFlag(FLAGS_max_new_tokens), 1}}) {
      ATTNSCOPE_RETURN_IF_ERROR(at_least(name, value, min));
    }
    const int64_t d_model = absl::GetFlag(FLAGS_d_model);
    if (d_model % absl::GetFlag(FLAGS_attention_heads) != 0 || d_model % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--d_model ", d_model, ": expected an even multiple of --attention_heads (",
          absl::GetFlag(FLAGS_attention_heads), "); sinusoidal positions pair sin and cos"));
    }
    ATTNSCOPE_RETURN_IF_ERROR(fraction("label_smoothing", absl::GetFlag(FLAGS_label_smoothing)));
    if (absl::GetFlag(FLAGS_steps) <= absl::GetFlag(FLAGS_warmup_steps)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--steps ", absl::GetFlag(FLAGS_steps),
                       ": expected more than --warmup_steps (", absl::GetFlag(FLAGS_warmup_steps),
                       "), the learning rate decays from the end of the warm-up to --steps"));
    }
  }
  for (const auto& [name, value, min] : std::vector<std::tuple<const char*, double, double>>{
           {"steps", absl::GetFlag(FLAGS_steps), 1},
           {"warmup_steps", absl::GetFlag(FLAGS_warmup_steps), 0},
           {"batch_size", absl::GetFlag(FLAGS_batch_size), 1},
           {"single_every", absl::GetFlag(FLAGS_single_every), 1},
           {"length_bucket_batches", absl::GetFlag(FLAGS_length_bucket_batches), 1},
           {"threads", absl::GetFlag(FLAGS_threads), 1},
           {"tied_query_key_init", absl::GetFlag(FLAGS_tied_query_key_init), 0},
           {"relevance_weight", absl::GetFlag(FLAGS_relevance_weight), 0},
           {"log_every", absl::GetFlag(FLAGS_log_every), 1},
           {"history_every", absl::GetFlag(FLAGS_history_every), 1},
           {"save_every", absl::GetFlag(FLAGS_save_every), 1},
           {"record_steps", absl::GetFlag(FLAGS_record_steps), 0}}) {
    ATTNSCOPE_RETURN_IF_ERROR(at_least(name, value, min));
  }
  if (!(absl::GetFlag(FLAGS_peak_lr) > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--peak_lr ", absl::GetFlag(FLAGS_peak_lr), ": expected more than 0"));
  }
  ATTNSCOPE_RETURN_IF_ERROR(fraction("query_mask_prob", absl::GetFlag(FLAGS_query_mask_prob)));
  ATTNSCOPE_RETURN_IF_ERROR(fraction("dropout", absl::GetFlag(FLAGS_dropout)));
  if (absl::GetFlag(FLAGS_linear_decay) &&
      absl::GetFlag(FLAGS_steps) <= absl::GetFlag(FLAGS_warmup_steps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--linear_decay: expected --steps (", absl::GetFlag(FLAGS_steps),
                     ") above --warmup_steps (", absl::GetFlag(FLAGS_warmup_steps),
                     "), the decay runs from the end of the warm-up to --steps"));
  }
  const std::string init_from = absl::GetFlag(FLAGS_init_from);
  if (!init_from.empty()) {
    ATTNSCOPE_RETURN_IF_ERROR(readable("init_from", JoinPath(init_from, "model.safetensors")));
  }
  ATTNSCOPE_RETURN_IF_ERROR(file_name("record_name", absl::GetFlag(FLAGS_record_name)));
  const std::string record_examples = absl::GetFlag(FLAGS_record_examples);
  if (!record_examples.empty()) {
    const std::filesystem::path parent = std::filesystem::absolute(record_examples).parent_path();
    if (!std::filesystem::is_directory(parent)) {
      return absl::NotFoundError(absl::StrCat("--record_examples '", record_examples,
                                              "': expected its directory to exist"));
    }
  }
  return absl::OkStatus();
}

std::string FormatDuration(double seconds) {
  const auto total = static_cast<int64_t>(seconds);
  return absl::StrFormat("%d:%02d", total / 60, total % 60);
}

absl::Status Train() {
  const std::string model_dir = absl::GetFlag(FLAGS_model_dir);
  ATTNSCOPE_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, LoadTokenizer(model_dir));
  ATTNSCOPE_ASSIGN_OR_RETURN(std::vector<Example> examples,
                             ReadExamples(absl::GetFlag(FLAGS_data)));
  TrainConfig config;
  config.steps = absl::GetFlag(FLAGS_steps);
  config.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  config.linear_decay = absl::GetFlag(FLAGS_linear_decay);
  config.peak_lr = absl::GetFlag(FLAGS_peak_lr);
  config.batch_size = absl::GetFlag(FLAGS_batch_size);
  config.threads = absl::GetFlag(FLAGS_threads);
  config.relevance_weight = absl::GetFlag(FLAGS_relevance_weight);
  config.tied_query_key_init = absl::GetFlag(FLAGS_tied_query_key_init);
  config.query_mask_prob = absl::GetFlag(FLAGS_query_mask_prob);
  config.dropout = absl::GetFlag(FLAGS_dropout);
  config.length_bucket_batches = absl::GetFlag(FLAGS_length_bucket_batches);
  // The first pass goes through the data in a seeded order (the trainer reshuffles later passes).
  std::mt19937_64 shuffle_rng(config.seed + 1);
  std::shuffle(examples.begin(), examples.end(), shuffle_rng);
  int64_t singles = 0;
  examples.erase(std::remove_if(examples.begin(), examples.end(),
                                [&](const Example& e) {
                                  return e.b.empty() &&
                                         singles++ % absl::GetFlag(FLAGS_single_every) != 0;
                                }),
                 examples.end());
  const size_t example_count = examples.size();
  std::printf("%zu examples; tokenizing\n", example_count);
  std::fflush(stdout);
  ATTNSCOPE_ASSIGN_OR_RETURN(std::unique_ptr<BertTrainer> trainer,
                             BertTrainer::Create(config, *tokenizer, std::move(examples)));
  trainer->BucketRemainingByLength();
  if (!absl::GetFlag(FLAGS_init_from).empty()) {
    ATTNSCOPE_RETURN_IF_ERROR(trainer->LoadWeights(absl::GetFlag(FLAGS_init_from)));
  }
  const int64_t record_steps = absl::GetFlag(FLAGS_record_steps);
  if (!absl::GetFlag(FLAGS_record_examples).empty()) {
    ATTNSCOPE_RETURN_IF_ERROR(WriteExamples(trainer->UpcomingExamples(record_steps),
                                            absl::GetFlag(FLAGS_record_examples)));
  }

  json record = {{"config", trainer->config().ToJson()},
                 {"init_from", absl::GetFlag(FLAGS_init_from)},
                 {"examples", example_count},
                 {"first_steps", json::array()},
                 {"history", json::array()}};
  const Clock::time_point start = Clock::now();
  int64_t window_tokens = 0;
  Clock::time_point window_start = start;
  double loss_sum = 0, mlm_sum = 0, relevance_sum = 0;
  int64_t window_steps = 0;
  // Sums of loss, mlm_loss and relevance_loss since the last history point.
  std::array<double, 3> history_sums = {0, 0, 0};
  const int64_t history_every = absl::GetFlag(FLAGS_history_every);
  for (int64_t step = 1; step <= config.steps; ++step) {
    const StepStats stats = trainer->Step();
    if (step <= record_steps) {
      record["first_steps"].push_back({{"step", stats.step},
                                       {"loss", stats.loss},
                                       {"mlm_loss", stats.mlm_loss},
                                       {"relevance_loss", stats.relevance_loss}});
    }
    window_tokens += stats.tokens;
    loss_sum += stats.loss;
    mlm_sum += stats.mlm_loss;
    relevance_sum += stats.relevance_loss;
    ++window_steps;
    history_sums[0] += stats.loss;
    history_sums[1] += stats.mlm_loss;
    history_sums[2] += stats.relevance_loss;
    if (step % history_every == 0 || step == config.steps) {
      const double steps_summed = static_cast<double>((step - 1) % history_every + 1);
      record["history"].push_back({{"step", step},
                                   {"loss", history_sums[0] / steps_summed},
                                   {"mlm_loss", history_sums[1] / steps_summed},
                                   {"relevance_loss", history_sums[2] / steps_summed},
                                   {"learning_rate", stats.lr}});
      history_sums = {0, 0, 0};
    }
    if (step % absl::GetFlag(FLAGS_log_every) == 0 || step == config.steps) {
      const Clock::time_point now = Clock::now();
      const double elapsed = std::chrono::duration<double>(now - start).count();
      const double window = std::chrono::duration<double>(now - window_start).count();
      const double left =
          elapsed / static_cast<double>(step) * static_cast<double>(config.steps - step);
      std::printf(
          "step %5lld/%lld  loss %.4f (mlm %.4f, relevance %.4f)  lr %.2e  %.0f tokens/s  "
          "elapsed %s  left %s\n",
          static_cast<long long>(step), static_cast<long long>(config.steps),
          loss_sum / window_steps, mlm_sum / window_steps, relevance_sum / window_steps, stats.lr,
          static_cast<double>(window_tokens) / window, FormatDuration(elapsed).c_str(),
          FormatDuration(left).c_str());
      std::fflush(stdout);
      record["last_window"] = {{"step", step},
                               {"loss", loss_sum / window_steps},
                               {"mlm_loss", mlm_sum / window_steps},
                               {"relevance_loss", relevance_sum / window_steps}};
      window_tokens = 0;
      window_start = now;
      loss_sum = mlm_sum = relevance_sum = 0;
      window_steps = 0;
    }
    if (step % absl::GetFlag(FLAGS_save_every) == 0 || step == config.steps) {
      ATTNSCOPE_RETURN_IF_ERROR(trainer->Save(model_dir));
      record["steps_done"] = step;
      record["training_seconds"] = std::chrono::duration<double>(Clock::now() - start).count();
      ATTNSCOPE_RETURN_IF_ERROR(
          WriteText(JoinPath(model_dir, absl::GetFlag(FLAGS_record_name)), record.dump(2) + "\n"));
    }
  }
  return absl::OkStatus();
}

// The processor's name as /proc/cpuinfo gives it, for the training record: step times depend on it.
std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (absl::StartsWith(line, "model name")) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line
                                        : line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

// Scores greedy translations of `heldout` (translation_eval.h) and writes them with the scores to
// --evaluation_name in `model_dir`.
absl::Status EvaluateHeldOut(const std::string& model_dir, const std::string& heldout) {
  ATTNSCOPE_ASSIGN_OR_RETURN(std::vector<TranslationExample> examples,
                             ReadTranslationExamples(heldout));
  ATTNSCOPE_ASSIGN_OR_RETURN(
      TranslationEvaluation result,
      EvaluateTranslations(model_dir, examples, absl::GetFlag(FLAGS_max_new_tokens)));
  json scores = json::object();
  for (const auto& [lang, score] : result.scores) {
    scores[lang] = {
        {"pairs", score.pairs}, {"chrf", score.chrf}, {"copy_source_chrf", score.copy_source_chrf}};
    std::printf("held-out %s: %lld pairs, chrF2 %.1f (copying the source: %.1f)\n", lang.c_str(),
                static_cast<long long>(score.pairs), score.chrf, score.copy_source_chrf);
  }
  std::printf("%zu greedy translations in %.1f s\n", examples.size(), result.seconds);
  json translations = json::array();
  for (size_t i = 0; i < examples.size(); ++i) {
    translations.push_back({{"lang", examples[i].lang},
                            {"source", examples[i].source},
                            {"reference", examples[i].target},
                            {"translation", result.translations[i]}});
  }
  const json evaluation = {{"heldout", heldout},
                           {"decoding", "greedy"},
                           {"max_new_tokens", result.max_new_tokens},
                           {"metric",
                            "chrF2 (character 1- to 6-grams, beta 2, whitespace removed, "
                            "corpus statistics, as sacreBLEU's CHRF defaults)"},
                           {"scores", scores},
                           {"seconds", result.seconds},
                           {"translations", translations}};
  return WriteText(JoinPath(model_dir, absl::GetFlag(FLAGS_evaluation_name)),
                   evaluation.dump(2) + "\n");
}

absl::Status Translate() {
  // A step's largest tensors, the logits over the vocabulary and their gradients, are tens of MB:
  // glibc serves such blocks by mmap and unmaps them when freed, so each step faulted their pages
  // in again (a fifth of the time in a profile). From the heap, without trimming, they are reused.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  const std::string model_dir = absl::GetFlag(FLAGS_model_dir);
  ATTNSCOPE_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, LoadTokenizer(model_dir));
  ATTNSCOPE_ASSIGN_OR_RETURN(std::vector<TranslationExample> examples,
                             ReadTranslationExamples(absl::GetFlag(FLAGS_data)));
  MarianConfig config;
  config.d_model = absl::GetFlag(FLAGS_d_model);
  config.encoder_layers = absl::GetFlag(FLAGS_encoder_layers);
  config.decoder_layers = absl::GetFlag(FLAGS_decoder_layers);
  config.attention_heads = absl::GetFlag(FLAGS_attention_heads);
  config.ffn_dim = absl::GetFlag(FLAGS_ffn_dim);
  config.max_length = absl::GetFlag(FLAGS_max_length);
  config.dropout = absl::GetFlag(FLAGS_dropout);
  config.label_smoothing = absl::GetFlag(FLAGS_label_smoothing);
  config.batch_size = absl::GetFlag(FLAGS_batch_size);
  config.steps = absl::GetFlag(FLAGS_steps);
  config.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  config.peak_lr = absl::GetFlag(FLAGS_peak_lr);
  config.length_bucket_batches = absl::GetFlag(FLAGS_length_bucket_batches);
  config.threads = absl::GetFlag(FLAGS_threads);
  std::printf("%zu pairs; tokenizing\n", examples.size());
  std::fflush(stdout);
  ATTNSCOPE_ASSIGN_OR_RETURN(
      std::unique_ptr<MarianTrainer> trainer,
      MarianTrainer::Create(config, *tokenizer, std::move(examples), model_dir));
  trainer->BucketRemainingByLength();
  std::printf("%lld pairs kept, %lld over --max_length %lld left out; vocabulary %lld\n",
              static_cast<long long>(trainer->num_examples()),
              static_cast<long long>(trainer->num_too_long()),
              static_cast<long long>(trainer->config().max_length),
              static_cast<long long>(trainer->config().vocab_size));
  json record = {{"config", trainer->config().ToJson()},
                 {"examples", trainer->num_examples()},
                 {"examples_too_long", trainer->num_too_long()},
                 {"cpu", CpuModel()},
                 {"history", json::array()}};
  const Clock::time_point start = Clock::now();
  Clock::time_point window_start = start;
  double loss_sum = 0, nll_sum = 0, history_loss = 0, history_nll = 0;
  int64_t window_steps = 0, window_tokens = 0;
  const int64_t history_every = absl::GetFlag(FLAGS_history_every);
  for (int64_t step = 1; step <= config.steps; ++step) {
    const TranslationStepStats stats = trainer->Step();
    loss_sum += stats.loss;
    nll_sum += stats.nll;
    history_loss += stats.loss;
    history_nll += stats.nll;
    window_tokens += stats.source_tokens + stats.target_tokens;
    ++window_steps;
    if (step % history_every == 0 || step == config.steps) {
      const double steps_summed = static_cast<double>((step - 1) % history_every + 1);
      record["history"].push_back({{"step", step},
                                   {"loss", history_loss / steps_summed},
                                   {"nll", history_nll / steps_summed},
                                   {"learning_rate", stats.lr}});
      history_loss = history_nll = 0;
    }
    if (step % absl::GetFlag(FLAGS_log_every) == 0 || step == config.steps) {
      const Clock::time_point now = Clock::now();
      const double elapsed = std::chrono::duration<double>(now - start).count();
      const double window = std::chrono::duration<double>(now - window_start).count();
      const double left =
          elapsed / static_cast<double>(step) * static_cast<double>(config.steps - step);
      std::printf(
          "step %5lld/%lld  loss %.4f (nll %.4f)  lr %.2e  %.3f s/step  %.0f tokens/s  elapsed %s  "
          "left %s\n",
          static_cast<long long>(step), static_cast<long long>(config.steps),
          loss_sum / window_steps, nll_sum / window_steps, stats.lr,
          window / static_cast<double>(window_steps), static_cast<double>(window_tokens) / window,
          FormatDuration(elapsed).c_str(), FormatDuration(left).c_str());
      std::fflush(stdout);
      window_start = now;
      loss_sum = nll_sum = 0;
      window_steps = window_tokens = 0;
    }
    if (step % absl::GetFlag(FLAGS_save_every) == 0 || step == config.steps) {
      ATTNSCOPE_RETURN_IF_ERROR(trainer->Save(model_dir));
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      record["steps_done"] = step;
      record["training_seconds"] = seconds;
      record["seconds_per_step"] = seconds / static_cast<double>(step);
      ATTNSCOPE_RETURN_IF_ERROR(
          WriteText(JoinPath(model_dir, absl::GetFlag(FLAGS_record_name)), record.dump(2) + "\n"));
    }
  }
  if (absl::GetFlag(FLAGS_heldout).empty()) return absl::OkStatus();
  return EvaluateHeldOut(model_dir, absl::GetFlag(FLAGS_heldout));
}

}  // namespace
}  // namespace attnscope::train

int main(int argc, char** argv) {
  // --help lists the flags of this file; absl's default looks for a file named after the binary.
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [](absl::string_view path) {
    return absl::EndsWith(path, "tools/train/main.cc");
  };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  absl::SetFlagsUsageConfig(usage_config);
  absl::SetProgramUsageMessage(
      "attnscope-train vocab|train|tokens|translate|evaluate [flags]: builds the default model's "
      "vocabulary, trains it, or measures its tokenization; trains the translation model, or "
      "scores its held-out translations");
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  const std::string command = positional.size() == 2 ? positional[1] : "";
  if (command != "vocab" && command != "train" && command != "tokens" && command != "translate" &&
      command != "evaluate") {
    std::fprintf(stderr,
                 "usage: attnscope-train vocab|train|tokens|translate|evaluate [flags] (--help for "
                 "the flags)\n");
    return 2;
  }
  absl::Status status = attnscope::train::CheckFlags(command);
  if (!status.ok()) {
    std::fprintf(stderr, "attnscope-train %s: %s\n", command.c_str(),
                 std::string(status.message()).c_str());
    return 2;
  }
  if (command == "vocab") {
    status = attnscope::train::BuildVocab();
  } else if (command == "tokens") {
    status = attnscope::train::ReportTokenization(absl::GetFlag(FLAGS_model_dir),
                                                  absl::GetFlag(FLAGS_heldout));
  } else if (command == "translate") {
    status = attnscope::train::Translate();
  } else if (command == "evaluate") {
    status = attnscope::train::EvaluateHeldOut(absl::GetFlag(FLAGS_model_dir),
                                               absl::GetFlag(FLAGS_heldout));
  } else {
    status = attnscope::train::Train();
  }
  if (!status.ok()) {
    std::fprintf(stderr, "attnscope-train %s: %s\n", command.c_str(), status.ToString().c_str());
    return 1;
  }
  return 0;
}

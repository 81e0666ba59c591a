// BPE tokenizer.json files (GPT-2, RoBERTa, Llama 3, Qwen3, Gemma 3, Llama 2, CLIP, openai-gpt
// layouts) read by LoadTokenizer, against Hugging Face tokenizers' own output on every text of the
// multilingual corpus (tokenizer_json_goldens.h), and the reader's refusals.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/tokenizers/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/unit/test_util.h"
#include "tests/unit/tokenizers/tokenizer_json_goldens.h"

namespace attnscope {
namespace {

using ::attnscope::testing::ExpectMatchesTheLibraryOnEveryCorpusLine;
using ::attnscope::testing::kMakeGoldens;
using ::attnscope::testing::MakeTempDir;
using ::attnscope::testing::ReferenceDir;
using ::attnscope::testing::TokenizerJsonPath;
using ::attnscope::testing::WriteFileBytes;
using ::testing::HasSubstr;
using json = nlohmann::json;

class TokenizerJsonGoldenTest : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerJsonGoldenTest, MatchesTheLibraryOnEveryCorpusLine) {
  ExpectMatchesTheLibraryOnEveryCorpusLine(GetParam(), TokenizerKind::kByteLevelBpe);
}

INSTANTIATE_TEST_SUITE_P(Layouts, TokenizerJsonGoldenTest,
                         ::testing::Values("gpt2", "roberta", "llama3", "qwen3", "gemma3",
                                           "bpe-components", "bpe-roberta-prefix", "llama2-spm-bpe",
                                           "bpe-char-components", "bpe-clip-suffix",
                                           "bpe-chars-prefix", "bpe-chars-suffix", "bpe-openai-gpt",
                                           "bpe-bert-components"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// A byte-level BPE tokenizer.json small enough to read: "a" "b" "c", "ab" "abc", "Ġ", "Ġab", the
// GPT-2 layout's components, and `patch` merged over it (null removes a field).
json SmallTokenizerJson(const json& patch = json::object()) {
  json root = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", json::array({{{"id", 7},
                                     {"content", "<|endoftext|>"},
                                     {"single_word", false},
                                     {"lstrip", false},
                                     {"rstrip", false},
                                     {"normalized", false},
                                     {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"post_processor",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", false},
        {"use_regex", true}}},
      {"decoder",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"abc", 4}, {"Ġ", 5}, {"Ġab", 6}}},
        {"merges", json::array({"a b", json::array({"ab", "c"}), "Ġ ab"})}}}};
  root.merge_patch(patch);
  return root;
}

// A checkpoint folder holding `tokenizer_json` as its tokenizer.json.
std::string FolderWith(const json& tokenizer_json) {
  const std::string dir = MakeTempDir();
  WriteFileBytes(dir + "/tokenizer.json", tokenizer_json.dump());
  return dir;
}

TEST(TokenizerJsonBpeTest, ReadsBothMergeFormatsAndTheAddedTokens) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      LoadTokenizer(FolderWith(SmallTokenizerJson()));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<TokenizedText> text = (*tokenizer)->Tokenize("abc ab<|endoftext|>ca");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->tokens, (std::vector<std::string>{"abc", "Ġab", "<|endoftext|>", "c", "a"}));
  EXPECT_EQ(text->ids, (std::vector<int64_t>{4, 6, 7, 2, 0}));
  EXPECT_EQ(text->offsets, (std::vector<Offset>{{0, 3}, {3, 6}, {6, 19}, {19, 20}, {20, 21}}));
  EXPECT_EQ(text->word_ids, (std::vector<int64_t>{0, 1, 2, 3, 3}));
  EXPECT_EQ((*tokenizer)->Decode(text->ids, /*skip_special_tokens=*/true), "abc abca");
  EXPECT_EQ((*tokenizer)->vocab_size(), 8);
}

TEST(TokenizerJsonBpeTest, RefusesAnUnsupportedComponentByName) {
  const std::string dir = FolderWith(SmallTokenizerJson({{"normalizer", {{"type", "ByteLevel"}}}}));
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(dir);
  ASSERT_FALSE(tokenizer.ok());
  // Nothing else in the folder: the refusal is the answer, as InvalidArgument.
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tokenizer.status().message(),
            absl::StrCat("tokenizer.json '", dir,
                         "/tokenizer.json': normalizer type 'ByteLevel' is not supported; "
                         "supported: NFC, NFD, NFKC, NFKD, Replace, Prepend, Precompiled, Strip, "
                         "Lowercase, StripAccents, BertNormalizer, Nmt, Sequence (of those), "
                         "null"));

  for (const auto& [patch, expected] : std::vector<std::pair<json, std::string>>{
           {{{"pre_tokenizer", {{"type", "UnicodeScripts"}}}},
            "pre_tokenizer type 'UnicodeScripts' is not supported; supported: ByteLevel, Split"},
           {{{"pre_tokenizer", {{"type", "Punctuation"}, {"behavior", "Merged"}}}},
            "field 'pre_tokenizer.behavior': expected Isolated, Removed, MergedWithPrevious, "
            "MergedWithNext or Contiguous, got \"Merged\""},
           {{{"normalizer", {{"type", "Prepend"}, {"prepend", 1}}}},
            "field 'normalizer.prepend': expected a string, got 1"},
           {{{"post_processor", {{"type", "BertProcessing"}}}},
            "field 'post_processor.cls': expected [token, id], got null"},
           {{{"pre_tokenizer", {{"type", "CharDelimiterSplit"}, {"delimiter", "ab"}}}},
            "field 'pre_tokenizer.delimiter': expected one character, got \"ab\""},
           {{{"normalizer", {{"type", "BertNormalizer"}, {"strip_accents", "yes"}}}},
            "field 'normalizer.strip_accents': expected null or a boolean, got \"yes\""},
           {{{"decoder", {{"type", "CTC"}}}},
            "decoder type 'CTC' is not supported; supported: ByteLevel, Replace"},
           {{{"model", {{"continuing_subword_prefix", "##"}, {"byte_fallback", true}}}},
            "field 'model.byte_fallback' = true is not supported; supported: false when "
            "model.continuing_subword_prefix or model.end_of_word_suffix is set"},
           {{{"model", {{"end_of_word_suffix", 1}}}},
            "field 'model.end_of_word_suffix': expected null or a string, got 1"},
           {{{"model", {{"type", "WordLevel"}}}},
            "field 'model.unk_token': expected a token of model.vocab"},
           {{{"added_tokens", json::array({{{"id", 5}, {"content", "<zz>"}, {"special", true}}})}},
            "field 'added_tokens[0].id': expected an id no other token has ('\u0120'), got 5"},
           {{{"model", {{"type", "Char"}}}},
            "model.type': expected \"WordPiece\", \"BPE\", \"Unigram\" or \"WordLevel\""}}) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> refused =
        LoadTokenizer(FolderWith(SmallTokenizerJson(patch)));
    ASSERT_FALSE(refused.ok()) << patch.dump();
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << patch.dump();
    EXPECT_THAT(refused.status().message(), HasSubstr(expected)) << patch.dump();
  }
}

TEST(TokenizerJsonBpeTest, AnUnsupportedTokenizerJsonLeavesTheSlowFilesTheirTurn) {
  const std::string dir =
      FolderWith(SmallTokenizerJson({{"pre_tokenizer", {{"type", "UnicodeScripts"}}}}));
  const std::string bart = ::attnscope::testing::TestDataDir() + "/tiny-bart";
  for (const char* name : {"vocab.json", "merges.txt"}) {
    std::filesystem::copy_file(absl::StrCat(bart, "/", name), absl::StrCat(dir, "/", name));
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_GT((*tokenizer)->vocab_size(), 8);  // tiny-bart's, not the tokenizer.json's
}

TEST(TokenizerJsonBpeTest, AMalformedTokenizerJsonIsAnErrorEvenWithSlowFiles) {
  const std::string dir =
      FolderWith(SmallTokenizerJson({{"model", {{"merges", json::array({"a z"})}}}}));
  const std::string bart = ::attnscope::testing::TestDataDir() + "/tiny-bart";
  for (const char* name : {"vocab.json", "merges.txt"}) {
    std::filesystem::copy_file(absl::StrCat(bart, "/", name), absl::StrCat(dir, "/", name));
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(dir);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tokenizer.status().message(),
              HasSubstr("field 'model.merges[0]': expected tokens 'z' in model.vocab"));

  absl::StatusOr<std::unique_ptr<Tokenizer>> bad_regex =
      LoadTokenizer(FolderWith(SmallTokenizerJson(
          {{"pre_tokenizer",
            {{"type", "Sequence"},
             {"pretokenizers", json::array({{{"type", "Split"},
                                             {"pattern", {{"Regex", "(unclosed"}}},
                                             {"behavior", "Isolated"},
                                             {"invert", false}},
                                            {{"type", "ByteLevel"}, {"use_regex", false}}})}}}})));
  ASSERT_FALSE(bad_regex.ok());
  EXPECT_THAT(bad_regex.status().message(),
              HasSubstr("field 'pre_tokenizer.pattern': expected a pattern PCRE2 compiles"));
}

// Whitespace as the library's regex engine (Oniguruma) has it, where PCRE2 differs: U+180E is no
// \s (PCRE2's \h has it), U+0085 and U+00A0 are. No corpus line tells these apart; the expected
// tokens and offsets are the library's (npm tokenizers 0.23.2), written down here.
TEST(TokenizerJsonBpeTest, SplitPatternsSeeWhiteSpaceAsOniguruma) {
  struct Case {
    const char* tokenizer;
    const char* text;
    std::vector<std::string> tokens;
    std::vector<Offset> offsets;
  };
  const std::vector<Case> cases = {
      {"llama3", "a \u180Eb", {"a", "Ġá", "ł", "İ", "b"}, {{0, 1}, {1, 3}, {2, 3}, {2, 3}, {3, 4}}},
      {"llama3", "a \u0085b", {"a", "Ġ", "Âħ", "b"}, {{0, 1}, {1, 2}, {2, 3}, {3, 4}}},
      {"llama3", "a \u00A0b", {"a", "Ġ", "Âłb"}, {{0, 1}, {1, 2}, {2, 4}}},
      {"qwen3", "a \u180Eb", {"a", "Ġá", "ł", "İ", "b"}, {{0, 1}, {1, 3}, {2, 3}, {2, 3}, {3, 4}}},
      {"qwen3", "a \u0085b", {"a", "Ġ", "Â", "ħ", "b"}, {{0, 1}, {1, 2}, {2, 3}, {2, 3}, {3, 4}}},
      {"qwen3", "a \u00A0b", {"a", "Ġ", "Âł", "b"}, {{0, 1}, {1, 2}, {2, 3}, {3, 4}}}};
  std::map<std::string, std::unique_ptr<Tokenizer>> tokenizers;
  for (const Case& c : cases) {
    std::unique_ptr<Tokenizer>& tokenizer = tokenizers[c.tokenizer];
    if (tokenizer == nullptr) {
      const std::string file = TokenizerJsonPath(ReferenceDir(), c.tokenizer);
      ASSERT_TRUE(std::filesystem::exists(file)) << file << ": make it with: " << kMakeGoldens;
      const std::string dir = MakeTempDir();
      std::filesystem::copy_file(file, dir + "/tokenizer.json");
      absl::StatusOr<std::unique_ptr<Tokenizer>> loaded = LoadTokenizer(dir);
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      tokenizer = std::move(loaded).value();
    }
    absl::StatusOr<TokenizedText> text = tokenizer->Tokenize(c.text);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(text->tokens, c.tokens) << c.tokenizer << " " << json(c.text).dump();
    EXPECT_EQ(text->offsets, c.offsets) << c.tokenizer << " " << json(c.text).dump();
  }
}

// What one text gives: the library's output (npm tokenizers 0.23.2), written down here.
struct Expected {
  std::string text;
  std::vector<std::string> tokens;
  std::vector<int64_t> ids;
  std::vector<Offset> offsets;
  std::vector<int64_t> word_ids;
};

void ExpectTokenizes(const Tokenizer& tokenizer, const Expected& expected) {
  absl::StatusOr<TokenizedText> text = tokenizer.Tokenize(expected.text);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->tokens, expected.tokens) << json(expected.text).dump();
  EXPECT_EQ(text->ids, expected.ids) << json(expected.text).dump();
  EXPECT_EQ(text->offsets, expected.offsets) << json(expected.text).dump();
  EXPECT_EQ(text->word_ids, expected.word_ids) << json(expected.text).dump();
}

// The committed Llama 2 layout (tests/data/tiny-llama2-tokenizer), found by LoadTokenizer beside
// the tokenizer.model it was made from. Prepend puts "▁" before each stretch between added
// tokens, aligned with the stretch's first character (here a space, itself a "▁"); the decoders
// write the "▁" back as spaces and strip one from the start only.
TEST(TokenizerJsonBpeTest, LoadsTinyLlama2AndPrependsToEachStretch) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> loaded =
      LoadTokenizer(::attnscope::testing::TestDataDir() + "/tiny-llama2-tokenizer");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Tokenizer& tokenizer = **loaded;
  EXPECT_EQ(tokenizer.kind(), TokenizerKind::kByteLevelBpe);
  EXPECT_EQ(tokenizer.vocab_size(), 4000);
  // model_max_length 1e30: no limit.
  EXPECT_EQ(tokenizer.model_max_length(), kNoMaxLength);
  const TokenizerNormalization normalization = tokenizer.normalization();
  EXPECT_FALSE(normalization.lowercase);
  EXPECT_FALSE(normalization.strip_accents);
  EXPECT_EQ(normalization.unicode_form, "");
  EXPECT_EQ(normalization.description,
            "text kept as written apart from the normalizer's replacements (a space becomes '▁', "
            "shown at the start of the word after it); a character the vocabulary lacks becomes "
            "its UTF-8 bytes as <0xXX> tokens");
  const Expected special = {
      "<s>T\u00F4i</s> \U0001F600",
      {"<s>", "\u2581T", "\u00F4i", "</s>", "\u2581", "\u2581", "<0xF0>", "<0x9F>", "<0x98>",
       "<0x80>"},
      {1, 284, 1863, 2, 3294, 3294, 243, 162, 155, 131},
      {{0, 3}, {3, 4}, {4, 6}, {6, 10}, {10, 11}, {10, 11}, {11, 12}, {11, 12}, {11, 12}, {11, 12}},
      {0, 1, 1, 2, 3, 3, 3, 3, 3, 3}};
  ExpectTokenizes(tokenizer, special);
  EXPECT_EQ(tokenizer.Decode(special.ids, /*skip_special_tokens=*/false),
            "<s> T\u00F4i</s>  \U0001F600");
  const Expected spaces = {" T\u00F4i  y\u00EAu",
                           {"\u2581", "\u2581T", "\u00F4i", "\u2581", "\u2581y", "\u00EA", "u"},
                           {3294, 284, 1863, 3294, 358, 3369, 3306},
                           {{0, 1}, {0, 2}, {2, 4}, {4, 5}, {5, 7}, {7, 8}, {8, 9}},
                           {0, 0, 0, 0, 0, 0, 0}};
  ExpectTokenizes(tokenizer, spaces);
  EXPECT_EQ(tokenizer.Decode(spaces.ids, /*skip_special_tokens=*/false), " T\u00F4i  y\u00EAu");
}

// A character-level BPE tokenizer.json (SentencePiece's kind, unknown characters fused into one
// <unk>, no byte fallback) with `normalizer` and `pre_tokenizer`.
json SmallCharBpeJson(const json& normalizer, const json& pre_tokenizer) {
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", json::array({{{"id", 0},
                                         {"content", "<unk>"},
                                         {"single_word", false},
                                         {"lstrip", false},
                                         {"rstrip", false},
                                         {"normalized", false},
                                         {"special", true}}})},
          {"normalizer", normalizer},
          {"pre_tokenizer", pre_tokenizer},
          {"post_processor", nullptr},
          {"decoder", {{"type", "Fuse"}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", "<unk>"},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", true},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab",
             {{"<unk>", 0},
              {"a", 1},
              {"b", 2},
              {"1", 3},
              {"2", 4},
              {"12", 5},
              {"!", 6},
              {"?", 7},
              {"ab", 8}}},
            {"merges", json::array({"a b", "1 2"})}}}};
}

// The settings no corpus layout has: Digits with runs of digits kept together, Punctuation with
// runs kept together (Contiguous), and a Prepend of two characters, both aligned with the first
// character of the text ("ab" spans "1").
TEST(TokenizerJsonBpeTest, DigitsPunctuationRunsAndALongerPrepend) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(FolderWith(SmallCharBpeJson(
      {{"type", "Prepend"}, {"prepend", "ab"}},
      {{"type", "Sequence"},
       {"pretokenizers", json::array({{{"type", "WhitespaceSplit"}},
                                      {{"type", "Digits"}, {"individual_digits", false}},
                                      {{"type", "Punctuation"}, {"behavior", "Contiguous"}}})}})));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const Expected expected = {
      "12!?\u3000b x12+ab!",
      {"ab", "12", "!", "?", "b", "<unk>", "12", "<unk>", "ab", "!"},
      {8, 5, 6, 7, 2, 0, 5, 0, 8, 6},
      {{0, 1}, {0, 2}, {2, 3}, {3, 4}, {5, 6}, {7, 8}, {8, 10}, {10, 11}, {11, 13}, {13, 14}},
      {0, 1, 2, 2, 3, 4, 5, 6, 7, 8}};
  ExpectTokenizes(**tokenizer, expected);
  EXPECT_EQ((*tokenizer)->Decode(expected.ids, /*skip_special_tokens=*/false),
            "ab12!?b<unk>12<unk>ab!");
  absl::StatusOr<TokenizedText> empty = (*tokenizer)->Tokenize("");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->ids.empty());
}

// A pattern that backtracks catastrophically ((a+)+ before a "b" that never comes) makes PCRE2
// give up at its match limit: the text is refused with the pattern named, where splitting the
// rest as one piece, as PCRE2's error read as "no more matches" did, gave other tokens silently.
TEST(TokenizerJsonBpeTest, APatternPcre2GivesUpOnRefusesTheTextNamingIt) {
  const json split = {{"type", "Split"},
                      {"pattern", {{"Regex", "(?:a+)+b|."}}},
                      {"behavior", "Isolated"},
                      {"invert", false}};
  const json replace = {
      {"type", "Replace"}, {"pattern", {{"Regex", "(?:a+)+b"}}}, {"content", "c"}};
  for (const auto& [what, patch] : std::vector<std::pair<std::string, json>>{
           {"pre_tokenizer Split", {{"pre_tokenizer", split}}},
           {"normalizer Replace", {{"normalizer", replace}}}}) {
    SCOPED_TRACE(what);
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
        LoadTokenizer(FolderWith(SmallTokenizerJson(patch)));
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    // Short runs stay within the limit: each "a" a piece of its own.
    absl::StatusOr<TokenizedText> short_run = (*tokenizer)->Tokenize(std::string(12, 'a') + "xyb");
    ASSERT_TRUE(short_run.ok()) << short_run.status();
    EXPECT_EQ(short_run->tokens.front(), "a");
    absl::StatusOr<TokenizedText> long_run = (*tokenizer)->Tokenize(std::string(40, 'a') + "xyb");
    ASSERT_FALSE(long_run.ok());
    EXPECT_EQ(long_run.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(long_run.status().message(), HasSubstr("tokenizer pattern '(?:a+)+b"));
    EXPECT_THAT(long_run.status().message(), HasSubstr("backtracks catastrophically"));
  }
}

// The Whitespace pre-tokenizer's classes where Unicode's categories alone would mislead: circled
// letters (So) and letter numbers (Nl) are word characters, other numbers (No) are not, nor is
// U+180E; connector punctuation and the joiners are; U+00A0 is whitespace.
TEST(TokenizerJsonBpeTest, WhitespaceKeepsRunsOfWordAndOtherCharactersAsOniguruma) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      LoadTokenizer(FolderWith(SmallCharBpeJson(nullptr, {{"type", "Whitespace"}})));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  ExpectTokenizes(**tokenizer, {"\u24B6\u00B2b x_y\u203Fz a\u200Db \u00BD\u216B!? \u180Ea\u00A0b",
                                {"<unk>", "<unk>", "b", "<unk>", "a", "<unk>", "b", "<unk>",
                                 "<unk>", "!", "?", "<unk>", "a", "b"},
                                {0, 0, 2, 0, 1, 0, 2, 0, 0, 6, 7, 0, 1, 2},
                                {{0, 1},
                                 {1, 2},
                                 {2, 3},
                                 {4, 9},
                                 {10, 11},
                                 {11, 12},
                                 {12, 13},
                                 {14, 15},
                                 {15, 16},
                                 {16, 17},
                                 {17, 18},
                                 {19, 20},
                                 {20, 21},
                                 {22, 23}},
                                {0, 1, 2, 3, 4, 4, 4, 5, 6, 7, 7, 8, 9, 10}});
}

// ModelInfo's normalization of bpe-char-components: NFKC then NFD (the last form counts), no
// byte fallback, no replacements.
TEST(TokenizerJsonBpeTest, SaysWhatTheNormalizerDoes) {
  const std::string file = TokenizerJsonPath(ReferenceDir(), "bpe-char-components");
  ASSERT_TRUE(std::filesystem::exists(file)) << file << ": make it with: " << kMakeGoldens;
  const std::string dir = MakeTempDir();
  std::filesystem::copy_file(file, dir + "/tokenizer.json");
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const TokenizerNormalization normalization = (*tokenizer)->normalization();
  EXPECT_FALSE(normalization.lowercase);
  EXPECT_FALSE(normalization.strip_accents);
  EXPECT_EQ(normalization.unicode_form, "NFD");
  EXPECT_EQ(normalization.description,
            "Unicode NFD, otherwise kept as written; a character the vocabulary lacks becomes the "
            "unknown token");
}

// The fuzz target's BPE seeds (fuzz/make_corpus.py) load and tokenize, so that the fuzzer starts
// inside the reader rather than at its first refusal.
TEST(TokenizerJsonBpeTest, TheFuzzSeedsLoad) {
  for (const char* seed :
       {"bpe_llama3_layout", "bpe_roberta_layout", "bpe_gemma_layout", "bpe_llama2_layout",
        "bpe_openai_gpt_layout", "bpe_bert_components_layout", "wordlevel_layout",
        "unigram_byte_fallback"}) {
    const std::string dir = MakeTempDir();
    std::filesystem::copy_file(
        absl::StrCat(ATTNSCOPE_SOURCE_DIR, "/fuzz/corpus/tokenizer_json/", seed),
        dir + "/tokenizer.json");
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(dir);
    ASSERT_TRUE(tokenizer.ok()) << seed << ": " << tokenizer.status();
    absl::StatusOr<Encoding> encoding =
        (*tokenizer)
            ->EncodePair("Tôi yêu Việt Nam <mask> [MASK]</s>  x", "I'LL see", EncodeOptions());
    ASSERT_TRUE(encoding.ok()) << seed << ": " << encoding.status();
    EXPECT_GT(encoding->size(), 10u) << seed;
  }
}

// The BertNormalizer of openai-gpt's layout keeps unassigned code points, as the library's
// is_control does (TokenizerJsonWordPieceTest.UnassignedCodePointsStayAsTheLibraryKeepsThem).
// Expected: the library's encoding of this text.
TEST(TokenizerJsonBpeTest, OpenAiGptKeepsUnassignedCodePoints) {
  ::attnscope::testing::ExpectEncodes("bpe-openai-gpt", "a\u0378 \uFFFE b\U0001FA89 \U0010FFFFc",
                                      {"a", "<unk>", "<unk>", "b", "<unk>", "<unk>", "c</w>"},
                                      {{0, 1}, {1, 2}, {3, 4}, {5, 6}, {6, 7}, {8, 9}, {9, 10}});
}

}  // namespace
}  // namespace attnscope

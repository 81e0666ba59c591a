#include "models/tokenizers/bpe_tokenizer.h"

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/tokenizers/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

using ::attnscope::testing::IdsOrMinusOne;
using ::attnscope::testing::MakeTempDir;
using ::attnscope::testing::OffsetsFromJson;
using ::attnscope::testing::ReadFileBytes;
using ::attnscope::testing::TestDataDir;
using ::attnscope::testing::WriteFileBytes;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using json = nlohmann::json;

std::string BartDir() { return TestDataDir() + "/tiny-bart"; }

// tests/data/make_bpe_tokenizer.py: GPT-2's encoder.py with the special-token, offset and template
// rules of Hugging Face `tokenizers`.
json Golden() { return json::parse(ReadFileBytes(BartDir() + "/bpe_tokenizer_golden.json")); }

std::unique_ptr<Tokenizer> LoadBart() {
  auto tokenizer = LoadTokenizer(BartDir());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

void ExpectEncodes(const Encoding& encoding, const json& expected) {
  EXPECT_EQ(encoding.input_ids, expected["input_ids"].get<std::vector<int64_t>>());
  EXPECT_EQ(encoding.tokens, expected["tokens"].get<std::vector<std::string>>());
  EXPECT_EQ(encoding.offsets, OffsetsFromJson(expected["offsets"]));
  EXPECT_EQ(encoding.byte_offsets, OffsetsFromJson(expected["byte_offsets"]));
  EXPECT_EQ(encoding.word_ids, IdsOrMinusOne(expected["word_ids"]));
  EXPECT_EQ(encoding.sequence_ids, IdsOrMinusOne(expected["sequence_ids"]));
  // RobertaProcessing: every type id is 0, also in pairs.
  EXPECT_EQ(encoding.token_type_ids, std::vector<int64_t>(encoding.size(), 0));
  for (size_t i = 0; i < encoding.size(); ++i) {
    EXPECT_EQ(encoding.special_tokens_mask[i], expected["sequence_ids"][i].is_null() ? 1 : 0);
  }
}

// A byte-level BPE in `dir` from the given files (tokenizer_config.json only when not empty).
void WriteTokenizer(const std::string& dir, const std::string& vocab, const std::string& merges,
                    const std::string& tokenizer_config = "") {
  WriteFileBytes(dir + "/vocab.json", vocab);
  WriteFileBytes(dir + "/merges.txt", merges);
  if (!tokenizer_config.empty()) WriteFileBytes(dir + "/tokenizer_config.json", tokenizer_config);
}

TEST(BpeTokenizerTest, LoadsTinyBartFiles) {
  auto tokenizer = LoadBart();
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->kind(), TokenizerKind::kByteLevelBpe);
  EXPECT_EQ(tokenizer->vocab_size(), Golden()["vocab_size"].get<int64_t>());
  EXPECT_EQ(tokenizer->IdToToken(0), "<s>");
  EXPECT_EQ(tokenizer->IdToToken(2), "</s>");
  EXPECT_EQ(tokenizer->IdToToken(tokenizer->vocab_size() - 1), "<mask>");
  EXPECT_EQ(tokenizer->IdToToken(tokenizer->vocab_size()), "");
  EXPECT_EQ(tokenizer->pad_token_id(), 1);
  EXPECT_EQ(tokenizer->model_max_length(), 64);
  const TokenizerNormalization normalization = tokenizer->normalization();
  EXPECT_FALSE(normalization.lowercase);
  EXPECT_FALSE(normalization.strip_accents);
  EXPECT_EQ(normalization.unicode_form, "");
  EXPECT_THAT(normalization.description, HasSubstr("as written"));
}

TEST(BpeTokenizerTest, EncodeMatchesTheReference) {
  auto tokenizer = LoadBart();
  ASSERT_NE(tokenizer, nullptr);
  const json golden = Golden();
  for (const json& expected : golden["encode"]) {
    SCOPED_TRACE(expected["text"].dump());
    absl::StatusOr<Encoding> encoding =
        tokenizer->Encode(expected["text"].get<std::string>(), EncodeOptions());
    ASSERT_TRUE(encoding.ok()) << encoding.status();
    ExpectEncodes(*encoding, expected);
  }
}

TEST(BpeTokenizerTest, EncodePairMatchesTheReference) {
  auto tokenizer = LoadBart();
  ASSERT_NE(tokenizer, nullptr);
  const json golden = Golden();
  for (const json& expected : golden["pairs"]) {
    SCOPED_TRACE(expected["text"].dump() + " " + expected["text_pair"].dump());
    absl::StatusOr<Encoding> encoding =
        tokenizer->EncodePair(expected["text"].get<std::string>(),
                              expected["text_pair"].get<std::string>(), EncodeOptions());
    ASSERT_TRUE(encoding.ok()) << encoding.status();
    ExpectEncodes(*encoding, expected);
  }
}

TEST(BpeTokenizerTest, DecodeMatchesTheReference) {
  auto tokenizer = LoadBart();
  ASSERT_NE(tokenizer, nullptr);
  const json golden = Golden();
  for (const json& expected : golden["decode"]) {
    EXPECT_EQ(tokenizer->Decode(expected["ids"].get<std::vector<int64_t>>(),
                                expected["skip_special_tokens"].get<bool>()),
              expected["text"].get<std::string>())
        << expected.dump();
  }
}

// Byte-level BPE loses nothing: decoding gives back the text, spaces, newlines, decomposed accents
// and emoji included. Only the mask token's lstrip eats the whitespace before it.
TEST(BpeTokenizerTest, DecodeRoundTrips) {
  auto tokenizer = LoadBart();
  ASSERT_NE(tokenizer, nullptr);
  const json golden = Golden();
  for (const json& expected : golden["encode"]) {
    const std::string text = expected["text"];
    const std::vector<int64_t> ids = expected["input_ids"];
    if (text.find("<mask>") != std::string::npos) {
      EXPECT_EQ(tokenizer->Decode(ids, /*skip_special_tokens=*/false).find(" <mask>"),
                std::string::npos);
      continue;
    }
    EXPECT_EQ(tokenizer->Decode(ids, /*skip_special_tokens=*/false), "<s>" + text + "</s>");
    if (text.find("<s>") == std::string::npos) {
      EXPECT_EQ(tokenizer->Decode(ids, /*skip_special_tokens=*/true), text);
    }
  }
  EXPECT_EQ(tokenizer->Decode(tokenizer->Encode("is <mask>.", EncodeOptions())->input_ids, false),
            "<s>is<mask>.</s>");
}

TEST(BpeTokenizerTest, TokenizeHasNoSpecialTokensAndCountsWords) {
  auto tokenizer = LoadBart();
  ASSERT_NE(tokenizer, nullptr);
  absl::StatusOr<TokenizedText> tokens = tokenizer->Tokenize("Hello world <mask>");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 4u);
  // "<mask>" took the space before it, and trim_offsets leaves it out of its offsets.
  EXPECT_EQ(tokens->tokens.back(), " <mask>");
  EXPECT_EQ(tokens->ids.back(), tokenizer->vocab_size() - 1);
  EXPECT_EQ(tokens->offsets.back(), (Offset{12, 18}));
  EXPECT_THAT(tokens->word_ids, ElementsAre(0, 0, 1, 2));
}

TEST(BpeTokenizerTest, TruncatesAndPadsAroundTheTemplate) {
  auto tokenizer = LoadBart();
  ASSERT_NE(tokenizer, nullptr);
  EncodeOptions options;
  options.truncation = Truncation::kLongestFirst;
  options.max_length = 4;
  options.pad_to = 6;
  absl::StatusOr<Encoding> encoding =
      tokenizer->Encode("The quick brown fox jumps over the lazy dog.", options);
  ASSERT_TRUE(encoding.ok()) << encoding.status();
  EXPECT_THAT(encoding->tokens, ElementsAre("<s>", "The", "Ġquick", "</s>", "<pad>", "<pad>"));
  EXPECT_THAT(encoding->attention_mask, ElementsAre(1, 1, 1, 1, 0, 0));
  EXPECT_EQ(encoding->input_ids[4], 1);

  options.max_length = 6;
  options.pad_to = 0;
  encoding = tokenizer->EncodePair("Hello world", "안녕하세요", options);
  ASSERT_TRUE(encoding.ok()) << encoding.status();
  EXPECT_EQ(encoding->size(), 6u);
  EXPECT_EQ(encoding->tokens[0], "<s>");
  EXPECT_EQ(encoding->tokens[2], "</s>");
  EXPECT_EQ(encoding->tokens[3], "</s>");
  EXPECT_EQ(encoding->tokens[5], "</s>");
}

TEST(BpeTokenizerTest, RefusesInvalidUtf8) {
  auto tokenizer = LoadBart();
  ASSERT_NE(tokenizer, nullptr);
  for (const std::string& text :
       {std::string("ab\xC3"), std::string("\xED\xA0\x80"), std::string("x\xC0\x80y")}) {
    const absl::Status status = tokenizer->Tokenize(text).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << text;
  }
  EXPECT_EQ(tokenizer->EncodePair("ok", "\xFF", EncodeOptions()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A vocabulary without 'z' (so that it becomes <unk>) nor <mask> (added with the next id), with a
// token outside the byte table, and merges.txt without a "#version" line and with CRLF endings.
TEST(BpeTokenizerTest, SmallVocabularyUnknownBytesAndAddedSpecials) {
  const std::string dir = MakeTempDir();
  WriteTokenizer(dir,
                 R"({"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "a": 4, "b": 5, "ab": 6,
                     "Ġ": 7, "Ġab": 8, "안": 9})",
                 "a b\r\n\xC4\xA0 ab\r\n");
  auto tokenizer = LoadTokenizer(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->vocab_size(), 11);
  EXPECT_EQ((*tokenizer)->IdToToken(10), "<mask>");
  EXPECT_EQ((*tokenizer)->model_max_length(), kNoMaxLength);
  absl::StatusOr<TokenizedText> tokens = (*tokenizer)->Tokenize("ab zab ab");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_THAT(tokens->tokens, ElementsAre("ab", "Ġ", "<unk>", "ab", "Ġab"));
  EXPECT_THAT(tokens->ids, ElementsAre(6, 7, 3, 6, 8));
  EXPECT_THAT(tokens->offsets,
              ElementsAre(Offset{0, 2}, Offset{3, 3}, Offset{3, 4}, Offset{4, 6}, Offset{7, 9}));
  EXPECT_THAT(tokens->word_ids, ElementsAre(0, 1, 1, 1, 2));
  // A token whose characters are not byte characters decodes to itself.
  EXPECT_EQ((*tokenizer)->Decode({9, 7, 6, 10}, false), "안 ab<mask>");
  EXPECT_EQ((*tokenizer)->Decode({9, 7, 6, 10}, true), "안 ab");
}

TEST(BpeTokenizerTest, TrimOffsetsCanBeTurnedOff) {
  const std::string dir = MakeTempDir();
  for (const char* name : {"vocab.json", "merges.txt"}) {
    std::filesystem::copy_file(BartDir() + "/" + name, dir + "/" + name);
  }
  WriteFileBytes(dir + "/tokenizer_config.json", R"({"trim_offsets": false})");
  auto tokenizer = LoadTokenizer(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<TokenizedText> tokens = (*tokenizer)->Tokenize("Hello world  <mask>");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 4u);
  EXPECT_EQ(tokens->tokens[2], "Ġworld");
  EXPECT_EQ(tokens->offsets[2], (Offset{5, 11}));
  EXPECT_EQ(tokens->byte_offsets[2], (Offset{5, 11}));
  EXPECT_EQ(tokens->tokens[3], "  <mask>");
  EXPECT_EQ(tokens->offsets[3], (Offset{11, 19}));
}

TEST(BpeTokenizerTest, MalformedMergesNameFileAndLine) {
  const std::string vocab = ReadFileBytes(BartDir() + "/vocab.json");
  const std::string dir = MakeTempDir();
  const std::string merges_path = dir + "/merges.txt";
  for (const auto& [merges, message] : std::vector<std::pair<std::string, std::string>>{
           {"#version: 0.2\nh e\nh e l\n",
            "line 3: expected two tokens separated by a space, "
            "got 'h e l'"},
           {"#version: 0.2\nh\n", "line 2: expected two tokens separated by a space, got 'h'"},
           {"#version: 0.2\n\na b\n", "line 2: expected two tokens"},
           {"#version: 0.2\nh e\nq z\n",
            "line 3: merged token 'qz': expected an entry in "
            "vocab.json, got none"},
           {"#version: 0.2\nh \xE2\x82\xAC\n", "line 2: token '\xE2\x82\xAC': expected an entry"},
           {"\xEF\xBB\xBF#version: 0.2\nh e\n",
            "line 1: expected text without a byte-order mark, got one"}}) {
    SCOPED_TRACE(merges);
    WriteTokenizer(dir, vocab, merges);
    const absl::Status status = LoadTokenizer(dir).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("merges.txt '" + merges_path + "': " + message));
  }
}

TEST(BpeTokenizerTest, MalformedVocabularyNamesTheFile) {
  const std::string dir = MakeTempDir();
  const std::string vocab_path = dir + "/vocab.json";
  for (const auto& [vocab, message] : std::vector<std::pair<std::string, std::string>>{
           {"[\"<s>\", \"</s>\"]",
            "expected a non-empty JSON object of token -> id, got a JSON array"},
           {"{\"<s>\": 0,",
            "expected a non-empty JSON object of token -> id, got malformed JSON (parse error at "
            "line 1, column 11: syntax error while parsing object key - unexpected end of input; "
            "expected string literal)"},
           {"{}", "expected a non-empty JSON object of token -> id, got an empty JSON object"},
           // A deeply nested array was dumped into the message, recursing once per level.
           {std::string(1 << 20, '[') + std::string(1 << 20, ']'),
            "expected a non-empty JSON object of token -> id, got a JSON array"},
           {R"({"<s>": 0, "a": 0})", "token 'a': expected a distinct id in [0, 2), got 0"},
           {R"({"<s>": 0, "a": 5})", "token 'a': expected a distinct id in [0, 2), got 5"},
           {R"({"<s>": 0, "a": "1"})", "token 'a': expected a distinct id in [0, 2), got \"1\""}}) {
    SCOPED_TRACE(vocab);
    WriteTokenizer(dir, vocab, "#version: 0.2\n");
    const absl::Status status = LoadTokenizer(dir).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("vocab.json '" + vocab_path + "': " + message));
  }
}

TEST(BpeTokenizerTest, RefusesWhatItDoesNotImplement) {
  const std::string dir = MakeTempDir();
  WriteTokenizer(dir, R"({"<s>": 0, "</s>": 1, "<unk>": 2})", "#version: 0.2\n",
                 R"({"add_prefix_space": true})");
  absl::Status status = LoadTokenizer(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("field 'add_prefix_space': expected false"));

  BpeOptions options;
  options.sep_token = "";
  status = BpeTokenizer::FromFiles(dir + "/vocab.json", dir + "/merges.txt", options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("sep_token: expected a token"));

  status =
      BpeTokenizer::FromFiles(dir + "/vocab.json", dir + "/missing.txt", BpeOptions()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
}

// Merging keeps a queue of candidate pairs (`tokenizers` Word::merge_all), so one long word costs
// n log n, not the n^2 of merging by rescanning the word.
TEST(BpeTokenizerTest, LongWordsTokenizeQuickly) {
  auto tokenizer = LoadBart();
  ASSERT_NE(tokenizer, nullptr);
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "안녕하세요";
  absl::StatusOr<TokenizedText> tokens = tokenizer->Tokenize(text);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(tokenizer->Decode(tokens->ids, true), text);
  EXPECT_EQ(tokens->offsets.back().end, 100000);
  EXPECT_EQ(tokens->word_ids.back(), 0);
}

}  // namespace
}  // namespace attnscope

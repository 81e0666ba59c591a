#include "models/tokenizers/marian_tokenizer.h"

#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/tokenizers/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

using ::attnscope::testing::MakeTempDir;
using ::attnscope::testing::ReadFileBytes;
using ::attnscope::testing::TestDataDir;
using ::attnscope::testing::WriteFileBytes;
using ::testing::HasSubstr;
using json = nlohmann::json;

std::string MarianDir() { return TestDataDir() + "/tiny-marian"; }

// tests/data/make_marian_tokenizer.py: SentencePiece's Python encoder and decoder with
// transformers' MarianTokenizer logic on top.
json Golden() { return json::parse(ReadFileBytes(MarianDir() + "/marian_tokenizer_golden.json")); }

std::unique_ptr<Tokenizer> LoadMarian() {
  auto tokenizer = LoadTokenizer(MarianDir());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

// A copy of tiny-marian's tokenizer files that a test may break.
std::string CopyOfMarianTokenizer() {
  const std::string dir = MakeTempDir();
  for (const char* name : {"source.spm", "target.spm", "vocab.json", "tokenizer_config.json"}) {
    std::filesystem::copy_file(MarianDir() + "/" + name, dir + "/" + name);
  }
  return dir;
}

void ExpectEncodes(const Encoding& encoding, const json& expected) {
  const std::vector<int64_t> ids = expected["input_ids"];
  EXPECT_EQ(encoding.input_ids, ids);
  std::vector<std::string> tokens = expected["tokens"];
  tokens.push_back("</s>");
  EXPECT_EQ(encoding.tokens, tokens);
  const std::vector<std::vector<int64_t>> offsets = expected["offsets"];
  ASSERT_EQ(encoding.offsets.size(), offsets.size() + 1);
  for (size_t i = 0; i < offsets.size(); ++i) {
    EXPECT_EQ(encoding.offsets[i], (Offset{offsets[i][0], offsets[i][1]})) << "token " << i;
  }
  EXPECT_EQ(encoding.offsets.back(), (Offset{0, 0}));
  EXPECT_EQ(encoding.special_tokens_mask.back(), 1);
}

TEST(MarianTokenizerTest, LoadsSourceTargetAndSharedVocabulary) {
  auto tokenizer = LoadMarian();
  ASSERT_NE(tokenizer, nullptr);
  const json golden = Golden();
  EXPECT_EQ(tokenizer->vocab_size(), golden["vocab_size"].get<int64_t>());
  EXPECT_EQ(tokenizer->IdToToken(0), "</s>");
  EXPECT_EQ(tokenizer->IdToToken(1), "<unk>");
  EXPECT_EQ(tokenizer->pad_token_id(), tokenizer->vocab_size() - 1);
  EXPECT_EQ(tokenizer->model_max_length(), 64);
  EXPECT_EQ(tokenizer->kind(), TokenizerKind::kSentencePiece);
  EXPECT_EQ(tokenizer->normalization().unicode_form, "NFKC");
}

TEST(MarianTokenizerTest, SourceTextsMatchMarianTokenizer) {
  auto tokenizer = LoadMarian();
  ASSERT_NE(tokenizer, nullptr);
  const json golden = Golden();
  for (const json& expected : golden["source"]) {
    SCOPED_TRACE(expected["text"].get<std::string>());
    absl::StatusOr<Encoding> encoding =
        tokenizer->Encode(expected["text"].get<std::string>(), EncodeOptions());
    ASSERT_TRUE(encoding.ok()) << encoding.status();
    ExpectEncodes(*encoding, expected);
  }
}

TEST(MarianTokenizerTest, TargetTextsUseTheTargetModel) {
  auto tokenizer = LoadMarian();
  ASSERT_NE(tokenizer, nullptr);
  const json golden = Golden();
  for (const json& expected : golden["target"]) {
    SCOPED_TRACE(expected["text"].get<std::string>());
    absl::StatusOr<Encoding> encoding =
        tokenizer->EncodeTarget(expected["text"].get<std::string>(), EncodeOptions());
    ASSERT_TRUE(encoding.ok()) << encoding.status();
    ExpectEncodes(*encoding, expected);
  }
  // The source model has no Hangul: the same text is <unk> there.
  absl::StatusOr<TokenizedText> source = tokenizer->Tokenize("표 삽입");
  ASSERT_TRUE(source.ok());
  EXPECT_NE(source->ids, Golden()["target"][1]["input_ids"].get<std::vector<int64_t>>());
}

TEST(MarianTokenizerTest, LanguageCodeIsOneWord) {
  auto tokenizer = LoadMarian();
  ASSERT_NE(tokenizer, nullptr);
  absl::StatusOr<TokenizedText> tokens = tokenizer->Tokenize(">>vie<< Inserting Tables");
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(tokens->tokens[0], ">>vie<<");
  EXPECT_EQ(tokens->word_ids[0], 0);
  EXPECT_EQ(tokens->word_ids[1], 1);  // "▁Insert"
  EXPECT_EQ(tokens->byte_offsets[1], (Offset{8, 14}));
}

TEST(MarianTokenizerTest, DecodeMatchesMarianTokenizer) {
  auto tokenizer = LoadMarian();
  ASSERT_NE(tokenizer, nullptr);
  const json golden = Golden();
  for (const json& expected : golden["decode"]) {
    EXPECT_EQ(tokenizer->Decode(expected["ids"].get<std::vector<int64_t>>(),
                                expected["skip_special_tokens"].get<bool>()),
              expected["text"].get<std::string>())
        << expected.dump();
  }
  EXPECT_EQ(tokenizer->Decode({-1, 100000}, /*skip_special_tokens=*/true), "");
}

TEST(MarianTokenizerTest, RefusesInvalidUtf8) {
  auto tokenizer = LoadMarian();
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->Tokenize("ab\xff").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tokenizer->TokenizeTarget("\xc3").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MarianTokenizerTest, MissingOrBrokenFilesNameTheFile) {
  {
    const std::string dir = CopyOfMarianTokenizer();
    std::filesystem::remove(dir + "/target.spm");
    const absl::Status status = LoadTokenizer(dir).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(status.message(), HasSubstr("target.spm': expected a file, got nothing there"));
  }
  {
    const std::string dir = CopyOfMarianTokenizer();
    std::filesystem::remove(dir + "/vocab.json");
    const absl::Status status = LoadTokenizer(dir).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(status.message(), HasSubstr("vocab.json"));
  }
  {
    const std::string dir = CopyOfMarianTokenizer();
    WriteFileBytes(dir + "/source.spm", "not a model");
    const absl::Status status = LoadTokenizer(dir).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("source.spm': expected a SentencePiece model"));
  }
  {
    const std::string dir = CopyOfMarianTokenizer();
    WriteFileBytes(dir + "/vocab.json", R"({"</s>": 0, "<unk>": 2})");
    const absl::Status status = LoadTokenizer(dir).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(),
                HasSubstr("piece '<unk>': expected a distinct id in [0, 2), got 2"));
  }
  {
    const std::string dir = CopyOfMarianTokenizer();
    WriteFileBytes(dir + "/vocab.json", R"({"</s>": 0, "<unk>": 1})");
    const absl::Status status = LoadTokenizer(dir).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("pad_token '<pad>': expected an entry for it"));
  }
  {
    const std::string dir = CopyOfMarianTokenizer();
    WriteFileBytes(dir + "/tokenizer_config.json", R"({"separate_vocabs": true})");
    const absl::Status status = LoadTokenizer(dir).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("field 'separate_vocabs': expected false"));
  }
}

}  // namespace
}  // namespace attnscope

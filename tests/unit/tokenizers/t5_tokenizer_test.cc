// T5Tokenizer (models/tokenizers/t5_tokenizer.h) against tests/data/make_t5_tokenizer.py:
// SentencePiece's Python encoder and decoder with transformers' T5Tokenizer logic on top (append
// "</s>", no BOS, sentinels numbered from the end, special tokens dropped on decoding).
#include "models/tokenizers/t5_tokenizer.h"

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

std::string T5Dir() { return TestDataDir() + "/tiny-t5"; }

json Golden() { return json::parse(ReadFileBytes(T5Dir() + "/t5_tokenizer_golden.json")); }

std::unique_ptr<Tokenizer> LoadT5() {
  auto tokenizer = LoadTokenizer(T5Dir());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

TEST(T5TokenizerTest, LoadsSpieceModelWithSentinels) {
  auto tokenizer = LoadT5();
  ASSERT_NE(tokenizer, nullptr);
  const json golden = Golden();
  EXPECT_EQ(tokenizer->vocab_size(), golden["vocab_size"].get<int64_t>());
  EXPECT_EQ(tokenizer->IdToToken(0), "<pad>");
  EXPECT_EQ(tokenizer->IdToToken(1), "</s>");
  EXPECT_EQ(tokenizer->IdToToken(2), "<unk>");
  EXPECT_EQ(tokenizer->pad_token_id(), 0);
  for (const auto& [sentinel, id] : golden["sentinels"].items()) {
    EXPECT_EQ(tokenizer->IdToToken(id.get<int64_t>()), sentinel);
  }
  EXPECT_EQ(tokenizer->IdToToken(tokenizer->vocab_size()), "");
  EXPECT_EQ(tokenizer->model_max_length(), 64);
  EXPECT_EQ(tokenizer->kind(), TokenizerKind::kSentencePiece);
  EXPECT_EQ(tokenizer->normalization().unicode_form, "NFKC");
  // The tokenizer's vocabulary is the model's (config.json's vocab_size).
  const json config = json::parse(ReadFileBytes(T5Dir() + "/config.json"));
  EXPECT_EQ(tokenizer->vocab_size(), config["vocab_size"].get<int64_t>());
}

TEST(T5TokenizerTest, TextsMatchT5Tokenizer) {
  auto tokenizer = LoadT5();
  ASSERT_NE(tokenizer, nullptr);
  for (const json& expected : Golden()["encode"]) {
    SCOPED_TRACE(expected["text"].get<std::string>());
    absl::StatusOr<Encoding> encoding =
        tokenizer->Encode(expected["text"].get<std::string>(), EncodeOptions());
    ASSERT_TRUE(encoding.ok()) << encoding.status();
    EXPECT_EQ(encoding->input_ids, expected["input_ids"].get<std::vector<int64_t>>());
    std::vector<std::string> tokens = expected["tokens"];
    tokens.push_back("</s>");
    EXPECT_EQ(encoding->tokens, tokens);
    const std::vector<std::vector<int64_t>> offsets = expected["offsets"];
    ASSERT_EQ(encoding->offsets.size(), offsets.size() + 1);
    for (size_t i = 0; i < offsets.size(); ++i) {
      EXPECT_EQ(encoding->offsets[i], (Offset{offsets[i][0], offsets[i][1]})) << "token " << i;
    }
    EXPECT_EQ(encoding->offsets.back(), (Offset{0, 0}));
    EXPECT_EQ(encoding->special_tokens_mask.back(), 1);
    EXPECT_EQ(encoding->token_type_ids, std::vector<int64_t>(encoding->size(), 0));
  }
}

// T5Tokenizer's pair template "$A </s> $B </s>", every type id 0.
TEST(T5TokenizerTest, PairsAreJoinedByEos) {
  auto tokenizer = LoadT5();
  ASSERT_NE(tokenizer, nullptr);
  const json golden = Golden();
  const json& first = golden["encode"][0];
  const json& second = golden["encode"][2];
  absl::StatusOr<Encoding> encoding = tokenizer->EncodePair(
      first["text"].get<std::string>(), second["text"].get<std::string>(), EncodeOptions());
  ASSERT_TRUE(encoding.ok()) << encoding.status();
  std::vector<int64_t> ids = first["input_ids"];
  for (int64_t id : second["input_ids"]) ids.push_back(id);
  EXPECT_EQ(encoding->input_ids, ids);
  EXPECT_EQ(encoding->token_type_ids, std::vector<int64_t>(ids.size(), 0));
  // Padding uses <pad> (0).
  EncodeOptions padded;
  padded.pad_to = static_cast<int64_t>(ids.size()) + 2;
  encoding = tokenizer->EncodePair(first["text"].get<std::string>(),
                                   second["text"].get<std::string>(), padded);
  ASSERT_TRUE(encoding.ok()) << encoding.status();
  EXPECT_EQ(encoding->input_ids.back(), 0);
  EXPECT_EQ(encoding->attention_mask.back(), 0);
}

TEST(T5TokenizerTest, DecodeSkipsSpecialTokensAndSentinels) {
  auto tokenizer = LoadT5();
  ASSERT_NE(tokenizer, nullptr);
  for (const json& expected : Golden()["decode"]) {
    SCOPED_TRACE(expected["ids"].dump());
    EXPECT_EQ(tokenizer->Decode(expected["ids"].get<std::vector<int64_t>>(),
                                /*skip_special_tokens=*/true),
              expected["text"].get<std::string>());
  }
  // Without skipping, the sentinels and </s> are written out.
  const int64_t extra_id_0 = Golden()["sentinels"]["<extra_id_0>"];
  const std::string text = tokenizer->Decode({extra_id_0, 1}, /*skip_special_tokens=*/false);
  EXPECT_THAT(text, HasSubstr("<extra_id_0>"));
  EXPECT_THAT(text, HasSubstr("</s>"));
}

// A copy of tiny-t5's tokenizer with another tokenizer_config.json.
std::string WithTokenizerConfig(const std::string& tokenizer_config) {
  const std::string dir = MakeTempDir();
  std::filesystem::copy_file(T5Dir() + "/spiece.model", dir + "/spiece.model");
  if (!tokenizer_config.empty()) WriteFileBytes(dir + "/tokenizer_config.json", tokenizer_config);
  return dir;
}

TEST(T5TokenizerTest, ExtraIdsDefaultToT5TokenizersHundred) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(WithTokenizerConfig(""));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const int64_t spm_size = Golden()["spm_size"];
  EXPECT_EQ((*tokenizer)->vocab_size(), spm_size + 100);
  EXPECT_EQ((*tokenizer)->IdToToken(spm_size + 99), "<extra_id_0>");
  EXPECT_EQ((*tokenizer)->IdToToken(spm_size), "<extra_id_99>");
  tokenizer = LoadTokenizer(WithTokenizerConfig(R"({"extra_ids": 0})"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->vocab_size(), spm_size);
}

TEST(T5TokenizerTest, RefusesBadExtraIdsAndNonT5Models) {
  absl::Status status = LoadTokenizer(WithTokenizerConfig(R"({"extra_ids": -1})")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("field 'extra_ids': expected a number of sentinel "
                                          "tokens >= 0, got -1"));
  // tiny-marian's source.spm has no <pad> piece.
  const std::string dir = MakeTempDir();
  std::filesystem::copy_file(TestDataDir() + "/tiny-marian/source.spm", dir + "/spiece.model");
  status = LoadTokenizer(dir).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("expected a \"<pad>\" piece"));
  const std::string garbage = MakeTempDir();
  WriteFileBytes(garbage + "/spiece.model", "not a model");
  EXPECT_EQ(LoadTokenizer(garbage).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace attnscope

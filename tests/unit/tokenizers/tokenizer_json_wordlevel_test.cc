// WordLevel tokenizer.json files read by LoadTokenizer, against Hugging Face tokenizers' own output
// on every text of the multilingual corpus (tokenizer_json_goldens.h), and the reader's refusals.
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/tokenizers/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/unit/test_util.h"
#include "tests/unit/tokenizers/tokenizer_json_goldens.h"

namespace attnscope {
namespace {

using ::attnscope::testing::MakeTempDir;
using ::attnscope::testing::WriteFileBytes;
using ::testing::HasSubstr;
using json = nlohmann::json;

TEST(TokenizerJsonWordLevelTest, MatchesTheLibraryOnEveryCorpusLine) {
  ::attnscope::testing::ExpectMatchesTheLibraryOnEveryCorpusLine("wordlevel",
                                                                 TokenizerKind::kWordLevel);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadWordLevel(const json& model) {
  const std::string dir = MakeTempDir();
  const json root = {{"added_tokens", json::array()},
                     {"normalizer", nullptr},
                     {"pre_tokenizer", {{"type", "WhitespaceSplit"}}},
                     {"post_processor", nullptr},
                     {"decoder", nullptr},
                     {"model", model}};
  WriteFileBytes(dir + "/tokenizer.json", root.dump());
  return LoadTokenizer(dir);
}

// The expected tokens, ids, offsets and decode are the library's (npm tokenizers 0.23.2) on this
// file; the byte offsets are those code points in UTF-8.
TEST(TokenizerJsonWordLevelTest, EachWordIsOneTokenOrTheUnknownOne) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      LoadWordLevel({{"type", "WordLevel"}, {"vocab", {{"<unk>", 0}, {"xin", 1}, {"chào", 2}}}});
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<TokenizedText> text = (*tokenizer)->Tokenize("xin  chào bạn");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->tokens, (std::vector<std::string>{"xin", "chào", "<unk>"}));
  EXPECT_EQ(text->ids, (std::vector<int64_t>{1, 2, 0}));
  EXPECT_EQ(text->offsets, (std::vector<Offset>{{0, 3}, {5, 9}, {10, 13}}));
  EXPECT_EQ(text->byte_offsets, (std::vector<Offset>{{0, 3}, {5, 10}, {11, 16}}));
  EXPECT_EQ((*tokenizer)->Decode(text->ids, /*skip_special_tokens=*/false), "xin chào <unk>");
  EXPECT_EQ((*tokenizer)->kind(), TokenizerKind::kWordLevel);
  EXPECT_EQ(TokenizerKindName((*tokenizer)->kind()), "wordlevel");
}

TEST(TokenizerJsonWordLevelTest, RefusesAMissingUnknownTokenOrABadVocab) {
  for (const auto& [model, expected] : std::vector<std::pair<json, std::string>>{
           {{{"type", "WordLevel"}, {"vocab", {{"a", 0}}}, {"unk_token", "[UNK]"}},
            "field 'model.unk_token': expected a token of model.vocab (the library cannot encode "
            "a word the vocab lacks without it), got \"[UNK]\""},
           {{{"type", "WordLevel"}, {"vocab", {{"<unk>", 0}, {"a", 0}}}},
            "expected an id no other token has"},
           {{{"type", "WordLevel"}, {"vocab", {{"<unk>", 5}}}},
            "field 'model.vocab.<unk>': expected an id in [0, 1)"},
           {{{"type", "WordLevel"}, {"vocab", json::array()}},
            "field 'model.vocab': expected a non-empty object token -> id"}}) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> refused = LoadWordLevel(model);
    ASSERT_FALSE(refused.ok()) << model.dump();
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << model.dump();
    EXPECT_THAT(refused.status().message(), HasSubstr(expected)) << model.dump();
  }
}

}  // namespace
}  // namespace attnscope

#include "models/tokenizers/sentencepiece_tokenizer.h"

#include <unistd.h>

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
using ::attnscope::testing::ReadJsonLines;
using ::attnscope::testing::SharedDir;
using ::attnscope::testing::WriteFileBytes;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using json = nlohmann::json;

std::string StoriesDir() { return SharedDir() + "/models/stories260K"; }

std::unique_ptr<Tokenizer> LoadStories() {
  auto tokenizer = LoadTokenizer(StoriesDir());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

// The piece as the text it stands for: U+2581 is a space.
std::string PieceSurface(const std::string& piece) {
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      i += 3;
    } else {
      out += piece[i++];
    }
  }
  return out;
}

TEST(SentencePieceTokenizerTest, LoadsStoriesTokenizer) {
  auto tokenizer = LoadStories();
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->kind(), TokenizerKind::kSentencePiece);
  EXPECT_EQ(tokenizer->vocab_size(), 512);
  EXPECT_EQ(tokenizer->IdToToken(1), "<s>");
  EXPECT_EQ(tokenizer->IdToToken(2), "</s>");
  EXPECT_EQ(tokenizer->IdToToken(512), "");
  EXPECT_EQ(tokenizer->pad_token_id(), 0);        // No pad token anywhere: 0.
  EXPECT_EQ(tokenizer->model_max_length(), 512);  // config.json max_position_embeddings.
}

TEST(SentencePieceTokenizerTest, PromptsEncodeToExpectedIdsAndGreedyIdsDecode) {
  auto tokenizer = LoadStories();
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<json> lines = ReadJsonLines(StoriesDir() + "/expected_greedy.jsonl");
  ASSERT_FALSE(lines.empty());
  for (const json& line : lines) {
    const std::string prompt = line["prompt"].get<std::string>();
    SCOPED_TRACE("prompt: " + prompt);
    auto encoding = tokenizer->Encode(prompt, EncodeOptions());
    ASSERT_TRUE(encoding.ok()) << encoding.status();
    EXPECT_THAT(encoding->input_ids,
                ElementsAreArray(line["input_ids"].get<std::vector<int64_t>>()));
    EXPECT_EQ(encoding->special_tokens_mask[0], 1);
    EXPECT_EQ(tokenizer->Decode(line["greedy_ids"].get<std::vector<int64_t>>(), true),
              line["greedy_text"].get<std::string>());
  }
}

TEST(SentencePieceTokenizerTest, OffsetsSliceTheOriginalText) {
  auto tokenizer = LoadStories();
  ASSERT_NE(tokenizer, nullptr);
  const std::string text = "Once upon a time, Lily saw a big dog.";
  auto tokenized = tokenizer->Tokenize(text);
  ASSERT_TRUE(tokenized.ok()) << tokenized.status();
  ASSERT_GT(tokenized->size(), 5u);
  std::string rebuilt;
  for (size_t i = 0; i < tokenized->size(); ++i) {
    SCOPED_TRACE(tokenized->tokens[i]);
    const Offset& bytes = tokenized->byte_offsets[i];
    const std::string slice = text.substr(bytes.start, bytes.end - bytes.start);
    // The dummy-prefix space of the first piece has no character in the text.
    const std::string surface = PieceSurface(tokenized->tokens[i]);
    EXPECT_EQ(slice, i == 0 ? surface.substr(1) : surface);
    EXPECT_EQ(tokenized->offsets[i], bytes);  // ASCII: code points are bytes.
    rebuilt += slice;
  }
  EXPECT_EQ(rebuilt, text);
  EXPECT_EQ(tokenized->word_ids.front(), 0);
  EXPECT_EQ(tokenized->word_ids.back(), 8);  // Nine words: "," and "." continue "time" and "dog".
}

TEST(SentencePieceTokenizerTest, NonAsciiOffsetsUseCodePoints) {
  auto tokenizer = LoadStories();
  ASSERT_NE(tokenizer, nullptr);
  // Outside the 512-piece vocabulary: byte-fallback pieces.
  const std::string text = "Tôi yêu 나";
  auto tokenized = tokenizer->Tokenize(text);
  ASSERT_TRUE(tokenized.ok()) << tokenized.status();
  int64_t covered_bytes = 0;
  for (size_t i = 0; i < tokenized->size(); ++i) {
    SCOPED_TRACE(tokenized->tokens[i]);
    const Offset& cp = tokenized->offsets[i];
    const Offset& bytes = tokenized->byte_offsets[i];
    EXPECT_LE(cp.start, cp.end);
    EXPECT_LE(cp.end, 9);
    EXPECT_LE(bytes.end, static_cast<int64_t>(text.size()));
    covered_bytes += bytes.end - bytes.start;
  }
  EXPECT_EQ(covered_bytes, static_cast<int64_t>(text.size()));
  EXPECT_EQ(tokenized->offsets.back(), (Offset{8, 9}));
  EXPECT_EQ(tokenized->byte_offsets.back().end, static_cast<int64_t>(text.size()));
}

TEST(SentencePieceTokenizerTest, PairTemplate) {
  auto tokenizer = LoadStories();
  ASSERT_NE(tokenizer, nullptr);
  EncodeOptions options;
  options.pad_to = 8;
  auto encoding = tokenizer->EncodePair("Once upon", "a time", options);
  ASSERT_TRUE(encoding.ok()) << encoding.status();
  // "<s> $A <s>:1 $B:1": "Once upon" is [403, 407] and "a time" is [261, 378].
  EXPECT_THAT(encoding->input_ids, ElementsAre(1, 403, 407, 1, 261, 378, 0, 0));
  EXPECT_THAT(encoding->token_type_ids, ElementsAre(0, 0, 0, 1, 1, 1, 0, 0));
  EXPECT_THAT(encoding->sequence_ids, ElementsAre(-1, 0, 0, -1, 1, 1, -1, -1));
  EXPECT_THAT(encoding->special_tokens_mask, ElementsAre(1, 0, 0, 1, 0, 0, 1, 1));
  EXPECT_THAT(encoding->attention_mask, ElementsAre(1, 1, 1, 1, 1, 1, 0, 0));
  EXPECT_THAT(encoding->word_ids, ElementsAre(-1, 0, 1, -1, 0, 1, -1, -1));
  EXPECT_EQ(tokenizer->Decode(encoding->input_ids, false), "<s> Once upon<s> a time<unk><unk>");
}

TEST(SentencePieceTokenizerTest, EosAndBosFollowTokenizerConfig) {
  const std::string dir = MakeTempDir();
  ASSERT_EQ(
      symlink((StoriesDir() + "/tokenizer.model").c_str(), (dir + "/tokenizer.model").c_str()), 0);
  WriteFileBytes(dir + "/tokenizer_config.json",
                 R"({"add_bos_token": false, "add_eos_token": true, "model_max_length": 4})");
  auto tokenizer = LoadTokenizer(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EncodeOptions options;
  auto encoding = (*tokenizer)->EncodePair("Once upon", "a time", options);
  ASSERT_TRUE(encoding.ok());
  EXPECT_THAT(encoding->input_ids, ElementsAre(403, 407, 2, 261, 378, 2));
  EXPECT_THAT(encoding->token_type_ids, ElementsAre(0, 0, 0, 1, 1, 1));
  options.truncation = Truncation::kLongestFirst;  // model_max_length 4 = 3 tokens + </s>.
  encoding = (*tokenizer)->Encode("Once upon a time", options);
  ASSERT_TRUE(encoding.ok());
  EXPECT_THAT(encoding->input_ids, ElementsAre(403, 407, 261, 2));

  WriteFileBytes(dir + "/config.json", R"({"pad_token_id": 9999})");
  auto bad = LoadTokenizer(dir);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("pad_token_id"));
}

TEST(SentencePieceTokenizerTest, InvalidUtf8IsRejected) {
  auto tokenizer = LoadStories();
  ASSERT_NE(tokenizer, nullptr);
  for (const std::string text : {"\xff", "Once \xC3", "\xED\xA0\x80", "\xC1\xBF"}) {
    SCOPED_TRACE(::testing::PrintToString(text));
    auto encoding = tokenizer->Encode(text, EncodeOptions());
    ASSERT_FALSE(encoding.ok());
    EXPECT_EQ(encoding.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(encoding.status().message(), HasSubstr("valid UTF-8"));
  }
}

TEST(SentencePieceTokenizerTest, CorruptModelFileIsInvalidArgument) {
  const std::string dir = MakeTempDir();
  WriteFileBytes(dir + "/tokenizer.model", "definitely not a protobuf");
  auto tokenizer = LoadTokenizer(dir);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("tokenizer.model"));
}

TEST(SentencePieceTokenizerTest, NonFiniteScoreIsInvalidArgument) {
  // The stories tokenizer with the score of its piece "▁the" (a float after its string in the
  // serialized ModelProto.SentencePiece) replaced by NaN.
  std::string bytes = ReadFileBytes(StoriesDir() + "/tokenizer.model");
  const std::string piece = "\x0a\x06\xe2\x96\x81the\x15";
  const size_t at = bytes.find(piece);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at + piece.size(), 4, std::string("\x00\x00\xc0\x7f", 4));
  const std::string dir = MakeTempDir();
  WriteFileBytes(dir + "/tokenizer.model", bytes);
  auto tokenizer = LoadTokenizer(dir);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tokenizer.status().message(),
              HasSubstr("'\xe2\x96\x81the': expected a finite score, got nan"));
}

}  // namespace
}  // namespace attnscope

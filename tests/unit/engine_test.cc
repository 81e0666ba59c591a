// LoadedModel's tokenizing of texts longer than the model takes: only as much of the text as any
// encoding could keep is tokenized, and what comes out is exactly what tokenizing the whole text
// gives (the tokenizer itself is the reference), for WordPiece (the built-in model), byte-level
// BPE (tiny-bart) and SentencePiece (tiny-marian).
#include "models/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<LoadedModel> Load(const std::string& dir) {
  LoadedModel::Options options;
  options.name = "model";
  options.model_dir = dir;
  absl::StatusOr<std::unique_ptr<LoadedModel>> model = LoadedModel::Create(options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

// About 130 KB: far more tokens than either model takes, in three scripts, with line breaks.
std::string LongText() {
  std::string text;
  for (int i = 0; i < 1500; ++i) {
    text += "Tôi yêu Việt Nam quá. 나는 오늘 랭체인을 공부한다. The cat sat on the mat, ";
    text += std::to_string(i);
    text += i % 7 == 0 ? "\n" : " ";
  }
  return text;
}

class LongTextTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string data = testing::TestDataDir();
    model_ = Load(GetParam() == "wordpiece" ? data + "/../../checkpoints/default"
                  : GetParam() == "bpe"     ? data + "/tiny-bart"
                                            : data + "/tiny-marian");
    ASSERT_NE(model_, nullptr);
  }

  // The whole text through the tokenizer, then the same assembly as the model's.
  absl::StatusOr<Encoding> Reference(const std::string& text, const std::string& pair,
                                     Truncation truncation) {
    absl::StatusOr<TokenizedText> first = model_->tokenizer().Tokenize(text);
    absl::StatusOr<TokenizedText> second = model_->tokenizer().Tokenize(pair);
    EXPECT_TRUE(first.ok() && second.ok());
    EncodeOptions options;
    options.truncation = truncation;
    options.max_length = model_->max_tokens();
    return model_->tokenizer().Assemble(*std::move(first), &*second, options);
  }

  // `text`, far over the model's limit, cut to the model's tokens plus one: exactly the first
  // tokens of the whole text.
  void ExpectTheFirstTokensOfTheWhole(const std::string& text) {
    absl::StatusOr<TokenizedText> whole = model_->tokenizer().Tokenize(text);
    ASSERT_TRUE(whole.ok()) << whole.status();
    absl::StatusOr<TokenizedText> cut = model_->Tokenize(text);
    ASSERT_TRUE(cut.ok()) << cut.status();
    const size_t keep = static_cast<size_t>(model_->max_tokens()) + 1;
    ASSERT_GT(whole->size(), 10 * keep);
    EXPECT_TRUE(cut->is_prefix);
    ASSERT_EQ(cut->size(), keep);
    for (size_t i = 0; i < keep; ++i) {
      EXPECT_EQ(cut->ids[i], whole->ids[i]) << i;
      EXPECT_EQ(cut->tokens[i], whole->tokens[i]) << i;
      EXPECT_EQ(cut->offsets[i], whole->offsets[i]) << i;
      EXPECT_EQ(cut->byte_offsets[i], whole->byte_offsets[i]) << i;
      EXPECT_EQ(cut->word_ids[i], whole->word_ids[i]) << i;
    }
  }

  std::unique_ptr<LoadedModel> model_;
};

TEST_P(LongTextTest, GivesTheFirstTokensOfTheWholeText) {
  ExpectTheFirstTokensOfTheWhole(LongText());
}

TEST_P(LongTextTest, TruncatedPairsAreThoseOfTheWholeTexts) {
  const std::string text = LongText();
  const std::string short_text = "Chèn bảng mới vào tài liệu.";
  for (const Truncation truncation :
       {Truncation::kLongestFirst, Truncation::kOnlyFirst, Truncation::kOnlySecond}) {
    for (const auto& [first, second] :
         {std::pair(text, short_text), std::pair(short_text, text), std::pair(text, text)}) {
      TextOptions options;
      options.truncation = truncation;
      absl::StatusOr<Encoding> encoding = model_->Encode(first, second, options);
      const absl::StatusOr<Encoding> reference = Reference(first, second, truncation);
      // A truncation that cannot fit (the text it may not cut alone over the budget) refuses both.
      ASSERT_EQ(encoding.status().code(), reference.status().code()) << encoding.status();
      if (!encoding.ok()) continue;
      EXPECT_EQ(encoding->input_ids, reference->input_ids);
      EXPECT_EQ(encoding->tokens, reference->tokens);
      EXPECT_EQ(encoding->token_type_ids, reference->token_type_ids);
      EXPECT_EQ(encoding->offsets, reference->offsets);
      EXPECT_EQ(encoding->byte_offsets, reference->byte_offsets);
    }
  }
}

TEST_P(LongTextTest, WithoutTruncationTheRefusalSaysMoreThan) {
  const absl::Status status = model_->Encode(LongText(), std::nullopt, TextOptions()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("got more than "));
  EXPECT_THAT(status.message(), HasSubstr("tokenization.truncation"));
}

TEST_P(LongTextTest, InvalidUtf8PastTheCutIsTheWholeTextsRefusal) {
  const std::string text = LongText() + "\xC3\x28 end";
  const absl::Status status = model_->Tokenize(text).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status, model_->tokenizer().Tokenize(text).status());
}

TEST_P(LongTextTest, ShortTextsAreTokenizedWhole) {
  // WordPiece makes one [UNK] of a word over 100 characters, however long.
  const size_t keep = static_cast<size_t>(model_->max_tokens()) + 1;
  for (const std::string& text :
       {std::string("Tôi yêu Việt Nam quá"), std::string(keep * 20, 'a') + " b"}) {
    absl::StatusOr<TokenizedText> cut = model_->Tokenize(text);
    absl::StatusOr<TokenizedText> whole = model_->tokenizer().Tokenize(text);
    ASSERT_TRUE(cut.ok() && whole.ok());
    EXPECT_FALSE(cut->is_prefix);
    EXPECT_EQ(cut->ids, whole->ids);
  }
}

// Written without spaces, as Chinese, Japanese and Thai are: no break to cut a prefix at.
std::string TextWithoutBreaks(int repeats) {
  std::string text;
  for (int i = 0; i < repeats; ++i) {
    text += "랭체인은LLM을쉽게다루는도구입니다,TôiyêuViệtNam.";
    text += std::to_string(i);
  }
  return text;
}

TEST_P(LongTextTest, TextsWithoutBreaksAreCutBetweenCharacters) {
  ExpectTheFirstTokensOfTheWhole(TextWithoutBreaks(/*repeats=*/2000));
}

TEST_P(LongTextTest, TextsOfFewTokensAreRefusedAfterABoundedPrefix) {
  // 4 MB of one syllable: byte-level BPE makes tokens of it; WordPiece one [UNK] (one word) and
  // Marian's SentencePiece one <unk> (its vocabulary lacks it), which took 97 CPU-seconds whole.
  std::string text;
  while (text.size() < (4u << 20)) text += "랭";
  absl::StatusOr<TokenizedText> cut = model_->Tokenize(text);
  if (GetParam() == "bpe") {
    ASSERT_TRUE(cut.ok()) << cut.status();
    EXPECT_TRUE(cut->is_prefix);
    EXPECT_EQ(cut->size(), static_cast<size_t>(model_->max_tokens()) + 1);
    return;
  }
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cut.status().message(), HasSubstr("expected at least one token per 32 bytes"));
  EXPECT_THAT(cut.status().message(), HasSubstr("split the text"));
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, LongTextTest,
                         ::testing::Values("wordpiece", "bpe", "sentencepiece"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace attnscope

// The vocabulary builder under the default model's normalisation (NFC, lower-cased, accents kept):
// words count as the tokenizer will see them, and required tokens are held whatever the counts.
#include "tools/train/vocab_builder.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "models/tokenizers/wordpiece_tokenizer.h"

namespace attnscope::train {
namespace {

WordPieceOptions NfcLowercase() {
  WordPieceOptions options;
  options.nfc = true;
  options.lowercase = true;
  options.strip_accents = false;
  return options;
}

TEST(VocabBuilderTest, PrecomposedAndDecomposedSpellingsCountAsOneAccentedWord) {
  absl::StatusOr<WordCounter> counter = WordCounter::Create(NfcLowercase());
  ASSERT_TRUE(counter.ok()) << counter.status();
  // "Tôi" precomposed, then "To" U+0302 "i"; "tối" is a different word; Hangul from jamo.
  ASSERT_TRUE(counter->Add("Tôi tối To\u0302i").ok());
  ASSERT_TRUE(counter->Add("\u1105\u1162\u11bc 랭").ok());
  EXPECT_EQ(counter->counts().at("tôi"), 2);
  EXPECT_EQ(counter->counts().at("tối"), 1);
  EXPECT_EQ(counter->counts().at("랭"), 2);
  EXPECT_EQ(counter->counts().size(), 3u);
}

TEST(VocabBuilderTest, BertUncasedNormalisationStillStripsAccents) {
  WordPieceOptions uncased;
  absl::StatusOr<std::string> word = NormalizeWord("Tôi", uncased);
  ASSERT_TRUE(word.ok());
  EXPECT_EQ(*word, "toi");
  word = NormalizeWord("To\u0302i", NfcLowercase());
  ASSERT_TRUE(word.ok());
  EXPECT_EQ(*word, "tôi");
}

TEST(VocabBuilderTest, RequiredTokensAreHeldAfterTheCharacters) {
  absl::StatusOr<WordCounter> counter = WordCounter::Create(NfcLowercase());
  ASSERT_TRUE(counter.ok());
  ASSERT_TRUE(counter->Add("bảng bảng bảng chèn").ok());
  const std::vector<std::string> vocab =
      BuildWordPieceVocab(counter->counts(), /*vocab_size=*/40, {"랭", "##체", "tôi", "chèn"});
  auto position = [&](const std::string& token) {
    return std::find(vocab.begin(), vocab.end(), token) - vocab.begin();
  };
  for (const char* token : {"랭", "##체", "tôi", "chèn", "b", "##ả", "bảng"}) {
    EXPECT_LT(position(token), static_cast<std::ptrdiff_t>(vocab.size())) << token;
  }
  // Specials, then both forms of each seen character, then the required tokens, then merges.
  EXPECT_EQ(position("[MASK]"), 4);
  EXPECT_LT(position("##ả"), position("랭"));
  EXPECT_LT(position("tôi"), position("bảng"));
  // "chèn" was required and seen: held once.
  EXPECT_EQ(std::count(vocab.begin(), vocab.end(), "chèn"), 1);
}

}  // namespace
}  // namespace attnscope::train

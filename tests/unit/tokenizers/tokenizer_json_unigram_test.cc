// Unigram tokenizer.json files (XLM-RoBERTa's layout, the one transformers' converter writes
// today, T5's and ALBERT's) read by LoadTokenizer, against Hugging Face tokenizers' own output on
// every text of the multilingual corpus (tokenizer_json_goldens.h), and the reader's refusals.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
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
using ::attnscope::testing::TestDataDir;
using ::attnscope::testing::TokenizerJsonPath;
using ::attnscope::testing::WriteFileBytes;
using ::testing::HasSubstr;
using json = nlohmann::json;

class UnigramGoldenTest : public ::testing::TestWithParam<const char*> {};

TEST_P(UnigramGoldenTest, MatchesTheLibraryOnEveryCorpusLine) {
  ExpectMatchesTheLibraryOnEveryCorpusLine(GetParam(), TokenizerKind::kSentencePiece);
}

INSTANTIATE_TEST_SUITE_P(Layouts, UnigramGoldenTest,
                         ::testing::Values("xlmr", "xlmr-converter", "t5-unigram", "albert-unigram",
                                           "xlmr-byte-fallback"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// ModelInfo's normalization of each layout: T5's charsmap is SentencePiece's NFKC; ALBERT's
// normalizer also lower-cases and removes accents (NFKD and StripAccents before the charsmap).
TEST(TokenizerJsonUnigramTest, SaysWhatTheNormalizerDoes) {
  struct Case {
    const char* name;
    bool lowercase;
    bool strip_accents;
    std::string description;
  };
  for (const Case& c : std::vector<Case>{
           {"t5-unigram", false, false,
            "SentencePiece's Unicode NFKC ('\uFB01' becomes 'fi', full-width letters half-width), "
            "case and accents kept; a space becomes '\u2581', shown at the start of the word after "
            "it"},
           {"albert-unigram", true, true,
            "Unicode NFKC, lower-cased, accents removed; a space becomes '\u2581', shown at the "
            "start of the word after it"}}) {
    const std::string file = TokenizerJsonPath(ReferenceDir(), c.name);
    ASSERT_TRUE(std::filesystem::exists(file)) << file << ": make it with: " << kMakeGoldens;
    const std::string dir = MakeTempDir();
    std::filesystem::copy_file(file, dir + "/tokenizer.json");
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(dir);
    ASSERT_TRUE(tokenizer.ok()) << c.name << ": " << tokenizer.status();
    const TokenizerNormalization normalization = (*tokenizer)->normalization();
    EXPECT_EQ(normalization.lowercase, c.lowercase) << c.name;
    EXPECT_EQ(normalization.strip_accents, c.strip_accents) << c.name;
    EXPECT_EQ(normalization.unicode_form, "NFKC") << c.name;
    EXPECT_EQ(normalization.description, c.description) << c.name;
  }
}

// What one text gives: the library's output (npm tokenizers 0.23.2), written down here.
struct Expected {
  std::string text;
  std::vector<std::string> tokens;
  std::vector<int64_t> ids;
  std::vector<Offset> offsets;
};

void ExpectTokenizes(const Tokenizer& tokenizer, const Expected& expected) {
  absl::StatusOr<TokenizedText> text = tokenizer.Tokenize(expected.text);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->tokens, expected.tokens) << json(expected.text).dump();
  EXPECT_EQ(text->ids, expected.ids) << json(expected.text).dump();
  EXPECT_EQ(text->offsets, expected.offsets) << json(expected.text).dump();
}

// The committed XLM-R test tokenizer, found by LoadTokenizer in its folder (beside a
// sentencepiece.bpe.model it does not read), with the charsmap's quirks the corpus does not show.
TEST(TokenizerJsonUnigramTest, LoadsTinyXlmrAndKeepsTheLibrarysCharsmapQuirks) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> loaded =
      LoadTokenizer(TestDataDir() + "/tiny-xlmr-tokenizer");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Tokenizer& tokenizer = **loaded;
  EXPECT_EQ(tokenizer.kind(), TokenizerKind::kSentencePiece);
  EXPECT_EQ(tokenizer.vocab_size(), 5002);
  EXPECT_EQ(tokenizer.model_max_length(), 512);
  EXPECT_EQ(tokenizer.pad_token_id(), 1);
  EXPECT_EQ(tokenizer.normalization().unicode_form, "NFKC");
  // NFD "ệ" is one grapheme; the charsmap has "e" U+0302 ("ê"), the shortest prefix, which
  // replaces the whole grapheme: the dot below is lost, and "ê" spans "e" alone.
  ExpectTokenizes(tokenizer, {"Vie\u0302\u0323t Nam",
                              {"\u2581V", "i\u00EA", "t", "\u2581Nam"},
                              {689, 2278, 53, 3209},
                              {{0, 1}, {1, 3}, {5, 6}, {6, 10}}});
  // U+FB01 becomes "fi" and U+001E nothing: the removal is charged to the "i" inserted before it,
  // which so takes U+001E's place.
  ExpectTokenizes(tokenizer, {"\uFB01\u001Eg \uFF34\uFF45\uFF53\uFF54",
                              {"\u2581fi", "g", "\u2581T", "est"},
                              {2438, 508, 51, 2390},
                              {{0, 2}, {2, 3}, {3, 5}, {5, 8}}});
}

// A Unigram tokenizer.json small enough to read, with a Metaspace pre-tokenizer and decoder of
// `prepend_scheme` and `split`, and `patch` merged over it.
json SmallUnigramJson(const std::string& prepend_scheme, bool split,
                      const json& patch = json::object()) {
  const json metaspace = {{"type", "Metaspace"},
                          {"replacement", "\u2581"},
                          {"prepend_scheme", prepend_scheme},
                          {"split", split}};
  json root = {{"version", "1.0"},
               {"truncation", nullptr},
               {"padding", nullptr},
               {"added_tokens", json::array({{{"id", 7},
                                              {"content", "<s>"},
                                              {"single_word", false},
                                              {"lstrip", false},
                                              {"rstrip", false},
                                              {"normalized", false},
                                              {"special", true}}})},
               {"normalizer", nullptr},
               {"pre_tokenizer", metaspace},
               {"post_processor", nullptr},
               {"decoder", metaspace},
               {"model",
                {{"type", "Unigram"},
                 {"unk_id", 0},
                 {"byte_fallback", false},
                 {"vocab", json::array({json::array({"<unk>", 0.0}), json::array({"\u2581", -2.0}),
                                        json::array({"a", -1.0}), json::array({"b", -1.5}),
                                        json::array({"ab", -1.8}), json::array({"\u2581ab", -2.5}),
                                        json::array({"c", -3.0}), json::array({"<s>", 0.0})})}}}};
  root.merge_patch(patch);
  return root;
}

// A checkpoint folder holding `tokenizer_json` as its tokenizer.json.
std::string FolderWith(const json& tokenizer_json) {
  const std::string dir = MakeTempDir();
  WriteFileBytes(dir + "/tokenizer.json", tokenizer_json.dump());
  return dir;
}

TEST(TokenizerJsonUnigramTest, BestSegmentationFusedUnknownsAndEachPrependScheme) {
  struct Case {
    std::string prepend_scheme;
    bool split;
    Expected expected;
    std::vector<int64_t> word_ids;
    std::string decoded;
  };
  const std::vector<Case> cases = {
      // "x" "y" "z" have no piece: one unk token, shown as written; "▁ab" (-2.5) beats "▁" "ab".
      {"always",
       true,
       {"ab xyzc  ab",
        {"\u2581ab", "\u2581", "xyz", "c", "\u2581", "\u2581ab"},
        {5, 1, 0, 6, 1, 5},
        {{0, 2}, {2, 3}, {3, 6}, {6, 7}, {7, 8}, {8, 11}}},
       {0, 1, 1, 1, 2, 3},
       "ab <unk>c  ab"},
      {"always",
       true,
       {"ab<s>ab", {"\u2581ab", "<s>", "\u2581ab"}, {5, 7, 5}, {{0, 2}, {2, 5}, {5, 7}}},
       {0, 1, 2},
       "ab<s> ab"},
      // "first": only the stretch that starts the text gets the prefix.
      {"first",
       true,
       {"ab<s>ab b",
        {"\u2581ab", "<s>", "ab", "\u2581", "b"},
        {5, 7, 4, 1, 3},
        {{0, 2}, {2, 5}, {5, 7}, {7, 8}, {8, 9}}},
       {0, 1, 2, 3, 3},
       "ab<s>ab b"},
      {"never", false, {"ab ab", {"ab", "\u2581ab"}, {4, 5}, {{0, 2}, {2, 5}}}, {0, 0}, "ab ab"}};
  for (const Case& c : cases) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
        LoadTokenizer(FolderWith(SmallUnigramJson(c.prepend_scheme, c.split)));
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    ExpectTokenizes(**tokenizer, c.expected);
    absl::StatusOr<TokenizedText> text = (*tokenizer)->Tokenize(c.expected.text);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(text->word_ids, c.word_ids) << c.expected.text;
    EXPECT_EQ((*tokenizer)->Decode(text->ids, /*skip_special_tokens=*/false), c.decoded);
  }
}

TEST(TokenizerJsonUnigramTest, RefusesAnUnsupportedComponentOrSettingByName) {
  for (const auto& [patch, expected] : std::vector<std::pair<json, std::string>>{
           {{{"normalizer", {{"type", "ByteLevel"}}}},
            "normalizer type 'ByteLevel' is not supported; supported: NFC, NFD, NFKC, NFKD, "
            "Replace, Prepend, Precompiled, Strip, Lowercase, StripAccents, BertNormalizer, Nmt, "
            "Sequence (of those), null"},
           {{{"pre_tokenizer", {{"type", "UnicodeScripts"}}}},
            "pre_tokenizer type 'UnicodeScripts' is not supported"},
           {{{"model", {{"unk_id", nullptr}}}}, "field 'model.unk_id' = null is not supported"}}) {
    const std::string dir = FolderWith(SmallUnigramJson("always", true, patch));
    absl::StatusOr<std::unique_ptr<Tokenizer>> refused = LoadTokenizer(dir);
    ASSERT_FALSE(refused.ok()) << patch.dump();
    // Nothing else in the folder: the refusal is the answer, as InvalidArgument.
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << patch.dump();
    EXPECT_THAT(refused.status().message(),
                HasSubstr(absl::StrCat("tokenizer.json '", dir, "/tokenizer.json': ", expected)))
        << patch.dump();
  }
}

// The bytes of a charsmap of a hand-made Darts-clone trie holding "a" -> the pool's string at
// `leaf`: the root (unit 0) has its children at 0x60 ^ byte, so "a" is unit 1, whose leaf's value
// is unit 2; the array has 256 units, as the library reads every byte's child unchecked.
std::string CharsmapMappingA(uint32_t leaf, std::string_view pool) {
  std::vector<uint32_t> units(256, 0);
  units[0] = 0x60u << 10;
  units[1] = (3u << 10) | (1u << 8) | 'a';
  units[2] = leaf;
  units.insert(units.begin(), static_cast<uint32_t>(4 * units.size()));
  std::string bytes;
  for (uint32_t value : units) {
    for (int k = 0; k < 4; ++k) bytes.push_back(static_cast<char>((value >> (8 * k)) & 0xFF));
  }
  return bytes.append(pool);
}

// The pool of CharsmapMappingA: "b", ended by a NUL as SentencePiece writes each replacement.
constexpr std::string_view kPool("b\0", 2);

// A Precompiled normalizer of `charsmap` (its base64 when `base64`, else as given).
json PrecompiledPatch(const std::string& charsmap, bool base64 = true) {
  return {{"normalizer",
           {{"type", "Precompiled"},
            {"precompiled_charsmap", base64 ? absl::Base64Escape(charsmap) : charsmap}}}};
}

TEST(TokenizerJsonUnigramTest, ReadsAHandMadeCharsmap) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(
      FolderWith(SmallUnigramJson("always", true, PrecompiledPatch(CharsmapMappingA(0, kPool)))));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  ExpectTokenizes(**tokenizer, {"ca ab",
                                {"\u2581", "c", "b", "\u2581", "b", "b"},
                                {1, 6, 3, 1, 3, 3},
                                {{0, 1}, {0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}}});
}

TEST(TokenizerJsonUnigramTest, RefusesAMalformedCharsmapClearly) {
  std::string oversized = CharsmapMappingA(0, kPool);
  oversized[1] = '\x08';  // a trie of 2048 bytes, where 1026 follow
  const std::string dir =
      FolderWith(SmallUnigramJson("always", true, PrecompiledPatch("not base64!", false)));
  absl::StatusOr<std::unique_ptr<Tokenizer>> not_base64 = LoadTokenizer(dir);
  ASSERT_FALSE(not_base64.ok());
  EXPECT_EQ(not_base64.status().message(),
            absl::StrCat("tokenizer.json '", dir,
                         "/tokenizer.json': field 'normalizer.precompiled_charsmap': expected "
                         "base64, got \"not base64!...\""));
  for (const auto& [charsmap, expected] : std::vector<std::pair<std::string, std::string>>{
           {std::string("\x0C\0", 2),
            "expected a uint32 trie size, a trie and its pool of replacements, got 2 bytes"},
           {oversized,
            "expected a trie size that is a non-zero multiple of 4 and at most the 1026 bytes "
            "after it, got 2048"},
           {CharsmapMappingA(100, kPool),
            "expected leaves that point at a replacement of the 2-byte pool, got 100 at unit 2"},
           {CharsmapMappingA(0, "\xFF\0"),
            "expected replacements in UTF-8 after the trie, got expected valid UTF-8"}}) {
    const std::string folder =
        FolderWith(SmallUnigramJson("always", true, PrecompiledPatch(charsmap)));
    absl::StatusOr<std::unique_ptr<Tokenizer>> refused = LoadTokenizer(folder);
    ASSERT_FALSE(refused.ok()) << expected;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << expected;
    EXPECT_THAT(refused.status().message(),
                HasSubstr(absl::StrCat(
                    "tokenizer.json '", folder,
                    "/tokenizer.json': field 'normalizer.precompiled_charsmap': ", expected)));
  }
}

// The fuzz target's Unigram seeds (fuzz/make_corpus.py) load and tokenize as the library does
// (tokens and code-point offsets from tokenizers 0.23.2), so that the fuzzer starts inside the
// reader, the lattice and the charsmap rather than at their first refusal: unknown characters
// without the charsmap, its one-to-many and fullwidth rules with it, the converter layout's
// trailing spaces stripped, and T5's whitespace split off before Metaspace prepends to each word.
TEST(TokenizerJsonUnigramTest, TheFuzzSeedsLoad) {
  struct Case {
    std::string seed;
    std::vector<std::string> tokens;
    std::vector<Offset> offsets;
  };
  const std::string text = "\uFB01 \uFF21 the capital  ";
  const std::vector<Case> cases = {
      {"unigram_no_normalizer",
       {"\u2581", "\uFB01", "\u2581", "\uFF21", "\u2581the", "\u2581capital", "\u2581", "\u2581"},
       {{0, 1}, {0, 1}, {1, 2}, {2, 3}, {3, 7}, {7, 15}, {15, 16}, {16, 17}}},
      {"unigram_xlmr_layout",
       {"\u2581", "f", "i", "\u2581", "a", "\u2581the", "\u2581capital", "\u2581", "\u2581"},
       {{0, 1}, {0, 1}, {0, 1}, {1, 2}, {2, 3}, {3, 7}, {7, 15}, {15, 16}, {16, 17}}},
      {"unigram_xlmr_converter_layout",
       {"\u2581", "f", "i", "\u2581", "a", "\u2581the", "\u2581capital"},
       {{0, 1}, {0, 1}, {0, 1}, {1, 2}, {2, 3}, {3, 7}, {7, 15}}},
      {"unigram_t5_layout",
       {"\u2581", "f", "i", "\u2581", "a", "\u2581the", "\u2581capital"},
       {{0, 1}, {0, 1}, {0, 1}, {2, 3}, {2, 3}, {4, 7}, {8, 15}}},
  };
  for (const Case& c : cases) {
    const std::string dir = MakeTempDir();
    std::filesystem::copy_file(
        absl::StrCat(ATTNSCOPE_SOURCE_DIR, "/fuzz/corpus/tokenizer_json/", c.seed),
        dir + "/tokenizer.json");
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(dir);
    ASSERT_TRUE(tokenizer.ok()) << c.seed << ": " << tokenizer.status();
    absl::StatusOr<TokenizedText> tokens = (*tokenizer)->Tokenize(text);
    ASSERT_TRUE(tokens.ok()) << c.seed << ": " << tokens.status();
    EXPECT_EQ(tokens->tokens, c.tokens) << c.seed;
    EXPECT_EQ(tokens->offsets, c.offsets) << c.seed;
  }
}

}  // namespace
}  // namespace attnscope

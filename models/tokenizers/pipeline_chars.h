// Character classes and pattern matches shared by the components of PipelineTokenizer
// (pipeline_tokenizer.h): the added-token matcher, the normalizers and the pre-tokenizers.
#ifndef ATTNSCOPE_MODELS_TOKENIZERS_PIPELINE_CHARS_H_
#define ATTNSCOPE_MODELS_TOKENIZERS_PIPELINE_CHARS_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "models/tokenizers/regex.h"
#include "models/tokenizers/unicode.h"

namespace attnscope {
namespace pipeline_chars {

// GPT-2's bytes_to_unicode: each byte's character in the ByteLevel alphabet
// (PipelineTokenizer::ByteChars).
const std::array<char32_t, 256>& ByteLevelChars();
// L*.
bool IsLetter(char32_t c);
// N*.
bool IsNumber(char32_t c);
// \w of Rust's regex (the boundary of a single_word added token) and of Oniguruma (the Whitespace
// pre-tokenizer's \w+|[^\w\s]+), both UTS #18's: Alphabetic, marks, decimal numbers, connector
// punctuation, joiners. Alphabetic is the letters, the letter numbers and Other_Alphabetic, which
// is marks but for the circled and squared Latin letters (So); the library's Whitespace splits
// "Ⓐ²" into "Ⓐ" "²".
bool IsWordChar(char32_t c);

// The matches of `regex` in a run of characters (anything with a char32_t `c`), as [first, last)
// character indices; Regex::FindAll's error when PCRE2 gives up.
template <typename Chars>
absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> MatchesInChars(const Regex& regex,
                                                                        const Chars& chars) {
  std::string utf8;
  std::vector<size_t> byte_starts;
  byte_starts.reserve(chars.size() + 1);
  for (const auto& c : chars) {
    byte_starts.push_back(utf8.size());
    unicode::AppendUtf8(c.c, &utf8);
  }
  byte_starts.push_back(utf8.size());
  const auto index_of = [&](size_t byte) {
    return static_cast<int64_t>(std::lower_bound(byte_starts.begin(), byte_starts.end(), byte) -
                                byte_starts.begin());
  };
  ATTNSCOPE_ASSIGN_OR_RETURN(const auto found, regex.FindAll(utf8));
  std::vector<std::pair<int64_t, int64_t>> matches;
  for (const auto& [start, end] : found) {
    matches.emplace_back(index_of(start), index_of(end));
  }
  return matches;
}

}  // namespace pipeline_chars
}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_TOKENIZERS_PIPELINE_CHARS_H_

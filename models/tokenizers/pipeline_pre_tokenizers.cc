#include <algorithm>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/status_macros.h"
#include "models/tokenizers/pipeline_chars.h"
#include "models/tokenizers/pipeline_tokenizer.h"
#include "models/tokenizers/unicode.h"

namespace attnscope {
namespace {

using pipeline_chars::IsLetter;
using pipeline_chars::IsNumber;
using pipeline_chars::IsWordChar;
using pipeline_chars::MatchesInChars;

// The Punctuation pre-tokenizer's characters: Rust's is_ascii_punctuation (ASCII's symbols too:
// "$", "+", "<", "^", "`", "|", "~") or Unicode punctuation (P*).
bool IsPunctuationChar(char32_t c) {
  const bool ascii = (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) ||
                     (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
  return ascii || unicode::IsPunctuation(c);
}

// [^\s\p{L}\p{N}]
bool IsOtherClass(char32_t c) { return !unicode::IsWhiteSpace(c) && !IsLetter(c) && !IsNumber(c); }

// The end of the match of GPT-2's pattern at `begin` (< `end`) of `cps`, alternatives tried in the
// pattern's order as a backtracking engine (Oniguruma in `tokenizers`) tries them:
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
int64_t MatchEnd(const std::vector<char32_t>& cps, int64_t begin, int64_t end) {
  if (cps[begin] == '\'') {
    static constexpr std::u32string_view kContractions[] = {U"s", U"t",  U"re", U"ve",
                                                            U"m", U"ll", U"d"};
    const std::u32string_view rest(cps.data() + begin + 1, end - begin - 1);
    for (std::u32string_view suffix : kContractions) {
      if (rest.substr(0, suffix.size()) == suffix) return begin + 1 + suffix.size();
    }
  }
  for (bool (*in_class)(char32_t) : {IsLetter, IsNumber, IsOtherClass}) {
    int64_t i = begin + (cps[begin] == ' ' ? 1 : 0);
    if (i >= end || !in_class(cps[i])) continue;
    while (i < end && in_class(cps[i])) ++i;
    return i;
  }
  int64_t run_end = begin;
  while (run_end < end && unicode::IsWhiteSpace(cps[run_end])) ++run_end;
  // \s+(?!\S): a run followed by a non-space gives back its last character, which starts the next
  // word (as its leading space when it is ' '); a run of one cannot, and \s+ takes it alone.
  if (run_end < end && run_end - begin >= 2) return run_end - 1;
  return std::max(run_end, begin + 1);
}

// Spans of a pre-token and whether each is a pattern match (tokenizers' Pattern::find_matches).
using MatchedSpans = std::vector<std::pair<std::pair<int64_t, int64_t>, bool>>;

// Each character of `chars` for which `is_match` holds as a match of its own, and each run of the
// others as one span (tokenizers' Pattern for a character predicate).
template <typename Chars>
MatchedSpans CharMatches(const Chars& chars, bool (*is_match)(char32_t)) {
  MatchedSpans matches;
  int64_t previous = 0;
  const int64_t size = static_cast<int64_t>(chars.size());
  for (int64_t k = 0; k < size; ++k) {
    if (!is_match(chars[k].c)) continue;
    if (previous != k) matches.push_back({{previous, k}, false});
    matches.push_back({{k, k + 1}, true});
    previous = k + 1;
  }
  if (previous != size) matches.push_back({{previous, size}, false});
  return matches;
}

// The Whitespace pre-tokenizer's split of `chars`, inverted \w+|[^\w\s]+ with its gaps removed:
// each run of word characters and each run of other characters that are not whitespace is kept,
// each run of whitespace is a match (to remove).
template <typename Chars>
MatchedSpans WordAndSymbolRuns(const Chars& chars) {
  // 0: whitespace, 1: a word character, 2: anything else.
  const auto kind = [](char32_t c) { return unicode::IsWhiteSpace(c) ? 0 : IsWordChar(c) ? 1 : 2; };
  MatchedSpans runs;
  const int64_t size = static_cast<int64_t>(chars.size());
  for (int64_t start = 0; start < size;) {
    const int run_kind = kind(chars[start].c);
    int64_t stop = start + 1;
    while (stop < size && kind(chars[stop].c) == run_kind) ++stop;
    runs.push_back({{start, stop}, run_kind == 0});
    start = stop;
  }
  return runs;
}

// The fold of NormalizedString::split for Contiguous, MergedWithPrevious and MergedWithNext: in
// order (or in reverse, `backward`), a span joins the one kept before it when `joins(is_match,
// previous_is_match)`, else it is kept alone. None is removed.
MatchedSpans JoinSpans(const MatchedSpans& matches, bool backward,
                       bool (*joins)(bool is_match, bool previous_is_match)) {
  MatchedSpans spans;
  bool previous = false;
  for (size_t n = 0; n < matches.size(); ++n) {
    const auto& [span, is_match] = matches[backward ? matches.size() - 1 - n : n];
    if (joins(is_match, previous) && !spans.empty()) {
      if (backward) {
        spans.back().first.first = span.first;
      } else {
        spans.back().first.second = span.second;
      }
    } else {
      spans.push_back({span, false});
    }
    previous = is_match;
  }
  if (backward) std::reverse(spans.begin(), spans.end());
  return spans;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<PipelineTokenizer::NormChar>>>
PipelineTokenizer::PreTokenize(std::vector<NormChar> chars, bool starts_text) const {
  std::vector<std::vector<NormChar>> pieces;
  if (chars.empty()) return pieces;
  pieces.push_back(std::move(chars));
  // Whether each piece starts at the text's first character: the library asks its split's
  // original offset, the stretch's start for the stretch itself, its first character's alignment
  // for a piece split from it.
  std::vector<bool> pieces_start_text = {starts_text};
  for (const PreTokenizerStep& step : pipeline_.pre_tokenizer) {
    std::vector<std::vector<NormChar>> next;
    std::vector<bool> next_start_text;
    for (size_t p = 0; p < pieces.size(); ++p) {
      std::vector<NormChar>& piece = pieces[p];
      // [begin, end) of `piece` and whether it is a match.
      MatchedSpans matches;
      SplitBehavior behavior = step.behavior;
      if (step.kind == PreTokenizerStep::Kind::kMetaspace) {
        for (NormChar& c : piece) {
          if (c.c == ' ') c.c = step.replacement;
        }
        if (step.prepend && piece.front().c != step.replacement &&
            (!step.prepend_first_only || pieces_start_text[p])) {
          // NormalizedString::prepend: the replacement shares the first character's alignment.
          piece.insert(piece.begin(), {step.replacement, piece.front().start, piece.front().end});
        }
        if (!step.split) {
          next.push_back(std::move(piece));
          next_start_text.push_back(pieces_start_text[p]);
          continue;
        }
        // Each replacement is a match of its own, merged with what follows it.
        behavior = SplitBehavior::kMergedWithNext;
        int64_t previous = 0;
        for (int64_t k = 0; k < static_cast<int64_t>(piece.size()); ++k) {
          if (piece[k].c != step.replacement) continue;
          if (previous != k) matches.push_back({{previous, k}, false});
          matches.push_back({{k, k + 1}, true});
          previous = k + 1;
        }
        const int64_t size = static_cast<int64_t>(piece.size());
        if (previous != size) matches.push_back({{previous, size}, false});
      } else if (step.kind == PreTokenizerStep::Kind::kByteLevel) {
        if (step.add_prefix_space && piece.front().c != ' ') {
          // NormalizedString::prepend: the space shares the first character's alignment.
          piece.insert(piece.begin(), {' ', piece.front().start, piece.front().end});
        }
        if (!step.use_regex) {
          next.push_back(std::move(piece));
          next_start_text.push_back(pieces_start_text[p]);
          continue;
        }
        std::vector<char32_t> cps;
        cps.reserve(piece.size());
        for (const NormChar& c : piece) cps.push_back(c.c);
        const int64_t size = static_cast<int64_t>(cps.size());
        for (int64_t start = 0; start < size;) {
          const int64_t stop = MatchEnd(cps, start, size);
          matches.push_back({{start, stop}, true});
          start = stop;
        }
      } else if (step.kind == PreTokenizerStep::Kind::kWhitespaceSplit) {
        // Rust's char::is_whitespace: White_Space.
        behavior = SplitBehavior::kRemoved;
        matches = CharMatches(piece, unicode::IsWhiteSpace);
      } else if (step.kind == PreTokenizerStep::Kind::kWhitespace) {
        behavior = SplitBehavior::kRemoved;
        matches = WordAndSymbolRuns(piece);
      } else if (step.kind == PreTokenizerStep::Kind::kDigits) {
        // Rust's char::is_numeric: N*.
        matches = CharMatches(piece, IsNumber);
      } else if (step.kind == PreTokenizerStep::Kind::kPunctuation) {
        matches = CharMatches(piece, IsPunctuationChar);
      } else {
        int64_t previous = 0;
        ATTNSCOPE_ASSIGN_OR_RETURN(const auto found, MatchesInChars(*step.regex, piece));
        for (const auto& [start, stop] : found) {
          if (previous != start) matches.push_back({{previous, start}, step.invert});
          matches.push_back({{start, stop}, !step.invert});
          previous = stop;
        }
        const int64_t size = static_cast<int64_t>(piece.size());
        if (previous != size) matches.push_back({{previous, size}, step.invert});
      }
      // NormalizedString::split: the behaviour decides which spans are kept and joined.
      MatchedSpans splits;  // span, removed
      switch (behavior) {
        case SplitBehavior::kIsolated:
          for (const auto& [span, is_match] : matches) splits.push_back({span, false});
          break;
        case SplitBehavior::kRemoved:
          splits = matches;
          break;
        case SplitBehavior::kContiguous:
          splits = JoinSpans(matches, /*backward=*/false,
                             [](bool is_match, bool previous) { return is_match == previous; });
          break;
        case SplitBehavior::kMergedWithPrevious:
          splits = JoinSpans(matches, /*backward=*/false,
                             [](bool is_match, bool previous) { return is_match && !previous; });
          break;
        case SplitBehavior::kMergedWithNext:
          splits = JoinSpans(matches, /*backward=*/true,
                             [](bool is_match, bool previous) { return is_match && !previous; });
          break;
      }
      for (const auto& [span, removed] : splits) {
        if (removed || span.first >= span.second) continue;
        next.emplace_back(piece.begin() + span.first, piece.begin() + span.second);
        next_start_text.push_back(next.back().front().start == 0);
      }
    }
    pieces = std::move(next);
    pieces_start_text = std::move(next_start_text);
  }
  return pieces;
}

}  // namespace attnscope

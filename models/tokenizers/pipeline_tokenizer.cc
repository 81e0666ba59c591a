#include "models/tokenizers/pipeline_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"
#include "utf8proc.h"

namespace attnscope {
namespace {

// GPT-2's bytes_to_unicode: the printable bytes of Latin-1 stand for themselves, the other 68
// (controls, space, DEL, NBSP, soft hyphen, ...) map in byte order to U+0100 and up, so that every
// byte is a visible character BPE can merge.
constexpr bool IsPrintableByte(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

std::array<char32_t, 256> MakeByteChars() {
  std::array<char32_t, 256> chars{};
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) chars[b] = IsPrintableByte(b) ? b : next++;
  return chars;
}

// The byte a character of the table stands for, or -1.
int ByteOfChar(char32_t c) {
  static const std::array<int16_t, 0x144> bytes = [] {
    std::array<int16_t, 0x144> table;
    table.fill(-1);
    const std::array<char32_t, 256> chars = MakeByteChars();
    for (int b = 0; b < 256; ++b) table[chars[b]] = static_cast<int16_t>(b);
    return table;
  }();
  return c < bytes.size() ? bytes[c] : -1;
}

constexpr char32_t kSpaceChar = 0x120;  // "Ġ", the table's character for ' '.

bool IsLetter(char32_t c) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return true;
    default:
      return false;
  }
}

bool IsNumber(char32_t c) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

// \w of Rust's regex (the boundary of a single_word added token) and of Oniguruma (the Whitespace
// pre-tokenizer's \w+|[^\w\s]+), both UTS #18's: Alphabetic, marks, decimal numbers, connector
// punctuation, joiners. Alphabetic is the letters, the letter numbers and Other_Alphabetic, which
// is marks but for the circled and squared Latin letters (So); the library's Whitespace splits
// "Ⓐ²" into "Ⓐ" "²".
bool IsWordChar(char32_t c) {
  if (IsLetter(c)) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9) ||
             (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169) ||
             (c >= 0x1F170 && c <= 0x1F189);
  }
}

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

// `bytes` read as UTF-8, each maximal subpart of an ill-formed sequence replaced by one
// U+FFFD (Unicode's "substitution of maximal subparts", what Rust's from_utf8_lossy does).
std::string Utf8Lossy(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  size_t i = 0;
  while (i < bytes.size()) {
    const unsigned char lead = byte(i);
    int length = 0;
    unsigned char low = 0x80;
    unsigned char high = 0xBF;
    if (lead < 0x80) {
      length = 1;
    } else if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;
      if (lead == 0xED) high = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;
      if (lead == 0xF4) high = 0x8F;
    }
    if (length == 0) {
      out.append("\xEF\xBF\xBD");
      ++i;
      continue;
    }
    // Only the second byte has the narrowed range; the rest are any continuation byte.
    int valid = 1;
    while (valid < length && i + valid < bytes.size()) {
      const unsigned char b = byte(i + valid);
      const bool ok = valid == 1 ? (b >= low && b <= high) : (b >= 0x80 && b <= 0xBF);
      if (!ok) break;
      ++valid;
    }
    if (valid == length) {
      out.append(bytes, i, length);
    } else {
      out.append("\xEF\xBF\xBD");
    }
    i += valid;
  }
  return out;
}

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

// Leading and trailing characters byte_level.rs process_offsets trims: "Ġ" or whitespace.
std::pair<int32_t, int32_t> EdgeSpaces(const std::string& token) {
  absl::StatusOr<unicode::DecodedText> decoded = unicode::DecodeUtf8(token);
  if (!decoded.ok()) return {0, 0};
  const auto is_space = [](char32_t c) { return c == kSpaceChar || unicode::IsWhiteSpace(c); };
  const std::vector<char32_t>& cps = decoded->code_points;
  const int32_t leading =
      static_cast<int32_t>(std::find_if_not(cps.begin(), cps.end(), is_space) - cps.begin());
  const int32_t trailing =
      static_cast<int32_t>(std::find_if_not(cps.rbegin(), cps.rend(), is_space) - cps.rbegin());
  return {leading, trailing};
}

}  // namespace

const std::array<char32_t, 256>& PipelineTokenizer::ByteChars() {
  static const std::array<char32_t, 256> chars = MakeByteChars();
  return chars;
}

int64_t PipelineTokenizer::PadId(const std::vector<std::string>& id_to_token,
                                 const std::string& pad_token) {
  if (pad_token.empty()) return 0;
  const auto it = std::find(id_to_token.begin(), id_to_token.end(), pad_token);
  return it != id_to_token.end() ? it - id_to_token.begin() : 0;
}

PipelineTokenizer::PipelineTokenizer(std::vector<std::string> id_to_token, Pipeline pipeline,
                                     PostProcessorTemplate post_processor, int64_t pad_token_id,
                                     int64_t model_max_length)
    : Tokenizer(std::move(post_processor), pad_token_id, model_max_length),
      id_to_token_(std::move(id_to_token)),
      pipeline_(std::move(pipeline)),
      is_special_id_(id_to_token_.size(), false) {
  for (std::vector<std::vector<int32_t>>& table : added_by_first_byte_) table.resize(256);
  for (size_t k = 0; k < pipeline_.added_tokens.size(); ++k) {
    const AddedToken& added = pipeline_.added_tokens[k];
    if (added.special) is_special_id_[added.id] = true;
    if (added.content.empty()) continue;
    if (added.normalized) has_normalized_added_ = true;
    added_by_first_byte_[added.normalized ? 1 : 0][static_cast<unsigned char>(added.content[0])]
        .push_back(static_cast<int32_t>(k));
  }
  for (std::vector<std::vector<int32_t>>& table : added_by_first_byte_) {
    for (std::vector<int32_t>& candidates : table) {
      std::stable_sort(candidates.begin(), candidates.end(), [&](int32_t a, int32_t b) {
        return pipeline_.added_tokens[a].content.size() > pipeline_.added_tokens[b].content.size();
      });
    }
  }
  edge_spaces_.reserve(id_to_token_.size());
  for (const std::string& token : id_to_token_) edge_spaces_.push_back(EdgeSpaces(token));
}

TokenizerNormalization PipelineTokenizer::NormalizerFlags() const {
  TokenizerNormalization flags;
  for (const NormalizerStep& step : pipeline_.normalizer) {
    switch (step.kind) {
      case NormalizerStep::Kind::kNfc:
        flags.unicode_form = "NFC";
        break;
      case NormalizerStep::Kind::kNfd:
        flags.unicode_form = "NFD";
        break;
      case NormalizerStep::Kind::kNfkc:
        flags.unicode_form = "NFKC";
        break;
      case NormalizerStep::Kind::kNfkd:
        flags.unicode_form = "NFKD";
        break;
      case NormalizerStep::Kind::kPrecompiled: {
        // SentencePiece's nmt_nfkc and nfkc rules turn U+FB01 into "fi"; identity ones have no
        // charsmap at all.
        const std::vector<PrecompiledCharsmap::Change> changes = step.charsmap->Changes({0xFB01});
        if (changes.size() == 2 && changes[0].c == 'f' && changes[1].c == 'i') {
          flags.unicode_form = "NFKC";
        }
        break;
      }
      case NormalizerStep::Kind::kLowercase:
        flags.lowercase = true;
        break;
      case NormalizerStep::Kind::kStripAccents:
        flags.strip_accents = true;
        break;
      case NormalizerStep::Kind::kReplace:
      case NormalizerStep::Kind::kPrepend:
      case NormalizerStep::Kind::kStrip:
        break;
    }
  }
  std::vector<std::string> parts;
  if (!flags.unicode_form.empty()) parts.push_back("Unicode " + flags.unicode_form);
  if (flags.lowercase) parts.push_back("lower-cased");
  if (flags.strip_accents) parts.push_back("accents removed");
  flags.description = absl::StrJoin(parts, ", ");
  return flags;
}

std::string PipelineTokenizer::IdToToken(int64_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return id_to_token_[id];
}

std::vector<PipelineTokenizer::Segment> PipelineTokenizer::FindAddedTokens(
    std::string_view text, const unicode::DecodedText& decoded, bool normalized) const {
  std::vector<Segment> segments;
  const std::vector<std::vector<int32_t>>& table = added_by_first_byte_[normalized ? 1 : 0];
  const std::vector<char32_t>& cps = decoded.code_points;

  int64_t start_offset = 0;  // The end of the last split, in code points.
  int64_t scan = 0;          // Where the search for the next match starts.
  while (scan < decoded.size()) {
    // Leftmost, then longest.
    int64_t start = scan;
    int32_t found = -1;
    for (; start < decoded.size() && found < 0; ++start) {
      const std::string_view rest = text.substr(decoded.ByteOffset(start));
      for (int32_t k : table[static_cast<unsigned char>(rest[0])]) {
        const std::string& content = pipeline_.added_tokens[k].content;
        if (rest.compare(0, content.size(), content) == 0) {
          found = k;
          break;
        }
      }
    }
    if (found < 0) break;
    --start;
    const AddedToken& added = pipeline_.added_tokens[found];
    int64_t stop = decoded.CodePointsBeforeByte(decoded.ByteOffset(start) + added.content.size());
    scan = stop;
    if (added.single_word) {
      const bool start_space = start == 0 || !IsWordChar(cps[start - 1]);
      const bool stop_space = stop == decoded.size() || !IsWordChar(cps[stop]);
      if (!start_space || !stop_space) continue;
    }
    if (added.lstrip) {
      int64_t new_start = start;
      while (new_start > 0 && unicode::IsWhiteSpace(cps[new_start - 1])) --new_start;
      // Spaces a previous match took are not taken again.
      start = std::max(new_start, start_offset);
    }
    if (added.rstrip) {
      while (stop < decoded.size() && unicode::IsWhiteSpace(cps[stop])) ++stop;
    }
    if (start_offset < start) segments.push_back({-1, start_offset, start});
    segments.push_back({found, start, stop});
    start_offset = stop;
  }
  if (start_offset != decoded.size()) segments.push_back({-1, start_offset, decoded.size()});
  return segments;
}

absl::StatusOr<TokenizedText> PipelineTokenizer::Tokenize(std::string_view text) const {
  ATTNSCOPE_ASSIGN_OR_RETURN(unicode::DecodedText decoded, unicode::DecodeUtf8(text));
  TokenizedText out;
  std::vector<std::pair<int32_t, int32_t>> edges;
  int64_t word_index = 0;
  for (const Segment& segment : FindAddedTokens(text, decoded, /*normalized=*/false)) {
    if (segment.added < 0) {
      ATTNSCOPE_RETURN_IF_ERROR(
          TokenizeStretch(decoded, segment.begin, segment.end, &word_index, &out, &edges));
      continue;
    }
    // The token is the text matched, stripped whitespace included (`tokenizers` shows " <mask>"),
    // and trim_offsets cuts that whitespace from its offsets.
    std::string matched(
        text.substr(decoded.ByteOffset(segment.begin),
                    decoded.ByteOffset(segment.end) - decoded.ByteOffset(segment.begin)));
    edges.push_back(EdgeSpaces(matched));
    out.ids.push_back(pipeline_.added_tokens[segment.added].id);
    out.tokens.push_back(std::move(matched));
    out.offsets.push_back({segment.begin, segment.end});
    out.word_ids.push_back(word_index++);
  }
  FinishOffsets(decoded, edges, &out);
  return out;
}

absl::Status PipelineTokenizer::TokenizeStretch(
    const unicode::DecodedText& decoded, int64_t begin, int64_t end, int64_t* word_index,
    TokenizedText* out, std::vector<std::pair<int32_t, int32_t>>* edges) const {
  std::vector<NormChar> chars;
  chars.reserve(end - begin);
  for (int64_t k = begin; k < end; ++k) chars.push_back({decoded.code_points[k], k, k + 1});
  ATTNSCOPE_ASSIGN_OR_RETURN(chars, Normalize(pipeline_.normalizer, std::move(chars)));
  if (chars.empty()) return absl::OkStatus();

  // Each stretch to pre-tokenize, and whether it starts the text (Metaspace's prepend_scheme
  // "first" asks the library's split for its original offset 0).
  std::vector<std::pair<std::vector<NormChar>, bool>> stretches;
  const auto flush = [&]() -> absl::Status {
    for (auto& [stretch, starts_text] : stretches) {
      ATTNSCOPE_ASSIGN_OR_RETURN(const std::vector<std::vector<NormChar>> pieces,
                                 PreTokenize(std::move(stretch), starts_text));
      for (const std::vector<NormChar>& piece : pieces) {
        TokenizeWord(piece, (*word_index)++, out, edges);
      }
    }
    stretches.clear();
    return absl::OkStatus();
  };
  if (!has_normalized_added_) {
    stretches.push_back({std::move(chars), begin == 0});
    return flush();
  }
  std::string normalized;
  for (const NormChar& c : chars) unicode::AppendUtf8(c.c, &normalized);
  absl::StatusOr<unicode::DecodedText> normalized_decoded = unicode::DecodeUtf8(normalized);
  for (const Segment& segment :
       FindAddedTokens(normalized, *normalized_decoded, /*normalized=*/true)) {
    if (segment.added < 0) {
      stretches.push_back(
          {std::vector<NormChar>(chars.begin() + segment.begin, chars.begin() + segment.end),
           begin == 0 && segment.begin == 0});
      continue;
    }
    // The stretches before it, then the token itself.
    ATTNSCOPE_RETURN_IF_ERROR(flush());
    int64_t start = chars[segment.begin].start;
    int64_t stop = chars[segment.begin].end;
    for (int64_t k = segment.begin; k < segment.end; ++k) {
      start = std::min(start, chars[k].start);
      stop = std::max(stop, chars[k].end);
    }
    std::string matched = normalized.substr(normalized_decoded->ByteOffset(segment.begin),
                                            normalized_decoded->ByteOffset(segment.end) -
                                                normalized_decoded->ByteOffset(segment.begin));
    edges->push_back(EdgeSpaces(matched));
    out->ids.push_back(pipeline_.added_tokens[segment.added].id);
    out->tokens.push_back(std::move(matched));
    out->offsets.push_back({start, stop});
    out->word_ids.push_back((*word_index)++);
  }
  return flush();
}

absl::StatusOr<std::vector<PipelineTokenizer::NormChar>> PipelineTokenizer::Normalize(
    const std::vector<NormalizerStep>& normalizer, std::vector<NormChar> chars) {
  for (const NormalizerStep& step : normalizer) {
    std::vector<NormChar> next;
    next.reserve(chars.size());
    std::vector<char32_t> cps;
    cps.reserve(chars.size());
    for (const NormChar& c : chars) cps.push_back(c.c);
    switch (step.kind) {
      case NormalizerStep::Kind::kNfc:
      case NormalizerStep::Kind::kNfkc:
        // The library aligns a composed character with the first one it replaced only (its
        // NormalizedString::transform): the marks composed into it are covered by no token.
        for (const unicode::ComposedChar& composed :
             step.kind == NormalizerStep::Kind::kNfc ? unicode::Nfc(cps) : unicode::Nfkc(cps)) {
          const NormChar& source = chars[composed.first];
          next.push_back({composed.c, source.start, source.end});
        }
        break;
      case NormalizerStep::Kind::kNfd:
      case NormalizerStep::Kind::kNfkd:
        // Each character of a decomposition shares the alignment of the one it came from.
        for (const unicode::SourcedChar& sourced :
             step.kind == NormalizerStep::Kind::kNfd ? unicode::Nfd(cps) : unicode::Nfkd(cps)) {
          next.push_back({sourced.c, chars[sourced.source].start, chars[sourced.source].end});
        }
        break;
      case NormalizerStep::Kind::kLowercase:
        // Rust's char::to_lowercase, each character of a longer mapping aligned with the one
        // lowered.
        for (const NormChar& c : chars) {
          for (char32_t lower : unicode::ToLower(c.c)) next.push_back({lower, c.start, c.end});
        }
        break;
      case NormalizerStep::Kind::kStripAccents:
        // NormalizedString::filter: the kept characters keep their alignment, the removed ones
        // leave none behind.
        std::copy_if(chars.begin(), chars.end(), std::back_inserter(next),
                     [](const NormChar& c) { return !unicode::IsMark(c.c); });
        break;
      case NormalizerStep::Kind::kPrepend:
        // NormalizedString::prepend: the new characters share the first character's alignment;
        // an empty text stays empty.
        if (!chars.empty()) {
          absl::StatusOr<unicode::DecodedText> content = unicode::DecodeUtf8(step.content);
          for (char32_t c : content->code_points) {
            next.push_back({c, chars.front().start, chars.front().end});
          }
        }
        next.insert(next.end(), chars.begin(), chars.end());
        break;
      case NormalizerStep::Kind::kReplace: {
        absl::StatusOr<unicode::DecodedText> content = unicode::DecodeUtf8(step.content);
        int64_t kept = 0;
        ATTNSCOPE_ASSIGN_OR_RETURN(const auto found, MatchesInChars(*step.pattern, chars));
        for (const auto& [first, last] : found) {
          if (first == last) continue;
          next.insert(next.end(), chars.begin() + kept, chars.begin() + first);
          // NormalizedString::replace: the new characters are inserted ones, aligned with the
          // last character they replace.
          for (char32_t c : content->code_points) {
            next.push_back({c, chars[last - 1].start, chars[last - 1].end});
          }
          kept = last;
        }
        next.insert(next.end(), chars.begin() + kept, chars.end());
        break;
      }
      case NormalizerStep::Kind::kPrecompiled: {
        // NormalizedString::transform: a change of 0 or less takes the alignment of the next
        // original character and passes it (and the ones it removes), an inserted one (1) shares
        // the alignment of the character before it, or none at the start.
        size_t position = 0;
        // The first change replaces a character (a replacement's first character does), so an
        // inserted one always has one before it, and the changes pass no more characters than
        // they were made for.
        for (const PrecompiledCharsmap::Change& change : step.charsmap->Changes(cps)) {
          if (change.change > 0) {
            next.push_back({change.c, chars[position - 1].start, chars[position - 1].end});
            continue;
          }
          next.push_back({change.c, chars[position].start, chars[position].end});
          position += 1 + static_cast<size_t>(-change.change);
        }
        break;
      }
      case NormalizerStep::Kind::kStrip: {
        // The kept characters keep their alignment (NormalizedString::lrstrip).
        size_t first = 0;
        size_t last = chars.size();
        while (step.strip_left && first < last && unicode::IsWhiteSpace(chars[first].c)) ++first;
        while (step.strip_right && last > first && unicode::IsWhiteSpace(chars[last - 1].c)) --last;
        next.assign(chars.begin() + first, chars.begin() + last);
        break;
      }
    }
    chars = std::move(next);
  }
  return chars;
}

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
void PipelineTokenizer::Emit(int64_t id, std::string token, int64_t start, int64_t end,
                             int64_t word_index, TokenizedText* out,
                             std::vector<std::pair<int32_t, int32_t>>* edges) const {
  // A token is its id's but for Unigram's fused unknown characters, which are shown as written.
  edges->push_back(token == id_to_token_[id] ? edge_spaces_[id] : EdgeSpaces(token));
  out->ids.push_back(id);
  out->tokens.push_back(std::move(token));
  out->offsets.push_back({start, end});
  out->word_ids.push_back(word_index);
}

void PipelineTokenizer::FinishOffsets(const unicode::DecodedText& decoded,
                                      const std::vector<std::pair<int32_t, int32_t>>& edges,
                                      TokenizedText* out) const {
  for (size_t k = 0; k < out->offsets.size(); ++k) {
    Offset& offset = out->offsets[k];
    if (pipeline_.trim_offsets) {
      // byte_level.rs process_offsets.
      auto [leading, trailing] = edges[k];
      const bool is_first = k == 0 || offset.start == 0;
      if (is_first && pipeline_.trim_add_prefix_space && leading == 1) leading = 0;
      if (leading > 0) offset.start = std::min(offset.start + leading, offset.end);
      if (trailing > 0 && offset.end >= trailing) {
        offset.end = std::max(offset.end - trailing, offset.start);
      }
    }
    out->byte_offsets.push_back({decoded.ByteOffset(offset.start), decoded.ByteOffset(offset.end)});
  }
}

std::string PipelineTokenizer::Decode(const std::vector<int64_t>& ids,
                                      bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special_tokens && is_special_id_[id]) continue;
    tokens.push_back(id_to_token_[id]);
  }
  // No decoder: the library joins the tokens with spaces.
  if (pipeline_.decoder.empty()) return absl::StrJoin(tokens, " ");
  for (const DecoderStep& step : pipeline_.decoder) {
    switch (step.kind) {
      case DecoderStep::Kind::kByteLevel: {
        std::string bytes;
        for (const std::string& token : tokens) {
          absl::StatusOr<unicode::DecodedText> decoded = unicode::DecodeUtf8(token);
          const bool in_table =
              decoded.ok() && std::all_of(decoded->code_points.begin(), decoded->code_points.end(),
                                          [](char32_t c) { return ByteOfChar(c) >= 0; });
          if (!in_table) {
            bytes.append(token);
            continue;
          }
          for (char32_t c : decoded->code_points) bytes.push_back(static_cast<char>(ByteOfChar(c)));
        }
        tokens = {Utf8Lossy(bytes)};
        break;
      }
      case DecoderStep::Kind::kReplace:
        for (std::string& token : tokens) {
          token = absl::StrReplaceAll(token, {{step.pattern, step.content}});
        }
        break;
      case DecoderStep::Kind::kByteFallback: {
        // Runs of "<0xXX>" tokens become their bytes read as UTF-8, or one U+FFFD per token when
        // they are not UTF-8 (decoders::byte_fallback).
        std::vector<std::string> decoded;
        std::string run;
        size_t run_tokens = 0;
        const auto flush = [&] {
          if (run_tokens == 0) return;
          if (unicode::CheckUtf8(run).ok()) {
            decoded.push_back(run);
          } else {
            decoded.insert(decoded.end(), run_tokens, "\xEF\xBF\xBD");
          }
          run.clear();
          run_tokens = 0;
        };
        for (std::string& token : tokens) {
          int value = -1;
          if (token.size() == 6 && absl::StartsWith(token, "<0x") && token.back() == '>' &&
              std::isxdigit(static_cast<unsigned char>(token[3])) &&
              std::isxdigit(static_cast<unsigned char>(token[4]))) {
            value = std::stoi(token.substr(3, 2), nullptr, 16);
          }
          if (value >= 0) {
            run.push_back(static_cast<char>(value));
            ++run_tokens;
            continue;
          }
          flush();
          decoded.push_back(std::move(token));
        }
        flush();
        tokens = std::move(decoded);
        break;
      }
      case DecoderStep::Kind::kFuse:
        tokens = {absl::StrJoin(tokens, "")};
        break;
      case DecoderStep::Kind::kMetaspace:
        // Every replacement of the first token is dropped, not only a leading one (the library's
        // decode_chain).
        for (size_t k = 0; k < tokens.size(); ++k) {
          tokens[k] =
              absl::StrReplaceAll(tokens[k], {{step.content, k == 0 && step.prepend ? "" : " "}});
        }
        break;
      case DecoderStep::Kind::kStrip:
        for (std::string& token : tokens) {
          absl::StatusOr<unicode::DecodedText> decoded = unicode::DecodeUtf8(token);
          absl::StatusOr<unicode::DecodedText> content = unicode::DecodeUtf8(step.content);
          if (!decoded.ok() || !content.ok() || content->size() != 1) continue;
          const char32_t strip = content->code_points[0];
          int64_t first = 0;
          while (first < step.start && first < decoded->size() &&
                 decoded->code_points[first] == strip) {
            ++first;
          }
          int64_t last = decoded->size();
          for (int64_t k = 0;
               k < step.stop && last > first && decoded->code_points[last - 1] == strip; ++k) {
            --last;
          }
          token = token.substr(decoded->ByteOffset(first),
                               decoded->ByteOffset(last) - decoded->ByteOffset(first));
        }
        break;
    }
  }
  return absl::StrJoin(tokens, "");
}

}  // namespace attnscope

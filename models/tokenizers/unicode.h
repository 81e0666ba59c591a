// UTF-8 decoding and the few Unicode properties the tokenizers need. Properties come from
// libutf8proc (its Unicode version may be newer than the one Rust's `tokenizers` was built with, so
// characters assigned since then can classify differently).
#ifndef ATTNSCOPE_MODELS_UNICODE_H_
#define ATTNSCOPE_MODELS_UNICODE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace attnscope::unicode {

// A UTF-8 text split into code points, with the byte position of each.
struct DecodedText {
  std::vector<char32_t> code_points;
  // byte_starts[i] is the byte offset of code point i; byte_starts[size()] is the text's byte
  // length.
  std::vector<int64_t> byte_starts;

  int64_t size() const { return static_cast<int64_t>(code_points.size()); }
  // The byte offset where code point `index` starts, `index` in [0, size()].
  int64_t ByteOffset(int64_t index) const { return byte_starts[index]; }
  // The index of the code point containing byte `byte` (for a span start), `byte` in [0, bytes].
  int64_t CodePointAtByte(int64_t byte) const;
  // The number of code points that start before byte `byte` (for a span end: a span ending inside
  // a code point is widened to include it).
  int64_t CodePointsBeforeByte(int64_t byte) const;
};

// Decodes `text` strictly: overlong forms, surrogates (U+D800..U+DFFF), code points above U+10FFFF,
// stray continuation bytes and truncated sequences are rejected.
// InvalidArgument naming the byte offset of the first bad sequence.
absl::StatusOr<DecodedText> DecodeUtf8(std::string_view text);

// DecodeUtf8's check alone, without keeping the code points: the same InvalidArgument.
absl::Status CheckUtf8(std::string_view text);

// Appends the UTF-8 encoding of `code_point`, which must be a Unicode scalar value.
void AppendUtf8(char32_t code_point, std::string* out);

// Unicode White_Space property, the definition Rust's char::is_whitespace uses.
bool IsWhiteSpace(char32_t c);
// General category Cc, Cf, Cs or Co: Rust unicode_categories' is_other, whose tables, made from
// UnicodeData.txt, hold no unassigned (Cn) code point.
bool IsOther(char32_t c);
// General category P* (Pc, Pd, Ps, Pe, Pi, Pf, Po).
bool IsPunctuation(char32_t c);
// General category Mn (nonspacing mark), what BERT's accent stripping removes.
bool IsNonspacingMark(char32_t c);
// General category M* (Mn, Mc, Me), what tokenizers' StripAccents normalizer removes (the
// unicode-normalization crate's is_combining_mark).
bool IsMark(char32_t c);

// Lowercase mapping of one character as Rust's char::to_lowercase gives it: the simple mapping,
// except U+0130 (LATIN CAPITAL LETTER I WITH DOT ABOVE), whose unconditional full mapping is two
// characters ("i" + U+0307).
std::u32string ToLower(char32_t c);

// One character of a canonical decomposition and the index of the input character it came from.
struct SourcedChar {
  char32_t c;
  size_t source;
};

// Unicode canonical decomposition (NFD) of `text`: each character fully decomposed (Hangul
// syllables into jamo included), then combining marks canonically reordered. Every output character
// records which input character produced it.
std::vector<SourcedChar> Nfd(const std::vector<char32_t>& text);
// Unicode compatibility decomposition (NFKD): as Nfd, with the compatibility mappings too ("ﬁ" ->
// "f" "i", a full-width letter to its ASCII one, "²" -> "2").
std::vector<SourcedChar> Nfkd(const std::vector<char32_t>& text);

// One character of a canonical composition and the input characters [first, last] it was made of.
struct ComposedChar {
  char32_t c;
  size_t first;
  size_t last;
};

// Unicode NFC of `text` (UAX #15: NFD, then canonical composition of each unblocked pair whose
// primary composite exists, Hangul jamo included; utf8proc's composition table). A composed
// character spans every input character it was made of ("e" U+0302 U+0301 -> "ế" spanning all
// three), so offsets cover the whole of what the caller wrote.
std::vector<ComposedChar> Nfc(const std::vector<char32_t>& text);
// Unicode NFKC: Nfkd, then the canonical composition of Nfc.
std::vector<ComposedChar> Nfkc(const std::vector<char32_t>& text);

// The boundaries of the extended grapheme clusters of `text` (UAX #29, utf8proc's rules; Rust's
// unicode-segmentation `graphemes(true)` where their Unicode versions agree): 0, the index of each
// cluster's first character after the first, and text.size(); just {0} for an empty text.
std::vector<size_t> GraphemeBreaks(const std::vector<char32_t>& text);

}  // namespace attnscope::unicode

#endif  // ATTNSCOPE_MODELS_UNICODE_H_

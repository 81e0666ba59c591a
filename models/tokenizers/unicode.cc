#include "models/tokenizers/unicode.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "utf8proc.h"

namespace attnscope::unicode {
namespace {

absl::Status InvalidUtf8(std::string_view text, size_t offset, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "expected valid UTF-8, got %s at byte offset %d (byte 0x%02X); the input must be valid "
      "UTF-8",
      what, offset, static_cast<unsigned char>(text[offset])));
}

bool IsContinuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

int CombiningClass(char32_t c) {
  return utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class;
}

// Calls on_code_point(code_point, byte_start) for each code point of `text`, strictly decoded;
// InvalidArgument at the first bad sequence.
template <typename OnCodePoint>
absl::Status ForEachCodePoint(std::string_view text, OnCodePoint on_code_point) {
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char lead = static_cast<unsigned char>(text[i]);
    int length;
    char32_t code_point;
    char32_t min_value;
    if (lead < 0x80) {
      length = 1;
      code_point = lead;
      min_value = 0;
    } else if ((lead & 0xE0) == 0xC0) {
      length = 2;
      code_point = lead & 0x1F;
      min_value = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3;
      code_point = lead & 0x0F;
      min_value = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4;
      code_point = lead & 0x07;
      min_value = 0x10000;
    } else if (IsContinuation(lead)) {
      return InvalidUtf8(text, i, "a continuation byte with no lead byte");
    } else {
      return InvalidUtf8(text, i, "a byte that never occurs in UTF-8");
    }
    if (i + length > text.size()) {
      return InvalidUtf8(text, i, "a multi-byte sequence truncated by the end of the text");
    }
    for (int k = 1; k < length; ++k) {
      const unsigned char byte = static_cast<unsigned char>(text[i + k]);
      if (!IsContinuation(byte)) {
        return InvalidUtf8(text, i, "a multi-byte sequence cut short by a non-continuation byte");
      }
      code_point = (code_point << 6) | (byte & 0x3F);
    }
    if (code_point < min_value) return InvalidUtf8(text, i, "an overlong encoding");
    if (code_point >= 0xD800 && code_point <= 0xDFFF) {
      return InvalidUtf8(text, i, "an encoded UTF-16 surrogate");
    }
    if (code_point > 0x10FFFF) return InvalidUtf8(text, i, "a code point above U+10FFFF");
    on_code_point(code_point, i);
    i += length;
  }
  return absl::OkStatus();
}

}  // namespace

int64_t DecodedText::CodePointAtByte(int64_t byte) const {
  // The last start <= byte; byte_starts is strictly increasing.
  auto it = std::upper_bound(byte_starts.begin(), byte_starts.end(), byte);
  const int64_t index = std::distance(byte_starts.begin(), it) - 1;
  return std::clamp<int64_t>(index, 0, size());
}

int64_t DecodedText::CodePointsBeforeByte(int64_t byte) const {
  auto it = std::lower_bound(byte_starts.begin(), byte_starts.end(), byte);
  return std::min<int64_t>(std::distance(byte_starts.begin(), it), size());
}

absl::StatusOr<DecodedText> DecodeUtf8(std::string_view text) {
  DecodedText decoded;
  decoded.code_points.reserve(text.size());
  decoded.byte_starts.reserve(text.size() + 1);
  ATTNSCOPE_RETURN_IF_ERROR(ForEachCodePoint(text, [&](char32_t code_point, size_t start) {
    decoded.code_points.push_back(code_point);
    decoded.byte_starts.push_back(static_cast<int64_t>(start));
  }));
  decoded.byte_starts.push_back(static_cast<int64_t>(text.size()));
  return decoded;
}

absl::Status CheckUtf8(std::string_view text) {
  return ForEachCodePoint(text, [](char32_t, size_t) {});
}

void AppendUtf8(char32_t code_point, std::string* out) {
  if (code_point < 0x80) {
    out->push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

bool IsWhiteSpace(char32_t c) {
  // PropList.txt White_Space: a fixed list that Unicode has not changed since 6.x.
  switch (c) {
    case 0x0009:
    case 0x000A:
    case 0x000B:
    case 0x000C:
    case 0x000D:
    case 0x0020:
    case 0x0085:
    case 0x00A0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool IsOther(char32_t c) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
      return true;
    default:
      return false;
  }
}

bool IsPunctuation(char32_t c) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

bool IsNonspacingMark(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_MN;
}

bool IsMark(char32_t c) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
      return true;
    default:
      return false;
  }
}

std::u32string ToLower(char32_t c) {
  // SpecialCasing.txt: the only unconditional lowercase mapping longer than one character.
  if (c == 0x0130) return std::u32string{U'i', 0x0307};
  return std::u32string(1,
                        static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
}

namespace {

// Nfd, or Nfkd when `options` is UTF8PROC_COMPAT.
std::vector<SourcedChar> Decompose(const std::vector<char32_t>& text, int options) {
  std::vector<SourcedChar> out;
  out.reserve(text.size());
  // The longest canonical decomposition is 4 code points, the longest compatibility one 18
  // (U+FDFA); the buffer leaves room to spare.
  std::array<utf8proc_int32_t, 32> buffer;
  for (size_t i = 0; i < text.size(); ++i) {
    const utf8proc_ssize_t n = utf8proc_decompose_char(
        static_cast<utf8proc_int32_t>(text[i]), buffer.data(), buffer.size(),
        static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | options), nullptr);
    if (n <= 0 || n > static_cast<utf8proc_ssize_t>(buffer.size())) {
      // Only reachable for a non-scalar value, which DecodeUtf8 never produces: keep it unchanged.
      out.push_back({text[i], i});
      continue;
    }
    for (utf8proc_ssize_t k = 0; k < n; ++k) {
      out.push_back({static_cast<char32_t>(buffer[k]), i});
    }
  }
  // Canonical ordering: stable-sort every run of non-starters by combining class.
  size_t run_start = 0;
  while (run_start < out.size()) {
    if (CombiningClass(out[run_start].c) == 0) {
      ++run_start;
      continue;
    }
    size_t run_end = run_start;
    while (run_end < out.size() && CombiningClass(out[run_end].c) != 0) ++run_end;
    std::stable_sort(out.begin() + run_start, out.begin() + run_end,
                     [](const SourcedChar& a, const SourcedChar& b) {
                       return CombiningClass(a.c) < CombiningClass(b.c);
                     });
    run_start = run_end;
  }
  return out;
}

// The primary composite of `starter` and `next`, or 0 when they do not compose.
char32_t Compose(char32_t starter, char32_t next) {
  std::array<utf8proc_int32_t, 2> pair = {static_cast<utf8proc_int32_t>(starter),
                                          static_cast<utf8proc_int32_t>(next)};
  const utf8proc_ssize_t n = utf8proc_normalize_utf32(
      pair.data(), pair.size(), static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  return n == 1 ? static_cast<char32_t>(pair[0]) : 0;
}

// The canonical composition of a decomposed text (UAX #15's, the second half of NFC and NFKC).
std::vector<ComposedChar> ComposeAll(const std::vector<SourcedChar>& decomposed) {
  std::vector<ComposedChar> out;
  out.reserve(decomposed.size());
  // Index in `out` of the last starter, and the combining class of the last character kept after
  // it (-1: none yet), which decides whether a later mark is blocked from the starter.
  std::optional<size_t> starter;
  int last_class = -1;
  for (const SourcedChar& ch : decomposed) {
    const int combining_class = CombiningClass(ch.c);
    if (starter.has_value() && last_class < combining_class) {
      const char32_t composite = Compose(out[*starter].c, ch.c);
      if (composite != 0) {
        ComposedChar& base = out[*starter];
        base.c = composite;
        base.first = std::min(base.first, ch.source);
        base.last = std::max(base.last, ch.source);
        continue;
      }
    }
    if (combining_class == 0) {
      starter = out.size();
      last_class = -1;
    } else {
      last_class = std::max(last_class, combining_class);
    }
    out.push_back({ch.c, ch.source, ch.source});
  }
  return out;
}

}  // namespace

std::vector<SourcedChar> Nfd(const std::vector<char32_t>& text) { return Decompose(text, 0); }

std::vector<SourcedChar> Nfkd(const std::vector<char32_t>& text) {
  return Decompose(text, UTF8PROC_COMPAT);
}

std::vector<ComposedChar> Nfc(const std::vector<char32_t>& text) { return ComposeAll(Nfd(text)); }

std::vector<ComposedChar> Nfkc(const std::vector<char32_t>& text) { return ComposeAll(Nfkd(text)); }

std::vector<size_t> GraphemeBreaks(const std::vector<char32_t>& text) {
  std::vector<size_t> breaks = {0};
  utf8proc_int32_t state = 0;
  for (size_t k = 1; k < text.size(); ++k) {
    if (utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(text[k - 1]),
                                         static_cast<utf8proc_int32_t>(text[k]), &state)) {
      breaks.push_back(k);
    }
  }
  if (!text.empty()) breaks.push_back(text.size());
  return breaks;
}

}  // namespace attnscope::unicode

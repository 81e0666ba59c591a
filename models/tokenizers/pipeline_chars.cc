#include "models/tokenizers/pipeline_chars.h"

#include "utf8proc.h"

namespace attnscope {
namespace pipeline_chars {
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

}  // namespace

const std::array<char32_t, 256>& ByteLevelChars() {
  static const std::array<char32_t, 256> chars = MakeByteChars();
  return chars;
}

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

}  // namespace pipeline_chars
}  // namespace attnscope

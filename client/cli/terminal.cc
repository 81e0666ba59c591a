#include "client/cli/terminal.h"

#include <unistd.h>

#include "absl/strings/str_format.h"

namespace attnscope::cli {
namespace {

// Whether E2 `second` `third` is the UTF-8 of a bidirectional embedding, override or isolate
// (U+202A to U+202E, U+2066 to U+2069): text after it is shown reordered ("Trojan Source").
bool IsBidiControl(char second, char third) {
  const unsigned char b = static_cast<unsigned char>(second);
  const unsigned char c = static_cast<unsigned char>(third);
  return (b == 0x80 && c >= 0xaa && c <= 0xae) || (b == 0x81 && c >= 0xa6 && c <= 0xa9);
}

}  // namespace

std::string Printable(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char byte = static_cast<unsigned char>(text[i]);
    if ((byte < 0x20 && byte != '\n' && byte != '\t') || byte == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", byte);
    } else if (byte == 0xc2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(text[i + 1]));
      ++i;
    } else if (byte == 0xe2 && i + 2 < text.size() && IsBidiControl(text[i + 1], text[i + 2])) {
      absl::StrAppendFormat(&out, "\\u%04x",
                            0x2000 | ((static_cast<unsigned char>(text[i + 1]) & 0x3f) << 6) |
                                (static_cast<unsigned char>(text[i + 2]) & 0x3f));
      i += 2;
    } else {
      out.push_back(static_cast<char>(byte));
    }
  }
  return out;
}

std::string ForTerminal(absl::string_view text, bool stream_is_terminal) {
  return stream_is_terminal ? Printable(text) : std::string(text);
}

bool IsTerminal(int fd) { return isatty(fd) == 1; }

}  // namespace attnscope::cli

#include "client/cli/terminal.h"

#include <unistd.h>

#include "absl/strings/str_format.h"

namespace attnscope::cli {

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

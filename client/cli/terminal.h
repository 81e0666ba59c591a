// Text from the server (its error messages, token strings, generated text) printed for a person:
// a terminal acts on the control characters in it (ESC starts sequences that move the cursor,
// rewrite the window title or the clipboard, or hide what follows), so a model's output or a
// hostile server's message could rewrite what the user sees. These keep such characters
// visible instead.
#ifndef ATTNSCOPE_CLIENT_CLI_TERMINAL_H_
#define ATTNSCOPE_CLIENT_CLI_TERMINAL_H_

#include <string>

#include "absl/strings/string_view.h"

namespace attnscope::cli {

// `text` with each control character but newline and tab written out: C0 controls and DEL as
// `\xNN` (`\x1b` for ESC), C1 controls (U+0080 to U+009F, as UTF-8) and the bidirectional
// embeddings, overrides and isolates (U+202A to U+202E, U+2066 to U+2069) as `\uNNNN`. Every
// other byte, invalid UTF-8 included, is kept as it is.
std::string Printable(absl::string_view text);

// Printable(text) when `stream_is_terminal`, otherwise `text` unchanged: output piped to a file
// or another program keeps the server's bytes.
std::string ForTerminal(absl::string_view text, bool stream_is_terminal);

// Whether standard output (`fd` 1) or standard error (2) is a terminal.
bool IsTerminal(int fd);

}  // namespace attnscope::cli

#endif  // ATTNSCOPE_CLIENT_CLI_TERMINAL_H_

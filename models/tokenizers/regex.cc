#include "models/tokenizers/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace attnscope {
namespace {

pcre2_code* Code(void* code) { return static_cast<pcre2_code*>(code); }

// `pattern` with \s and \S widened to Unicode White_Space (PCRE2's \s lacks U+0085): outside a
// class \s becomes [\s\x{85}] and \S [^\s\x{85}]; inside one \s gains \x{85} (a \S inside a class
// is left alone: no tokenizer.json has one).
std::string WidenWhiteSpace(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's') {
        out.append(in_class ? "\\s\\x{85}" : "[\\s\\x{85}]");
      } else if (next == 'S' && !in_class) {
        out.append("[^\\s\\x{85}]");
      } else {
        out.push_back(c);
        out.push_back(next);
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out.push_back(c);
  }
  return out;
}

}  // namespace

Regex::~Regex() { pcre2_code_free(Code(code_)); }

absl::StatusOr<std::unique_ptr<Regex>> Regex::Create(std::string_view pattern, bool literal) {
  const std::string compiled = literal ? std::string(pattern) : WidenWhiteSpace(pattern);
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  // PCRE2_LITERAL refuses PCRE2_UCP (nothing in a literal depends on it).
  const uint32_t options = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                                   options, &error, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat(
        "regular expression '", std::string(pattern), "': expected a pattern PCRE2 compiles, got ",
        reinterpret_cast<const char*>(message), " at offset ", error_offset));
  }
  // Without a JIT (or when it fails) pcre2_match interprets the pattern: slower, same answers.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<Regex>(new Regex(std::string(pattern), code));
}

std::vector<std::pair<size_t, size_t>> Regex::FindAll(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(Code(code_), nullptr);
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  while (offset <= text.size()) {
    // The text was checked as UTF-8 once, when it came in.
    int rc =
        pcre2_match(Code(code_), subject, text.size(), offset, PCRE2_NO_UTF_CHECK, data, nullptr);
    // The JIT's stack (32 KiB) can run out on long runs of one class; the interpreter keeps its
    // backtracking on the heap.
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(Code(code_), subject, text.size(), offset, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       data, nullptr);
    }
    if (rc < 0) break;
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t start = ovector[0];
    const size_t end = ovector[1];
    matches.emplace_back(start, end);
    if (end > start) {
      offset = end;
      continue;
    }
    if (end >= text.size()) break;
    // One character on after an empty match.
    offset = end + 1;
    while (offset < text.size() && (static_cast<unsigned char>(text[offset]) & 0xC0) == 0x80) {
      ++offset;
    }
  }
  pcre2_match_data_free(data);
  return matches;
}

}  // namespace attnscope

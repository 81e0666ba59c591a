#include "models/tokenizers/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace attnscope {
namespace {

pcre2_code* Code(void* code) { return static_cast<pcre2_code*>(code); }

// `pattern` with \s and \S meaning what they mean to Oniguruma: Unicode White_Space. PCRE2's \s
// with PCRE2_UCP also takes U+180E (MONGOLIAN VOWEL SEPARATOR, in its \h list although Unicode made
// it a format character in 6.3); the library splits "a \u180Eb" as "a", " \u180E", "b", PCRE2 as
// is would give "a", " ", "\u180Eb". So \s becomes (?:(?!\x{180E})\s) and \S (?:\x{180E}|\S), and
// a class holding one of them is wrapped the same way (PCRE2 10.42 has no class subtraction).
std::string OnigurumaWhiteSpace(std::string_view pattern) {
  constexpr std::string_view kWithout = "(?:(?!\\x{180E})";  // ... ) : U+180E never matches
  constexpr std::string_view kWith = "(?:\\x{180E}|";        // ... ) : U+180E always matches
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[++i];
      if (next == 's' || next == 'S') {
        out.append(next == 's' ? kWithout : kWith).append({'\\', next, ')'});
      } else {
        out.push_back(c);
        out.push_back(next);
      }
      continue;
    }
    if (c != '[') {
      out.push_back(c);
      continue;
    }
    // A class: find its end (a ']' first, or after '^', is a literal; so is an escaped one; a
    // POSIX [:name:] inside does not end it) and whether it holds \s or \S.
    size_t end = i + 1;
    const bool negated = end < pattern.size() && pattern[end] == '^';
    if (negated) ++end;
    if (end < pattern.size() && pattern[end] == ']') ++end;
    bool has_s = false;
    bool has_upper_s = false;
    while (end < pattern.size() && pattern[end] != ']') {
      if (pattern[end] == '\\' && end + 1 < pattern.size()) {
        has_s |= pattern[end + 1] == 's';
        has_upper_s |= pattern[end + 1] == 'S';
        end += 2;
      } else if (pattern.compare(end, 2, "[:") == 0) {
        const size_t close = pattern.find(":]", end + 2);
        end = close == std::string_view::npos ? pattern.size() : close + 2;
      } else {
        ++end;
      }
    }
    const std::string_view whole =
        pattern.substr(i, std::min(end + 1, pattern.size()) - i);  // with its ']'
    if (has_s == has_upper_s) {
      out.append(whole);
    } else {
      // [\s..] and [^\S..] must not match U+180E; [\S..] and [^\s..] must.
      out.append((has_s != negated) ? kWithout : kWith).append(whole).append(")");
    }
    i = end;
  }
  return out;
}

}  // namespace

Regex::~Regex() { pcre2_code_free(Code(code_)); }

absl::StatusOr<std::unique_ptr<Regex>> Regex::Create(std::string_view pattern, bool literal) {
  const std::string compiled = literal ? std::string(pattern) : OnigurumaWhiteSpace(pattern);
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

absl::StatusOr<std::vector<std::pair<size_t, size_t>>> Regex::FindAll(std::string_view text) const {
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
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(data);
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer pattern '", pattern_,
          "': expected to match within PCRE2's limits, "
          "got \"",
          reinterpret_cast<const char*>(message), "\" searching from byte ", offset, " of ",
          text.size(),
          " (the pattern backtracks catastrophically on this text; a shorter text, or a "
          "tokenizer.json whose pattern does not, avoids it)"));
    }
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

// The regular expressions of tokenizer.json pre-tokenizers (Split with a "Regex" pattern), on
// PCRE2. Hugging Face's `tokenizers` compiles them with Oniguruma; PCRE2 reads the same syntax for
// everything those files use (\p{L}, \p{N}, (?i:...), lookahead) and is a Debian package with a
// JIT, where Oniguruma is neither linked here nor faster.
#ifndef ATTNSCOPE_MODELS_TOKENIZERS_REGEX_H_
#define ATTNSCOPE_MODELS_TOKENIZERS_REGEX_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace attnscope {

// A compiled pattern, immutable and safe to use from many threads at once (each search has its own
// match data).
class Regex {
 public:
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Compiles `pattern` with PCRE2_UTF and PCRE2_UCP (\w, \d, \s and case folding by Unicode
  // properties, as Oniguruma does on UTF-8), JIT-compiled where PCRE2 has a JIT. `literal`: the
  // pattern is a plain string (tokenizer.json's {"String": ...}). Oniguruma's \s is Unicode's
  // White_Space; PCRE2's also has U+180E, so the pattern is rewritten to leave it out of \s (and
  // in \S), classes included.
  // InvalidArgument: the pattern does not compile; the message has PCRE2's reason and its offset.
  static absl::StatusOr<std::unique_ptr<Regex>> Create(std::string_view pattern, bool literal);

  // Every leftmost match in `text` (valid UTF-8), in order, as [start, end) byte offsets. After
  // an empty match the search resumes one character later, as Oniguruma's iteration does.
  // InvalidArgument, naming the pattern and where in `text` it stopped: PCRE2 gave up on a
  // search (its match limit of 10^7 backtracking steps, or its heap limit: a pattern that
  // backtracks catastrophically on this text). Splitting the rest as one piece instead would give
  // other tokens than the pattern asks for, silently.
  absl::StatusOr<std::vector<std::pair<size_t, size_t>>> FindAll(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex(std::string pattern, void* code) : pattern_(std::move(pattern)), code_(code) {}

  std::string pattern_;
  void* code_;  // pcre2_code_8*, kept out of the header so that pcre2.h stays private.
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_TOKENIZERS_REGEX_H_

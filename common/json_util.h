// Guards for JSON documents read from outside (request bodies, checkpoint and tokenizer files):
// their depth, and how much of them an error message may quote.
#ifndef ATTNSCOPE_MODELS_JSON_UTIL_H_
#define ATTNSCOPE_MODELS_JSON_UTIL_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace attnscope {

// The deepest nesting accepted: protobuf's JSON parser refuses deeper messages too, and no Hugging
// Face file nests more than a handful of levels.
inline constexpr int kMaxJsonDepth = 100;

// InvalidArgument "<what>: expected JSON nested at most 100 levels deep, got N" when `json` nests
// deeper than kMaxJsonDepth. nlohmann parses and destroys any depth without recursion, but its
// dump(), copies and comparisons recurse once per level: 100 KB of '[' that parse fine overflowed
// the stack of the code that then printed the value into an error message
// (fuzz/regressions/*/deep_nesting). Call this right after parsing, before the document is dumped
// or copied. The depth is counted without recursion.
absl::Status CheckJsonDepth(const nlohmann::json& json, absl::string_view what);

// The same check on JSON text before it is parsed, for text from clients: a body of a few
// megabytes of '[' would otherwise cost a second and hundreds of megabytes of nested values
// before CheckJsonDepth could refuse it. Counts the brackets outside strings in one pass; text
// that is not JSON passes, for the parser to refuse.
absl::Status CheckJsonTextDepth(absl::string_view text, absl::string_view what);

// `text` as an error message may quote it: at most `max_bytes` bytes (cut on a UTF-8 character
// boundary, "..." after the cut) with control characters escaped (a newline becomes \n), so that
// a message quoting a hostile file stays one readable line, never megabytes.
std::string Excerpt(absl::string_view text, size_t max_bytes = 80);

// Excerpt of `value`'s JSON text. Invalid UTF-8 in strings is replaced, never thrown about.
std::string JsonExcerpt(const nlohmann::json& value, size_t max_bytes = 80);

// What a file's JSON text is, for an error that expected something else of it: "malformed JSON
// (<nlohmann's reason with its line and column>)", e.g. "(parse error at line 3, column 14: number
// overflow parsing '-1e999')", or the type of the value it holds ("a JSON array", "an empty JSON
// object"), never its text (dumping a deeply nested value recurses once per level). It parses
// `text` again: for error paths only.
std::string DescribeJsonText(absl::string_view text);

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_JSON_UTIL_H_

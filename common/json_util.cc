#include "common/json_util.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace attnscope {

absl::Status CheckJsonDepth(const nlohmann::json& json, absl::string_view what) {
  int deepest = 0;
  // Containers still to visit, with the depth of the values inside them.
  std::vector<std::pair<const nlohmann::json*, int>> pending = {{&json, 1}};
  while (!pending.empty()) {
    const auto [value, depth] = pending.back();
    pending.pop_back();
    if (!value->is_structured()) continue;
    deepest = std::max(deepest, depth);
    for (const nlohmann::json& child : *value) pending.emplace_back(&child, depth + 1);
  }
  if (deepest <= kMaxJsonDepth) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, ": expected JSON nested at most ",
                                                 kMaxJsonDepth, " levels deep, got ", deepest));
}

absl::Status CheckJsonTextDepth(absl::string_view text, absl::string_view what) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, a quote included, does not end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  if (deepest <= kMaxJsonDepth) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, ": expected JSON nested at most ",
                                                 kMaxJsonDepth, " levels deep, got ", deepest));
}

std::string Excerpt(absl::string_view text, size_t max_bytes) {
  bool cut = false;
  if (text.size() > max_bytes) {
    size_t end = max_bytes;
    // Back off continuation bytes (10xxxxxx) so that the cut never splits a character.
    while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xc0) == 0x80) --end;
    text = text.substr(0, end);
    cut = true;
  }
  std::string out;
  out.reserve(text.size() + 3);
  for (const char c : text) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (byte < 0x20 || byte == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += {'\\', 'x', kHex[byte >> 4], kHex[byte & 0xf]};
    } else {
      out += c;
    }
  }
  if (cut) out += "...";
  return out;
}

std::string JsonExcerpt(const nlohmann::json& value, size_t max_bytes) {
  return Excerpt(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), max_bytes);
}

std::string DescribeJsonText(absl::string_view text) {
  try {
    const nlohmann::json value = nlohmann::json::parse(text.begin(), text.end());
    if (value.is_object() && value.empty()) return "an empty JSON object";
    const std::string type = value.type_name();
    return absl::StrCat(type == "array" || type == "object" ? "a JSON " : "JSON ", type);
  } catch (const nlohmann::json::exception& error) {
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..." without its id.
    absl::string_view reason = error.what();
    if (const size_t id_end = reason.find("] "); id_end != absl::string_view::npos) {
      reason.remove_prefix(id_end + 2);
    }
    return absl::StrCat("malformed JSON (", Excerpt(reason, 200), ")");
  }
}

}  // namespace attnscope

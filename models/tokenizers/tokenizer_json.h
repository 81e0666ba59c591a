// Reading Hugging Face tokenizer.json files: the parse and the field accessors every tokenizer.json
// reader shares (WordPiece, byte-level BPE), so that their errors have one form: "tokenizer.json
// '<path>': field '<field>': expected X, got Y", and a component this project does not implement is
// refused as "tokenizer.json '<path>': <component> type 'X' is not supported; supported: ...".
#ifndef ATTNSCOPE_MODELS_TOKENIZERS_TOKENIZER_JSON_H_
#define ATTNSCOPE_MODELS_TOKENIZERS_TOKENIZER_JSON_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace attnscope::tokenizer_json {

// The file at `path` parsed (at most kMaxTokenizerFileBytes, nesting checked).
// NotFound: no file. InvalidArgument: not a JSON object.
absl::StatusOr<nlohmann::json> Read(const std::string& path);

// InvalidArgument: "tokenizer.json '<path>': field '<field>': expected <expected>, got <got>".
absl::Status FieldError(const std::string& path, const std::string& field,
                        const std::string& expected, const nlohmann::json& got);

// Unimplemented: "tokenizer.json '<path>': <component> type '<type>' is not supported; supported:
// <supported>". Unimplemented rather than InvalidArgument because the file may be fine: the loader
// then falls back to the checkpoint's other tokenizer files.
absl::Status Unsupported(const std::string& path, const std::string& component,
                         const nlohmann::json& type, const std::string& supported);

// Unimplemented: "tokenizer.json '<path>': field '<field>' = <value> is not supported; supported:
// <supported>", for a setting rather than a component type (model.byte_fallback true).
absl::Status UnsupportedValue(const std::string& path, const std::string& field,
                              const nlohmann::json& value, const std::string& supported);

// object[key] as a string / integer; FieldError naming `field` when missing or of another type.
absl::StatusOr<std::string> GetString(const nlohmann::json& object, const std::string& key,
                                      const std::string& path, const std::string& field);
absl::StatusOr<int64_t> GetInt(const nlohmann::json& object, const std::string& key,
                               const std::string& path, const std::string& field);
// object[key] as a bool, `default_value` when missing or null.
absl::StatusOr<bool> GetBool(const nlohmann::json& object, const std::string& key,
                             bool default_value, const std::string& path, const std::string& field);

}  // namespace attnscope::tokenizer_json

#endif  // ATTNSCOPE_MODELS_TOKENIZERS_TOKENIZER_JSON_H_

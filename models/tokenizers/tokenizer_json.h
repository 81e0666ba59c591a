// Reading Hugging Face tokenizer.json files: the parse and the field accessors every tokenizer.json
// reader shares (WordPiece, byte-level BPE), so that their errors have one form: "tokenizer.json
// '<path>': field '<field>': expected X, got Y", and a component this project does not implement is
// refused as "tokenizer.json '<path>': <component> type 'X' is not supported; supported: ...".
#ifndef ATTNSCOPE_MODELS_TOKENIZERS_TOKENIZER_JSON_H_
#define ATTNSCOPE_MODELS_TOKENIZERS_TOKENIZER_JSON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
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

// A BPE or WordLevel model's vocabulary: model.vocab, a non-empty object token -> id, read into
// both directions (id_to_token indexed by id; ids the file leaves out are "").
struct Vocab {
  absl::flat_hash_map<std::string, int64_t> token_to_id;
  std::vector<std::string> id_to_token;
  // The number of vocab and added tokens: every id, vocab or added, lies below it. The library
  // keeps ids in maps, so they may leave gaps; a table indexed by id must not be made huge by one
  // stray id (dense ids, the layout every converter writes, always fit).
  int64_t id_limit = 0;
};

// Reads `model`'s vocab; FieldError naming model.vocab (not a non-empty object), added_tokens (not
// an array), or the token whose id is no integer in [0, id_limit) or another token's.
absl::StatusOr<Vocab> ReadVocab(const nlohmann::json& root, const nlohmann::json& model,
                                const std::string& path);

}  // namespace attnscope::tokenizer_json

#endif  // ATTNSCOPE_MODELS_TOKENIZERS_TOKENIZER_JSON_H_

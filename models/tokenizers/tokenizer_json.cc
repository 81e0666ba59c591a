#include "models/tokenizers/tokenizer_json.h"

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/json_util.h"
#include "common/status_macros.h"

namespace attnscope::tokenizer_json {

using json = nlohmann::json;

absl::StatusOr<json> Read(const std::string& path) {
  ATTNSCOPE_ASSIGN_OR_RETURN(std::string contents, ReadFileToString(path, kMaxTokenizerFileBytes));
  json root = json::parse(contents, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer.json '", path, "': expected a JSON object, got ", DescribeJsonText(contents)));
  }
  ATTNSCOPE_RETURN_IF_ERROR(CheckJsonDepth(root, absl::StrCat("tokenizer.json '", path, "'")));
  return root;
}

absl::StatusOr<Vocab> ReadVocab(const json& root, const json& model, const std::string& path) {
  const json& vocab = model.value("vocab", json());
  if (!vocab.is_object() || vocab.empty()) {
    return FieldError(path, "model.vocab", "a non-empty object token -> id", vocab);
  }
  const json added_tokens = root.value("added_tokens", json::array());
  if (!added_tokens.is_array()) return FieldError(path, "added_tokens", "an array", added_tokens);
  Vocab out;
  out.id_limit = static_cast<int64_t>(vocab.size() + added_tokens.size());
  const std::string id_range =
      absl::StrCat("an id in [0, ", out.id_limit, "), the number of vocab and added tokens");
  out.token_to_id.reserve(vocab.size());
  std::vector<bool> taken;
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= out.id_limit) {
      return FieldError(path, "model.vocab." + token, id_range, id);
    }
    const auto index = static_cast<size_t>(id.get<int64_t>());
    if (index >= out.id_to_token.size()) {
      out.id_to_token.resize(index + 1);
      taken.resize(index + 1, false);
    }
    if (taken[index]) {
      return FieldError(path, "model.vocab." + token,
                        absl::StrCat("an id no other token has (", out.id_to_token[index], ")"),
                        id);
    }
    taken[index] = true;
    out.id_to_token[index] = token;
    out.token_to_id[token] = id.get<int64_t>();
  }
  return out;
}

absl::Status FieldError(const std::string& path, const std::string& field,
                        const std::string& expected, const json& got) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json '", path, "': field '", field,
                                                 "': expected ", expected, ", got ",
                                                 got.dump().substr(0, 200)));
}

absl::Status Unsupported(const std::string& path, const std::string& component, const json& type,
                         const std::string& supported) {
  return absl::UnimplementedError(
      absl::StrCat("tokenizer.json '", path, "': ", component, " type '",
                   type.is_string() ? type.get<std::string>() : type.dump().substr(0, 100),
                   "' is not supported; supported: ", supported));
}

absl::Status UnsupportedValue(const std::string& path, const std::string& field, const json& value,
                              const std::string& supported) {
  return absl::UnimplementedError(absl::StrCat("tokenizer.json '", path, "': field '", field,
                                               "' = ", value.dump().substr(0, 100),
                                               " is not supported; supported: ", supported));
}

absl::StatusOr<std::string> GetString(const json& object, const std::string& key,
                                      const std::string& path, const std::string& field) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string()) {
    return FieldError(path, field, "a string", it == object.end() ? json() : *it);
  }
  return it->get<std::string>();
}

absl::StatusOr<int64_t> GetInt(const json& object, const std::string& key, const std::string& path,
                               const std::string& field) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number_integer()) {
    return FieldError(path, field, "an integer", it == object.end() ? json() : *it);
  }
  return it->get<int64_t>();
}

absl::StatusOr<bool> GetBool(const json& object, const std::string& key, bool default_value,
                             const std::string& path, const std::string& field) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return default_value;
  if (!it->is_boolean()) return FieldError(path, field, "true or false", *it);
  return it->get<bool>();
}

}  // namespace attnscope::tokenizer_json

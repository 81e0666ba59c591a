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

#include "server/request_body.h"

#include <google/protobuf/util/json_util.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json_util.h"
#include "common/status_macros.h"

namespace attnscope::server {
namespace {

// nlohmann's parse error text without its "[json.exception.parse_error.101] " tag and the "; last
// read: '...'" echo of the input, which may hold invalid UTF-8 that the JSON error answer cannot
// carry. Leaves "parse error at line 1, column 12: syntax error while parsing object - ...".
std::string ParseErrorWithoutInput(std::string text) {
  if (const size_t tag_end = text.find("] "); tag_end != std::string::npos) {
    text.erase(0, tag_end + 2);
  }
  constexpr std::string_view kLastRead = "; last read: '";
  if (const size_t start = text.find(kLastRead); start != std::string::npos) {
    size_t end = text.find("'; expected ", start + kLastRead.size());
    if (end == std::string::npos) end = text.rfind('\'');
    text.erase(start, end + 1 - start);
  }
  return text;
}

// A field's key in protobuf's JSON mapping, either spelling (lowerCamelCase "maxLength" or the
// proto name "max_length"), as the proto name: both name one field.
std::string FieldName(const std::string& key) {
  std::string name;
  for (const char c : key) {
    if (c >= 'A' && c <= 'Z') {
      name += '_';
      name += static_cast<char>(c - 'A' + 'a');
    } else {
      name += c;
    }
  }
  return name;
}

}  // namespace

absl::Status ParseBody(const std::string& body, BodyFormat format, absl::string_view source,
                       google::protobuf::Message* message) {
  const std::string& type = message->GetDescriptor()->full_name();
  if (format == BodyFormat::kProto) {
    if (!message->ParseFromString(body)) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": not a serialized ", type,
                       " (or a text in it is not valid UTF-8); send one, or JSON with Content-Type "
                       "application/json"));
    }
    return absl::OkStatus();
  }
  ATTNSCOPE_RETURN_IF_ERROR(CheckJsonTextDepth(body, source));
  nlohmann::json json;
  // The keys of each object open while parsing, as field names: a field given twice (under one
  // spelling or both) is refused instead of the parser's keeping the last (which of the two the
  // client meant is anyone's guess). Request messages have no map fields, whose keys are no
  // field names.
  std::vector<std::set<std::string>> keys;
  std::string repeated;
  const auto find_repeated = [&keys, &repeated](int /*depth*/, nlohmann::json::parse_event_t event,
                                                nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) {
      keys.emplace_back();
    } else if (event == Event::object_end && !keys.empty()) {
      keys.pop_back();
    } else if (event == Event::key && !keys.empty() && repeated.empty() &&
               !keys.back().insert(FieldName(parsed.get<std::string>())).second) {
      repeated = parsed.get<std::string>();
    }
    return true;
  };
  try {
    json = nlohmann::json::parse(body.empty() ? std::string("{}") : body, find_repeated);
  } catch (const nlohmann::json::exception& error) {  // a parse_error, or a number overflow
    return absl::InvalidArgumentError(
        absl::StrCat(source,
                     ": expected a JSON object in UTF-8, got text that does not parse "
                     "as JSON (",
                     ParseErrorWithoutInput(error.what()), ")"));
  }
  if (!repeated.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": JSON key '", repeated.substr(0, 64),
                     "' given more than once in one object (a field's lowerCamelCase and proto "
                     "names are one field); send each field once"));
  }
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": expected a JSON object (", type,
                                                   "), got a JSON ", json.type_name()));
  }
  ATTNSCOPE_RETURN_IF_ERROR(CheckJsonDepth(json, source));
  const google::protobuf::util::Status parsed = google::protobuf::util::JsonStringToMessage(
      json.dump(), message, google::protobuf::util::JsonParseOptions());
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not a valid ", type, " (", parsed.message().as_string(),
                     "); see proto/attnscope/v1/attnscope.proto for its fields"));
  }
  return absl::OkStatus();
}

}  // namespace attnscope::server

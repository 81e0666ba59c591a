// Request decoding as the HTTP/JSON front end sees it: arbitrary bytes as a JSON body
// (server/request_body.h ParseBody, the same call the server makes) for each attnscope.v1 request
// the request layer takes, and every body that parses converted with ToQuery. A body whose "text"
// is a JSON string must arrive as exactly that string's bytes (texts travel as plain strings, not
// base64).
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "attnscope/v1/attnscope.pb.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/request_checks.h"
#include "nlohmann/json.hpp"
#include "server/request_body.h"

namespace {

template <typename Request>
void Decode(const std::string& body) {
  Request request;
  if (!attnscope::server::ParseBody(body, attnscope::server::BodyFormat::kJson,
                                    /*source=*/"request body", &request)
           .ok()) {
    return;
  }
  attnscope::fuzz::CheckToQuery(request);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace v1 = attnscope::v1;
  const std::string body(reinterpret_cast<const char*>(data), size);
  Decode<v1::GetAttentionRequest>(body);
  Decode<v1::EncodeRequest>(body);
  Decode<v1::CrossAttentionRequest>(body);
  Decode<v1::GetParameterRequest>(body);
  Decode<v1::AttributeRequest>(body);
  Decode<v1::GenerateRequest>(body);

  v1::TokenizeRequest request;
  if (!attnscope::server::ParseBody(body, attnscope::server::BodyFormat::kJson,
                                    /*source=*/"request body", &request)
           .ok()) {
    return 0;
  }
  attnscope::fuzz::CheckToQuery(request);
  const nlohmann::json json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (json.is_object() && json.contains("text") && json["text"].is_string()) {
    ATTNSCOPE_FUZZ_CHECK(request.text() == json["text"].get<std::string>(),
                         absl::StrCat("TokenizeRequest: text '", request.text(), "': expected '",
                                      json["text"].get<std::string>(), "', the body's string"));
  }
  return 0;
}

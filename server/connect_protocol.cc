#include "server/connect_protocol.h"

#include <chrono>
#include <optional>
#include <string>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/http_request_fields.h"

namespace attnscope::server {

namespace http = boost::beast::http;

bool Enveloped(Codec codec) {
  return codec == Codec::kConnectJson || codec == Codec::kConnectProto;
}
BodyFormat FormatOf(Codec codec) {
  return codec == Codec::kJson || codec == Codec::kConnectJson ? BodyFormat::kJson
                                                               : BodyFormat::kProto;
}

bool StreamingMethod(absl::string_view method) {
  return method == "StreamAttention" || method == "Generate";
}

absl::Status CheckGetQuery(const HttpRequestHeader& request) {
  const absl::string_view query = QueryOf(View(request.target()));
  for (const absl::string_view name : {"encoding", "message", "base64", "compression", "connect"}) {
    ATTNSCOPE_ASSIGN_OR_RETURN(std::optional<std::string> value, QueryParam(query, name));
    if (name == "connect" && value.has_value() && *value != "v1") {
      return absl::InvalidArgumentError(
          absl::StrCat("query parameter 'connect' '", value->substr(0, 64),
                       "': expected v1, the Connect protocol version served"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Codec> CodecOf(const HttpRequestHeader& request, absl::string_view method) {
  if (request.method() == http::verb::get) {
    const absl::string_view query = QueryOf(View(request.target()));
    ATTNSCOPE_ASSIGN_OR_RETURN(std::optional<std::string> encoding, QueryParam(query, "encoding"));
    // A GET with neither is an empty request (a browser's or curl's plain GET of ListModels).
    if (!encoding.has_value() && !HasQueryParam(query, "message")) return Codec::kJson;
    if (encoding == "json") return Codec::kJson;
    if (encoding == "proto") return Codec::kProto;
    return absl::InvalidArgumentError(absl::StrCat(
        "query parameter 'encoding'",
        encoding.has_value() ? absl::StrCat(" '", *encoding, "'") : std::string(" missing"),
        ": expected json (message=<URL-encoded JSON>) or proto (base64=1&message=<URL-safe "
        "base64>), as Connect's GET form names the message's codec"));
  }
  const std::string type = MediaType(request);
  if (FromBrowser(request) && (type == "application/x-www-form-urlencoded" ||
                               type == "multipart/form-data" || type == "text/plain")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Content-Type '", type,
        "' from a browser: refused, since any page may send it to any site without asking; "
        "send application/json or application/proto"));
  }
  // curl -d sends its form type; a body without a type is JSON too.
  if (type.empty() || type == "application/json" || type == "application/x-www-form-urlencoded") {
    return Codec::kJson;
  }
  if (type == "application/proto" || type == "application/x-protobuf") return Codec::kProto;
  const bool connect_json = type == "application/connect+json";
  if (connect_json || type == "application/connect+proto") {
    if (!StreamingMethod(method)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Content-Type '", type, "': a streaming content type, and ", method,
                       " is unary; send application/json or application/proto"));
    }
    return connect_json ? Codec::kConnectJson : Codec::kConnectProto;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "Content-Type '", type,
      "': expected application/json or application/proto (application/connect+json or "
      "application/connect+proto for StreamAttention and Generate); e.g. curl -H 'Content-Type: "
      "application/json' -d '{\"text\": \"...\"}'"));
}

std::string Envelope(uint8_t flags, absl::string_view payload) {
  std::string out(5, '\0');
  out[0] = static_cast<char>(flags);
  const uint32_t size = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) out[1 + i] = static_cast<char>((size >> (24 - 8 * i)) & 0xff);
  return absl::StrCat(out, payload);
}

std::string EndOfStream(const absl::Status& status) {
  return Envelope(0x02, status.ok() ? "{}" : absl::StrCat("{\"error\": ", ErrorJson(status), "}"));
}

HttpResponse FailedConnectStream(const absl::Status& status, Codec codec) {
  HttpResponse response(http::status::ok, 11);
  response.set(http::field::content_type, codec == Codec::kConnectJson
                                              ? "application/connect+json"
                                              : "application/connect+proto");
  response.body() = EndOfStream(status);
  return response;
}

absl::StatusOr<std::string> Unenvelope(const std::string& body) {
  if (body.size() < 5) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request body: expected one Connect envelope (a flags byte, a 4-byte big-endian length, "
        "the message), got ",
        body.size(), " bytes"));
  }
  const auto byte = [&body](size_t i) { return static_cast<unsigned char>(body[i]); };
  const uint64_t size = (uint64_t{byte(1)} << 24) | (byte(2) << 16) | (byte(3) << 8) | byte(4);
  // Connect's request flags are 0 or 0x01 (compressed); anything else (a '{' of JSON sent
  // without its envelope, say) is no envelope at all.
  if (byte(0) > 0x01) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request body: expected one Connect envelope (a flags byte of 0, a 4-byte big-endian "
        "length, the message), got a first byte of 0x",
        absl::Hex(byte(0), absl::kZeroPad2),
        ": a body sent as application/connect+json or application/connect+proto must be "
        "enveloped; send application/json for a plain JSON body"));
  }
  if (byte(0) == 0x01) {
    return absl::UnimplementedError(
        "request envelope: compressed (flags 0x01), and the server compresses nothing; send "
        "flags 0 and no Connect-Content-Encoding");
  }
  if (byte(0) != 0 || size + 5 != body.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request body: expected one Connect envelope with flags 0 and a length of the ",
        body.size() - 5, " bytes after it, got flags ", byte(0), " and length ", size,
        "; StreamAttention and Generate take exactly one request message"));
  }
  return body.substr(5);
}

absl::StatusOr<std::string> MessageOf(const HttpRequest& request, Codec codec) {
  if (request.method() != http::verb::get) {
    return Enveloped(codec) ? Unenvelope(request.body()) : request.body();
  }
  const absl::string_view query = QueryOf(View(request.target()));
  ATTNSCOPE_ASSIGN_OR_RETURN(std::optional<std::string> message, QueryParam(query, "message"));
  ATTNSCOPE_ASSIGN_OR_RETURN(std::optional<std::string> base64, QueryParam(query, "base64"));
  if (base64.has_value() && base64 != "0" && base64 != "1") {
    return absl::InvalidArgumentError(
        absl::StrCat("query parameter 'base64' '", *base64,
                     "': expected 1 (the message is URL-safe base64) or 0 (it is not)"));
  }
  if (!message.has_value()) {
    if (!HasQueryParam(query, "encoding")) return std::string();
    return absl::InvalidArgumentError(
        "query parameter 'message' missing: Connect's GET form carries the request in it (for an "
        "empty JSON request, message={})");
  }
  if (base64 != "1") return *message;
  std::string decoded;
  if (!absl::WebSafeBase64Unescape(*message, &decoded)) {
    return absl::InvalidArgumentError(
        "query parameter 'message': expected URL-safe base64 with base64=1, got other "
        "characters");
  }
  return decoded;
}

absl::StatusOr<std::chrono::system_clock::time_point> DeadlineOf(const HttpRequestHeader& request) {
  const size_t given = request.count("Connect-Timeout-Ms");
  if (given == 0) return std::chrono::system_clock::time_point::max();
  if (given > 1) {
    return absl::InvalidArgumentError(absl::StrCat("Connect-Timeout-Ms: given ", given,
                                                   " times, expected once; send one deadline"));
  }
  const std::string value = HeaderOf(request, "Connect-Timeout-Ms");
  int64_t milliseconds = 0;
  // At most 10 digits, as the Connect protocol allows.
  // Digits only: SimpleAtoi alone also takes a sign and surrounding spaces.
  if (value.empty() || value.size() > 10 || !absl::c_all_of(value, absl::ascii_isdigit) ||
      !absl::SimpleAtoi(value, &milliseconds) || milliseconds <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Connect-Timeout-Ms '", value,
        "': expected a positive number of milliseconds of at most 10 digits (the Connect "
        "protocol's limit)"));
  }
  return std::chrono::system_clock::now() + std::chrono::milliseconds(milliseconds);
}

}  // namespace attnscope::server

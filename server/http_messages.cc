#include "server/http_messages.h"

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "server/service_core.h"

namespace attnscope::server {

namespace http = boost::beast::http;

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

std::string ConnectCodeName(absl::StatusCode code) {
  // Connect spells the codes in lower case, and "canceled" with one l.
  if (code == absl::StatusCode::kCancelled) return "canceled";
  return absl::AsciiStrToLower(absl::StatusCodeToString(code));
}

std::string ErrorJson(const absl::Status& status) {
  return nlohmann::json{{"code", ConnectCodeName(status.code())},
                        {"message", ClientMessage(status)}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

HttpResponse ErrorResponse(const absl::Status& status, int http_status) {
  HttpResponse response(
      static_cast<http::status>(http_status != 0 ? http_status : HttpStatusOf(status.code())), 11);
  response.set(http::field::content_type, "application/json");
  response.body() = ErrorJson(status);
  return response;
}

}  // namespace attnscope::server

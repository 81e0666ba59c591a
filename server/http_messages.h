// The HTTP messages of both HTTP ports (the API and dashboard, and /metrics) and the error answer
// they give: the status of each canonical code and the Connect protocol's error object.
#ifndef ATTNSCOPE_SERVER_HTTP_MESSAGES_H_
#define ATTNSCOPE_SERVER_HTTP_MESSAGES_H_

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <string>

#include "absl/status/status.h"

namespace attnscope::server {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpRequestHeader = boost::beast::http::request_header<>;
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;
using HttpFields = boost::beast::http::fields;

// The HTTP status of a canonical code (google.rpc.Code's mapping, as Connect uses it): 400, 404,
// 429, 503, 499 for CANCELLED, ...
int HttpStatusOf(absl::StatusCode code);
// The Connect protocol's name of a canonical code: "invalid_argument", "not_found", "canceled".
std::string ConnectCodeName(absl::StatusCode code);
// The Connect error object {"code": ..., "message": ...} of a non-OK `status`, as JSON text; the
// message as ClientMessage cuts it, invalid UTF-8 replaced.
std::string ErrorJson(const absl::Status& status);
// An application/json answer holding ErrorJson(status), with the HTTP status of its code, or
// `http_status` when given (413, 414, 431, ...).
HttpResponse ErrorResponse(const absl::Status& status, int http_status = 0);

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_HTTP_MESSAGES_H_

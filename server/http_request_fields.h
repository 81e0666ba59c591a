// An HTTP request's header fields and target as the API and dashboard port reads them
// (http_server.cc, connect_protocol.h): header values, the path and query, percent-decoding,
// query parameters, the media type, whether a browser sent the request, and origins compared as
// browsers compare them.
#ifndef ATTNSCOPE_SERVER_HTTP_REQUEST_FIELDS_H_
#define ATTNSCOPE_SERVER_HTTP_REQUEST_FIELDS_H_

#include <boost/beast/core/string_type.hpp>
#include <boost/beast/http/field.hpp>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/http_messages.h"

namespace attnscope::server {

// Abseil's string_view is not std's here, nor Beast's.
absl::string_view View(boost::beast::string_view text);
boost::beast::string_view BeastView(absl::string_view text);

// The value of a request header field ("" when absent; the first when repeated).
std::string HeaderOf(const HttpRequestHeader& request, boost::beast::http::field field);
std::string HeaderOf(const HttpRequestHeader& request, absl::string_view name);

// InvalidArgument naming the first of the fields the API reads once (Authorization, Origin,
// Content-Type, Content-Encoding, Connect-Protocol-Version, Connect-Content-Encoding) that the
// request gives more than once: HTTP allows one of each (RFC 9110, section 5.3), and a proxy in
// front that reads the last of two Authorization headers would vouch for a key the server never
// checked.
absl::Status CheckSingleFields(const HttpRequestHeader& request);

// Rewrites an absolute-form target ("http://host:port/path?query", which a server must accept:
// RFC 9112, section 3.2.2) to origin-form, its authority replacing the Host header as that
// section requires, and decodes the percent-encoded unreserved characters of the path, which name
// the same resource as the characters themselves (RFC 3986, section 6.2.2.2: "/%54okenize" is
// "/Tokenize").
void NormalizeTarget(HttpRequestHeader& request);

// The request target's path (before '?') and query (after it).
absl::string_view PathOf(absl::string_view target);
absl::string_view QueryOf(absl::string_view target);

// Percent-decoding of a path or a query value ('+' a space in a query, as forms encode it).
// InvalidArgument naming a '%' without two hex digits after it.
absl::StatusOr<std::string> PercentDecode(absl::string_view text, bool plus_is_space);

// The decoded value of query parameter `name`, or nullopt when absent. InvalidArgument as
// PercentDecode, or naming a parameter given more than once (which of its values was meant is
// anyone's guess).
absl::StatusOr<std::optional<std::string>> QueryParam(absl::string_view query,
                                                      absl::string_view name);

// Whether query parameter `name` is given (with or without a value, once or more).
bool HasQueryParam(absl::string_view query, absl::string_view name);

// The media type of a Content-Type, lower-cased, without parameters (charset, boundary).
std::string MediaType(const HttpRequestHeader& request);

// True for a request a browser made: browsers send Origin with every request a page makes
// cross-origin (and with same-origin POSTs), and Sec-Fetch-Site with every request.
bool FromBrowser(const HttpRequestHeader& request);

// Lower-cased, without a trailing '/' or the scheme's default port: origins compare equal when
// browsers would call them the same.
std::string NormalizeOrigin(absl::string_view origin);

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_HTTP_REQUEST_FIELDS_H_

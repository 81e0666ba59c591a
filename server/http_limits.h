// The bounds of one HTTP request on attnscope-server's HTTP ports (server/http_connection.h), in
// bytes and time; apart so that the servers' Options can hold them without the HTTP library.
#ifndef ATTNSCOPE_SERVER_HTTP_LIMITS_H_
#define ATTNSCOPE_SERVER_HTTP_LIMITS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "common/limits.h"

namespace attnscope::server {

// Connections one HTTP port keeps open by default (HttpListener::Options::max_connections,
// --max_http_connections): a descriptor each, well within the process's limit beside the gRPC
// port's.
inline constexpr int kDefaultMaxHttpConnections = 2048;

// What one request may take, in bytes and time. Over a size: an answer with a JSON error and the
// connection closed. Over a deadline: the connection closed.
struct HttpLimits {
  // The request line and the headers together. More: 431 (414 when the request line alone is
  // longer than max_target_bytes). Browsers send a few KB; 64 KiB leaves room for long cookies.
  uint32_t max_header_bytes = 64 << 10;
  // The request target (path and query; the Connect GET form carries its message there). More:
  // 414.
  size_t max_target_bytes = 16 << 10;
  // A request body, whether it comes with a Content-Length, chunked or otherwise. A
  // Content-Length over it is refused before the body is read; a chunked body as it passes the
  // limit. 413, naming `body_limit_source`.
  int64_t max_body_bytes = kDefaultMaxRequestBytes;
  // What sets max_body_bytes, for the 413's message.
  std::string body_limit_source = "--max_request_bytes, the same limit as gRPC's";
  // The bodies being read on all the port's connections together (at least max_body_bytes), so
  // that many clients sending large bodies at once cannot fill the memory: 64 sending 100 MB in
  // chunks held 4 MiB each until refused, 430 MB in all. A body that would pass it is refused with
  // 429 (RESOURCE_EXHAUSTED); the first 64 KiB of each are not counted, so that small calls go on.
  int64_t max_buffered_body_bytes = int64_t{32} << 20;
  // From a connection's first byte, or its first byte after an answer, to the end of the
  // headers; a new connection's first byte must come within it too.
  absl::Duration header_timeout = absl::Seconds(10);
  // From the end of the headers to the end of the body: 30 s takes a 4 MiB body at 140 KB/s.
  absl::Duration body_timeout = absl::Seconds(30);
  // How long a kept-alive connection may wait for its next request. More than load balancers'
  // own idle timeouts (60 s on the common ones), as they require of the servers behind them, so
  // that the balancer, not the server, closes an idle connection and never sends a request into
  // one being closed.
  absl::Duration idle_timeout = absl::Seconds(75);
  // For each write of an answer (each MiB of a unary answer, or one piece of a stream) to reach
  // the client's socket; a client that stops reading is cut after it and its call cancelled.
  absl::Duration write_timeout = absl::Seconds(30);
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_HTTP_LIMITS_H_

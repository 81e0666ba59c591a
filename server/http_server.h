// The HTTP/JSON front end of attnscope.v1.AttentionService, and the dashboard's files, on the
// transport of server/http_connection.h (Boost.Beast).
//
// Every RPC is `POST /attnscope.v1.AttentionService/<Method>` (the Connect protocol's unary
// convention):
// - `Content-Type: application/json`: protobuf's canonical JSON mapping of the request and the
//   response (lowerCamelCase names in answers, either spelling accepted in requests; int64 as
//   strings; Tensor.data as base64; texts as plain strings).
// - `Content-Type: application/proto`: the binary messages. A body without a Content-Type, or with
//   curl's default application/x-www-form-urlencoded, is read as JSON (unless a browser sent it,
//   see below).
// - StreamAttention and Generate answer JSON requests with newline-delimited JSON
//   (`application/x-ndjson`): one StreamAttentionResponse / GenerateResponse per line, and binary
//   ones with the Connect streaming envelope (`application/connect+proto`: a flags byte and a
//   4-byte big-endian length before each message). Once the body has parsed and the API key
//   passed, such a stream's status is 200: a call that fails after that (a refused field included)
//   ends with an error line (NDJSON) or an end-of-stream envelope (flags 0x02) holding
//   {"error": {"code", "message"}}.
// - They also take the Connect protocol's own streaming requests, `application/connect+json` and
//   `application/connect+proto`: the request in one envelope, answered in envelopes of the same
//   codec (JSON messages for connect+json), the last one the end of the stream (flags 0x02)
//   holding {} or {"error": {...}}. As the protocol requires, every error of such a call, a
//   missing key or a malformed envelope included, is that last envelope of a 200 answer.
// - Errors: the HTTP status of the gRPC code as google.rpc.Code and grpc-gateway map them (400
//   INVALID_ARGUMENT, 404 NOT_FOUND, 429 RESOURCE_EXHAUSTED, 503 UNAVAILABLE, 504
//   DEADLINE_EXCEEDED, ...), with {"code": "invalid_argument", "message": "..."} as Connect writes
//   it. Messages are the same as over gRPC. So are the errors of the HTTP layer itself (413 body
//   too large, 414 URI too long, 431 headers too large, 400 malformed request, 405 method).
// - A `Connect-Timeout-Ms` header sets the call's deadline, honoured between layers.
// - Unary methods also answer the Connect protocol's GET form, `GET
//   /attnscope.v1.AttentionService/<Method>?encoding=json&message=<URL-encoded JSON>`
//   (`encoding=proto&base64=1` for a binary message; no message: an empty request), so that `curl
//   URL` lists the models and a link can carry a request.
// - A call whose client closes its connection is cancelled (CANCELLED in the metrics), unary or
//   streaming; after SIGTERM calls get the grace period, then end with UNAVAILABLE.
//
// Any other path is a GET of the dashboard's files (index.html at "/"): regular files inside
// --dashboard_dir only (symbolic links resolved first), typed by their extension, with a
// Content-Security-Policy that lets the page load only its own script and style and call only
// its own origin.
//
// Browsers: a request with an `Origin` other than the server's own (scheme://Host) is refused
// (403) unless --http_allowed_origins lists it; those listed get CORS answers and preflights. A
// browser's request (one with Origin or Sec-Fetch-Site) with a content type that pages may send
// anywhere without a preflight (forms, text/plain) is refused (415), and a GET call from another
// site's page (Sec-Fetch-Site cross-site or same-site) too. On a loopback listener the Host must
// name a loopback host or one of --http_allowed_hosts, so that a DNS name rebound to 127.0.0.1
// reaches nothing. With API keys, a request without a valid key is refused before its body is
// read.
#ifndef ATTNSCOPE_SERVER_HTTP_SERVER_H_
#define ATTNSCOPE_SERVER_HTTP_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/http_limits.h"
#include "server/security.h"
#include "server/service_core.h"

namespace attnscope::server {

class HttpListener;
class ApiHandler;

class HttpServer {
 public:
  struct Options {
    // HOST:PORT; port 0 picks a free port.
    std::string listen = "127.0.0.1:8080";
    // Folder served for GET requests (the built dashboard). Empty or missing: "/" answers 404
    // saying so and how to build it; the API works either way.
    std::string dashboard_dir;
    // HTTPS, with the same certificate, key and client CA as the gRPC listener.
    TlsOptions tls;
    // Sizes (max_body_bytes is --max_request_bytes) and deadlines of a request.
    HttpLimits limits;
    // Requests answered at once: each unary call and each stream holds a thread while it is
    // answered; more wait for a free one. Connections that are idle or still sending their
    // request hold none. Inference is bounded by --max_concurrent_requests, not by this. At most
    // kMaxHttpThreads.
    int threads = 64;
    // Requests that may wait for a thread while every one is busy; more are answered 429
    // (RESOURCE_EXHAUSTED) at once rather than wait without bound. 0 = no limit. The server sets
    // it to --max_concurrent_requests.
    int max_waiting = 64;
    // Connections open at once (HttpListener::Options::max_connections): at the limit the one
    // that has waited longest for a request is closed to make room. At least 1, at most 1e6.
    int max_connections = kDefaultMaxHttpConnections;
    // Origins ("https://app.example.com", scheme://host[:port]) whose pages may call the API
    // besides the server's own; "*" allows every origin.
    std::vector<std::string> allowed_origins;
    // Names a request's Host may carry when the listener is on a loopback address, besides
    // localhost, 127.0.0.1 and [::1] (e.g. the name of a proxy in front).
    std::vector<std::string> allowed_hosts;
  };

  // Most threads a port may have: each is a thread of the process, and creating 100000 of them
  // aborted the process.
  static constexpr int kMaxHttpThreads = 4096;

  // Checks `options` before anything starts. InvalidArgument, naming the flag: a listen address
  // that is not HOST:PORT, threads outside [1, kMaxHttpThreads], a negative max_waiting, an
  // allowed origin that is not scheme://host[:port], an allowed host with a scheme or a path.
  static absl::Status ValidateOptions(const Options& options);
  // Binds and starts serving on threads of its own. `core` must outlive the server.
  // InvalidArgument: what ValidateOptions refuses, or TLS files that do not make a certificate
  // and key. NotFound: a TLS file cannot be read. Unavailable: the address cannot be bound (in
  // use, or not local).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const Options& options,
                                                           ServiceCore* core);
  // Stops accepting and waits for the calls in flight: until the deadline of Shutdown when it was
  // called, else they are cancelled (UNAVAILABLE) at once.
  ~HttpServer();

  // Stops accepting and closes idle connections; calls in flight may run until `deadline`, then
  // are cancelled (UNAVAILABLE; streams end with their error line or envelope). Returns at once.
  void Shutdown(absl::Time deadline);

  // The bound port.
  int port() const;

 private:
  HttpServer(std::unique_ptr<ApiHandler> handler, std::unique_ptr<HttpListener> listener);

  std::unique_ptr<ApiHandler> handler_;
  std::unique_ptr<HttpListener> listener_;
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_HTTP_SERVER_H_

// The HTTP/JSON front end of attnscope.v1.AttentionService, on cpp-httplib, and the dashboard's
// files.
//
// Every RPC is `POST /attnscope.v1.AttentionService/<Method>` (the Connect protocol's unary
// convention):
// - `Content-Type: application/json`: protobuf's canonical JSON mapping of the request and the
//   response (lowerCamelCase names in answers, either spelling accepted in requests; int64 as
//   strings; Tensor.data as base64; texts as plain strings).
// - `Content-Type: application/proto`: the binary messages. A body without a Content-Type, or with
//   curl's default application/x-www-form-urlencoded, is read as JSON.
// - StreamAttention and Generate answer JSON requests with newline-delimited JSON
//   (`application/x-ndjson`): one StreamAttentionResponse / GenerateResponse per line. Binary
//   requests get the Connect streaming envelope
//   (`application/connect+proto`: a flags byte and a 4-byte big-endian length before each
//   message). Once the body has parsed and the API key passed, a stream's status is 200: a call
//   that fails after that (a refused field included) ends with an error line (NDJSON) or an
//   end-of-stream envelope (flags 0x02) holding {"error": {"code", "message"}}.
// - Errors: the HTTP status of the gRPC code as google.rpc.Code and grpc-gateway map them (400
//   INVALID_ARGUMENT, 404 NOT_FOUND, 429 RESOURCE_EXHAUSTED, 503 UNAVAILABLE, 504
//   DEADLINE_EXCEEDED, ...), with {"code": "invalid_argument", "message": "..."} as Connect writes
//   it. Messages are the same as over gRPC.
// - A `Connect-Timeout-Ms` header sets the call's deadline, honoured between layers.
// - Unary methods also answer the Connect protocol's GET form, `GET
//   /attnscope.v1.AttentionService/<Method>?encoding=json&message=<URL-encoded JSON>` (no message:
//   an empty request), so that `curl URL` lists the models and a link can carry a request.
//
// Any other path is a GET of the dashboard's files (index.html at "/").
#ifndef ATTNSCOPE_SERVER_HTTP_SERVER_H_
#define ATTNSCOPE_SERVER_HTTP_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/security.h"
#include "server/service_core.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace attnscope::server {

// Largest request, in bytes, on both transports by default: gRPC's default receive limit.
inline constexpr int64_t kDefaultMaxRequestBytes = int64_t{4} << 20;

// The HTTP status of a canonical code (google.rpc.Code's mapping): 400, 404, 429, 503, ...
int HttpStatusOf(absl::StatusCode code);
// The Connect protocol's name of a canonical code: "invalid_argument", "not_found", ...
std::string ConnectCodeName(absl::StatusCode code);

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
    // Larger request bodies get 413 with a JSON error naming --max_request_bytes.
    int64_t max_request_bytes = kDefaultMaxRequestBytes;
    // Connections served at once. cpp-httplib gives every open connection a thread of this pool
    // for as long as it stays open: a stream, and a kept-alive connection between requests (up to
    // 5 s). Browsers keep six connections per host, so a few dashboard tabs would hold all of
    // cpp-httplib's default eight and make every other client wait. Threads waiting on a socket
    // cost no CPU; inference is bounded by --max_concurrent_requests, not by this.
    int threads = 64;
  };

  // Binds and starts serving on a thread of its own. `core` must outlive the server.
  // InvalidArgument: a listen address that is not HOST:PORT, threads below 1, or TLS files that do
  // not make a certificate and key. NotFound: a TLS file cannot be read. Unavailable: the address
  // cannot be bound (in use, or not local).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const Options& options,
                                                           ServiceCore* core);
  // Stops accepting, lets the requests in flight finish and joins the thread.
  ~HttpServer();

  // The bound port.
  int port() const { return port_; }

 private:
  HttpServer(std::unique_ptr<httplib::Server> http, int port);

  std::unique_ptr<httplib::Server> http_;
  const int port_;
  std::thread thread_;
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_HTTP_SERVER_H_

// The HTTP/1.1 transport under both HTTP ports of attnscope-server, the API and dashboard
// (server/http_server.h) and /metrics (server/metrics_http.h), on Boost.Beast and Boost.Asio:
// accepting, TLS, reading requests, deadlines, writing answers, and the drain at shutdown. The
// ports differ only in their HttpHandler.
//
// Why not cpp-httplib, which served both ports until 2026-12: it gives each open connection a
// thread for as long as it stays open, so 64 clients sending a byte a second held all 64 threads
// and a normal client waited for ever; it reads a request's headers (in any number) and body
// (chunked ones whole) before a handler can bound them or check the key; a unary handler cannot
// learn that its client has gone, so an abandoned call computed to its end; and stopping it waits
// for every call, however long, whatever the grace period.
//
// Here a connection holds a thread only while its request is being answered: reading is
// asynchronous, on two I/O threads shared by every connection. Every byte is bounded before it is
// read: the request line and the headers in total, then the body (with or without a length)
// once the handler has screened the headers, so that an origin, a key or a size is refused
// before any of the body is read. Deadlines cut clients that send their headers or their body
// slowly, keep a connection idle, or stop reading an answer. While a handler runs on a worker
// thread, the connection watches its socket and tells the handler when the client has closed it.
#ifndef ATTNSCOPE_SERVER_HTTP_CONNECTION_H_
#define ATTNSCOPE_SERVER_HTTP_CONNECTION_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/http_limits.h"
#include "server/http_messages.h"
#include "server/security.h"

namespace attnscope::server {

// One request's way back to its client, for the HttpHandler answering it on a worker thread. The
// writes go through the connection's I/O thread; the handler may call these from its own.
class HttpExchange {
 public:
  // True once the client has closed its connection, or an answer could not be written to it: the
  // call should stop. The connection watches its socket for the whole call.
  virtual bool ClientGone() const = 0;
  // True once the grace period of HttpListener::Shutdown is over: the call should stop and say
  // the server is shutting down.
  virtual bool GraceOver() const = 0;
  // The client's source (SourceOf in server/client_addresses.h), "" when its address was unknown.
  virtual std::string ClientSource() const = 0;
  // Sends `response` whole (its Content-Length is set here), keeping `hold` (may be null; a
  // reservation of the answer budget) until it is written or the connection ends. Once per
  // request, and not after StartStream.
  virtual void Respond(HttpResponse response, std::shared_ptr<const void> hold = nullptr) = 0;
  // Sends the status and headers of an answer whose body follows in pieces (chunked encoding),
  // blocking until they are written. False when the client is gone.
  virtual bool StartStream(HttpResponse head) = 0;
  // Sends one piece of a streamed answer, blocking until it is written, so that a client reading
  // slowly slows its call down instead of filling the server's memory. False when the client is
  // gone or read nothing for HttpLimits::write_timeout. The stream ends when Handle returns.
  virtual bool Write(std::string data) = 0;

 protected:
  ~HttpExchange() = default;
};

// What a port does with its requests.
class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // Called on an I/O thread once a request's headers are read, before any of its body is; must
  // not block. A response refuses the request: it is sent at once, the body never read, the
  // connection closed. Fields put in `answer_headers` are added to every answer to the request,
  // this refusal included.
  virtual std::optional<HttpResponse> Screen(const HttpRequestHeader& request,
                                             HttpFields& answer_headers) = 0;
  // Called on a worker thread with the whole request; answers through `exchange` before it
  // returns (no answer at all is a 500).
  virtual void Handle(const HttpRequest& request, HttpExchange& exchange) = 0;
  // Called on an I/O thread when the listener itself refuses a request that Screen let through,
  // with the status and HTTP status of its answer: every worker busy and Options::max_waiting
  // requests already waiting (RESOURCE_EXHAUSTED, 429), the bodies being read at once over
  // HttpLimits::max_buffered_body_bytes (RESOURCE_EXHAUSTED, 429), the body over
  // HttpLimits::max_body_bytes (RESOURCE_EXHAUSTED, 413) or not valid HTTP/1.1 framing
  // (INVALID_ARGUMENT, 400). `rejection`: the admission limit that refused it, as
  // attnscope_rejected_requests_total's reason ("concurrency_limit", "body_bytes_limit",
  // "body_bytes_client_limit"), or "" for a refusal of the request itself. Must not block.
  virtual void OnRefused(const HttpRequestHeader& request, const absl::Status& status,
                         int http_status, absl::string_view rejection) = 0;
};

// A listening socket, the connections it accepts and the threads that serve them.
class HttpListener {
 public:
  struct Options {
    // The address to bind: an IP address or a name ("localhost"); port 0 picks a free port.
    std::string host = "127.0.0.1";
    int port = 0;
    // HTTPS when set (ValidateTlsOptions has accepted them); a client CA requires and verifies
    // client certificates.
    TlsOptions tls;
    HttpLimits limits;
    // Requests answered at once (each holds a worker thread while its handler runs); more wait
    // for a free worker.
    int workers = 8;
    // Requests that may wait for a worker; more are refused at once with 429 and
    // HttpHandler::OnRefused. 0 = no limit.
    int max_waiting = 0;
    // Connections open at once; at the limit the one that has waited longest for a request is
    // closed to make room for a new one, or the new one is refused when every connection is being
    // answered. Each holds a descriptor. 0 = no limit.
    int max_connections = kDefaultMaxHttpConnections;
  };

  // Binds and listens, without accepting yet. Unavailable, saying why, when the address cannot be
  // bound (in use, not local, no such name); InvalidArgument naming --tls_cert_file and
  // --tls_key_file when OpenSSL cannot use the files together.
  static absl::StatusOr<std::unique_ptr<HttpListener>> Bind(const Options& options);
  // Stops accepting (at once), closes idle connections, and waits for every call in flight to
  // return; see Shutdown.
  ~HttpListener();

  // Starts accepting and serving requests with `handler`, which must outlive the listener.
  void Start(HttpHandler* handler);
  // Stops accepting and closes the connections waiting for a request; a connection in the middle
  // of a request is closed once it is answered. Calls in flight go on until `deadline`, when
  // HttpExchange::GraceOver turns true for them; half a second after it every connection still
  // open is closed. Returns at once; the destructor waits.
  void Shutdown(absl::Time deadline);

  // The bound port.
  int port() const;
  // True when the bound address is a loopback address (127.0.0.0/8, ::1).
  bool loopback() const;

  class State;

 private:
  explicit HttpListener(std::unique_ptr<State> state);

  std::unique_ptr<State> state_;
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_HTTP_CONNECTION_H_

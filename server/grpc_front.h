// The gRPC port's listener. It accepts each connection itself (speaking TLS when the server has a
// certificate), checks and paces the client's HTTP/2 frames on their way (server/http2_frames.h),
// and hands the plaintext HTTP/2 to gRPC over a socket pair (grpc::AddInsecureChannelFromFd).
//
// Why: gRPC 1.51 (Debian 12) applies its HTTP/2 limits only once the client has acknowledged the
// server's SETTINGS frame (RFC 9113 6.5.3: the sender may not rely on new settings before then).
// A client that never acknowledged them had none: one connection sending an endless header block
// (HEADERS without END_HEADERS, then CONTINUATION frames) grew the server by 240 MB a second, and
// one opening 264,000 streams took gRPC away from every other client for 70 s and left 5.8 GB
// behind. The front makes gRPC's settings hold from the start (Http2ClientFrames), and bounds a
// header block before gRPC buffers it.
#ifndef ATTNSCOPE_SERVER_GRPC_FRONT_H_
#define ATTNSCOPE_SERVER_GRPC_FRONT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/client_addresses.h"
#include "server/http2_frames.h"
#include "server/security.h"

namespace grpc {
class Server;
}

namespace attnscope::server {

class GrpcFront {
 public:
  struct Options {
    // Where to listen (--listen): a host name or address and a port, 0 for a free one.
    std::string host;
    int port = 0;
    // TLS as the server's flags say (ValidateTlsOptions); disabled: plaintext HTTP/2.
    TlsOptions tls;
    Http2ClientFrames::Limits limits;
    // Streams handed to gRPC that it has not answered yet, over every connection, each for at
    // most its age (Http2ClientFrames::Limits); work beyond this waits in the front
    // (Http2ClientFrames), connections taking turns, one frame each. gRPC 1.51 works through
    // about 10,000 calls a second on two cores, and reads new ones faster than that: a client
    // that opened connections, sent 100 calls on each and dropped it at once, 650,000 calls in
    // 3 s, kept others' calls waiting 14-26 s. Here the wait is for this many streams at most,
    // and streams whose client has gone never reach gRPC.
    int stream_slots = 256;
    // Streams gRPC holds whose request the client has not finished, over every connection: each
    // is a call gRPC keeps (about 12 KB) while it waits for the rest. Past this, the oldest such
    // stream of the connection holding the most is cancelled in gRPC (Http2ClientFrames::Cancel),
    // so that a flood of them cancels its own. Before, 300 connections keeping 100 such streams
    // each grew the server by 350 MB, and the 100 streams gRPC allows a connection times the
    // connections the descriptors allow came to about 7 GB.
    int max_open_requests = 4096;
    // The DATA bytes of those requests handed to gRPC, over every connection: gRPC buffers a
    // request's message until all of it has arrived, up to --max_request_bytes. Past this, the
    // largest open request of the connection holding the most bytes is cancelled. Before, 3,000
    // streams each holding 4 MB of a message whose last byte never came grew the server from
    // 386 MB to 12 GB in a minute.
    int64_t max_open_request_bytes = int64_t{128} << 20;
    // Connections open at once. At the limit, one is closed with a GOAWAY to make room for a new
    // one, chosen by source address and by how long it has been idle or without a new call
    // (Connections in server/grpc_front_limits.h), or else the new one is refused. Each costs
    // three descriptors and about 70 KB in gRPC: 7,000 idle connections took all of a
    // 20,000-descriptor limit, and every gRPC call then failed with UNAVAILABLE. Lowered, when
    // the process's descriptor limit (RLIMIT_NOFILE) is lower, to what a third of it, less 512,
    // allows (at least 64).
    int max_connections = 2048;
    // How long a write to the client may take before the connection is closed: a client that
    // reads nothing would otherwise hold it, and what gRPC wrote for it, for good
    // (--write_timeout_seconds).
    absl::Duration write_timeout = absl::Seconds(30);
    // Called (on the front's own threads) for each connection closed for crossing a limit.
    std::function<void()> on_refused;
    // Called (on the front's own threads) for each connection refused at max_connections.
    std::function<void()> on_connection_refused;
    // Told each connection's client source as it is handed to gRPC (may be null); must outlive
    // the front.
    ClientAddresses* client_addresses = nullptr;
  };

  // Binds and listens; accepts nothing until Start. InvalidArgument: TLS files OpenSSL cannot use
  // together. Unavailable: the host does not resolve, or the address cannot be bound (in use,
  // not local).
  static absl::StatusOr<std::unique_ptr<GrpcFront>> Create(const Options& options);
  // Stops accepting and closes every connection still open.
  ~GrpcFront();

  // The port bound (the one picked when Options::port was 0).
  int port() const;
  // Starts accepting, handing each connection to `server` (started, and alive until StopAccepting
  // returns).
  void Start(grpc::Server* server);
  // Accepts no more connections and hands none more to gRPC: call before gRPC's Shutdown.
  // Connections already handed over go on until gRPC closes them.
  void StopAccepting();

  struct State;

 private:
  explicit GrpcFront(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_GRPC_FRONT_H_

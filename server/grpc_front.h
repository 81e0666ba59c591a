// The gRPC port's listener. It accepts each connection itself (speaking TLS when the server has a
// certificate), checks the client's HTTP/2 frames on their way, and hands the plaintext HTTP/2 to
// gRPC over a socket pair (grpc::AddInsecureChannelFromFd).
//
// Why: gRPC 1.51 (Debian 12) applies its HTTP/2 limits only once the client has acknowledged the
// server's SETTINGS frame (RFC 9113 6.5.3: the sender may not rely on new settings before then).
// A client that never acknowledges them had none: one connection sending an endless header block
// (HEADERS without END_HEADERS, then CONTINUATION frames) grew the server by 240 MB a second, and
// one opening 264,000 streams took gRPC away from every other client for 70 s and left 5.8 GB
// behind. The front closes such a connection first (Http2ClientFrameCheck); after the
// acknowledgement gRPC enforces its own limits as before.
#ifndef ATTNSCOPE_SERVER_GRPC_FRONT_H_
#define ATTNSCOPE_SERVER_GRPC_FRONT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/security.h"

namespace grpc {
class Server;
}

namespace attnscope::server {

// Follows the frames a client sends on one HTTP/2 connection (RFC 9113 4.1: the 24-byte
// connection preface, then frames of a 9-byte header and `length` bytes of payload), fed in
// whatever pieces they arrive in, and says when the client has crossed a limit.
class Http2ClientFrameCheck {
 public:
  struct Limits {
    // Bytes of one header block: a HEADERS frame and its CONTINUATION frames, compressed. gRPC
    // clients send a few hundred; gRPC's own limit (8 KiB of decoded metadata by default) holds
    // only after the acknowledgement.
    int64_t max_header_block_bytes = 64 << 10;
    // Streams a client may open before it acknowledges the server's SETTINGS: gRPC's own
    // per-connection limit (GRPC_ARG_MAX_CONCURRENT_STREAMS), which it enforces only after.
    int max_streams_before_settings_ack = 100;
  };

  explicit Http2ClientFrameCheck(Limits limits) : limits_(limits) {}

  // Follows `bytes`, the next piece of what the client sent. ResourceExhausted naming the limit
  // once a header block is longer than Limits::max_header_block_bytes, or a stream beyond
  // Limits::max_streams_before_settings_ack opens before the client's first SETTINGS frame with
  // the ACK flag; the connection should then be closed (every later call returns the same error).
  absl::Status Consume(absl::string_view bytes);

 private:
  absl::Status OnFrameHeader();

  const Limits limits_;
  absl::Status error_;
  int64_t preface_left_ = 24;
  unsigned char header_[9] = {};
  int header_filled_ = 0;
  int64_t payload_left_ = 0;
  int64_t header_block_bytes_ = 0;
  uint32_t last_stream_id_ = 0;
  int streams_before_ack_ = 0;
  bool settings_acked_ = false;
};

class GrpcFront {
 public:
  struct Options {
    // Where to listen (--listen): a host name or address and a port, 0 for a free one.
    std::string host;
    int port = 0;
    // TLS as the server's flags say (ValidateTlsOptions); disabled: plaintext HTTP/2.
    TlsOptions tls;
    Http2ClientFrameCheck::Limits limits;
    // Called (on the front's own threads) for each connection closed for crossing a limit.
    std::function<void()> on_refused;
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

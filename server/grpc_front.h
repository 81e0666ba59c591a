// The gRPC port's listener. It accepts each connection itself (speaking TLS when the server has a
// certificate), checks the client's HTTP/2 frames on their way, and hands the plaintext HTTP/2 to
// gRPC over a socket pair (grpc::AddInsecureChannelFromFd).
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
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/security.h"

namespace grpc {
class Server;
}

namespace attnscope::server {

// What gRPC receives of a client's HTTP/2 connection (RFC 9113 4.1: the 24-byte connection
// preface, then frames of a 9-byte header and `length` bytes of payload), made from what the
// client sends, fed in whatever pieces it arrives in:
// - a SETTINGS frame with the ACK flag right after the client's first SETTINGS frame, and the
//   client's own first ACK left out. gRPC then holds the client to the settings it sent
//   (MAX_CONCURRENT_STREAMS, MAX_HEADER_LIST_SIZE of decoded metadata) from its first stream on,
//   instead of only once the ACK arrives: without it, 100 streams of header blocks referring to
//   one HPACK table entry again and again grew the server by 1 GB. The rest of gRPC's first
//   SETTINGS (a 4 MiB flow-control window and frame size, true binary metadata) only allows more
//   than the protocol's defaults a client assumes until then, so nothing a client may send
//   becomes an error;
// - a header block (a HEADERS frame and its CONTINUATION frames, compressed) longer than
//   Limits::max_header_block_bytes ends the connection before gRPC has buffered it;
// - so do more than Limits::max_resets_per_second streams reset by the client (RST_STREAM) in a
//   second, when they are more than half of the streams it opened in that second: gRPC 1.51 has no
//   limit of its own on "rapid reset" (CVE-2023-44487), and two connections opening and resetting
//   170,000 streams in 10 s grew the server by 3.8 GB and kept a call from another client waiting
//   17 s. The proportion is Envoy's rule for premature resets: a busy client whose calls often
//   reach their deadline (each a reset) stays connected.
class Http2ClientFrames {
 public:
  struct Limits {
    // gRPC clients send a few hundred bytes; gRPC's own limit is 8 KiB decoded.
    int64_t max_header_block_bytes = 64 << 10;
    // A client cancels a call with RST_STREAM: 200 in one second on one connection, most of its
    // calls, is far more than a client cancels, and far fewer than a flood.
    int max_resets_per_second = 200;
  };

  explicit Http2ClientFrames(Limits limits) : limits_(limits) {}

  // Appends to `out` what gRPC should receive for `bytes`, the next piece of what the client sent,
  // which arrived at `now`. ResourceExhausted naming the limit once a header block is longer than
  // Limits::max_header_block_bytes or resets come faster than the limits allow; the connection
  // should then be closed (every later call returns the same error).
  absl::Status Consume(absl::string_view bytes, std::string* out, absl::Time now);
  // Whether the 24 bytes of the connection preface have all arrived.
  bool preface_done() const { return preface_left_ == 0; }
  // Whether the client has acknowledged the server's first SETTINGS.
  bool settings_acked() const { return client_acked_; }

 private:
  // Decides on the frame whose header has just arrived in header_: appends it to `out` unless it
  // is the client's first ACK.
  absl::Status OnFrameHeader(std::string* out, absl::Time now);

  const Limits limits_;
  absl::Status error_;
  int64_t preface_left_ = 24;
  unsigned char header_[9] = {};
  int header_filled_ = 0;
  int64_t payload_left_ = 0;
  int64_t header_block_bytes_ = 0;
  bool first_settings_seen_ = false;
  bool ack_pending_ = false;  // the first SETTINGS' payload is under way; its ACK follows it
  bool client_acked_ = false;
  uint32_t last_stream_id_ = 0;
  // Streams opened and reset by the client since window_start_ (a one-second window).
  absl::Time window_start_ = absl::InfinitePast();
  int64_t window_opened_ = 0;
  int64_t window_resets_ = 0;
};

class GrpcFront {
 public:
  struct Options {
    // Where to listen (--listen): a host name or address and a port, 0 for a free one.
    std::string host;
    int port = 0;
    // TLS as the server's flags say (ValidateTlsOptions); disabled: plaintext HTTP/2.
    TlsOptions tls;
    Http2ClientFrames::Limits limits;
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

#include "server/grpc_front.h"

#include <fcntl.h>
#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <openssl/ssl.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/listen_address.h"

namespace attnscope::server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

// Threads moving every connection's bytes; they never wait for a call.
constexpr int kIoThreads = 2;
// Bytes moved per read from the client (requests: small) and from gRPC (answers: up to hundreds
// of MB). The answer buffer is held only while gRPC has bytes to pass on, so that an idle
// connection costs little beyond its sockets.
constexpr size_t kClientChunkBytes = 16 << 10;
constexpr size_t kGrpcChunkBytes = 64 << 10;
// How long a TLS handshake may take, and then the client's acknowledgement of the server's
// SETTINGS, which it sends as soon as it has read them (RFC 9113 6.5.3): a client that opens
// connections and never starts one would otherwise hold three descriptors each (its socket and
// both ends of the socket pair) for good.
constexpr std::chrono::seconds kHandshakeTimeout(10);
// After gRPC has closed its side, how long the front keeps reading (and dropping) what the client
// still sends before it closes the socket: closing a socket with unread input resets the
// connection, and the client could lose the end of an answer still on its way.
constexpr std::chrono::seconds kLingerTime(2);

constexpr unsigned char kAlpnH2[] = {'h', '2'};

// Offers HTTP/2 in the TLS handshake (ALPN, RFC 7301): gRPC clients refuse a server that selects
// no protocol.
int SelectH2(SSL* /*ssl*/, const unsigned char** out, unsigned char* out_length,
             const unsigned char* offered, unsigned int offered_length, void* /*arg*/) {
  for (unsigned int i = 0; i < offered_length;) {
    const unsigned int length = offered[i];
    if (i + 1 + length > offered_length) break;
    if (length == sizeof(kAlpnH2) && std::memcmp(offered + i + 1, kAlpnH2, length) == 0) {
      *out = offered + i + 1;
      *out_length = static_cast<unsigned char>(length);
      return SSL_TLSEXT_ERR_OK;
    }
    i += 1 + length;
  }
  return SSL_TLSEXT_ERR_ALERT_FATAL;
}

}  // namespace

absl::Status Http2ClientFrames::Consume(absl::string_view bytes, std::string* out, absl::Time now) {
  // SETTINGS (type 4) with the ACK flag, no payload, on stream 0.
  static constexpr char kSettingsAck[9] = {0, 0, 0, 4, 1, 0, 0, 0, 0};
  while (error_.ok() && !bytes.empty()) {
    if (preface_left_ > 0 || payload_left_ > 0) {
      int64_t& left = preface_left_ > 0 ? preface_left_ : payload_left_;
      const int64_t n = std::min<int64_t>(left, static_cast<int64_t>(bytes.size()));
      out->append(bytes.data(), static_cast<size_t>(n));
      left -= n;
      bytes.remove_prefix(static_cast<size_t>(n));
    } else {
      const int n = std::min<int>(9 - header_filled_, static_cast<int>(bytes.size()));
      std::memcpy(header_ + header_filled_, bytes.data(), n);
      header_filled_ += n;
      bytes.remove_prefix(n);
      if (header_filled_ == 9) {
        header_filled_ = 0;
        error_ = OnFrameHeader(out, now);
      }
    }
    if (ack_pending_ && payload_left_ == 0 && header_filled_ == 0) {
      out->append(kSettingsAck, sizeof(kSettingsAck));
      ack_pending_ = false;
    }
  }
  return error_;
}

absl::Status Http2ClientFrames::OnFrameHeader(std::string* out, absl::Time now) {
  constexpr int kHeaders = 0x1;
  constexpr int kResetStream = 0x3;
  constexpr int kSettings = 0x4;
  constexpr int kContinuation = 0x9;
  constexpr int kAck = 0x1;
  const int64_t length = (int64_t{header_[0]} << 16) | (int64_t{header_[1]} << 8) | header_[2];
  const int type = header_[3];
  const int flags = header_[4];
  payload_left_ = length;
  if (type == kSettings && (flags & kAck) == 0 && !first_settings_seen_) {
    first_settings_seen_ = true;
    ack_pending_ = true;
  }
  if (type == kSettings && (flags & kAck) != 0 && length == 0 && first_settings_seen_ &&
      !client_acked_) {
    // Already given to gRPC right after the client's first SETTINGS.
    client_acked_ = true;
    return absl::OkStatus();
  }
  out->append(reinterpret_cast<const char*>(header_), sizeof(header_));
  if (type == kHeaders || type == kResetStream) {
    if (now - window_start_ >= absl::Seconds(1)) {
      window_start_ = now;
      window_opened_ = 0;
      window_resets_ = 0;
    }
    const uint32_t stream_id = ((uint32_t{header_[5]} << 24) | (uint32_t{header_[6]} << 16) |
                                (uint32_t{header_[7]} << 8) | header_[8]) &
                               0x7fffffffu;
    if (type == kHeaders && stream_id > last_stream_id_) {
      last_stream_id_ = stream_id;
      ++window_opened_;
    }
    if (type == kResetStream && ++window_resets_ > limits_.max_resets_per_second &&
        2 * window_resets_ > window_opened_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "HTTP/2 streams reset by the client: expected at most ", limits_.max_resets_per_second,
          " a second or half of those opened, got more; cancel fewer calls"));
    }
  }
  if (type == kHeaders) header_block_bytes_ = 0;
  if (type == kHeaders || type == kContinuation) {
    header_block_bytes_ += length;
    if (header_block_bytes_ > limits_.max_header_block_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat("HTTP/2 header block: expected at most ",
                                                       limits_.max_header_block_bytes,
                                                       " bytes, got more; send less metadata"));
    }
  }
  return absl::OkStatus();
}

struct GrpcFront::State {
  explicit State(const Options& options) : options(options) {}

  void Accept();
  template <typename Stream>
  void Serve(Stream client);
  // Hands `fd` to gRPC unless the front has stopped; false (and `fd` closed) if it has.
  bool HandOver(int fd);

  const Options options;
  std::optional<asio::ssl::context> tls;
  std::mutex mutex;
  grpc::Server* server = nullptr;  // under mutex; nullptr once stopped
  // Connections handed to gRPC whose bytes from gRPC are not all passed on to the client yet.
  std::atomic<int> passing{0};
  int port = 0;
  std::vector<std::thread> io_threads;
  asio::io_context io{kIoThreads};
  asio::strand<asio::io_context::executor_type> strand{io.get_executor()};
  tcp::acceptor acceptor{strand};
  asio::steady_timer accept_retry{strand};
};

namespace {

template <typename Stream>
constexpr bool kIsTls = !std::is_same_v<Stream, tcp::socket>;

template <typename Stream>
tcp::socket& TcpOf(Stream& stream) {
  if constexpr (kIsTls<Stream>) {
    return stream.next_layer();
  } else {
    return stream;
  }
}

// One client connection: its bytes to gRPC through the frame check, gRPC's bytes back as they
// are. Every handler runs on the client socket's strand.
template <typename Stream>
class FrontConnection : public std::enable_shared_from_this<FrontConnection<Stream>> {
 public:
  FrontConnection(GrpcFront::State* state, Stream client)
      : state_(state),
        client_(std::move(client)),
        upstream_(TcpOf(client_).get_executor()),
        timer_(TcpOf(client_).get_executor()),
        frames_(state->options.limits) {}

  void Run() {
    asio::local::stream_protocol::socket grpc_side(upstream_.get_executor());
    error_code error;
    asio::local::connect_pair(upstream_, grpc_side, error);
    if (!error) upstream_.non_blocking(true, error);
    if (error) return;
    const int fd = grpc_side.release(error);
    if (error) return;
    // gRPC's endpoint expects a non-blocking descriptor.
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    if constexpr (kIsTls<Stream>) {
      timer_.expires_after(kHandshakeTimeout);
      timer_.async_wait([self = this->shared_from_this()](error_code timer_error) {
        if (!timer_error && !self->handshaken_) self->Close();
      });
      client_.async_handshake(asio::ssl::stream_base::server,
                              [self = this->shared_from_this(), fd](error_code error) {
                                self->handshaken_ = true;
                                self->timer_.cancel();
                                if (error) {
                                  ::close(fd);
                                  self->Close();
                                  return;
                                }
                                self->Begin(fd);
                              });
    } else {
      Begin(fd);
    }
  }

 private:
  void Begin(int fd) {
    if (!state_->HandOver(fd)) {
      Close();
      return;
    }
    ++state_->passing;
    passing_ = true;
    timer_.expires_after(kHandshakeTimeout);
    timer_.async_wait([self = this->shared_from_this()](error_code error) {
      if (!error && !self->frames_.settings_acked()) self->Close();
    });
    ReadClient();
    ReadGrpc();
  }

  void ReadClient() {
    client_.async_read_some(
        asio::buffer(from_client_), [self = this->shared_from_this()](error_code error, size_t n) {
          if (error) {
            // The client is done sending (or gone): gRPC sees the end of its input.
            error_code ignored;
            self->upstream_.shutdown(asio::socket_base::shutdown_send, ignored);
            self->client_done_ = true;
            self->MaybeClose();
            return;
          }
          if (self->grpc_done_ || self->grpc_input_closed_) {
            // Dropped: gRPC takes no more (kLingerTime).
            self->ReadClient();
            return;
          }
          self->to_grpc_.clear();
          if (!self->frames_
                   .Consume(absl::string_view(self->from_client_.data(), n), &self->to_grpc_,
                            absl::Now())
                   .ok()) {
            if (self->state_->options.on_refused) self->state_->options.on_refused();
            self->Close();
            return;
          }
          asio::async_write(self->upstream_, asio::buffer(self->to_grpc_),
                            [self](error_code error, size_t) {
                              // gRPC has closed the connection; what it wrote before is still
                              // passed on (ReadGrpc).
                              if (error) self->grpc_input_closed_ = true;
                              self->ReadClient();
                            });
        });
  }

  void ReadGrpc() {
    upstream_.async_wait(asio::socket_base::wait_read,
                         [self = this->shared_from_this()](error_code error) {
                           if (error) {
                             self->OnGrpcClosed();
                             return;
                           }
                           if (self->from_grpc_ == nullptr) {
                             self->from_grpc_ = std::make_unique<char[]>(kGrpcChunkBytes);
                           }
                           const size_t n = self->upstream_.read_some(
                               asio::buffer(self->from_grpc_.get(), kGrpcChunkBytes), error);
                           if (error == asio::error::would_block) {
                             self->ReadGrpc();
                             return;
                           }
                           if (error) {
                             self->OnGrpcClosed();
                             return;
                           }
                           asio::async_write(self->client_, asio::buffer(self->from_grpc_.get(), n),
                                             [self, n](error_code error, size_t) {
                                               if (error) {
                                                 self->Close();
                                                 return;
                                               }
                                               if (n < kGrpcChunkBytes) self->from_grpc_.reset();
                                               self->ReadGrpc();
                                             });
                         });
  }

  // gRPC closed the connection (everything it wrote has been passed on): the client gets the end
  // of its input, and kLingerTime to stop sending before the socket closes.
  void OnGrpcClosed() {
    if (grpc_done_ || closed_) return;
    grpc_done_ = true;
    EndPassing();
    error_code ignored;
    TcpOf(client_).shutdown(asio::socket_base::shutdown_send, ignored);
    timer_.expires_after(kLingerTime);
    timer_.async_wait([self = this->shared_from_this()](error_code error) {
      if (!error) self->Close();
    });
    MaybeClose();
  }

  void MaybeClose() {
    if (client_done_ && grpc_done_) Close();
  }

  void EndPassing() {
    if (passing_) --state_->passing;
    passing_ = false;
  }

  void Close() {
    closed_ = true;
    EndPassing();
    error_code ignored;
    timer_.cancel();
    TcpOf(client_).close(ignored);
    upstream_.close(ignored);
  }

  GrpcFront::State* const state_;
  Stream client_;
  asio::local::stream_protocol::socket upstream_;
  asio::steady_timer timer_;
  Http2ClientFrames frames_;
  std::string to_grpc_;  // what gRPC receives of the last read (Http2ClientFrames)
  std::array<char, kClientChunkBytes> from_client_;
  std::unique_ptr<char[]> from_grpc_;  // while gRPC has bytes to pass on
  bool handshaken_ = false;
  bool client_done_ = false;
  bool grpc_done_ = false;
  bool grpc_input_closed_ = false;  // a write to gRPC failed
  bool closed_ = false;
  bool passing_ = false;  // counted in State::passing
};

}  // namespace

bool GrpcFront::State::HandOver(int fd) {
  std::lock_guard<std::mutex> lock(mutex);
  if (server == nullptr) {
    ::close(fd);
    return false;
  }
  grpc::AddInsecureChannelFromFd(server, fd);
  return true;
}

void GrpcFront::State::Accept() {
  acceptor.async_accept(asio::make_strand(io), [this](error_code error, tcp::socket socket) {
    if (!acceptor.is_open()) return;
    if (error) {
      // Out of file descriptors, typically: wait for connections to close instead of spinning.
      accept_retry.expires_after(std::chrono::milliseconds(100));
      accept_retry.async_wait([this](error_code timer_error) {
        if (!timer_error) Accept();
      });
      return;
    }
    error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    if (tls.has_value()) {
      Serve(asio::ssl::stream<tcp::socket>(std::move(socket), *tls));
    } else {
      Serve(std::move(socket));
    }
    Accept();
  });
}

template <typename Stream>
void GrpcFront::State::Serve(Stream client) {
  std::make_shared<FrontConnection<Stream>>(this, std::move(client))->Run();
}

GrpcFront::GrpcFront(std::unique_ptr<State> state) : state_(std::move(state)) {}

absl::StatusOr<std::unique_ptr<GrpcFront>> GrpcFront::Create(const Options& options) {
  auto state = std::make_unique<State>(options);
  if (options.tls.enabled()) {
    asio::ssl::context& context = state->tls.emplace(asio::ssl::context::tls_server);
    if (absl::Status configured = ConfigureServerTls(options.tls, context.native_handle());
        !configured.ok()) {
      return configured;
    }
    SSL_CTX_set_alpn_select_cb(context.native_handle(), &SelectH2, nullptr);
  }
  if (absl::Status bound = ListenOn(options.host, options.port, state->acceptor); !bound.ok()) {
    return bound;
  }
  state->port = state->acceptor.local_endpoint().port();
  return std::unique_ptr<GrpcFront>(new GrpcFront(std::move(state)));
}

int GrpcFront::port() const { return state_->port; }

void GrpcFront::Start(grpc::Server* server) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->server = server;
  }
  asio::post(state_->strand, [state = state_.get()] { state->Accept(); });
  for (int i = 0; i < kIoThreads; ++i) {
    state_->io_threads.emplace_back([state = state_.get()] { state->io.run(); });
  }
}

void GrpcFront::StopAccepting() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->server = nullptr;
  }
  asio::post(state_->strand, [state = state_.get()] {
    error_code ignored;
    state->acceptor.close(ignored);
    state->accept_retry.cancel();
  });
}

GrpcFront::~GrpcFront() {
  StopAccepting();
  // gRPC, stopped before, has written everything into the socket pairs, but a slow client may not
  // have taken all of it from them yet: what the kernel holds for the client outlives the
  // process, what the socket pairs hold does not.
  const auto deadline = std::chrono::steady_clock::now() + kLingerTime;
  while (state_->passing.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  state_->io.stop();
  for (std::thread& thread : state_->io_threads) thread.join();
}

}  // namespace attnscope::server

#include "server/grpc_front.h"

#include <fcntl.h>
#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/client_addresses.h"
#include "server/grpc_front_limits.h"
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
// Most bytes of a client's streams waiting for slots before the front stops reading from it.
// Reading on is how the front learns that a client has gone, so that its waiting streams never
// reach gRPC; 64 KiB holds a few hundred calls of a usual size.
constexpr int64_t kMaxWaitingBytes = 64 << 10;
// And most frames, each of which the front keeps with its own bookkeeping: 64 KiB of empty frames
// held 340 KB.
constexpr int64_t kMaxWaitingFrames = 1024;
// How long a TLS handshake may take, and then the client's acknowledgement of the server's
// SETTINGS, which it sends as soon as it has read them (RFC 9113 6.5.3): a client that opens
// connections and never starts one would otherwise hold three descriptors each (its socket and
// both ends of the socket pair) for good.
constexpr std::chrono::seconds kHandshakeTimeout(10);
// After gRPC has closed its side, how long the front keeps reading (and dropping) what the client
// still sends before it closes the socket: closing a socket with unread input resets the
// connection, and the client could lose the end of an answer still on its way.
constexpr std::chrono::seconds kLingerTime(2);
// The same for a connection closed to make room for another, and how long it may take in all.
constexpr std::chrono::milliseconds kMakingRoomLinger(250);
constexpr std::chrono::seconds kMakingRoomDeadline(1);

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

struct GrpcFront::State {
  explicit State(const Options& options)
      : options(options),
        slots(options.stream_slots),
        open_requests(options.max_open_requests, options.max_open_request_bytes),
        connections(MaxConnections(options.max_connections)) {}

  void Accept();
  template <typename Stream>
  void Serve(Stream client);
  // Hands `fd` to gRPC unless the front has stopped; false (and `fd` closed) if it has.
  bool HandOver(int fd);

  const Options options;
  StreamSlots slots;
  OpenRequests open_requests;
  Connections connections;
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
class FrontConnection : public SlotWaiter,
                        public OpenRequests::Holder,
                        public Connections::Member,
                        public std::enable_shared_from_this<FrontConnection<Stream>> {
 public:
  FrontConnection(GrpcFront::State* state, Stream client, std::string source)
      : state_(state),
        source_(std::move(source)),
        client_(std::move(client)),
        upstream_(TcpOf(client_).get_executor()),
        timer_(TcpOf(client_).get_executor()),
        slot_timer_(TcpOf(client_).get_executor()),
        pause_timer_(TcpOf(client_).get_executor()),
        write_timer_(TcpOf(client_).get_executor()),
        frames_(state->options.limits,
                [this] { return ClientConnected() && state_->slots.TryTake(); }) {}

  ~FrontConnection() override { state_->connections.Remove(this, source_); }

  void Run() {
    UpdateIdle();
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

  void Grant() override {
    asio::post(TcpOf(client_).get_executor(), [self = this->shared_from_this()] {
      self->slot_requested_ = false;
      if (self->gone_.load()) {
        self->state_->slots.Give(1);
        return;
      }
      if (!self->ClientConnected()) {
        self->state_->slots.Give(1);
        self->ClientGone();
        return;
      }
      self->frames_.Admit(&self->to_grpc_, absl::Now());
      self->MaybeRequestSlot();
      self->Flush();
      self->MaybeReadClient();
      self->SyncOpenRequests();
      self->UpdateIdle();
      self->GiveBackFreedSlots();
    });
  }

  bool Gone() const override { return gone_.load(); }

  void CloseToMakeRoom() override {
    asio::post(TcpOf(client_).get_executor(), [self = this->shared_from_this()] {
      if (self->closed_ || self->grpc_done_) return;
      if (!self->passing_) {
        self->Close();
        return;
      }
      // gRPC sees the end of its input and closes its end; the client then gets a GOAWAY
      // (OnGrpcClosed).
      self->making_room_ = true;
      error_code ignored;
      self->upstream_.shutdown(asio::socket_base::shutdown_both, ignored);
      // It counts against the limit until it is gone: closed by then whatever the client does
      // (one that reads nothing would otherwise keep the GOAWAY, and the connection, waiting).
      self->timer_.expires_after(kMakingRoomDeadline);
      self->timer_.async_wait([self](error_code error) {
        if (!error) self->Close();
      });
    });
  }

  auto executor() { return TcpOf(client_).get_executor(); }

  void Evict(uint32_t stream_id) override {
    asio::post(TcpOf(client_).get_executor(), [self = this->shared_from_this(), stream_id] {
      if (self->closed_ || self->grpc_done_) return;
      self->counted_requests_.erase(stream_id);
      self->frames_.Cancel(stream_id, &self->to_grpc_);
      self->Flush();
      self->SyncOpenRequests();
      self->UpdateIdle();
      self->GiveBackFreedSlots();
    });
  }

 private:
  // Asks for a slot when a frame waits for one and none is asked for or granted already.
  void MaybeRequestSlot() {
    if (slot_requested_ || gone_.load() || frames_.waiting_for_slots() == 0) return;
    slot_requested_ = true;
    state_->slots.Wait(this->shared_from_this());
  }

  // The client has closed or reset its connection (read, or seen by ClientConnected).
  void ClientGone() {
    if (grpc_fd_ >= 0) {
      // Gone before it started: gRPC never hears of it.
      Close();
      return;
    }
    // gRPC sees the end of its input, and the frames still waiting never reach it.
    error_code ignored;
    upstream_.shutdown(asio::socket_base::shutdown_send, ignored);
    client_done_ = true;
    gone_ = true;
    MaybeClose();
  }

  // gRPC gets `fd` once the client's connection preface has arrived (HandOverOnceStarted).
  void Begin(int fd) {
    grpc_fd_ = fd;
    timer_.expires_after(kHandshakeTimeout);
    timer_.async_wait([self = this->shared_from_this()](error_code error) {
      if (!error && !self->frames_.settings_acked()) self->Close();
    });
    MaybeReadClient();
    ReadGrpc();
  }

  // Hands the socket pair's other end to gRPC once the client has sent its connection preface
  // (RFC 9113 3.4: it does so before it reads anything), and only if it is still connected: a
  // connection dropped at once costs gRPC nothing. False (and the connection closed) when the
  // front has stopped or the client has gone.
  bool HandOverOnceStarted() {
    if (grpc_fd_ < 0 || !frames_.preface_done()) return true;
    const int fd = std::exchange(grpc_fd_, -1);
    if (!ClientConnected()) {
      ::close(fd);
      Close();
      return false;
    }
    if (state_->options.client_addresses != nullptr) {
      state_->options.client_addresses->Set(fd, source_);
    }
    if (!state_->HandOver(fd)) {
      Close();
      return false;
    }
    ++state_->passing;
    passing_ = true;
    return true;
  }

  // False once the client has closed or reset its connection, even if the front has not read
  // that far yet: a client that sends calls and drops the connection at once has them in the
  // same read as its last bytes, and streams it opened never take a slot.
  bool ClientConnected() {
    tcp_info info{};
    socklen_t size = sizeof(info);
    return getsockopt(TcpOf(client_).native_handle(), IPPROTO_TCP, TCP_INFO, &info, &size) == 0 &&
           info.tcpi_state == TCP_ESTABLISHED;
  }

  // Reads the client's next bytes unless a read is under way, gRPC has not taken the last ones
  // yet, or enough of them wait for slots: the client then waits (TCP's flow control).
  void MaybeReadClient() {
    if (reading_ || client_done_ || closed_ || writing_) return;
    if (frames_.waiting_bytes() >= kMaxWaitingBytes ||
        frames_.waiting_frames() >= kMaxWaitingFrames) {
      // Not read, the client's going away shows only in the socket's state: looked at every
      // second until a slot lets the frames on.
      if (!pause_timer_armed_) {
        pause_timer_armed_ = true;
        pause_timer_.expires_after(std::chrono::seconds(1));
        pause_timer_.async_wait([self = this->shared_from_this()](error_code error) {
          self->pause_timer_armed_ = false;
          if (error || self->closed_ || self->client_done_) return;
          if (!self->ClientConnected()) {
            self->ClientGone();
          } else {
            self->MaybeReadClient();
          }
        });
      }
      return;
    }
    reading_ = true;
    client_.async_read_some(asio::buffer(from_client_),
                            [self = this->shared_from_this()](error_code error, size_t n) {
                              self->OnClientRead(error, n);
                            });
  }

  void OnClientRead(error_code error, size_t n) {
    reading_ = false;
    if (error) {
      ClientGone();
      return;
    }
    if (grpc_done_ || grpc_input_closed_) {
      // Dropped: gRPC takes no more (kLingerTime).
      MaybeReadClient();
      return;
    }
    if (!frames_.Consume(absl::string_view(from_client_.data(), n), &to_grpc_, absl::Now()).ok()) {
      if (state_->options.on_refused) state_->options.on_refused();
      Close();
      return;
    }
    if (!HandOverOnceStarted()) return;
    MaybeRequestSlot();
    Flush();
    MaybeReadClient();
    SyncOpenRequests();
    UpdateIdle();
    GiveBackFreedSlots();
  }

  // Writes what gRPC is to receive, one write at a time.
  void Flush() {
    if (writing_ || to_grpc_.empty() || grpc_input_closed_ || closed_) return;
    writing_ = true;
    std::swap(being_written_, to_grpc_);
    to_grpc_.clear();
    asio::async_write(upstream_, asio::buffer(being_written_),
                      [self = this->shared_from_this()](error_code error, size_t) {
                        self->writing_ = false;
                        // gRPC has closed the connection; what it wrote before is still passed
                        // on (ReadGrpc).
                        if (error) self->grpc_input_closed_ = true;
                        self->Flush();
                        self->MaybeReadClient();
                      });
  }

  void ReadGrpc() {
    upstream_.async_wait(
        asio::socket_base::wait_read, [self = this->shared_from_this()](error_code error) {
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
          self->frames_.ConsumeServer(absl::string_view(self->from_grpc_.get(), n));
          self->SyncOpenRequests();
          self->UpdateIdle();
          self->GiveBackFreedSlots();
          // A client that takes nothing holds the connection, and what gRPC has written for it,
          // only so long: the same as --write_timeout_seconds gives an answer.
          self->write_timer_.expires_after(
              absl::ToChronoNanoseconds(self->state_->options.write_timeout));
          self->write_timer_.async_wait([self](error_code error) {
            if (!error) self->Close();
          });
          asio::async_write(self->client_, asio::buffer(self->from_grpc_.get(), n),
                            [self, n](error_code error, size_t) {
                              self->write_timer_.cancel();
                              if (error) {
                                self->Close();
                                return;
                              }
                              if (n < kGrpcChunkBytes) self->from_grpc_.reset();
                              self->ReadGrpc();
                            });
        });
  }

  // Returns the slots of streams gRPC has answered, the client has reset, or whose age has
  // passed, and sets the timer for the next to pass.
  void GiveBackFreedSlots() {
    if (slots_released_) return;
    const absl::Time now = absl::Now();
    const int freed = frames_.TakeFreedSlots(now);
    if (freed > 0) state_->slots.Give(freed);
    // A slot granted while a frame was half given to gRPC may have gone by age.
    MaybeRequestSlot();
    const absl::Time next = frames_.NextSlotExpiry();
    if (next >= slot_timer_expiry_) return;
    // Setting the expiry cancels a wait for a later one (its handler gets an error).
    slot_timer_expiry_ = next;
    slot_timer_.expires_after(absl::ToChronoNanoseconds(next - now));
    slot_timer_.async_wait([self = this->shared_from_this()](error_code error) {
      if (error) return;
      self->slot_timer_expiry_ = absl::InfiniteFuture();
      self->GiveBackFreedSlots();
    });
  }

  // Counts in State::open_requests the open requests frames_ has and the bytes of their messages,
  // and ends those counted that are no longer open. A request that arrives whole in one read is
  // never counted.
  void SyncOpenRequests() {
    if (slots_released_) return;
    const absl::flat_hash_map<uint32_t, int64_t>& open = frames_.open_requests();
    for (auto it = counted_requests_.begin(); it != counted_requests_.end();) {
      if (open.contains(it->first)) {
        ++it;
      } else {
        state_->open_requests.End(this, it->first);
        counted_requests_.erase(it++);
      }
    }
    for (const auto& [stream_id, bytes] : open) {
      auto [counted, added] = counted_requests_.try_emplace(stream_id, bytes);
      if (!added && counted->second == bytes) continue;
      counted->second = bytes;
      // May evict (this connection's requests too, through a task posted to its strand).
      state_->open_requests.Count(this, this->weak_from_this(), stream_id, bytes, added);
    }
  }

  // Tells State::connections whether this connection is idle, since when, or when its latest
  // call began. Idle: no frame waiting, and no call in gRPC but those whose request is still
  // arriving (a connection holding only those is what a flood of them looks like; the
  // open-request limits cancel them anyway). One that has not started (TLS handshake, preface)
  // is idle too.
  void UpdateIdle() {
    if (closed_) return;
    const absl::Time now = absl::Now();
    const bool idle = frames_.live_streams() == static_cast<int>(frames_.open_requests().size()) &&
                      frames_.waiting_frames() == 0;
    if (frames_.last_passed_stream_id() != last_call_) {
      last_call_ = frames_.last_passed_stream_id();
      last_call_began_ = now;
    }
    if (idle && !idle_) idle_since_ = now;
    const absl::Time since = idle ? idle_since_ : last_call_began_;
    if (idle == idle_ && since == ranked_since_) return;
    idle_ = idle;
    ranked_since_ = since;
    state_->connections.Update(this, this->weak_from_this(), source_, idle, since);
  }

  // Once gRPC or the connection is done: every slot held goes back, and no request is open.
  void ReleaseSlots() {
    gone_ = true;
    if (slots_released_) return;
    slots_released_ = true;
    state_->open_requests.EndAll(this);
    counted_requests_.clear();
    slot_timer_.cancel();
    const int held = frames_.ReleaseAllSlots();
    if (held > 0) state_->slots.Give(held);
  }

  // gRPC closed the connection (everything it wrote has been passed on): the client gets the end
  // of its input, and kLingerTime to stop sending before the socket closes.
  void OnGrpcClosed() {
    if (grpc_done_ || closed_) return;
    grpc_done_ = true;
    ReleaseSlots();
    EndPassing();
    if (making_room_ && frames_.server_at_frame_boundary()) {
      // Closed to make room (Connections): GOAWAY (RFC 9113 6.8) with NO_ERROR and the last
      // stream gRPC had, so that a client sending a call right now retries it on a new connection
      // instead of failing it.
      const uint32_t last = frames_.last_passed_stream_id();
      goaway_ = {0,
                 0,
                 8,
                 7,
                 0,
                 0,
                 0,
                 0,
                 0,
                 static_cast<char>((last >> 24) & 0x7f),
                 static_cast<char>(last >> 16),
                 static_cast<char>(last >> 8),
                 static_cast<char>(last),
                 0,
                 0,
                 0,
                 0};
      asio::async_write(
          client_, asio::buffer(goaway_),
          [self = this->shared_from_this()](error_code, size_t) { self->EndClientOutput(); });
      return;
    }
    EndClientOutput();
  }

  // The client gets the end of its input, and kLingerTime to stop sending before the socket
  // closes.
  void EndClientOutput() {
    error_code ignored;
    TcpOf(client_).shutdown(asio::socket_base::shutdown_send, ignored);
    // One closed to make room counts until it is gone (Connections): its client has had a GOAWAY
    // and has nothing to finish.
    timer_.expires_after(making_room_ ? kMakingRoomLinger : kLingerTime);
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
    state_->connections.Unlist(this);
    if (grpc_fd_ >= 0) ::close(std::exchange(grpc_fd_, -1));
    ReleaseSlots();
    EndPassing();
    error_code ignored;
    timer_.cancel();
    pause_timer_.cancel();
    write_timer_.cancel();
    TcpOf(client_).close(ignored);
    upstream_.close(ignored);
  }

  GrpcFront::State* const state_;
  const std::string source_;  // Connections' key of the client's address (SourceOf)
  Stream client_;
  asio::local::stream_protocol::socket upstream_;
  asio::steady_timer timer_;
  asio::steady_timer slot_timer_;   // the next slot's age (GiveBackFreedSlots)
  asio::steady_timer pause_timer_;  // while the client is not read (MaybeReadClient)
  asio::steady_timer write_timer_;  // while gRPC's bytes are written to the client (ReadGrpc)
  absl::Time slot_timer_expiry_ = absl::InfiniteFuture();  // when slot_timer_ fires, if set
  Http2ClientFrames frames_;
  std::string to_grpc_;        // what gRPC is to receive next (Http2ClientFrames)
  std::string being_written_;  // what gRPC is receiving
  std::array<char, kClientChunkBytes> from_client_;
  std::unique_ptr<char[]> from_grpc_;  // while gRPC has bytes to pass on
  std::atomic<bool> gone_{false};      // no more slots wanted (SlotWaiter::Gone)
  int grpc_fd_ = -1;                   // gRPC's end of the socket pair until handed over
  // The open requests counted in State::open_requests, with their bytes (SyncOpenRequests).
  absl::flat_hash_map<uint32_t, int64_t> counted_requests_;
  bool handshaken_ = false;
  bool reading_ = false;
  bool writing_ = false;
  bool client_done_ = false;
  bool grpc_done_ = false;
  bool grpc_input_closed_ = false;  // a write to gRPC failed
  bool closed_ = false;
  bool passing_ = false;  // counted in State::passing
  bool slots_released_ = false;
  bool slot_requested_ = false;  // waiting in State::slots, or a grant on its way
  bool pause_timer_armed_ = false;
  // What State::connections was last told (UpdateIdle): idle or busy, and since when.
  bool idle_ = false;
  absl::Time ranked_since_ = absl::InfinitePast();
  absl::Time idle_since_;
  uint32_t last_call_ = 0;  // the stream id of the latest call handed to gRPC, begun at:
  absl::Time last_call_began_ = absl::Now();
  bool making_room_ = false;  // closed to make room (CloseToMakeRoom)
  std::string goaway_;        // the GOAWAY being written then
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
  error_code error;
  const tcp::endpoint remote = TcpOf(client).remote_endpoint(error);
  // A client already gone has no address; its connection ends at its first read.
  std::string source = error ? std::string() : SourceOf(remote);
  if (!connections.Add(absl::Now(), source)) {
    // Every connection is busy: this one is refused at once, before it costs anything.
    error_code ignored;
    TcpOf(client).close(ignored);
    if (options.on_connection_refused) options.on_connection_refused();
    return;
  }
  // On the connection's own strand, as every later handler of it: an operation it starts can
  // complete on the other I/O thread at once.
  auto connection =
      std::make_shared<FrontConnection<Stream>>(this, std::move(client), std::move(source));
  asio::post(connection->executor(), [connection] { connection->Run(); });
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

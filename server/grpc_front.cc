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
#include <deque>
#include <memory>
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

namespace {

constexpr int kData = 0x0;
constexpr int kHeaders = 0x1;
constexpr int kResetStream = 0x3;
constexpr int kSettings = 0x4;
constexpr int kWindowUpdate = 0x8;
constexpr int kContinuation = 0x9;
constexpr int kAck = 0x1;
constexpr int kEndStream = 0x1;

bool EndsRequest(int type, int flags) {
  return (type == kData || type == kHeaders) && (flags & kEndStream) != 0;
}

}  // namespace

bool Http2ClientFrames::FrameHeader::Fill(absl::string_view* bytes) {
  const size_t n = std::min(sizeof(bytes_) - filled_, bytes->size());
  std::memcpy(bytes_ + filled_, bytes->data(), n);
  filled_ += static_cast<int>(n);
  bytes->remove_prefix(n);
  if (filled_ < static_cast<int>(sizeof(bytes_))) return false;
  filled_ = 0;
  return true;
}

absl::Status Http2ClientFrames::Consume(absl::string_view bytes, std::string* out, absl::Time now) {
  // SETTINGS (type 4) with the ACK flag, no payload, on stream 0.
  static constexpr char kSettingsAck[9] = {0, 0, 0, 4, 1, 0, 0, 0, 0};
  while (error_.ok() && !bytes.empty()) {
    if (preface_left_ > 0) {
      const int64_t n = std::min<int64_t>(preface_left_, static_cast<int64_t>(bytes.size()));
      out->append(bytes.data(), static_cast<size_t>(n));
      preface_left_ -= n;
      bytes.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (payload_left_ > 0) {
      const int64_t n = std::min<int64_t>(payload_left_, static_cast<int64_t>(bytes.size()));
      const absl::string_view piece = bytes.substr(0, static_cast<size_t>(n));
      if (destination_ == Destination::kGrpc) {
        out->append(piece.data(), piece.size());
      } else if (destination_ == Destination::kWaiting) {
        waiting_.back().bytes.append(piece.data(), piece.size());
        waiting_bytes_ += n;
      }
      payload_left_ -= n;
      bytes.remove_prefix(static_cast<size_t>(n));
    } else {
      if (!header_.Fill(&bytes)) continue;
      error_ = OnFrameHeader(out, now);
      if (!error_.ok()) break;
    }
    if (payload_left_ > 0) continue;
    // The frame is complete.
    if (destination_ == Destination::kWaiting) waiting_.back().complete = true;
    destination_ = Destination::kGrpc;
    if (ack_pending_) {
      out->append(kSettingsAck, sizeof(kSettingsAck));
      ack_pending_ = false;
    }
    for (; !pending_admits_.empty(); pending_admits_.pop_front()) Release(out, now);
    for (const uint32_t stream_id : std::exchange(pending_cancels_, {})) Cancel(stream_id, out);
  }
  return error_;
}

absl::Status Http2ClientFrames::OnFrameHeader(std::string* out, absl::Time now) {
  const int64_t length = header_.length();
  const int type = header_.type();
  const int flags = header_.flags();
  const uint32_t stream_id = header_.stream_id();
  payload_left_ = length;
  if (type == kSettings && (flags & kAck) == 0 && !first_settings_seen_) {
    first_settings_seen_ = true;
    ack_pending_ = true;
  }
  if (type == kSettings && (flags & kAck) != 0 && length == 0 && first_settings_seen_ &&
      !client_acked_) {
    // Already given to gRPC right after the client's first SETTINGS.
    client_acked_ = true;
    destination_ = Destination::kDropped;
    return absl::OkStatus();
  }
  if (type == kHeaders && stream_id % 2 == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP/2 HEADERS on stream ", stream_id,
                     ": expected an odd stream id, as a client's streams are (RFC 9113 5.1.1)"));
  }
  const bool opens_stream = type == kHeaders && stream_id > last_stream_id_;
  if (type == kHeaders || type == kResetStream) {
    if (now - window_start_ >= absl::Seconds(1)) {
      window_start_ = now;
      window_opened_ = 0;
      window_resets_ = 0;
    }
    if (opens_stream) {
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
  const bool needs_slot = NeedsSlot(type, flags, stream_id, opens_stream);
  destination_ = Route(type, stream_id, needs_slot);
  const absl::string_view header = header_.bytes();
  if (destination_ == Destination::kGrpc) {
    out->append(header.data(), header.size());
    OnPassed(type, flags, stream_id, opens_stream, needs_slot, now);
  } else {
    waiting_.push_back(WaitingFrame{stream_id, type, flags, opens_stream, needs_slot,
                                    /*complete=*/false, std::string(header)});
    waiting_bytes_ += static_cast<int64_t>(header.size());
    if (needs_slot) ++waiting_for_slots_;
    ++waiting_frames_of_stream_[stream_id];
  }
  return absl::OkStatus();
}

bool Http2ClientFrames::NeedsSlot(int type, int flags, uint32_t stream_id,
                                  bool opens_stream) const {
  if (opens_stream) return true;
  // The end of a request on a stream gRPC has, which holds no slot (its slot went by age): the
  // call's work begins. Not when frames of the stream wait: it then ends with them, after the
  // frame that waits for its slot.
  return EndsRequest(type, flags) && stream_id <= last_passed_stream_id_ &&
         !slot_streams_.contains(stream_id) && !waiting_frames_of_stream_.contains(stream_id);
}

Http2ClientFrames::Destination Http2ClientFrames::Route(int type, uint32_t stream_id,
                                                        bool needs_slot) {
  if (waiting_.empty()) {
    return !needs_slot || admit_ == nullptr || admit_() ? Destination::kGrpc
                                                        : Destination::kWaiting;
  }
  if (needs_slot) return Destination::kWaiting;
  // What gRPC needs to finish the streams it has passes the waiting ones: the connection's own
  // frames, window updates (they concern what gRPC sends, whatever the client's frames around
  // them), and the frames of streams already passed on with nothing of theirs waiting. Not header
  // blocks: gRPC must read them in the order sent.
  if (stream_id == 0) return Destination::kGrpc;
  if (stream_id > last_passed_stream_id_) return Destination::kWaiting;
  if (type == kWindowUpdate) return Destination::kGrpc;
  if (type != kHeaders && type != kContinuation && !waiting_frames_of_stream_.contains(stream_id)) {
    return Destination::kGrpc;
  }
  return Destination::kWaiting;
}

void Http2ClientFrames::OnPassed(int type, int flags, uint32_t stream_id, bool opens_stream,
                                 bool needs_slot, absl::Time now) {
  if (opens_stream) {
    last_passed_stream_id_ = stream_id;
    slot_streams_[stream_id] = Slot{now, EndsRequest(type, flags)};
    if (!EndsRequest(type, flags)) open_requests_.insert(stream_id);
  } else if (type == kResetStream) {
    if (slot_streams_.erase(stream_id) > 0) ++freed_slots_;
    open_requests_.erase(stream_id);
  } else if (EndsRequest(type, flags)) {
    open_requests_.erase(stream_id);
    // The call's work begins now: the stream's slot, if it still has one, lasts as long as a
    // request's from here.
    if (auto it = slot_streams_.find(stream_id); it != slot_streams_.end()) {
      it->second = Slot{now, /*request_complete=*/true};
    } else if (needs_slot) {
      slot_streams_[stream_id] = Slot{now, /*request_complete=*/true};
    }
  }
}

void Http2ClientFrames::Admit(std::string* out, absl::Time now) {
  if (destination_ == Destination::kGrpc && payload_left_ > 0) {
    // Half of a frame is in gRPC's hands: the waiting frames follow it whole.
    pending_admits_.push_back(now);
    return;
  }
  Release(out, now);
}

void Http2ClientFrames::Release(std::string* out, absl::Time now) {
  bool first = true;
  while (!waiting_.empty() && (first || !waiting_.front().needs_slot)) {
    first = false;
    WaitingFrame& frame = waiting_.front();
    out->append(frame.bytes);
    waiting_bytes_ -= static_cast<int64_t>(frame.bytes.size());
    if (frame.needs_slot) --waiting_for_slots_;
    if (auto it = waiting_frames_of_stream_.find(frame.stream_id); --it->second == 0) {
      waiting_frames_of_stream_.erase(it);
    }
    OnPassed(frame.type, frame.flags, frame.stream_id, frame.opens_stream, frame.needs_slot, now);
    const bool complete = frame.complete;
    waiting_.pop_front();
    if (!complete) {
      // The frame still arriving is the last one waiting: the rest of it goes straight on.
      destination_ = Destination::kGrpc;
      break;
    }
  }
}

void Http2ClientFrames::ConsumeServer(absl::string_view bytes) {
  while (!bytes.empty()) {
    if (server_payload_left_ > 0) {
      const int64_t n = std::min<int64_t>(server_payload_left_, static_cast<int64_t>(bytes.size()));
      server_payload_left_ -= n;
      bytes.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (!server_header_.Fill(&bytes)) continue;
    server_payload_left_ = server_header_.length();
    const int type = server_header_.type();
    const uint32_t stream_id = server_header_.stream_id();
    if ((type == kHeaders || type == kResetStream) && slot_streams_.erase(stream_id) > 0) {
      ++freed_slots_;
    }
    // gRPC has ended the stream (trailers, or a reset): what the client still sends on it is
    // dropped by gRPC.
    if (type == kResetStream || (type == kHeaders && (server_header_.flags() & kEndStream) != 0)) {
      open_requests_.erase(stream_id);
    }
  }
}

void Http2ClientFrames::Cancel(uint32_t stream_id, std::string* out) {
  if (!open_requests_.contains(stream_id)) return;
  if (destination_ == Destination::kGrpc && payload_left_ > 0) {
    pending_cancels_.push_back(stream_id);
    return;
  }
  // RST_STREAM (type 3) with the error code CANCEL (0x8).
  const char reset[13] = {0,
                          0,
                          4,
                          3,
                          0,
                          static_cast<char>((stream_id >> 24) & 0x7f),
                          static_cast<char>(stream_id >> 16),
                          static_cast<char>(stream_id >> 8),
                          static_cast<char>(stream_id),
                          0,
                          0,
                          0,
                          8};
  out->append(reset, sizeof(reset));
  open_requests_.erase(stream_id);
  if (slot_streams_.erase(stream_id) > 0) ++freed_slots_;
}

int Http2ClientFrames::TakeFreedSlots(absl::Time now) {
  while (!pending_admits_.empty() &&
         pending_admits_.front() + limits_.open_stream_slot_age <= now) {
    pending_admits_.pop_front();
    ++freed_slots_;
  }
  for (auto it = slot_streams_.begin(); it != slot_streams_.end();) {
    if (it->second.since + AgeOf(it->second) <= now) {
      it = slot_streams_.erase(it);
      ++freed_slots_;
    } else {
      ++it;
    }
  }
  return std::exchange(freed_slots_, 0);
}

int Http2ClientFrames::ReleaseAllSlots() {
  const int held = SlotsHeld();
  slot_streams_.clear();
  pending_admits_.clear();
  return std::exchange(freed_slots_, 0) + held;
}

absl::Time Http2ClientFrames::NextSlotExpiry() const {
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [stream_id, slot] : slot_streams_) {
    next = std::min(next, slot.since + AgeOf(slot));
  }
  if (!pending_admits_.empty()) {
    next = std::min(next, pending_admits_.front() + limits_.open_stream_slot_age);
  }
  return next;
}

namespace {

// A connection with a stream waiting for a slot.
class SlotWaiter {
 public:
  virtual ~SlotWaiter() = default;
  // A slot is now the waiter's (thread-safe; called without StreamSlots' lock held).
  virtual void Grant() = 0;
  // True once the waiter will take no more slots (its client or gRPC has gone).
  virtual bool Gone() const = 0;
};

// GrpcFront::Options::stream_slots, shared by every connection, and the connections waiting for
// one, each served in turn.
class StreamSlots {
 public:
  explicit StreamSlots(int slots) : free_(slots) {}

  // Takes a slot; false when none is free or connections wait for one (they come first).
  bool TryTake() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_ == 0 || !waiting_.empty()) return false;
    --free_;
    return true;
  }

  // `waiter` is granted a slot after those already waiting.
  void Wait(std::weak_ptr<SlotWaiter> waiter) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      waiting_.push_back(std::move(waiter));
    }
    Give(0);
  }

  // Frees `slots`, and grants the free ones to the waiters.
  void Give(int slots) {
    std::vector<std::shared_ptr<SlotWaiter>> granted;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      free_ += slots;
      while (free_ > 0 && !waiting_.empty()) {
        std::shared_ptr<SlotWaiter> waiter = waiting_.front().lock();
        waiting_.pop_front();
        if (waiter == nullptr || waiter->Gone()) continue;
        --free_;
        granted.push_back(std::move(waiter));
      }
    }
    for (const std::shared_ptr<SlotWaiter>& waiter : granted) waiter->Grant();
  }

 private:
  std::mutex mutex_;
  int free_;
  std::deque<std::weak_ptr<SlotWaiter>> waiting_;
};

// GrpcFront::Options::max_open_requests, over every connection: the open requests in the order
// they were handed to gRPC, the oldest cancelled when there are more.
class OpenRequests {
 public:
  // A connection whose open requests are counted here.
  class Holder {
   public:
    virtual ~Holder() = default;
    // Cancel `stream_id` in gRPC (thread-safe; called without OpenRequests' lock held).
    virtual void Evict(uint32_t stream_id) = 0;
  };
  // Set once a request is no longer counted: ended by its connection, or evicted.
  using Ended = std::shared_ptr<std::atomic<bool>>;

  explicit OpenRequests(int max) : max_(max) {}

  // Counts a new open request of `holder`, cancelling the oldest ones past the maximum.
  Ended Add(std::weak_ptr<Holder> holder, uint32_t stream_id) {
    Ended ended = std::make_shared<std::atomic<bool>>(false);
    std::vector<Entry> evicted;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      entries_.push_back(Entry{std::move(holder), stream_id, ended});
      ++open_;
      // Entries of requests already ended go too, so that the queue holds little more than the
      // open requests.
      while (!entries_.empty() && (entries_.front().ended->load() || open_ > max_)) {
        Entry entry = std::move(entries_.front());
        entries_.pop_front();
        if (!entry.ended->exchange(true)) {
          --open_;
          evicted.push_back(std::move(entry));
        }
      }
    }
    for (const Entry& entry : evicted) {
      if (std::shared_ptr<Holder> holder = entry.holder.lock()) holder->Evict(entry.stream_id);
    }
    return ended;
  }

  // The request is no longer open (nothing if it was evicted).
  void End(const Ended& ended) {
    if (ended->exchange(true)) return;
    std::lock_guard<std::mutex> lock(mutex_);
    --open_;
  }

 private:
  struct Entry {
    std::weak_ptr<Holder> holder;
    uint32_t stream_id;
    Ended ended;
  };
  const int max_;
  std::mutex mutex_;
  std::deque<Entry> entries_;
  int open_ = 0;
};

}  // namespace

struct GrpcFront::State {
  explicit State(const Options& options)
      : options(options), slots(options.stream_slots), open_requests(options.max_open_requests) {}

  void Accept();
  template <typename Stream>
  void Serve(Stream client);
  // Hands `fd` to gRPC unless the front has stopped; false (and `fd` closed) if it has.
  bool HandOver(int fd);

  const Options options;
  StreamSlots slots;
  OpenRequests open_requests;
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
                        public std::enable_shared_from_this<FrontConnection<Stream>> {
 public:
  FrontConnection(GrpcFront::State* state, Stream client)
      : state_(state),
        client_(std::move(client)),
        upstream_(TcpOf(client_).get_executor()),
        timer_(TcpOf(client_).get_executor()),
        slot_timer_(TcpOf(client_).get_executor()),
        pause_timer_(TcpOf(client_).get_executor()),
        frames_(state->options.limits,
                [this] { return ClientConnected() && state_->slots.TryTake(); }) {}

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
      self->GiveBackFreedSlots();
    });
  }

  bool Gone() const override { return gone_.load(); }

  auto executor() { return TcpOf(client_).get_executor(); }

  void Evict(uint32_t stream_id) override {
    asio::post(TcpOf(client_).get_executor(), [self = this->shared_from_this(), stream_id] {
      if (self->closed_ || self->grpc_done_) return;
      self->open_requests_.erase(stream_id);
      self->frames_.Cancel(stream_id, &self->to_grpc_);
      self->Flush();
      self->SyncOpenRequests();
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
          self->GiveBackFreedSlots();
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

  // Counts in State::open_requests the open requests frames_ has and this connection has not
  // counted, and ends those it counted that are no longer open. A request that arrives whole in
  // one read is never counted.
  void SyncOpenRequests() {
    if (slots_released_) return;
    const absl::flat_hash_set<uint32_t>& open = frames_.open_requests();
    for (auto it = open_requests_.begin(); it != open_requests_.end();) {
      if (open.contains(it->first)) {
        ++it;
      } else {
        state_->open_requests.End(it->second);
        open_requests_.erase(it++);
      }
    }
    for (const uint32_t stream_id : open) {
      if (!open_requests_.contains(stream_id)) {
        open_requests_[stream_id] = state_->open_requests.Add(this->weak_from_this(), stream_id);
      }
    }
  }

  // Once gRPC or the connection is done: every slot held goes back, and no request is open.
  void ReleaseSlots() {
    gone_ = true;
    if (slots_released_) return;
    slots_released_ = true;
    for (const auto& [stream_id, ended] : open_requests_) state_->open_requests.End(ended);
    open_requests_.clear();
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
    if (grpc_fd_ >= 0) ::close(std::exchange(grpc_fd_, -1));
    ReleaseSlots();
    EndPassing();
    error_code ignored;
    timer_.cancel();
    pause_timer_.cancel();
    TcpOf(client_).close(ignored);
    upstream_.close(ignored);
  }

  GrpcFront::State* const state_;
  Stream client_;
  asio::local::stream_protocol::socket upstream_;
  asio::steady_timer timer_;
  asio::steady_timer slot_timer_;   // the next slot's age (GiveBackFreedSlots)
  asio::steady_timer pause_timer_;  // while the client is not read (MaybeReadClient)
  absl::Time slot_timer_expiry_ = absl::InfiniteFuture();  // when slot_timer_ fires, if set
  Http2ClientFrames frames_;
  std::string to_grpc_;        // what gRPC is to receive next (Http2ClientFrames)
  std::string being_written_;  // what gRPC is receiving
  std::array<char, kClientChunkBytes> from_client_;
  std::unique_ptr<char[]> from_grpc_;  // while gRPC has bytes to pass on
  std::atomic<bool> gone_{false};      // no more slots wanted (SlotWaiter::Gone)
  int grpc_fd_ = -1;                   // gRPC's end of the socket pair until handed over
  // The open requests counted in State::open_requests (SyncOpenRequests).
  absl::flat_hash_map<uint32_t, OpenRequests::Ended> open_requests_;
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
  // On the connection's own strand, as every later handler of it: an operation it starts can
  // complete on the other I/O thread at once.
  auto connection = std::make_shared<FrontConnection<Stream>>(this, std::move(client));
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

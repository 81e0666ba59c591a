// The HTTP/2 frames a client sends on the gRPC port, checked and paced on their way to gRPC
// (server/grpc_front.h, the listener, feeds them through Http2ClientFrames).
#ifndef ATTNSCOPE_SERVER_HTTP2_FRAMES_H_
#define ATTNSCOPE_SERVER_HTTP2_FRAMES_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

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
// - HEADERS on stream 0 or an even stream ends the connection (RFC 9113 5.1.1: a client's streams
//   are odd; gRPC 1.51 ignores such frames, which would hold slots for nothing);
// - a header block (a HEADERS frame and its CONTINUATION frames, compressed) longer than
//   Limits::max_header_block_bytes ends the connection before gRPC has buffered it;
// - so do more than Limits::max_resets_per_second streams reset by the client (RST_STREAM) in a
//   second, when they are more than half of the streams it opened in that second: gRPC 1.51 has no
//   limit of its own on "rapid reset" (CVE-2023-44487), and two connections opening and resetting
//   170,000 streams in 10 s grew the server by 3.8 GB and kept a call from another client waiting
//   17 s. The proportion is Envoy's rule for premature resets: a busy client whose calls often
//   reach their deadline (each a reset) stays connected;
// - the frames that give gRPC work, a new stream's HEADERS and the frame that ends a request
//   (END_STREAM) of a stream that holds no slot, each need a slot (GrpcFront's stream slots) while
//   the `admit` callback refuses one; such a frame waits in the front until Admit, with every
//   frame after it but those gRPC needs to finish what it already has (frames on stream 0, and
//   the frames other than header blocks of streams it has with nothing of theirs waiting). So
//   gRPC is never handed more work than it gets through in a moment. Frames are never reordered
//   within a stream, and header blocks reach gRPC in the order sent (RFC 7541: each may change
//   the HPACK table the next one is read with).
// It also reads what gRPC sends back (ConsumeServer), to know which streams gRPC has answered.
class Http2ClientFrames {
 public:
  struct Limits {
    // gRPC clients send a few hundred bytes. gRPC's own limit on decoded metadata is set to this
    // bound too (server/server.cc).
    int64_t max_header_block_bytes = 64 << 10;
    // A client cancels a call with RST_STREAM: 200 in one second on one connection, most of its
    // calls, is far more than a client cancels, and far fewer than a flood.
    int max_resets_per_second = 200;
    // How long a stream holds its slot when gRPC has not answered it (its first HEADERS or an
    // RST_STREAM): once its request is complete, a call's work has begun and ends in an answer
    // soon, or is a call running (bounded by --max_concurrent_requests); before that, gRPC has
    // only made the call, which it does as soon as it reads the HEADERS, and a client that opens
    // streams and never finishes them must not hold the slots others wait for.
    absl::Duration request_slot_age = absl::Seconds(1);
    absl::Duration open_stream_slot_age = absl::Milliseconds(20);
  };

  // `admit` (may be empty: nothing waits) is asked for each frame that needs a slot while none
  // waits; true when it may reach gRPC now (the caller has counted it against its slots), false to
  // hold it until Admit. Frames that need a slot while another waits wait behind it without
  // asking.
  explicit Http2ClientFrames(Limits limits, std::function<bool()> admit = nullptr)
      : limits_(limits), admit_(std::move(admit)) {}

  // Appends to `out` what gRPC should receive for `bytes`, the next piece of what the client sent,
  // which arrived at `now`. ResourceExhausted naming the limit once a header block is longer than
  // Limits::max_header_block_bytes or resets come faster than the limits allow, InvalidArgument
  // for HEADERS on stream 0 or an even stream; the connection should then be closed (every later
  // call returns the same error).
  absl::Status Consume(absl::string_view bytes, std::string* out, absl::Time now);
  // Whether the 24 bytes of the connection preface have all arrived.
  bool preface_done() const { return preface_left_ == 0; }
  // Whether the client has acknowledged the server's first SETTINGS.
  bool settings_acked() const { return client_acked_; }

  // The oldest frame waiting for a slot may reach gRPC (a slot was taken for it): appends it to
  // `out`, with the frames that waited behind it up to the next one that needs a slot. When a
  // frame that passes is half given to gRPC, that happens at its end instead, in Consume, unless
  // the slot goes by age first (Limits::open_stream_slot_age; the frame then waits for another).
  // Call only while waiting_for_slots() > 0.
  void Admit(std::string* out, absl::Time now);
  // Reads `bytes`, the next piece of what gRPC sends the client: a stream whose first HEADERS
  // (or RST_STREAM) gRPC sends is answered.
  void ConsumeServer(absl::string_view bytes);
  // Frames that wait for Admit, and the bytes waiting with them.
  int waiting_for_slots() const {
    return waiting_for_slots_ - static_cast<int>(pending_admits_.size());
  }
  int64_t waiting_bytes() const { return waiting_bytes_; }
  int64_t waiting_frames() const { return static_cast<int64_t>(waiting_.size()); }
  // The slots this connection holds: one for each stream given one (by `admit` or Admit) until
  // gRPC answers it, the client resets it, or its age (Limits) passes.
  int SlotsHeld() const { return static_cast<int>(slot_streams_.size() + pending_admits_.size()); }
  // How many slots were freed since the last call, counting as freed those whose age has passed
  // at `now`.
  int TakeFreedSlots(absl::Time now);
  // Frees every slot this connection holds, and says how many (when it closes).
  int ReleaseAllSlots();
  // When TakeFreedSlots next frees a slot by age; absl::InfiniteFuture() when none is held.
  absl::Time NextSlotExpiry() const;

  // Streams gRPC has whose request the client has not finished (no END_STREAM yet), that neither
  // side has reset and gRPC has not ended, each with the DATA payload bytes of it handed to gRPC
  // so far: gRPC buffers a message until all of it has arrived (up to --max_request_bytes).
  const absl::flat_hash_map<uint32_t, int64_t>& open_requests() const { return open_requests_; }
  // The highest stream id handed to gRPC (what a GOAWAY names as the last one processed).
  uint32_t last_passed_stream_id() const { return last_passed_stream_id_; }
  // Streams gRPC has that neither side has ended (gRPC by its trailers or a reset, the client by
  // a reset): calls under way. A connection without any is idle.
  int live_streams() const { return static_cast<int>(live_streams_.size()); }
  // Whether what gRPC has sent so far (ConsumeServer) ends at the end of a frame, so that a frame
  // of the front's own may follow.
  bool server_at_frame_boundary() const {
    return server_payload_left_ == 0 && !server_header_.partial();
  }
  // Ends an open request in gRPC: appends an RST_STREAM (CANCEL) for it to `out`, so that gRPC
  // drops the call it holds; it is no longer an open request at once. When a frame is half given
  // to gRPC, the reset follows its end (in Consume), unless it is the stream's own DATA frame:
  // gRPC then gets the rest of that frame as zeros and the client's rest is dropped, since a
  // client may never finish it. The client is not told; gRPC answers its next frame on the
  // stream with RST_STREAM. Nothing when `stream_id` is not an open request.
  void Cancel(uint32_t stream_id, std::string* out);

 private:
  // A frame's 9-byte header (RFC 9113 4.1), arriving in pieces.
  class FrameHeader {
   public:
    // Takes what it lacks from the front of `bytes`; true once all 9 bytes are in (and the next
    // call starts the next header).
    bool Fill(absl::string_view* bytes);
    absl::string_view bytes() const {
      return absl::string_view(reinterpret_cast<const char*>(bytes_), sizeof(bytes_));
    }
    int64_t length() const {
      return (int64_t{bytes_[0]} << 16) | (int64_t{bytes_[1]} << 8) | bytes_[2];
    }
    // Some of the header's bytes are in, not all.
    bool partial() const { return filled_ > 0; }
    int type() const { return bytes_[3]; }
    int flags() const { return bytes_[4]; }
    uint32_t stream_id() const {
      return ((uint32_t{bytes_[5]} << 24) | (uint32_t{bytes_[6]} << 16) |
              (uint32_t{bytes_[7]} << 8) | bytes_[8]) &
             0x7fffffffu;
    }

   private:
    unsigned char bytes_[9] = {};
    int filled_ = 0;
  };
  enum class Destination { kGrpc, kWaiting, kDropped };
  struct WaitingFrame {
    uint32_t stream_id;
    int type;
    int flags;
    bool opens_stream;
    bool needs_slot;
    bool complete;
    int64_t length;  // of the payload
    std::string bytes;
  };
  struct Slot {
    absl::Time since;
    bool request_complete;  // the client has ended its request (END_STREAM)
  };

  // Decides on the frame whose header has just arrived in header_: appends it to `out` unless it
  // is the client's first ACK or waits.
  absl::Status OnFrameHeader(std::string* out, absl::Time now);
  // Whether a frame of `type` with `flags` on `stream_id` needs a slot; `opens_stream` when it is
  // a new stream's HEADERS.
  bool NeedsSlot(int type, int flags, uint32_t stream_id, bool opens_stream) const;
  // Where such a frame goes.
  Destination Route(int type, uint32_t stream_id, bool needs_slot);
  // Appends the oldest frame waiting for a slot, and those behind it, to `out` (Admit's work,
  // when it may happen).
  void Release(std::string* out, absl::Time now);
  // Appends an RST_STREAM (CANCEL) for `stream_id` to `out`.
  static void Reset(uint32_t stream_id, std::string* out);
  // Notes that a frame has been given to gRPC.
  void OnPassed(int type, int flags, uint32_t stream_id, int64_t length, bool opens_stream,
                bool needs_slot, absl::Time now);
  absl::Duration AgeOf(const Slot& slot) const {
    return slot.request_complete ? limits_.request_slot_age : limits_.open_stream_slot_age;
  }

  const Limits limits_;
  absl::Status error_;
  int64_t preface_left_ = 24;
  FrameHeader header_;
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

  std::function<bool()> admit_;
  Destination destination_ = Destination::kGrpc;  // of the frame whose payload is arriving
  std::deque<WaitingFrame> waiting_;
  int waiting_for_slots_ = 0;  // frames in waiting_ that need a slot
  int64_t waiting_bytes_ = 0;
  absl::flat_hash_map<uint32_t, int> waiting_frames_of_stream_;
  // When each Admit call still to carry out at the end of the frame passing now came: a slot
  // that goes by age as an open stream's does, so that a client that never finishes a frame holds
  // none for long.
  std::deque<absl::Time> pending_admits_;
  uint32_t last_passed_stream_id_ = 0;
  // Streams holding a slot, by id, with since when.
  absl::btree_map<uint32_t, Slot> slot_streams_;
  absl::flat_hash_map<uint32_t, int64_t> open_requests_;
  absl::flat_hash_set<uint32_t> live_streams_;
  std::vector<uint32_t> pending_cancels_;  // resets to send at the end of the frame (Cancel)
  int freed_slots_ = 0;
  // The server's frames, as the client's above: a frame header in pieces, then its payload.
  FrameHeader server_header_;
  int64_t server_payload_left_ = 0;
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_HTTP2_FRAMES_H_

#include "server/http2_frames.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace attnscope::server {

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
    for (const uint32_t stream_id : std::exchange(pending_cancels_, {})) Reset(stream_id, out);
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
    OnPassed(type, flags, stream_id, length, opens_stream, needs_slot, now);
  } else {
    waiting_.push_back(WaitingFrame{stream_id, type, flags, opens_stream, needs_slot,
                                    /*complete=*/false, length, std::string(header)});
    waiting_bytes_ += static_cast<int64_t>(header.size());
    if (needs_slot) ++waiting_for_slots_;
    ++waiting_frames_of_stream_[stream_id];
  }
  return absl::OkStatus();
}

bool Http2ClientFrames::NeedsSlot(int type, int flags, uint32_t stream_id,
                                  bool opens_stream) const {
  if (opens_stream) return true;
  // The end of an unfinished request gRPC holds, on a stream that holds no slot (its slot went by
  // age): the call's work begins. Not the end of a stream gRPC no longer has (it ignores that,
  // and would never answer to free a slot), nor when frames of the stream wait: it then ends with
  // them, after the frame that waits for its slot.
  return EndsRequest(type, flags) && open_requests_.contains(stream_id) &&
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

void Http2ClientFrames::OnPassed(int type, int flags, uint32_t stream_id, int64_t length,
                                 bool opens_stream, bool needs_slot, absl::Time now) {
  if (opens_stream) {
    last_passed_stream_id_ = stream_id;
    slot_streams_[stream_id] = Slot{now, EndsRequest(type, flags)};
    if (!EndsRequest(type, flags)) open_requests_.emplace(stream_id, 0);
    live_streams_.insert(stream_id);
  } else if (type == kResetStream) {
    if (slot_streams_.erase(stream_id) > 0) ++freed_slots_;
    open_requests_.erase(stream_id);
    live_streams_.erase(stream_id);
  } else if (type == kData && !EndsRequest(type, flags)) {
    if (auto it = open_requests_.find(stream_id); it != open_requests_.end()) it->second += length;
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
    OnPassed(frame.type, frame.flags, frame.stream_id, frame.length, frame.opens_stream,
             frame.needs_slot, now);
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
      live_streams_.erase(stream_id);
    }
  }
}

void Http2ClientFrames::Cancel(uint32_t stream_id, std::string* out) {
  if (!open_requests_.contains(stream_id)) return;
  open_requests_.erase(stream_id);
  live_streams_.erase(stream_id);
  if (slot_streams_.erase(stream_id) > 0) ++freed_slots_;
  if (destination_ == Destination::kGrpc && payload_left_ > 0) {
    if (header_.type() != kData || header_.stream_id() != stream_id) {
      // Another stream's frame is half given to gRPC: the reset follows its end.
      pending_cancels_.push_back(stream_id);
      return;
    }
    // The stream's own DATA frame, which a client may leave unfinished for as long as it likes
    // while gRPC holds what came of it: gRPC gets the rest as zeros (message bytes of a call it
    // drops next, or padding), the client's rest is dropped.
    out->append(static_cast<size_t>(payload_left_), '\0');
    destination_ = Destination::kDropped;
  }
  Reset(stream_id, out);
}

void Http2ClientFrames::Reset(uint32_t stream_id, std::string* out) {
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

}  // namespace attnscope::server

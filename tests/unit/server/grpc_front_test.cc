#include "server/grpc_front.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace attnscope::server {
namespace {

constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr int kHeaders = 0x1;
constexpr int kSettings = 0x4;
constexpr int kContinuation = 0x9;
constexpr int kEndHeaders = 0x4;
constexpr int kAck = 0x1;

// An HTTP/2 frame (RFC 9113 4.1) with `payload_bytes` bytes of payload.
std::string Frame(int type, int flags, uint32_t stream_id, int64_t payload_bytes) {
  std::string frame = {static_cast<char>(payload_bytes >> 16),
                       static_cast<char>(payload_bytes >> 8),
                       static_cast<char>(payload_bytes),
                       static_cast<char>(type),
                       static_cast<char>(flags),
                       static_cast<char>(stream_id >> 24),
                       static_cast<char>(stream_id >> 16),
                       static_cast<char>(stream_id >> 8),
                       static_cast<char>(stream_id)};
  frame.append(static_cast<size_t>(payload_bytes), 'x');
  return frame;
}

std::string Start() { return std::string(kPreface) + Frame(kSettings, 0, 0, 6); }

// Feeds `bytes` in pieces of `piece` bytes; the first error, or OK.
absl::Status FeedInPieces(Http2ClientFrameCheck& check, const std::string& bytes, size_t piece) {
  absl::Status status;
  for (size_t i = 0; i < bytes.size() && status.ok(); i += piece) {
    status = check.Consume(absl::string_view(bytes).substr(i, piece));
  }
  return status;
}

Http2ClientFrameCheck::Limits SmallLimits() {
  Http2ClientFrameCheck::Limits limits;
  limits.max_header_block_bytes = 1000;
  limits.max_streams_before_settings_ack = 3;
  return limits;
}

TEST(Http2ClientFrameCheckTest, AHeaderBlockOverTheLimitIsRefusedInAnyPieces) {
  // 400 + 400 bytes, then a CONTINUATION that takes the block to 1,200.
  const std::string within = Start() + Frame(kHeaders, 0, 1, 400) + Frame(kContinuation, 0, 1, 400);
  const std::string over = within + Frame(kContinuation, kEndHeaders, 1, 400);
  for (const size_t piece : {size_t{1}, size_t{7}, size_t{4096}}) {
    SCOPED_TRACE(piece);
    Http2ClientFrameCheck check(SmallLimits());
    EXPECT_TRUE(FeedInPieces(check, within, piece).ok());
    const absl::Status refused = FeedInPieces(check, over.substr(within.size()), piece);
    EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(refused.message().find("header block"), std::string::npos) << refused;
    // And it stays refused.
    EXPECT_FALSE(check.Consume(Frame(kSettings, kAck, 0, 0)).ok());
  }
}

TEST(Http2ClientFrameCheckTest, EachHeaderBlockHasItsOwnLimit) {
  Http2ClientFrameCheck check(SmallLimits());
  std::string bytes = Start() + Frame(kSettings, kAck, 0, 0);
  for (uint32_t stream = 1; stream < 40; stream += 2) {
    bytes += Frame(kHeaders, 0, stream, 600) + Frame(kContinuation, kEndHeaders, stream, 300);
  }
  EXPECT_TRUE(check.Consume(bytes).ok());
}

TEST(Http2ClientFrameCheckTest, StreamsBeyondTheLimitBeforeTheSettingsAckAreRefused) {
  Http2ClientFrameCheck check(SmallLimits());
  std::string three = Start();
  for (uint32_t stream = 1; stream <= 5; stream += 2) {
    three += Frame(kHeaders, kEndHeaders, stream, 50);
  }
  EXPECT_TRUE(FeedInPieces(check, three, 5).ok());
  // A second HEADERS on an open stream (trailers) opens nothing.
  EXPECT_TRUE(check.Consume(Frame(kHeaders, kEndHeaders, 5, 50)).ok());
  const absl::Status refused = check.Consume(Frame(kHeaders, kEndHeaders, 7, 50));
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("acknowledge"), std::string::npos) << refused;
}

TEST(Http2ClientFrameCheckTest, AfterTheSettingsAckStreamsAreLeftToGrpc) {
  Http2ClientFrameCheck check(SmallLimits());
  std::string bytes = Start() + Frame(kHeaders, kEndHeaders, 1, 50) + Frame(kSettings, kAck, 0, 0);
  for (uint32_t stream = 3; stream < 2001; stream += 2) {
    bytes += Frame(kHeaders, kEndHeaders, stream, 50);
  }
  EXPECT_TRUE(FeedInPieces(check, bytes, 1000).ok());
}

}  // namespace
}  // namespace attnscope::server

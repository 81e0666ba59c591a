#include "server/http2_frames.h"

#include <cstdint>
#include <functional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace attnscope::server {
namespace {

constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr int kData = 0x0;
constexpr int kHeaders = 0x1;
constexpr int kSettings = 0x4;
constexpr int kPing = 0x6;
constexpr int kWindowUpdate = 0x8;
constexpr int kContinuation = 0x9;
constexpr int kEndStream = 0x1;
constexpr int kEndHeaders = 0x4;
constexpr int kAck = 0x1;
constexpr int kResetStream = 0x3;
const absl::Time kNow = absl::FromUnixSeconds(1'000'000'000);

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

const std::string kSettingsAck = Frame(kSettings, kAck, 0, 0);

std::string Start() { return std::string(kPreface) + Frame(kSettings, 0, 0, 12); }

// Feeds `bytes` in pieces of `piece` bytes into `frames`, appending what gRPC gets to `out`; the
// first error, or OK.
absl::Status FeedInPieces(Http2ClientFrames& frames, const std::string& bytes, size_t piece,
                          std::string* out) {
  absl::Status status;
  for (size_t i = 0; i < bytes.size() && status.ok(); i += piece) {
    status = frames.Consume(absl::string_view(bytes).substr(i, piece), out, kNow);
  }
  return status;
}

Http2ClientFrames::Limits SmallLimits() {
  Http2ClientFrames::Limits limits;
  limits.max_header_block_bytes = 1000;
  return limits;
}

TEST(Http2ClientFramesTest, GrpcGetsTheAckRightAfterTheFirstSettingsAndNotTheClientsOwn) {
  const std::string headers = Frame(kHeaders, kEndHeaders, 1, 50);
  const std::string ping = Frame(kPing, 0, 0, 8);
  // The client opens a stream before it acknowledges, then acknowledges, then acknowledges a
  // later SETTINGS of the server's.
  const std::string client = Start() + headers + kSettingsAck + ping + kSettingsAck;
  const std::string expected = Start() + kSettingsAck + headers + ping + kSettingsAck;
  for (const size_t piece : {size_t{1}, size_t{5}, size_t{9}, size_t{4096}}) {
    SCOPED_TRACE(piece);
    Http2ClientFrames frames(SmallLimits());
    std::string out;
    ASSERT_TRUE(FeedInPieces(frames, client.substr(0, Start().size()), piece, &out).ok());
    EXPECT_FALSE(frames.settings_acked());
    ASSERT_TRUE(FeedInPieces(frames, client.substr(Start().size()), piece, &out).ok());
    EXPECT_TRUE(frames.settings_acked());
    EXPECT_EQ(out, expected);
  }
}

TEST(Http2ClientFramesTest, AnEmptyFirstSettingsIsAcknowledgedToo) {
  Http2ClientFrames frames(SmallLimits());
  std::string out;
  const std::string start = std::string(kPreface) + Frame(kSettings, 0, 0, 0);
  ASSERT_TRUE(frames.Consume(start, &out, kNow).ok());
  EXPECT_EQ(out, start + kSettingsAck);
}

TEST(Http2ClientFramesTest, SaysWhenThePrefaceHasArrived) {
  Http2ClientFrames frames(SmallLimits());
  std::string out;
  EXPECT_TRUE(frames.Consume(absl::string_view(kPreface, 23), &out, kNow).ok());
  EXPECT_FALSE(frames.preface_done());
  EXPECT_TRUE(frames.Consume(absl::string_view(kPreface + 23, 1), &out, kNow).ok());
  EXPECT_TRUE(frames.preface_done());
  EXPECT_EQ(out, kPreface);
}

TEST(Http2ClientFramesTest, AHeaderBlockOverTheLimitIsRefusedInAnyPieces) {
  // 400 + 400 bytes, then a CONTINUATION that takes the block to 1,200.
  const std::string within = Start() + Frame(kHeaders, 0, 1, 400) + Frame(kContinuation, 0, 1, 400);
  const std::string over = within + Frame(kContinuation, kEndHeaders, 1, 400);
  for (const size_t piece : {size_t{1}, size_t{7}, size_t{4096}}) {
    SCOPED_TRACE(piece);
    Http2ClientFrames frames(SmallLimits());
    std::string out;
    EXPECT_TRUE(FeedInPieces(frames, within, piece, &out).ok());
    const absl::Status refused = FeedInPieces(frames, over.substr(within.size()), piece, &out);
    EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_NE(refused.message().find("header block"), std::string::npos) << refused;
    // And it stays refused.
    EXPECT_FALSE(frames.Consume(kSettingsAck, &out, kNow).ok());
  }
}

TEST(Http2ClientFramesTest, EachHeaderBlockHasItsOwnLimit) {
  Http2ClientFrames frames(SmallLimits());
  std::string bytes = Start() + kSettingsAck;
  for (uint32_t stream = 1; stream < 40; stream += 2) {
    bytes += Frame(kHeaders, 0, stream, 600) + Frame(kContinuation, kEndHeaders, stream, 300);
  }
  std::string out;
  EXPECT_TRUE(frames.Consume(bytes, &out, kNow).ok());
}

// Opens `opened` streams from *next_stream on (HEADERS) and resets the first `resets` of them.
std::string OpenAndReset(uint32_t* next_stream, int opened, int resets) {
  std::string bytes;
  const uint32_t first = *next_stream;
  for (int i = 0; i < opened; ++i, *next_stream += 2) {
    bytes += Frame(kHeaders, kEndHeaders, *next_stream, 20);
  }
  for (int i = 0; i < resets; ++i) bytes += Frame(kResetStream, 0, first + 2 * i, 4);
  return bytes;
}

Http2ClientFrames::Limits ResetLimits() {
  Http2ClientFrames::Limits limits;
  limits.max_resets_per_second = 10;
  return limits;
}

TEST(Http2ClientFramesTest, MostStreamsResetWithinASecondAreRefused) {
  Http2ClientFrames frames(ResetLimits());
  std::string out;
  ASSERT_TRUE(frames.Consume(Start() + kSettingsAck, &out, kNow).ok());
  uint32_t stream = 1;
  ASSERT_TRUE(frames.Consume(OpenAndReset(&stream, 20, 10), &out, kNow).ok());
  const absl::Status refused = frames.Consume(OpenAndReset(&stream, 0, 1), &out, kNow);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find("reset"), std::string::npos) << refused;
}

TEST(Http2ClientFramesTest, ResetsOfFewerThanHalfTheStreamsOrSpreadOverSecondsGoOn) {
  Http2ClientFrames frames(ResetLimits());
  std::string out;
  ASSERT_TRUE(frames.Consume(Start() + kSettingsAck, &out, kNow).ok());
  uint32_t stream = 1;
  // A busy client: 100 calls a second, 40 of them reset.
  for (int second = 0; second < 5; ++second) {
    ASSERT_TRUE(
        frames.Consume(OpenAndReset(&stream, 100, 40), &out, kNow + absl::Seconds(second)).ok())
        << second;
  }
  // At the limit: 10 opened and reset every second.
  for (int second = 5; second < 100; ++second) {
    ASSERT_TRUE(
        frames.Consume(OpenAndReset(&stream, 10, 10), &out, kNow + absl::Seconds(second)).ok())
        << second;
  }
}

// An `admit` callback that lets `slots` streams through, then refuses.
std::function<bool()> AdmitFirst(int slots) {
  return [slots]() mutable { return slots-- > 0; };
}

TEST(Http2ClientFramesTest, StreamsBeyondTheSlotsWaitWithTheirFramesUntilAdmitted) {
  const std::string h1 = Frame(kHeaders, kEndHeaders, 1, 30);
  const std::string d1 = Frame(kData, kEndStream, 1, 20);
  const std::string h3 = Frame(kHeaders, kEndHeaders, 3, 30);
  const std::string d3 = Frame(kData, kEndStream, 3, 20);
  const std::string h5 = Frame(kHeaders, kEndHeaders, 5, 30);
  const std::string ping = Frame(kPing, 0, 0, 8);
  const std::string window_1 = Frame(kWindowUpdate, 0, 1, 4);
  const std::string reset_1 = Frame(kResetStream, 0, 1, 4);
  const std::string reset_3 = Frame(kResetStream, 0, 3, 4);
  // Stream 1 passes; 3 waits, and 5 behind it. What gRPC needs for stream 1 and the connection
  // passes them; stream 3's own frames wait with it.
  const std::string client =
      Start() + kSettingsAck + h1 + h3 + d1 + d3 + ping + window_1 + h5 + reset_3 + reset_1;
  for (const size_t piece : {size_t{1}, size_t{5}, size_t{9}, size_t{4096}}) {
    SCOPED_TRACE(piece);
    Http2ClientFrames frames(SmallLimits(), AdmitFirst(1));
    std::string out;
    ASSERT_TRUE(FeedInPieces(frames, client, piece, &out).ok());
    EXPECT_EQ(out, Start() + kSettingsAck + h1 + d1 + ping + window_1 + reset_1);
    EXPECT_EQ(frames.waiting_for_slots(), 2);
    EXPECT_EQ(frames.waiting_bytes(), static_cast<int64_t>((h3 + d3 + h5 + reset_3).size()));
    // Stream 1 was reset by the client: its slot is free.
    EXPECT_EQ(frames.SlotsHeld(), 0);
    EXPECT_EQ(frames.TakeFreedSlots(absl::InfinitePast()), 1);

    out.clear();
    frames.Admit(&out, kNow);
    EXPECT_EQ(out, h3 + d3);
    EXPECT_EQ(frames.waiting_for_slots(), 1);
    out.clear();
    frames.Admit(&out, kNow);
    EXPECT_EQ(out, h5 + reset_3);
    EXPECT_EQ(frames.waiting_for_slots(), 0);
    EXPECT_EQ(frames.waiting_bytes(), 0);
    // Stream 3 was reset too; stream 5 holds its slot.
    EXPECT_EQ(frames.SlotsHeld(), 1);
    EXPECT_EQ(frames.TakeFreedSlots(absl::InfinitePast()), 1);
    // Nothing waits: frames pass again.
    out.clear();
    ASSERT_TRUE(frames.Consume(ping, &out, kNow).ok());
    EXPECT_EQ(out, ping);
  }
}

TEST(Http2ClientFramesTest, StreamsOpenedWhileOneWaitsWaitBehindItWithoutAsking) {
  int asked = 0;
  Http2ClientFrames frames(SmallLimits(), [&asked] {
    ++asked;
    return false;
  });
  std::string out;
  ASSERT_TRUE(frames.Consume(Start() + kSettingsAck, &out, kNow).ok());
  const std::string h1 = Frame(kHeaders, 0, 1, 30);
  const std::string c1 = Frame(kContinuation, kEndHeaders, 1, 30);
  const std::string h3 = Frame(kHeaders, kEndHeaders, 3, 30);
  // A later stream's window update waits too: gRPC has not heard of that stream yet.
  const std::string window_3 = Frame(kWindowUpdate, 0, 3, 4);
  out.clear();
  ASSERT_TRUE(frames.Consume(h1 + c1 + h3 + window_3, &out, kNow).ok());
  EXPECT_EQ(out, "");
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(frames.waiting_for_slots(), 2);
  frames.Admit(&out, kNow);
  EXPECT_EQ(out, h1 + c1);
  frames.Admit(&out, kNow);
  EXPECT_EQ(out, h1 + c1 + h3 + window_3);
}

TEST(Http2ClientFramesTest, AFrameHalfGivenToGrpcIsFinishedBeforeTheAdmittedStream) {
  Http2ClientFrames frames(SmallLimits(), AdmitFirst(0));
  std::string out;
  const std::string h1 = Frame(kHeaders, kEndHeaders, 1, 30);
  const std::string ping = Frame(kPing, 0, 0, 8);
  ASSERT_TRUE(frames.Consume(Start() + kSettingsAck + h1 + ping.substr(0, 13), &out, kNow).ok());
  EXPECT_EQ(out, Start() + kSettingsAck + ping.substr(0, 13));
  frames.Admit(&out, kNow);
  EXPECT_EQ(out, Start() + kSettingsAck + ping.substr(0, 13));
  EXPECT_EQ(frames.SlotsHeld(), 1);  // the admitted stream's
  ASSERT_TRUE(frames.Consume(ping.substr(13), &out, kNow).ok());
  EXPECT_EQ(out, Start() + kSettingsAck + ping + h1);
  EXPECT_EQ(frames.waiting_for_slots(), 0);
  EXPECT_EQ(frames.SlotsHeld(), 1);
}

TEST(Http2ClientFramesTest, AWaitingFrameStillArrivingWhenAdmittedGoesOnStraight) {
  Http2ClientFrames frames(SmallLimits(), AdmitFirst(0));
  std::string out;
  ASSERT_TRUE(frames.Consume(Start() + kSettingsAck, &out, kNow).ok());
  const std::string h1 = Frame(kHeaders, kEndHeaders, 1, 30);
  out.clear();
  ASSERT_TRUE(frames.Consume(h1.substr(0, 20), &out, kNow).ok());
  EXPECT_EQ(out, "");
  frames.Admit(&out, kNow);
  EXPECT_EQ(out, h1.substr(0, 20));
  ASSERT_TRUE(frames.Consume(h1.substr(20) + Frame(kPing, 0, 0, 8), &out, kNow).ok());
  EXPECT_EQ(out, h1 + Frame(kPing, 0, 0, 8));
  EXPECT_EQ(frames.waiting_bytes(), 0);
}

TEST(Http2ClientFramesTest, SlotsAreFreedByGrpcsAnswersByAgeAndAllAtTheEnd) {
  Http2ClientFrames frames(SmallLimits(), AdmitFirst(10));
  std::string out;
  ASSERT_TRUE(frames.Consume(Start() + kSettingsAck, &out, kNow).ok());
  // Streams 1, 3 and 5 are whole requests (HEADERS and DATA with END_STREAM); stream 7 is opened
  // and not finished.
  for (uint32_t stream = 1; stream <= 5; stream += 2) {
    const absl::Time passed = kNow + absl::Seconds(stream);
    ASSERT_TRUE(frames
                    .Consume(Frame(kHeaders, kEndHeaders, stream, 30) +
                                 Frame(kData, kEndStream, stream, 20),
                             &out, passed)
                    .ok());
  }
  ASSERT_TRUE(frames.Consume(Frame(kHeaders, kEndHeaders, 7, 30), &out, kNow).ok());
  EXPECT_EQ(frames.SlotsHeld(), 4);
  // An open stream holds its slot for the short age, a whole request for the long one.
  EXPECT_EQ(frames.NextSlotExpiry(), kNow + absl::Milliseconds(20));
  EXPECT_EQ(frames.TakeFreedSlots(kNow + absl::Milliseconds(19)), 0);
  EXPECT_EQ(frames.TakeFreedSlots(kNow + absl::Milliseconds(20)), 1);
  EXPECT_EQ(frames.NextSlotExpiry(), kNow + absl::Seconds(2));
  // gRPC's SETTINGS, stream 3's answer (HEADERS, DATA, trailers) in pieces, and an RST_STREAM
  // ending stream 5.
  const std::string server =
      Frame(kSettings, 0, 0, 18) + Frame(kHeaders, kEndHeaders, 3, 40) + Frame(kData, 0, 3, 100) +
      Frame(kHeaders, kEndHeaders | kEndStream, 3, 20) + Frame(kResetStream, 0, 5, 4);
  for (size_t i = 0; i < server.size(); i += 7) {
    frames.ConsumeServer(absl::string_view(server).substr(i, 7));
  }
  EXPECT_EQ(frames.SlotsHeld(), 1);
  EXPECT_EQ(frames.TakeFreedSlots(kNow), 2);
  EXPECT_EQ(frames.TakeFreedSlots(kNow), 0);
  // Stream 1's request, passed on at kNow + 1 s, is a second old at kNow + 2 s.
  EXPECT_EQ(frames.TakeFreedSlots(kNow + absl::Seconds(2)), 1);
  EXPECT_EQ(frames.NextSlotExpiry(), absl::InfiniteFuture());
  // An answer to a stream whose slot went by age frees nothing more.
  frames.ConsumeServer(Frame(kHeaders, kEndHeaders, 1, 10));
  EXPECT_EQ(frames.TakeFreedSlots(kNow + absl::Seconds(2)), 0);
  EXPECT_EQ(frames.SlotsHeld(), 0);
}

TEST(Http2ClientFramesTest, ARequestEndedAfterItsStreamsSlotWentByAgeNeedsASlot) {
  Http2ClientFrames frames(SmallLimits(), AdmitFirst(1));
  std::string out;
  ASSERT_TRUE(frames.Consume(Start() + kSettingsAck, &out, kNow).ok());
  const std::string h1 = Frame(kHeaders, kEndHeaders, 1, 30);
  const std::string d1 = Frame(kData, 0, 1, 20);
  const std::string end_1 = Frame(kData, kEndStream, 1, 0);
  const std::string window_1 = Frame(kWindowUpdate, 0, 1, 4);
  out.clear();
  ASSERT_TRUE(frames.Consume(h1 + d1, &out, kNow).ok());
  EXPECT_EQ(out, h1 + d1);
  // The open stream's slot goes by age; the client ends its request later: that begins the
  // call's work and waits for a slot (this client's `admit` has none left). A window update for
  // the stream still passes.
  EXPECT_EQ(frames.TakeFreedSlots(kNow + absl::Seconds(1)), 1);
  out.clear();
  ASSERT_TRUE(frames.Consume(end_1 + window_1, &out, kNow + absl::Seconds(1)).ok());
  EXPECT_EQ(out, window_1);
  EXPECT_EQ(frames.waiting_for_slots(), 1);
  out.clear();
  frames.Admit(&out, kNow + absl::Seconds(2));
  EXPECT_EQ(out, end_1);
  EXPECT_EQ(frames.SlotsHeld(), 1);
  EXPECT_EQ(frames.NextSlotExpiry(), kNow + absl::Seconds(3));
  EXPECT_EQ(frames.ReleaseAllSlots(), 1);
}

TEST(Http2ClientFramesTest, OpenRequestsAreThoseGrpcHasAndTheClientHasNotFinished) {
  Http2ClientFrames frames(SmallLimits());
  std::string out;
  ASSERT_TRUE(frames.Consume(Start() + kSettingsAck, &out, kNow).ok());
  // Stream 1 whole, 3 and 5 and 7 opened without their end.
  ASSERT_TRUE(frames
                  .Consume(Frame(kHeaders, kEndHeaders, 1, 30) + Frame(kData, kEndStream, 1, 20) +
                               Frame(kHeaders, kEndHeaders, 3, 30) + Frame(kData, 0, 3, 20) +
                               Frame(kHeaders, kEndHeaders, 5, 30) +
                               Frame(kHeaders, kEndHeaders, 7, 30),
                           &out, kNow)
                  .ok());
  using ::testing::Pair;
  EXPECT_THAT(frames.open_requests(),
              ::testing::UnorderedElementsAre(Pair(3, 20), Pair(5, 0), Pair(7, 0)));
  // More of 3's message: its DATA payload adds up.
  ASSERT_TRUE(frames.Consume(Frame(kData, 0, 3, 100) + Frame(kData, 0, 3, 5), &out, kNow).ok());
  EXPECT_THAT(frames.open_requests(),
              ::testing::UnorderedElementsAre(Pair(3, 125), Pair(5, 0), Pair(7, 0)));
  // The client ends 3, resets 5; gRPC ends 7 with its trailers.
  ASSERT_TRUE(
      frames.Consume(Frame(kData, kEndStream, 3, 0) + Frame(kResetStream, 0, 5, 4), &out, kNow)
          .ok());
  frames.ConsumeServer(Frame(kHeaders, kEndHeaders | kEndStream, 7, 10));
  EXPECT_TRUE(frames.open_requests().empty());
}

TEST(Http2ClientFramesTest, DataThatWaitsCountsInItsOpenRequestOnceGrpcHasIt) {
  Http2ClientFrames frames(SmallLimits(), AdmitFirst(1));
  std::string out;
  // Stream 1 takes the one slot, 3 waits; 1's DATA behind it passes, 3's waits with it.
  ASSERT_TRUE(frames
                  .Consume(Start() + kSettingsAck + Frame(kHeaders, kEndHeaders, 1, 30) +
                               Frame(kHeaders, kEndHeaders, 3, 30) + Frame(kData, 0, 1, 50) +
                               Frame(kData, 0, 3, 70),
                           &out, kNow)
                  .ok());
  using ::testing::Pair;
  EXPECT_THAT(frames.open_requests(), ::testing::UnorderedElementsAre(Pair(1, 50)));
  frames.Admit(&out, kNow);
  EXPECT_THAT(frames.open_requests(), ::testing::UnorderedElementsAre(Pair(1, 50), Pair(3, 70)));
}

TEST(Http2ClientFramesTest, ACancelledOpenRequestIsResetInGrpcBetweenFrames) {
  Http2ClientFrames frames(SmallLimits());
  std::string out;
  const std::string h1 = Frame(kHeaders, kEndHeaders, 1, 30);
  const std::string h3 = Frame(kHeaders, kEndHeaders, 3, 30);
  const std::string d3 = Frame(kData, 0, 3, 40);
  ASSERT_TRUE(frames.Consume(Start() + kSettingsAck + h1 + h3, &out, kNow).ok());
  EXPECT_EQ(frames.SlotsHeld(), 2);
  // Half of stream 3's DATA frame is with gRPC: stream 1's reset follows the frame's end, and 1
  // is no longer an open request at once.
  out.clear();
  ASSERT_TRUE(frames.Consume(d3.substr(0, 20), &out, kNow).ok());
  frames.Cancel(1, &out);
  EXPECT_EQ(out, d3.substr(0, 20));
  EXPECT_THAT(frames.open_requests(), ::testing::ElementsAre(::testing::Pair(3, 40)));
  ASSERT_TRUE(frames.Consume(d3.substr(20), &out, kNow).ok());
  const std::string cancel_1 = {0, 0, 4, 3, 0, 0, 0, 0, 1, 0, 0, 0, 8};
  EXPECT_EQ(out, d3 + cancel_1);
  EXPECT_EQ(frames.SlotsHeld(), 1);
  EXPECT_EQ(frames.TakeFreedSlots(kNow), 1);
  // Once cancelled, or for a stream that is not an open request, nothing more.
  out.clear();
  frames.Cancel(1, &out);
  frames.Cancel(5, &out);
  EXPECT_EQ(out, "");
}

TEST(Http2ClientFramesTest, AStreamCancelledDuringItsOwnDataFrameHasTheRestOfItDropped) {
  Http2ClientFrames frames(SmallLimits());
  std::string out;
  const std::string h1 = Frame(kHeaders, kEndHeaders, 1, 30);
  const std::string d1 = Frame(kData, 0, 1, 40);
  const std::string ping = Frame(kPing, 0, 0, 8);
  ASSERT_TRUE(frames.Consume(Start() + kSettingsAck + h1 + d1.substr(0, 20), &out, kNow).ok());
  // The client may never send the other 29 bytes: gRPC gets them as zeros, then the reset.
  out.clear();
  frames.Cancel(1, &out);
  const std::string cancel_1 = {0, 0, 4, 3, 0, 0, 0, 0, 1, 0, 0, 0, 8};
  EXPECT_EQ(out, std::string(29, '\0') + cancel_1);
  EXPECT_TRUE(frames.open_requests().empty());
  EXPECT_EQ(frames.live_streams(), 0);
  // If they come after all, they are dropped, and what follows them passes.
  out.clear();
  ASSERT_TRUE(frames.Consume(d1.substr(20) + ping, &out, kNow).ok());
  EXPECT_EQ(out, ping);
}

TEST(Http2ClientFramesTest, TheEndOfAStreamGrpcNoLongerHasNeedsNoSlot) {
  Http2ClientFrames frames(SmallLimits(), AdmitFirst(1));
  std::string out;
  ASSERT_TRUE(frames.Consume(Start() + kSettingsAck, &out, kNow).ok());
  const std::string h1 = Frame(kHeaders, kEndHeaders, 1, 30);
  const std::string d1 = Frame(kData, kEndStream, 1, 20);
  out.clear();
  ASSERT_TRUE(frames.Consume(h1 + d1, &out, kNow).ok());
  frames.ConsumeServer(Frame(kHeaders, kEndHeaders | kEndStream, 1, 10));
  EXPECT_EQ(frames.TakeFreedSlots(kNow), 1);
  // Empty DATA frames ending stream 1 again: gRPC ignores them; they take no slot (this client's
  // `admit` has none left) and wait for none.
  const std::string again = Frame(kData, kEndStream, 1, 0);
  out.clear();
  ASSERT_TRUE(frames.Consume(again + again, &out, kNow).ok());
  EXPECT_EQ(out, again + again);
  EXPECT_EQ(frames.waiting_for_slots(), 0);
  EXPECT_EQ(frames.SlotsHeld(), 0);
}

TEST(Http2ClientFramesTest, HeadersOnStreamZeroOrAnEvenStreamEndTheConnection) {
  for (const uint32_t stream : {uint32_t{0}, uint32_t{2}, uint32_t{100}}) {
    SCOPED_TRACE(stream);
    Http2ClientFrames frames(SmallLimits());
    std::string out;
    const absl::Status refused = frames.Consume(
        Start() + kSettingsAck + Frame(kHeaders, kEndHeaders, stream, 30), &out, kNow);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(refused.message().find("odd stream id"), std::string::npos) << refused;
    EXPECT_EQ(frames.SlotsHeld(), 0);
  }
}

TEST(Http2ClientFramesTest, ASlotGrantedDuringAFrameNeverFinishedGoesByAge) {
  Http2ClientFrames frames(SmallLimits(), AdmitFirst(0));
  std::string out;
  const std::string h1 = Frame(kHeaders, kEndHeaders, 1, 30);
  const std::string ping = Frame(kPing, 0, 0, 8);
  ASSERT_TRUE(frames.Consume(Start() + kSettingsAck + h1 + ping.substr(0, 13), &out, kNow).ok());
  frames.Admit(&out, kNow);
  EXPECT_EQ(frames.SlotsHeld(), 1);
  EXPECT_EQ(frames.waiting_for_slots(), 0);
  EXPECT_EQ(frames.NextSlotExpiry(), kNow + absl::Milliseconds(20));
  // The PING is never finished: the slot goes as an open stream's would, and the stream waits
  // for another.
  EXPECT_EQ(frames.TakeFreedSlots(kNow + absl::Milliseconds(20)), 1);
  EXPECT_EQ(frames.SlotsHeld(), 0);
  EXPECT_EQ(frames.waiting_for_slots(), 1);
  // Granted again, and the PING finishes: the stream passes after it.
  frames.Admit(&out, kNow + absl::Seconds(1));
  ASSERT_TRUE(frames.Consume(ping.substr(13), &out, kNow + absl::Seconds(1)).ok());
  EXPECT_EQ(out, Start() + kSettingsAck + ping + h1);
  EXPECT_EQ(frames.SlotsHeld(), 1);
}

}  // namespace
}  // namespace attnscope::server

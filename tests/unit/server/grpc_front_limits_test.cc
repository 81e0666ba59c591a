#include "server/grpc_front_limits.h"

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace attnscope::server {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1'000'000'000);

class FakeConnection : public Connections::Member {
 public:
  void CloseToMakeRoom() override { ++closed; }
  int closed = 0;
};

// `count` connections from `source`, counted in `connections` and reported idle (or busy, their
// latest call begun) since `since`.
std::vector<std::shared_ptr<FakeConnection>> Open(Connections& connections, int count,
                                                  const std::string& source, bool idle,
                                                  absl::Time since) {
  std::vector<std::shared_ptr<FakeConnection>> opened;
  for (int i = 0; i < count; ++i) {
    EXPECT_TRUE(connections.Add(since, source));
    opened.push_back(std::make_shared<FakeConnection>());
    connections.Update(opened.back().get(), opened.back(), source, idle, since);
  }
  return opened;
}

TEST(ConnectionsTest, AtTheLimitTheConnectionIdleLongestMakesRoomOnceIdleASecond) {
  Connections connections(/*max=*/2);
  auto open = Open(connections, 2, "10.0.0.1", /*idle=*/true, kStart);
  connections.Update(open[1].get(), open[1], "10.0.0.1", /*idle=*/true,
                     kStart + absl::Milliseconds(100));
  EXPECT_FALSE(connections.Add(kStart + absl::Milliseconds(500), "10.0.0.1"));
  EXPECT_EQ(open[0]->closed + open[1]->closed, 0);
  EXPECT_TRUE(connections.Add(kStart + absl::Milliseconds(1050), "10.0.0.1"));
  EXPECT_EQ(open[0]->closed, 1);
  EXPECT_EQ(open[1]->closed, 0);
  // The one closing counts until it is gone; it is not closed twice.
  EXPECT_FALSE(connections.Add(kStart + absl::Milliseconds(1060), "10.0.0.1"));
  EXPECT_EQ(open[0]->closed, 1);
}

TEST(ConnectionsTest, AConnectionWhoseLatestCallBeganTenSecondsAgoMakesRoom) {
  Connections connections(/*max=*/1);
  auto open = Open(connections, 1, "10.0.0.1", /*idle=*/false, kStart);
  EXPECT_FALSE(connections.Add(kStart + absl::Seconds(9), "10.0.0.1"));
  // A new call on it starts the ten seconds again.
  connections.Update(open[0].get(), open[0], "10.0.0.1", /*idle=*/false, kStart + absl::Seconds(5));
  EXPECT_FALSE(connections.Add(kStart + absl::Seconds(11), "10.0.0.1"));
  EXPECT_TRUE(connections.Add(kStart + absl::Seconds(15), "10.0.0.1"));
  EXPECT_EQ(open[0]->closed, 1);
}

TEST(ConnectionsTest, AnAddressHoldingFarMoreThanAnotherMakesRoomAtOnceEvenWithCallsUnderWay) {
  Connections connections(/*max=*/10);
  auto open = Open(connections, 10, "10.0.0.1", /*idle=*/false, kStart);
  connections.Update(open[0].get(), open[0], "10.0.0.1", /*idle=*/false,
                     kStart + absl::Milliseconds(5));
  EXPECT_TRUE(connections.Add(kStart + absl::Milliseconds(10), "10.0.0.2"));
  // Its busy connection whose latest call began longest ago.
  EXPECT_EQ(open[0]->closed, 0);
  EXPECT_EQ(open[1]->closed, 1);
  // Not for itself: its own calls have begun too recently.
  EXPECT_FALSE(connections.Add(kStart + absl::Milliseconds(20), "10.0.0.1"));
}

TEST(ConnectionsTest, OfAddressesHoldingAsManyTheConnectionIdleLongestGoesWhateverItsAddress) {
  Connections connections(/*max=*/3);
  auto z = Open(connections, 1, "10.0.0.9", /*idle=*/true, kStart + absl::Milliseconds(500));
  auto a = Open(connections, 1, "10.0.0.1", /*idle=*/true, kStart);
  auto m = Open(connections, 1, "10.0.0.5", /*idle=*/true, kStart + absl::Milliseconds(200));
  EXPECT_TRUE(connections.Add(kStart + absl::Seconds(2), "10.0.0.7"));
  EXPECT_EQ(a[0]->closed, 1);
  EXPECT_EQ(m[0]->closed + z[0]->closed, 0);
  // A new connection from 10.0.0.7, which now holds one: of those holding as many, the idle
  // longest (10.0.0.7's own has not reported yet).
  EXPECT_TRUE(connections.Add(kStart + absl::Seconds(2), "10.0.0.7"));
  EXPECT_EQ(m[0]->closed, 1);
  EXPECT_EQ(z[0]->closed, 0);
}

TEST(ConnectionsTest, AConnectionWhoseClientHasGoneMakesNoRoom) {
  Connections connections(/*max=*/10);
  auto open = Open(connections, 10, "10.0.0.1", /*idle=*/true, kStart);
  // No address: its client reset the connection before it was accepted. One address holding
  // every connection would otherwise lose one to it at once.
  EXPECT_FALSE(connections.Add(kStart + absl::Seconds(2), ""));
  EXPECT_TRUE(connections.Add(kStart + absl::Seconds(2), "10.0.0.2"));
  int closed = 0;
  for (const auto& connection : open) closed += connection->closed;
  EXPECT_EQ(closed, 1);
}

TEST(ConnectionsTest, NewConnectionsAreRefusedWhileAnEighthOfTheLimitIsStillClosing) {
  Connections connections(/*max=*/200);
  auto open = Open(connections, 200, "10.0.0.1", /*idle=*/true, kStart);
  const absl::Time later = kStart + absl::Seconds(2);
  for (int i = 0; i < 25; ++i) EXPECT_TRUE(connections.Add(later, "10.0.0.1")) << i;
  EXPECT_FALSE(connections.Add(later, "10.0.0.1"));
  // Another address may have twice as many closing.
  for (int i = 0; i < 25; ++i) EXPECT_TRUE(connections.Add(later, "10.0.0.2")) << i;
  EXPECT_FALSE(connections.Add(later, "10.0.0.2"));
  // 50 closing: once 26 of them are gone, 10.0.0.1 gets room again.
  int gone = 0;
  for (const auto& connection : open) {
    if (connection->closed == 0) continue;
    EXPECT_FALSE(connections.Add(later, "10.0.0.1")) << gone;
    connections.Remove(connection.get(), "10.0.0.1");
    if (++gone == 26) break;
  }
  EXPECT_TRUE(connections.Add(later, "10.0.0.1"));
}

class FakeHolder : public OpenRequests::Holder {
 public:
  void Evict(uint32_t stream_id) override { evicted.push_back(stream_id); }
  std::vector<uint32_t> evicted;
};

TEST(OpenRequestsTest, PastTheCountTheOldestOfTheConnectionHoldingTheMostIsCancelled) {
  OpenRequests requests(/*max_requests=*/3, /*max_bytes=*/1 << 20);
  auto a = std::make_shared<FakeHolder>();
  auto b = std::make_shared<FakeHolder>();
  requests.Count(b.get(), b, 1, /*bytes=*/0, /*added=*/true);
  requests.Count(a.get(), a, 5, /*bytes=*/0, /*added=*/true);
  requests.Count(a.get(), a, 7, /*bytes=*/0, /*added=*/true);
  EXPECT_TRUE(a->evicted.empty());
  requests.Count(b.get(), b, 3, /*bytes=*/0, /*added=*/true);
  // A tie: one of the two, its oldest.
  const bool from_a = !a->evicted.empty();
  EXPECT_EQ(from_a ? a->evicted : b->evicted, std::vector<uint32_t>{from_a ? 5u : 1u});
  requests.Count(a.get(), a, 9, /*bytes=*/0, /*added=*/true);
  EXPECT_EQ(a->evicted.size() + b->evicted.size(), 2u);
}

TEST(OpenRequestsTest, PastTheBytesTheLargestOfTheConnectionHoldingTheMostIsCancelled) {
  OpenRequests requests(/*max_requests=*/100, /*max_bytes=*/100);
  auto a = std::make_shared<FakeHolder>();
  auto b = std::make_shared<FakeHolder>();
  requests.Count(a.get(), a, 1, /*bytes=*/10, /*added=*/true);
  requests.Count(a.get(), a, 3, /*bytes=*/50, /*added=*/true);
  requests.Count(b.get(), b, 1, /*bytes=*/30, /*added=*/true);
  // b's upload grows past the limit: a holds more, and its largest goes.
  requests.Count(b.get(), b, 1, /*bytes=*/45, /*added=*/false);
  EXPECT_EQ(a->evicted, std::vector<uint32_t>{3});
  EXPECT_TRUE(b->evicted.empty());
  // More bytes of a request no longer counted (its Evict on the way) are not counted again.
  requests.Count(a.get(), a, 3, /*bytes=*/90, /*added=*/false);
  EXPECT_EQ(a->evicted, std::vector<uint32_t>{3});
  EXPECT_TRUE(b->evicted.empty());
  // Ended requests no longer count.
  requests.End(b.get(), 1);
  requests.Count(b.get(), b, 3, /*bytes=*/80, /*added=*/true);
  EXPECT_TRUE(b->evicted.empty());
}

}  // namespace
}  // namespace attnscope::server

// The gRPC port's connection limit (--max_grpc_connections): idle connections, connections whose
// calls never end and one address holding every place make room for new clients.

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "attnscope/v1/attnscope.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/integration/h2_flood_util.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

// Connections that stay open doing nothing: each holds three descriptors and about 70 KB in gRPC,
// and before, 7,000 of them took all 20,000 descriptors: every gRPC call then failed with
// UNAVAILABLE until they closed. At --max_grpc_connections the one idle longest is closed with a
// GOAWAY to make room; a client whose idle connection went that way connects again on its next
// call.
TEST(ConnectionLimitTest, IdleConnectionsMakeRoomAtTheConnectionLimit) {
  ServerProcess::Options options;
  options.models = {"default=" + TinyBertDir()};
  options.metrics_port = FreeTcpPort();
  options.extra_flags = {"--max_grpc_connections=100"};
  absl::StatusOr<std::unique_ptr<ServerProcess>> started = ServerProcess::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;
  // A client with a channel it keeps, idle after its first call.
  std::unique_ptr<v1::AttentionService::Stub> kept = StubOf(server);
  ASSERT_TRUE(CallGetAttention(*kept, /*seconds=*/10).ok());
  const int descriptors_before = OpenFileDescriptors(server.pid());

  nlohmann::json idle;
  std::thread holder([&] {
    idle = RunH2Flood(GrpcPortOf(server),
                      {"--settings_ack", "--streams", "0", "--connections", "300", "--hold", "4"});
  });
  absl::SleepFor(absl::Seconds(2));
  const int descriptors_held = OpenFileDescriptors(server.pid());
  const grpc::Status kept_status = CallGetAttention(*kept, /*seconds=*/10);
  const grpc::Status new_status = CallGetAttention(*StubOf(server), /*seconds=*/10);
  holder.join();
  ASSERT_FALSE(idle.is_discarded());
  EXPECT_TRUE(kept_status.ok()) << kept_status.error_message();
  EXPECT_TRUE(new_status.ok()) << new_status.error_message();
  // 300 connections and the kept one, at most 100 open: the oldest 201 or more closed.
  EXPECT_GE(idle.value("closed_by_server", 0), 200) << idle.dump();
  EXPECT_LT(descriptors_held - descriptors_before, 3 * 100 + 20)
      << descriptors_before << " descriptors before, " << descriptors_held << " held";
  std::cout << idle.dump() << ": descriptors " << descriptors_before << " before, "
            << descriptors_held << " with the connections held\n";
}

// Connections whose calls never end (here: answers the client never lets through a window of 0;
// grpc.health.v1.Health/Watch streams do the same) at --max_grpc_connections: no connection is
// idle, and a new client is refused, but only until the latest call of one of them began 10 s ago;
// then that one is closed to make room.
TEST(ConnectionLimitTest, ConnectionsWhoseCallsNeverEndGiveWayAfterTenSeconds) {
  ServerProcess::Options options;
  options.models = {"default=" + TinyBertDir()};
  options.metrics_port = FreeTcpPort();
  options.extra_flags = {"--max_grpc_connections=100"};
  absl::StatusOr<std::unique_ptr<ServerProcess>> started = ServerProcess::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;
  std::thread holder([&] {
    RunH2Flood(GrpcPortOf(server), {"--closed_window", "100", "--hold", "14"});
  });
  absl::SleepFor(absl::Seconds(3));
  const grpc::Status refused = CallGetAttention(*StubOf(server), /*seconds=*/2);
  absl::SleepFor(absl::Seconds(9));
  const grpc::Status answered = CallGetAttention(*StubOf(server), /*seconds=*/2);
  holder.join();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  EXPECT_TRUE(answered.ok()) << answered.error_message();
  absl::StatusOr<std::string> metrics = HttpGet(server.metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const std::vector<MetricSample> samples =
      FindSamples(ParseMetrics(*metrics), "attnscope_rejected_requests_total",
                  {{"reason", "connection_limit"}});
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_GE(samples[0].value, 1);
}

// One address holding every connection at --max_grpc_connections, each with a call that never
// ends, and opening more as fast as it can: it closes its own, while a client from another
// address gets in at once, the largest address's connections making room.
TEST(ConnectionLimitTest, AnAddressHoldingEveryConnectionMakesRoomForOthers) {
  ServerProcess::Options options;
  options.models = {"default=" + TinyBertDir()};
  options.extra_flags = {"--max_grpc_connections=100"};
  absl::StatusOr<std::unique_ptr<ServerProcess>> started = ServerProcess::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;
  const std::string port = GrpcPortOf(server);
  // The server listens on 127.0.0.1; the flood comes from 127.0.0.2, this test's client from
  // 127.0.0.1.
  std::thread holder([&] {
    RunH2Flood(port, {"--source", "127.0.0.2", "--closed_window", "100", "--hold", "6"});
  });
  absl::SleepFor(absl::Seconds(2));
  nlohmann::json churn;
  std::thread churner([&] {
    churn = RunH2Flood(port, {"--source", "127.0.0.2", "--churn", "1", "--max_seconds", "3"});
  });
  absl::Duration slowest;
  for (int i = 0; i < 5; ++i) {
    const absl::Time start = absl::Now();
    const grpc::Status status = CallGetAttention(*StubOf(server), /*seconds=*/5);
    EXPECT_TRUE(status.ok()) << status.error_message();
    slowest = std::max(slowest, absl::Now() - start);
    absl::SleepFor(absl::Milliseconds(300));
  }
  churner.join();
  holder.join();
  ASSERT_FALSE(churn.is_discarded());
  EXPECT_GT(churn.value("connections", 0), 100) << churn.dump();
  EXPECT_LT(slowest, absl::Seconds(1));
  std::cout << "churn from 127.0.0.2 " << churn.dump() << "; slowest call from 127.0.0.1 "
            << absl::ToDoubleSeconds(slowest) << " s\n";
}

}  // namespace
}  // namespace attnscope::testing

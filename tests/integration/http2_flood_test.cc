// The gRPC port under floods of HTTP/2 from one client: streams opened, reset or left open by the
// ten thousand, clients that never acknowledge SETTINGS or never open their window, connections
// dropped at once, requests whose message never ends. Each stays within its bound (threads,
// memory, streams handed to gRPC) and other clients' calls are answered meanwhile.

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "attnscope/v1/attnscope.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/h2_flood_util.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

// Clients that ask for an answer and never open their HTTP/2 window hold no thread: on gRPC's
// synchronous API 85 such ListModels calls held every thread of its pool until they went, and
// every other gRPC caller got "Server Threadpool Exhausted".
TEST(Http2FloodTest, ClientsThatNeverTakeTheirAnswersHoldNoThreads) {
  ServerProcess::Options options;
  options.models = {"default=" + TinyBertDir()};
  absl::StatusOr<std::unique_ptr<ServerProcess>> started = ServerProcess::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;
  const std::string port = GrpcPortOf(server);
  std::thread holders([&] {
    RunCommand({"/usr/bin/python3", ATTNSCOPE_H2_STREAM_FLOOD, "--port", port, "--closed_window",
                "200", "--hold", "8"},
               absl::Seconds(60));
  });
  absl::SleepFor(absl::Seconds(3));
  std::unique_ptr<v1::AttentionService::Stub> stub = StubOf(server);
  int served = 0;
  std::string failures;
  for (int i = 0; i < 10; ++i) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    v1::ListModelsResponse response;
    const grpc::Status status = stub->ListModels(&context, v1::ListModelsRequest(), &response);
    if (status.ok()) {
      ++served;
    } else {
      failures += status.error_message() + "\n";
    }
  }
  holders.join();
  EXPECT_EQ(served, 10) << failures;
}

// HTTP/2 streams opened by the ten thousand on the gRPC port, left open or reset at once, do not
// make a thread each: with gRPC's synchronous server unbounded, 60 000 such streams on three
// connections made 19 000 threads and 3.4 GB, and normal calls timed out. Afterwards the server
// answers as before.
TEST(Http2FloodTest, AFloodOfHttp2StreamsHasBoundedThreads) {
  ServerProcess::Options options;
  options.models = {"default=" + TinyBertDir()};
  options.metrics_port = FreeTcpPort();
  absl::StatusOr<std::unique_ptr<ServerProcess>> started = ServerProcess::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;
  const std::string port = GrpcPortOf(server);
  const int idle_threads = ProcessThreads(server.pid());
  ASSERT_GT(idle_threads, 0);
  std::atomic<bool> flooding{true};
  std::atomic<int> peak_threads{idle_threads};
  std::thread sampler([&] {
    while (flooding) {
      peak_threads = std::max(peak_threads.load(), ProcessThreads(server.pid()));
      absl::SleepFor(absl::Milliseconds(20));
    }
  });
  std::vector<std::thread> floods;
  for (const bool reset : {false, true, true}) {
    floods.emplace_back([&, reset] {
      // Acknowledging the server's SETTINGS, so that the streams reach gRPC (without, the
      // server closes the connection at its stream limit: the next test).
      std::vector<std::string> argv = {"/usr/bin/python3", ATTNSCOPE_H2_STREAM_FLOOD,
                                       "--port",           port,
                                       "--streams",        "20000",
                                       "--hold",           "3",
                                       "--settings_ack"};
      if (reset) argv.push_back("--reset");
      RunCommand(argv, absl::Seconds(60));
    });
  }
  for (std::thread& flood : floods) flood.join();
  flooding = false;
  sampler.join();
  // The bound is --max_concurrent_requests (64) + 16 gRPC threads; the rest of the process
  // (HTTP, OpenMP, gRPC's pollers) is counted in idle_threads.
  EXPECT_LT(peak_threads.load(), idle_threads + 200)
      << "idle " << idle_threads << ", RSS after " << ProcessRssBytes(server.pid()) / (1 << 20)
      << " MB";
  // The streams' calls, refused or cancelled, are gone within seconds of their connections.
  const absl::Time flood_end = absl::Now();
  grpc::Status status;
  do {
    status = CallGetAttention(*StubOf(server), /*seconds=*/5);
    if (!status.ok()) absl::SleepFor(absl::Milliseconds(100));
  } while (!status.ok() && absl::Now() - flood_end < absl::Seconds(20));
  EXPECT_TRUE(status.ok()) << status.error_message();
  // The flood's requests are whole and valid: none is counted as a bad request, whether the
  // client reset its stream before the server read the message or after.
  absl::StatusOr<std::string> metrics = HttpGet(server.metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_THAT(FindSamples(ParseMetrics(*metrics), "attnscope_requests_total",
                          {{"rpc", "GetAttention"}, {"code", "INVALID_ARGUMENT"}}),
              ::testing::IsEmpty());
  std::cout << "peak threads " << peak_threads << " (idle " << idle_threads << "), answered "
            << absl::ToDoubleSeconds(absl::Now() - flood_end) << " s after the flood, RSS "
            << ProcessRssBytes(server.pid()) / (1 << 20) << " MB\n";
}

// gRPC 1.51 applies its HTTP/2 limits (the header list size, MAX_CONCURRENT_STREAMS) only once
// the client has acknowledged the server's SETTINGS, so a client that never does was held to
// none: a header block continued without end grew the server by 240 MB/s, and one connection
// opened 264 000 streams in 12 s, left gRPC answering nobody else for 70 s and 5.8 GB behind.
// Nor has it a limit on streams reset at once ("rapid reset"). The server's own listener
// (server/grpc_front.cc) makes up for both.
TEST(Http2FloodTest, ClientsThatNeverAcknowledgeSettingsAreHeldToTheLimits) {
  ServerProcess::Options options;
  options.models = {"default=" + TinyBertDir()};
  options.metrics_port = FreeTcpPort();
  absl::StatusOr<std::unique_ptr<ServerProcess>> started = ServerProcess::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;
  const std::string port = GrpcPortOf(server);

  const auto refused_by_listener = [&server] {
    absl::StatusOr<std::string> metrics = HttpGet(server.metrics_port(), "/metrics");
    EXPECT_TRUE(metrics.ok()) << metrics.status();
    double refused = 0;
    for (const MetricSample& sample :
         FindSamples(ParseMetrics(metrics.value_or("")), "attnscope_rejected_requests_total",
                     {{"reason", "http2_limits"}}))
      refused += sample.value;
    return refused;
  };

  // 512 MiB of CONTINUATION frames: before, the server kept all it read and had taken the whole
  // of it within seconds. Now the listener (at 64 KiB) or gRPC (its 64 KiB of metadata holding
  // from the first stream) ends the connection first; what the client got in before that is what
  // the kernel's buffers took, and what the listener read and dropped while the connection
  // closed.
  const int64_t rss_before = ProcessRssBytes(server.pid());
  const nlohmann::json continuation =
      RunH2Flood(port, {"--continuation_bytes", std::to_string(512 << 20), "--hold", "1"});
  ASSERT_FALSE(continuation.is_discarded());
  EXPECT_TRUE(continuation.value("closed_by_server", false)) << continuation.dump();
  EXPECT_LT(continuation.value("bytes_sent", int64_t{0}), 64 << 20) << continuation.dump();
  const int64_t rss_after = ProcessRssBytes(server.pid());
  EXPECT_LT(rss_after - rss_before, 64 << 20)
      << "RSS " << rss_before / (1 << 20) << " MB before, " << rss_after / (1 << 20) << " MB after";

  // Each stream left open is a call waiting for its message: before, 20 000 of them on one
  // connection were all taken.
  const nlohmann::json streams =
      RunH2Flood(port, {"--no_settings_ack", "--streams", "20000", "--hold", "2"});
  ASSERT_FALSE(streams.is_discarded());
  EXPECT_TRUE(streams.value("closed_by_server", false)) << streams.dump();

  // Streams opened and reset at once, acknowledging SETTINGS: before, two connections doing so
  // for 10 s grew the server by 3.8 GB and kept another client's call waiting 17 s. gRPC has no
  // limit of its own on resets: the listener closes this one.
  const double refused_before_resets = refused_by_listener();
  const nlohmann::json resets = RunH2Flood(port, {"--settings_ack", "--reset", "--streams", "20000",
                                                  "--hold", "2", "--max_seconds", "10"});
  ASSERT_FALSE(resets.is_discarded());
  EXPECT_TRUE(resets.value("closed_by_server", false)) << resets.dump();

  const absl::Time flood_end = absl::Now();
  grpc::Status status;
  do {
    status = CallGetAttention(*StubOf(server), /*seconds=*/5);
    if (!status.ok()) absl::SleepFor(absl::Milliseconds(100));
  } while (!status.ok() && absl::Now() - flood_end < absl::Seconds(5));
  EXPECT_TRUE(status.ok()) << status.error_message();
  const absl::Duration answered_after = absl::Now() - flood_end;
  // The streams gRPC took are counted once cancelled with their connection; scraped after the
  // call above, which is counted too, so that the cancellations have had their time.
  absl::StatusOr<std::string> metrics = HttpGet(server.metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  double calls = 0;
  for (const MetricSample& sample :
       FindSamples(ParseMetrics(*metrics), "attnscope_requests_total", {{"rpc", "GetAttention"}}))
    calls += sample.value;
  EXPECT_LE(calls, 1000);
  const double refused = refused_by_listener();
  EXPECT_EQ(refused - refused_before_resets, 1);
  std::cout << "continuation flood " << continuation.dump() << ", stream flood " << streams.dump()
            << ", reset flood " << resets.dump() << ", " << refused << " closed by the listener"
            << ", " << calls << " GetAttention calls counted, answered "
            << absl::ToDoubleSeconds(answered_after) << " s after the floods, RSS "
            << ProcessRssBytes(server.pid()) / (1 << 20) << " MB\n";
}

// A client that opens connections one after another, sends 100 calls on each and drops it at once
// with a reset: before, gRPC took every call (650,000 in 3 s) and worked through them long after
// their callers had gone, while another client's call waited 14-26 s. The listener now hands gRPC
// a bounded number of streams at a time (GrpcFront::Options::stream_slots), and none of a client
// that has already gone. The flood's calls that do reach gRPC (those read before their
// connection's reset) are real work, and can fill --max_concurrent_requests for a moment: then the
// other client's call is refused at once with RESOURCE_EXHAUSTED (admission, server/
// service_core.h), and it retries after 100 ms as the message asks (1 call of 24 on a 2-core Zen 3
// that churned 33,000 connections in 3 s). What is bounded is the time until its answer.
TEST(Http2FloodTest, CallsOnConnectionsDroppedAtOnceKeepNoOneElseWaiting) {
  ServerProcess::Options options;
  options.models = {"default=" + TinyBertDir()};
  options.metrics_port = FreeTcpPort();
  absl::StatusOr<std::unique_ptr<ServerProcess>> started = ServerProcess::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;
  const std::string port = GrpcPortOf(server);
  const int descriptors_before = OpenFileDescriptors(server.pid());

  nlohmann::json churn;
  std::thread churner([&] { churn = RunH2Flood(port, {"--churn", "100", "--max_seconds", "3"}); });
  // A new client every 200 ms while the churn goes on and for 2 s after: each connects and calls.
  const absl::Time end = absl::Now() + absl::Seconds(5);
  absl::Duration slowest;
  int calls = 0;
  int refusals = 0;
  while (absl::Now() < end) {
    const absl::Time start = absl::Now();
    grpc::Status status = CallGetAttention(*StubOf(server), /*seconds=*/30);
    while (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
           absl::Now() - start < absl::Seconds(3)) {
      ++refusals;
      absl::SleepFor(absl::Milliseconds(100));
      status = CallGetAttention(*StubOf(server), /*seconds=*/30);
    }
    EXPECT_TRUE(status.ok()) << status.error_message();
    slowest = std::max(slowest, absl::Now() - start);
    ++calls;
    absl::SleepFor(absl::Milliseconds(200));
  }
  churner.join();
  ASSERT_FALSE(churn.is_discarded());
  EXPECT_GT(churn.value("connections", 0), 1000) << churn.dump();
  EXPECT_LT(slowest, absl::Seconds(3)) << churn.dump();

  absl::StatusOr<std::string> metrics = HttpGet(server.metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  double counted = 0;
  for (const MetricSample& sample :
       FindSamples(ParseMetrics(*metrics), "attnscope_requests_total", {{"rpc", "GetAttention"}}))
    counted += sample.value;
  EXPECT_LT(counted, 0.1 * churn.value("streams_sent", 0.0)) << churn.dump();
  // Every dropped connection's descriptors (its socket and both ends of the pair to gRPC) are
  // closed again within seconds.
  const absl::Time churn_end = absl::Now();
  int descriptors = OpenFileDescriptors(server.pid());
  while (descriptors > descriptors_before + 10 && absl::Now() - churn_end < absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(100));
    descriptors = OpenFileDescriptors(server.pid());
  }
  EXPECT_LE(descriptors, descriptors_before + 10);
  std::cout << "churn " << churn.dump() << ": " << calls << " calls of another client (" << refusals
            << " refusals retried), slowest " << absl::ToDoubleSeconds(slowest) << " s; " << counted
            << " GetAttention calls counted; descriptors " << descriptors_before << " before, "
            << descriptors << " after\n";
}

// Streams opened and never finished (HEADERS alone): each is a call gRPC keeps, about 12 KB,
// waiting for the rest of its request. Before, 300 connections keeping 100 each grew the server by
// 350 MB (the deployment's memory limit is 640 MiB), and the descriptors allowed about 7 GB. The
// listener cancels the oldest in gRPC past GrpcFront::Options::max_open_requests.
TEST(Http2FloodTest, StreamsLeftOpenOnManyConnectionsHoldBoundedMemory) {
  ServerProcess::Options options;
  options.models = {"default=" + TinyBertDir()};
  absl::StatusOr<std::unique_ptr<ServerProcess>> started = ServerProcess::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;
  const std::string port = GrpcPortOf(server);
  const int64_t rss_before = ProcessRssBytes(server.pid());

  nlohmann::json flood;
  std::thread flooder([&] {
    flood = RunH2Flood(
        port, {"--settings_ack", "--streams", "100", "--connections", "300", "--hold", "5"});
  });
  absl::SleepFor(absl::Seconds(3));
  const int64_t rss_held = ProcessRssBytes(server.pid());
  const grpc::Status status = CallGetAttention(*StubOf(server), /*seconds=*/10);
  flooder.join();
  ASSERT_FALSE(flood.is_discarded());
  EXPECT_EQ(flood.value("streams_sent", 0), 30000) << flood.dump();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_LT(rss_held - rss_before, 200 << 20)
      << "RSS " << rss_before / (1 << 20) << " MB before, " << rss_held / (1 << 20)
      << " MB with the streams held";
  std::cout << flood.dump() << ": RSS " << rss_before / (1 << 20) << " MB before, "
            << rss_held / (1 << 20) << " MB with the streams held\n";
}

// Requests whose message never arrives whole: gRPC buffers each message's bytes until its end, up
// to --max_request_bytes. Before, 3,000 streams holding 4 MB each grew the server to 12 GB; 200
// streams of 3 MB here grew it by 600 MB. The listener cancels the largest open request of the
// connection holding the most bytes past GrpcFront::Options::max_open_request_bytes (128 MiB).
TEST(Http2FloodTest, RequestsWhoseMessageNeverEndsHoldBoundedMemory) {
  ServerProcess::Options options;
  options.models = {"default=" + TinyBertDir()};
  absl::StatusOr<std::unique_ptr<ServerProcess>> started = ServerProcess::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;
  const int64_t rss_before = ProcessRssBytes(server.pid());

  nlohmann::json flood;
  std::atomic<bool> flooding{true};
  std::thread flooder([&] {
    flood = RunH2Flood(GrpcPortOf(server), {"--partial_bytes", "3000000", "--streams", "20",
                                            "--connections", "10", "--hold", "2"});
    flooding = false;
  });
  int64_t rss_most = rss_before;
  while (flooding.load()) {
    rss_most = std::max(rss_most, ProcessRssBytes(server.pid()));
    absl::SleepFor(absl::Milliseconds(100));
  }
  flooder.join();
  const grpc::Status status = CallGetAttention(*StubOf(server), /*seconds=*/10);
  ASSERT_FALSE(flood.is_discarded());
  EXPECT_EQ(flood.value("bytes_sent", int64_t{0}), int64_t{600'000'000}) << flood.dump();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_LT(rss_most - rss_before, 300 << 20)
      << "RSS " << rss_before / (1 << 20) << " MB before, at most " << rss_most / (1 << 20)
      << " MB while 600 MB of unfinished messages were sent";
  std::cout << flood.dump() << ": RSS " << rss_before / (1 << 20) << " MB before, at most "
            << rss_most / (1 << 20) << " MB\n";
}

// An upload under way while a flood of unfinished requests passes the open-request limit: the
// flood's connections hold the most, and lose their own. Before, the oldest went first, and an
// upload whose second half came a second after its first was cancelled.
TEST(Http2FloodTest, AnUploadUnderWayOutlivesAFloodOfUnfinishedRequests) {
  ServerProcess::Options options;
  options.models = {"default=" + TinyBertDir()};
  absl::StatusOr<std::unique_ptr<ServerProcess>> started = ServerProcess::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;
  // 5,400 unfinished requests (4,096 may be open), 4,860 of them after the upload began.
  const nlohmann::json flood =
      RunH2Flood(GrpcPortOf(server), {"--partial_bytes", "100", "--streams", "90", "--connections",
                                      "60", "--slow_upload", "1", "--hold", "0"});
  ASSERT_FALSE(flood.is_discarded());
  EXPECT_EQ(flood.value("streams_sent", 0), 5400) << flood.dump();
  EXPECT_TRUE(flood.value("slow_upload_answered", false)) << flood.dump();
}

}  // namespace
}  // namespace attnscope::testing

// Admission (server/service_core.h): calls beyond --max_concurrent_requests are refused at once
// with RESOURCE_EXHAUSTED, the admitted ones complete, and the server stays healthy; the default
// limit takes a 32-client load without refusing anything (text-embeddings-inference's anchor: a
// bound high enough for normal load, an immediate Overloaded beyond it).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/barrier.h"
#include "absl/time/clock.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

struct Outcome {
  absl::Status status;
  absl::Duration latency;
};

// Runs `calls` GetAttention requests at once, released together from a barrier, one client each.
std::vector<Outcome> Burst(const ServerProcess& server, const v1::GetAttentionRequest& request,
                           int calls) {
  std::vector<Outcome> outcomes(calls);
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < calls; ++i) clients.push_back(server.NewClient());
  absl::Barrier* start = new absl::Barrier(calls);
  std::vector<std::thread> threads;
  for (int i = 0; i < calls; ++i) {
    threads.emplace_back([&, i] {
      // The channel connects before the barrier, so that connecting is not part of the burst; a
      // failure here shows as the call's own.
      clients[i]->Health().IgnoreError();
      if (start->Block()) delete start;
      const absl::Time begin = absl::Now();
      outcomes[i].status = clients[i]->GetAttention(request).status();
      outcomes[i].latency = absl::Now() - begin;
    });
  }
  for (std::thread& thread : threads) thread.join();
  return outcomes;
}

TEST(AdmissionTest, BurstBeyondTheLimitIsRefusedAtOnceAndTheRestSucceed) {
  // A forward pass of a few hundred milliseconds, so that the burst overlaps it.
  TempDir dir;
  BertShape shape;
  shape.hidden = 256;
  shape.heads = 4;
  shape.intermediate = 1024;
  ASSERT_TRUE(WriteRandomBert(shape, dir.path()).ok());
  ServerProcess::Options options;
  options.models = {"mid=" + dir.path()};
  options.extra_flags = {"--max_concurrent_requests=2"};
  options.metrics_port = FreeTcpPort();
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();

  v1::GetAttentionRequest request;
  request.set_model("mid");
  request.set_text(RandomBertText(shape, 384));
  request.add_layers(-1);
  constexpr int kCalls = 12;
  const std::vector<Outcome> outcomes = Burst(**server, request, kCalls);

  int ok = 0;
  int refused = 0;
  absl::Duration slowest_refusal = absl::ZeroDuration();
  absl::Duration fastest_success = absl::InfiniteDuration();
  for (const Outcome& outcome : outcomes) {
    if (outcome.status.ok()) {
      ++ok;
      fastest_success = std::min(fastest_success, outcome.latency);
    } else {
      ASSERT_EQ(outcome.status.code(), absl::StatusCode::kResourceExhausted) << outcome.status;
      EXPECT_NE(outcome.status.message().find("--max_concurrent_requests"), std::string::npos)
          << outcome.status;
      ++refused;
      slowest_refusal = std::max(slowest_refusal, outcome.latency);
    }
  }
  EXPECT_GE(ok, 2) << (*server)->Log();
  EXPECT_GE(refused, 1) << "no call was refused; the burst did not exceed the limit";
  // A refusal costs no forward pass: each one came back before any admitted call finished.
  EXPECT_LT(slowest_refusal, fastest_success);

  // Counted once each, by reason, in a real scrape.
  absl::StatusOr<std::string> scrape = HttpGet((*server)->metrics_port(), "/metrics");
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  const std::vector<MetricSample> rejected =
      FindSamples(ParseMetrics(*scrape), "attnscope_rejected_requests_total",
                  {{"reason", "concurrency_limit"}});
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].value, refused);

  // Healthy afterwards: SERVING, and the next call is answered.
  std::unique_ptr<Client> client = (*server)->NewClient();
  absl::StatusOr<ServingStatus> health = client->Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_TRUE(client->GetAttention(request).ok());
}

// One API key keeping its share of calls running leaves the rest for the other keys: before, one
// client holding --max_concurrent_requests calls had every other refused for as long.
TEST(AdmissionTest, OneKeyHoldsAtMostItsShareAndOtherKeysAreServed) {
  TempDir dir;
  BertShape shape;
  shape.hidden = 256;
  shape.heads = 4;
  shape.intermediate = 1024;
  ASSERT_TRUE(WriteRandomBert(shape, dir.path()).ok());
  TempDir keys;
  std::ofstream(keys.path() + "/keys") << "key-of-the-busy-client\nkey-of-another-client\n";
  ServerProcess::Options options;
  options.models = {"mid=" + dir.path()};
  // A share of 2 (half of 4, the default) for each key.
  options.extra_flags = {"--max_concurrent_requests=4", "--api_keys_file=" + keys.path() + "/keys"};
  options.metrics_port = FreeTcpPort();
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const auto client_with = [&](const std::string& key) {
    ClientOptions client_options;
    client_options.target = (*server)->address();
    client_options.api_key = key;
    client_options.max_attempts = 1;
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(client_options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  };

  // Six calls of the busy key at once, each of several forward passes' length.
  v1::GetAttentionRequest heavy;
  heavy.set_model("mid");
  heavy.set_text(RandomBertText(shape, 384));
  heavy.add_layers(-1);
  constexpr int kBusyCalls = 6;
  std::vector<absl::Status> busy(kBusyCalls);
  std::vector<std::unique_ptr<Client>> busy_clients;
  for (int i = 0; i < kBusyCalls; ++i)
    busy_clients.push_back(client_with("key-of-the-busy-client"));
  absl::Barrier* start = new absl::Barrier(kBusyCalls + 1);
  std::vector<std::thread> threads;
  for (int i = 0; i < kBusyCalls; ++i) {
    threads.emplace_back([&, i] {
      ASSERT_NE(busy_clients[i], nullptr);
      busy_clients[i]->Health().IgnoreError();
      if (start->Block()) delete start;
      busy[i] = busy_clients[i]->GetAttention(heavy).status();
    });
  }
  // The other key's call comes while the busy key's share runs.
  std::unique_ptr<Client> other = client_with("key-of-another-client");
  ASSERT_NE(other, nullptr);
  other->Health().IgnoreError();
  if (start->Block()) delete start;
  absl::SleepFor(absl::Milliseconds(50));
  const absl::StatusOr<AttentionResult> answer = other->GetAttention(heavy);
  for (std::thread& thread : threads) thread.join();
  EXPECT_TRUE(answer.ok()) << answer.status();

  int refused = 0;
  for (const absl::Status& status : busy) {
    if (status.ok()) continue;
    ++refused;
    EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
    EXPECT_THAT(std::string(status.message()),
                ::testing::HasSubstr("calls of this API key: expected at most 2 at once "
                                     "(--max_concurrent_requests_per_key"));
  }
  // At most two of the busy key's calls ran at a time; they ran about as fast as the other key's,
  // so some of the six found its share full.
  EXPECT_GE(refused, 1);
  absl::StatusOr<std::string> scrape = HttpGet((*server)->metrics_port(), "/metrics");
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  const std::vector<MetricSample> rejected = FindSamples(
      ParseMetrics(*scrape), "attnscope_rejected_requests_total", {{"reason", "key_limit"}});
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].value, refused);
}

TEST(AdmissionTest, DefaultLimitTakes32ClientsAtOnce) {
  ServerProcess::Options options;
  options.models = {"default=" + DefaultModelDir()};
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  v1::GetAttentionRequest request;
  request.set_model("default");
  request.set_text("Tôi yêu Việt Nam quá");
  for (const Outcome& outcome : Burst(**server, request, /*calls=*/32)) {
    EXPECT_TRUE(outcome.status.ok()) << outcome.status;
  }
}

}  // namespace
}  // namespace attnscope::testing

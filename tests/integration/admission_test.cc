// Admission (server/service_core.h): calls beyond --max_concurrent_requests are refused at once
// with RESOURCE_EXHAUSTED, the admitted ones complete, and the server stays healthy; the default
// limit takes a 32-client load without refusing anything (text-embeddings-inference's anchor: a
// bound high enough for normal load, an immediate Overloaded beyond it).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
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

// A BERT whose forward pass over 384 tokens takes a few hundred milliseconds, so that a burst of
// calls overlaps it.
BertShape MidShape() {
  BertShape shape;
  shape.hidden = 256;
  shape.heads = 4;
  shape.intermediate = 1024;
  return shape;
}

TEST(AdmissionTest, BurstBeyondTheLimitIsRefusedAtOnceAndTheRestSucceed) {
  TempDir dir;
  const BertShape shape = MidShape();
  ASSERT_TRUE(WriteRandomBert(shape, dir.path()).ok());
  ServerProcess::Options options;
  options.models = {"mid=" + dir.path()};
  // One test process is one client: its share of the limit is the whole limit here.
  options.extra_flags = {"--max_concurrent_requests=2", "--max_concurrent_requests_per_client=2"};
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

// One client keeping its share of calls running leaves the rest for the others: before, one
// client holding --max_concurrent_requests calls (or streams it never read) had every other
// refused for as long. `busy_key` (may be empty) is the busy client's API key; `other_call`
// makes another client's call while the busy one's six heavy calls run, and its status is
// returned with the busy calls' refusals checked against `who` ("its API key", "its address").
absl::Status OtherClientWhileOneIsBusy(const ServerProcess& server, const BertShape& shape,
                                       const std::string& busy_key, const std::string& who,
                                       const std::function<absl::Status()>& other_call) {
  v1::GetAttentionRequest heavy;
  heavy.set_model("mid");
  heavy.set_text(RandomBertText(shape, 384));
  heavy.add_layers(-1);
  constexpr int kBusyCalls = 6;
  std::vector<absl::Status> busy(kBusyCalls);
  std::vector<std::unique_ptr<Client>> busy_clients;
  for (int i = 0; i < kBusyCalls; ++i) {
    ClientOptions options;
    options.target = server.address();
    options.api_key = busy_key;
    options.max_attempts = 1;
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
    if (!client.ok()) return client.status();
    busy_clients.push_back(*std::move(client));
  }
  absl::Barrier* start = new absl::Barrier(kBusyCalls + 1);
  std::vector<std::thread> threads;
  for (int i = 0; i < kBusyCalls; ++i) {
    threads.emplace_back([&, i] {
      busy_clients[i]->Health().IgnoreError();
      if (start->Block()) delete start;
      busy[i] = busy_clients[i]->GetAttention(heavy).status();
    });
  }
  if (start->Block()) delete start;
  absl::SleepFor(absl::Milliseconds(50));
  const absl::Status other = other_call();
  for (std::thread& thread : threads) thread.join();

  int refused = 0;
  for (const absl::Status& status : busy) {
    if (status.ok()) continue;
    ++refused;
    EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
    // Its share (2), or near the limit an equal part with the other client (1).
    EXPECT_THAT(
        std::string(status.message()),
        ::testing::HasSubstr(absl::StrCat("calls of this client (", who, "): expected at most ")));
    EXPECT_THAT(std::string(status.message()),
                ::testing::HasSubstr("--max_concurrent_requests_per_client"));
  }
  // At most two of the busy client's calls ran at a time, so some of the six found its share
  // full; each refusal counted once.
  EXPECT_GE(refused, 1);
  absl::StatusOr<std::string> scrape = HttpGet(server.metrics_port(), "/metrics");
  EXPECT_TRUE(scrape.ok()) << scrape.status();
  const std::vector<MetricSample> rejected =
      FindSamples(ParseMetrics(scrape.value_or("")), "attnscope_rejected_requests_total",
                  {{"reason", "client_limit"}});
  EXPECT_EQ(rejected.size(), 1u);
  if (!rejected.empty()) {
    EXPECT_EQ(rejected[0].value, refused);
  }
  return other;
}

TEST(AdmissionTest, OneKeyHoldsAtMostItsShareAndOtherKeysAreServed) {
  TempDir dir;
  const BertShape shape = MidShape();
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
  ClientOptions other_options;
  other_options.target = (*server)->address();
  other_options.api_key = "key-of-another-client";
  other_options.max_attempts = 1;
  absl::StatusOr<std::unique_ptr<Client>> other = Client::Create(other_options);
  ASSERT_TRUE(other.ok()) << other.status();
  (*other)->Health().IgnoreError();
  v1::TokenizeRequest tokenize;
  tokenize.set_model("mid");
  tokenize.set_text("paris");
  EXPECT_TRUE(
      OtherClientWhileOneIsBusy(**server, shape, "key-of-the-busy-client", "its API key", [&] {
        return (*other)->Tokenize(tokenize).status();
      }).ok());
}

// Without keys a client is its address: 127.0.0.2 is another client than 127.0.0.1.
TEST(AdmissionTest, OneAddressHoldsAtMostItsShareAndOtherAddressesAreServed) {
  TempDir dir;
  const BertShape shape = MidShape();
  ASSERT_TRUE(WriteRandomBert(shape, dir.path()).ok());
  ServerProcess::Options options;
  options.models = {"mid=" + dir.path()};
  options.extra_flags = {"--max_concurrent_requests=4"};
  options.metrics_port = FreeTcpPort();
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string body = R"({"model": "mid", "text": "paris"})";
  const std::string tokenize = absl::StrCat(
      "POST /attnscope.v1.AttentionService/Tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Type: application/json\r\nContent-Length: ",
      body.size(), "\r\n\r\n", body);
  const absl::Status other =
      OtherClientWhileOneIsBusy(**server, shape, "", "its address", [&]() -> absl::Status {
        absl::StatusOr<std::unique_ptr<RawConnection>> connection =
            RawConnection::Open((*server)->http_port(), "127.0.0.2");
        if (!connection.ok()) return connection.status();
        (*connection)->Send(tokenize);
        absl::StatusOr<RawResponse> answer = (*connection)->ReadResponse(absl::Seconds(30));
        if (!answer.ok()) return answer.status();
        if (answer->status != 200) return absl::InternalError(answer->body);
        return absl::OkStatus();
      });
  EXPECT_TRUE(other.ok()) << other;
}

// Two clients keeping calls under way cannot fill the server between them: near the limit each
// may have an equal part of it with room left for one more. Before, two addresses each holding
// their share (half of --max_concurrent_requests) of unread streams had every other client
// refused until their writes timed out.
TEST(AdmissionTest, TwoBusyAddressesLeaveRoomForAThird) {
  ServerProcess::Options options;
  options.models = {"llama=" + Stories260kDir()};
  // A share of 4; from the 7th call on, 8 / (clients + 1) each.
  options.extra_flags = {"--max_concurrent_requests=8", "--write_timeout_seconds=60",
                         "--max_answer_bytes_in_flight=0"};
  options.metrics_port = FreeTcpPort();
  absl::StatusOr<std::unique_ptr<ServerProcess>> started = ServerProcess::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;
  const auto post = [](absl::string_view method, const std::string& body) {
    return absl::StrCat("POST /attnscope.v1.AttentionService/", method,
                        " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                        "Content-Length: ",
                        body.size(), "\r\n\r\n", body);
  };
  // Every layer's attention over 242 tokens, about 30 MB as JSON lines: its writes wait for a
  // reader that never comes, and the call stays under way.
  std::string text;
  for (int i = 0; i < 20; ++i) text += "Once upon a time there was a little girl. ";
  const std::string stream =
      post("StreamAttention", absl::StrCat(R"({"model": "llama", "text": ")", text, R"("})"));
  const auto inflight = [&server]() -> double {
    absl::StatusOr<std::string> scrape = HttpGet(server.metrics_port(), "/metrics");
    if (!scrape.ok()) return -1;
    const std::vector<MetricSample> samples =
        FindSamples(ParseMetrics(*scrape), "attnscope_inflight_requests");
    return samples.empty() ? -1 : samples[0].value;
  };
  std::vector<std::unique_ptr<RawConnection>> held;
  int expected = 0;
  for (const char* source : {"127.0.0.2", "127.0.0.3"}) {
    for (int i = 0; i < 4; ++i) {
      absl::StatusOr<std::unique_ptr<RawConnection>> connection =
          RawConnection::Open(server.http_port(), source);
      ASSERT_TRUE(connection.ok()) << connection.status();
      ASSERT_TRUE((*connection)->Send(stream));
      held.push_back(*std::move(connection));
      // One at a time, so that the order of admission is the order here.
      const absl::Time start = absl::Now();
      ++expected;
      while (inflight() < std::min(expected, 6) && absl::Now() - start < absl::Seconds(20)) {
        absl::SleepFor(absl::Milliseconds(50));
      }
    }
  }
  // The first address holds its 4, the second 2: its third and fourth calls came near the limit.
  EXPECT_EQ(inflight(), 6);

  // The second address's refusals say why, and count as client_limit.
  for (size_t i = 6; i < held.size(); ++i) {
    absl::StatusOr<RawResponse> refused = held[i]->ReadResponse(absl::Seconds(30));
    ASSERT_TRUE(refused.ok()) << refused.status();
    // A stream's answer starts with 200; its one line is the error.
    EXPECT_THAT(refused->body, ::testing::HasSubstr(R"("code":"resource_exhausted")"));
    EXPECT_THAT(refused->body, ::testing::HasSubstr(
                                   "expected at most 2 at once (while the server is near its "
                                   "--max_concurrent_requests and 2 clients have calls under way"));
  }
  // A third address is served meanwhile.
  absl::StatusOr<std::unique_ptr<RawConnection>> third = RawConnection::Open(server.http_port());
  ASSERT_TRUE(third.ok()) << third.status();
  ASSERT_TRUE(
      (*third)->Send(post("Tokenize", R"({"model": "llama", "text": "Once upon a time"})")));
  absl::StatusOr<RawResponse> answer = (*third)->ReadResponse(absl::Seconds(30));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->status, 200) << answer->body;

  absl::StatusOr<std::string> scrape = HttpGet(server.metrics_port(), "/metrics");
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  const std::vector<MetricSample> rejected = FindSamples(
      ParseMetrics(*scrape), "attnscope_rejected_requests_total", {{"reason", "client_limit"}});
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].value, 2);
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

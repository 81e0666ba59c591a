// Client-side load balancing over replicas, as deploy/k8s/service-headless.yaml intends it: three
// real servers on loopback, one client channel whose target names all three. Which server
// answered is read from each server's own attnscope_requests_total.
//
// A dns:/// name that resolves to several loopback addresses would need a resolver entry we do not
// own, so the channel's target is gRPC's static `ipv4:A,B,C` list: the resolver differs, and
// everything after it is the same as for the headless Service's DNS name (the client's service
// config with its round_robin policy and UNAVAILABLE retries, one subchannel per address). The
// dns:/// scheme itself is exercised with an address literal through the CLI's --server.
#include <sys/wait.h>

#include <atomic>
#include <csignal>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

constexpr int kServers = 3;

// Tokenize calls this server has answered OK, from its /metrics.
double TokenizeCalls(const ServerProcess& server) {
  absl::StatusOr<std::string> body = HttpGet(server.metrics_port(), "/metrics");
  EXPECT_TRUE(body.ok()) << body.status();
  const std::vector<MetricSample> samples =
      FindSamples(ParseMetrics(body.value_or("")), "attnscope_requests_total",
                  {{"rpc", "Tokenize"}, {"code", "OK"}});
  return samples.empty() ? 0 : samples[0].value;
}

class LoadBalancingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::string> addresses;
    for (int i = 0; i < kServers; ++i) {
      ServerProcess::Options options;
      options.models = {"bert=" + TinyBertDir()};
      options.metrics_port = FreeTcpPort();
      absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
      ASSERT_TRUE(server.ok()) << server.status();
      addresses.push_back((*server)->address());
      servers_.push_back(*std::move(server));
    }
    target_ = "ipv4:" + absl::StrJoin(addresses, ",");
    tokenize_.set_model("bert");
    tokenize_.set_text("the capital of france is paris");
  }

  // Each server's Tokenize count.
  std::vector<double> Counts() const {
    std::vector<double> counts;
    for (const auto& server : servers_) counts.push_back(server ? TokenizeCalls(*server) : 0);
    return counts;
  }

  std::vector<std::unique_ptr<ServerProcess>> servers_;
  std::string target_;
  v1::TokenizeRequest tokenize_;
};

TEST_F(LoadBalancingTest, OneClientSpreadsCallsOverEveryServerAndCarriesOnWhenOneStops) {
  ClientOptions options;
  options.target = target_;
  options.default_timeout = absl::Seconds(30);
  absl::StatusOr<std::unique_ptr<Client>> created = Client::Create(options);
  ASSERT_TRUE(created.ok()) << created.status();
  Client& client = **created;
  // round_robin picks only among subchannels already READY, and one whose first connection
  // attempt failed on a loaded machine waits out a backoff: call until every server has answered
  // once, so that the counted calls go round all three.
  std::vector<double> warm = Counts();
  const absl::Time warm_deadline = absl::Now() + absl::Seconds(30);
  while ((warm[0] == 0 || warm[1] == 0 || warm[2] == 0) && absl::Now() < warm_deadline) {
    ASSERT_TRUE(client.Tokenize(tokenize_).ok());
    warm = Counts();
  }
  for (int i = 0; i < kServers; ++i) ASSERT_GT(warm[i], 0) << "server " << i << " of " << target_;

  constexpr int kCalls = 30;
  for (int i = 0; i < kCalls; ++i) ASSERT_TRUE(client.Tokenize(tokenize_).ok()) << i;
  const std::vector<double> before = Counts();
  double total = 0;
  for (int i = 0; i < kServers; ++i) {
    total += before[i] - warm[i];
    // Round robin over three ready servers gives 10 each; pick_first would give one all 30.
    EXPECT_GE(before[i] - warm[i], kCalls / kServers - 2) << "server " << i << " of " << target_;
  }
  EXPECT_EQ(total, kCalls);

  // A replica stops (SIGTERM: it drains and answers new calls UNAVAILABLE) while calls go on.
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0};
  std::atomic<int> failed{0};
  std::string first_error;
  std::thread caller([&] {
    while (!stop.load()) {
      absl::StatusOr<v1::TokenizeResponse> answer = client.Tokenize(tokenize_);
      if (answer.ok()) {
        ++ok;
      } else if (failed++ == 0) {
        first_error = answer.status().ToString();
      }
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  servers_[1]->Signal(SIGTERM);
  absl::StatusOr<int> exit_status = servers_[1]->Wait(absl::Seconds(30));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stop = true;
  caller.join();
  ASSERT_TRUE(exit_status.ok()) << exit_status.status();
  EXPECT_TRUE(WIFEXITED(*exit_status) && WEXITSTATUS(*exit_status) == 0);
  EXPECT_EQ(failed.load(), 0) << "first error: " << first_error;
  EXPECT_GT(ok.load(), 10);
  servers_[1].reset();

  // Afterwards the two others share the calls.
  const std::vector<double> during = Counts();
  for (int i = 0; i < kCalls; ++i) ASSERT_TRUE(client.Tokenize(tokenize_).ok()) << i;
  const std::vector<double> after = Counts();
  EXPECT_GE(after[0] - during[0], kCalls / 2 - 2);
  EXPECT_GE(after[2] - during[2], kCalls / 2 - 2);
  EXPECT_EQ(after[0] - during[0] + after[2] - during[2], kCalls);
}

TEST_F(LoadBalancingTest, CliPassesResolverTargetsThrough) {
  // The same multi-address target through the CLI's --server.
  const CommandResult tokenize = RunCommand(
      {CliBinary(), "tokenize", "--server", target_, "--model", "bert", "--text", "paris"});
  EXPECT_EQ(tokenize.exit_code, 0) << tokenize.stderr_text;
  EXPECT_NE(tokenize.stdout_text.find("\"paris\""), std::string::npos) << tokenize.stdout_text;
  double total = 0;
  for (double count : Counts()) total += count;
  EXPECT_EQ(total, 1);

  // dns:/// as the headless Service is addressed (an address literal: no resolver entry needed).
  const std::string dns = "dns:///" + servers_[2]->address();
  const CommandResult health = RunCommand({CliBinary(), "health", "--server", dns});
  EXPECT_EQ(health.exit_code, 0) << health.stderr_text;
  EXPECT_EQ(health.stdout_text, "{\"status\":\"SERVING\"}\n");
  const std::vector<double> before = Counts();
  const CommandResult dns_tokenize =
      RunCommand({CliBinary(), "tokenize", "--server", dns, "--model", "bert", "--text", "paris"});
  EXPECT_EQ(dns_tokenize.exit_code, 0) << dns_tokenize.stderr_text;
  const std::vector<double> after = Counts();
  EXPECT_EQ(after[0], before[0]);
  EXPECT_EQ(after[1], before[1]);
  EXPECT_EQ(after[2], before[2] + 1);
}

}  // namespace
}  // namespace attnscope::testing

// The L7 gRPC balancer, Debian's HAProxy running deploy/haproxy/haproxy.cfg:
// - HAProxy accepts the shipped configuration with docker-compose's replicas;
// - a rolling restart on loopback with real processes: three attnscope-server replicas behind
//   it, eight clients of the client library calling through it without pause (Tokenize and
//   GetAttention unary, StreamAttention streaming), and each replica in turn stopped with SIGTERM
//   and started again on its port. No call may fail: the balancer takes a draining replica out
//   on its gRPC health check (NOT_SERVING, then a refused connection once the replica stops
//   listening) and sends a call refused at connect time to another replica, and the client
//   retries UNAVAILABLE. Which replica is in the rotation is read from HAProxy's own stats; the
//   calls, failures and latencies are printed.
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/integration/deploy_util.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

constexpr char kHaproxy[] = "/usr/sbin/haproxy";
constexpr int kReplicas = 3;
constexpr int kClients = 8;
constexpr char kText[] = "the capital of france is paris";

std::string HaproxyDir() { return SourceDir() + "/deploy/haproxy"; }

TEST(BalancerConfigTest, HaproxyAcceptsTheConfigWithComposeReplicas) {
  const CommandResult check = RunCommand({kHaproxy, "-c", "-f", HaproxyDir() + "/haproxy.cfg", "-f",
                                          HaproxyDir() + "/replicas-compose.cfg"});
  EXPECT_EQ(check.exit_code, 0) << check.stdout_text << check.stderr_text;
  // No warning either: HAProxy names what it ignores or guesses.
  EXPECT_EQ(check.stderr_text.find("WARNING"), std::string::npos) << check.stderr_text;
}

// One replica as HAProxy's stats page reports it.
struct BalancedReplica {
  // "UP", "DOWN", ... (the `status` column).
  std::string status;
  // How many times its health checks took it from UP to DOWN (`chkdown`).
  int down_transitions = 0;
};

// The servers of backend "replicas" by name, from HAProxy's CSV stats.
absl::StatusOr<std::map<std::string, BalancedReplica>> BalancerReplicas(int stats_port) {
  // HAProxy sends the page in chunks, which RawConnection decodes.
  absl::StatusOr<std::unique_ptr<RawConnection>> connection = RawConnection::Open(stats_port);
  if (!connection.ok()) return connection.status();
  (*connection)->Send("GET /stats;csv HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  absl::StatusOr<RawResponse> response = (*connection)->ReadResponse(absl::Seconds(5));
  if (!response.ok()) return response.status();
  const std::string& csv = response->body;
  const std::vector<std::string> lines = absl::StrSplit(csv, '\n', absl::SkipEmpty());
  absl::string_view header_line;
  if (!lines.empty()) header_line = lines[0];
  if (!absl::ConsumePrefix(&header_line, "# ")) {
    return absl::InternalError(absl::StrCat("HAProxy's stats: expected a CSV header, got ", csv));
  }
  const std::vector<std::string> header = absl::StrSplit(header_line, ',');
  std::map<std::string, int> column;
  for (size_t i = 0; i < header.size(); ++i) column[header[i]] = static_cast<int>(i);
  for (const char* name : {"pxname", "svname", "status", "chkdown"}) {
    if (!column.count(name)) return absl::InternalError(absl::StrCat("no column ", name));
  }
  std::map<std::string, BalancedReplica> replicas;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> cells = absl::StrSplit(lines[i], ',');
    if (cells.size() < header.size() || cells[column["pxname"]] != "replicas") continue;
    const std::string& name = cells[column["svname"]];
    if (name == "BACKEND") continue;
    BalancedReplica replica;
    replica.status = cells[column["status"]];
    if (!absl::SimpleAtoi(cells[column["chkdown"]], &replica.down_transitions)) {
      return absl::InternalError(absl::StrCat("chkdown of ", name, ": ", lines[i]));
    }
    replicas[name] = replica;
  }
  return replicas;
}

// OK answers this replica has given, every RPC together, from its /metrics.
double CallsAnswered(const ServerProcess& server) {
  absl::StatusOr<std::string> body = HttpGet(server.metrics_port(), "/metrics");
  EXPECT_TRUE(body.ok()) << body.status();
  double total = 0;
  for (const MetricSample& sample :
       FindSamples(ParseMetrics(body.value_or("")), "attnscope_requests_total", {{"code", "OK"}})) {
    total += sample.value;
  }
  return total;
}

// One call of a client: when it started, how long it took, how it ended.
struct CallRecord {
  absl::Time start;
  absl::Duration latency;
  absl::Status status;
};

// The q-quantile (nearest rank) of `latencies`, sorted, in milliseconds.
double QuantileMs(const std::vector<absl::Duration>& latencies, double q) {
  if (latencies.empty()) return 0;
  const size_t rank = static_cast<size_t>(q * (latencies.size() - 1) + 0.5);
  return absl::ToDoubleMilliseconds(latencies[rank]);
}

class RollingRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    start_ = absl::Now();
    for (int i = 0; i < kReplicas; ++i) {
      ports_.push_back(FreeTcpPort());
      servers_.emplace_back();
      ASSERT_NO_FATAL_FAILURE(StartReplica(i));
    }
    // The shipped balancer with fixed server lines for the loopback replicas, as
    // deploy/haproxy/haproxy.cfg describes.
    std::string backend = "backend replicas from attnscope-replicas\n";
    for (int i = 0; i < kReplicas; ++i) {
      absl::StrAppend(&backend, "  server ", ReplicaName(i), " 127.0.0.1:", ports_[i], "\n");
    }
    const std::string replicas_file = dir_.path() + "/replicas.cfg";
    std::ofstream(replicas_file) << backend;
    balancer_port_ = FreeTcpPort();
    stats_port_ = FreeTcpPort();
    absl::StatusOr<std::unique_ptr<BackgroundProcess>> balancer = BackgroundProcess::Start(
        {"/usr/bin/env", absl::StrCat("ATTNSCOPE_BALANCER_LISTEN=127.0.0.1:", balancer_port_),
         absl::StrCat("ATTNSCOPE_BALANCER_STATS=127.0.0.1:", stats_port_), kHaproxy, "-db", "-f",
         HaproxyDir() + "/haproxy.cfg", "-f", replicas_file});
    ASSERT_TRUE(balancer.ok()) << balancer.status();
    balancer_ = *std::move(balancer);
    for (int i = 0; i < kReplicas; ++i) ASSERT_NO_FATAL_FAILURE(WaitUntilUp(i));
  }

  static std::string ReplicaName(int i) { return absl::StrCat("replica-", i); }

  // Starts replica `i` on its port; it returns once the replica serves (models loaded).
  void StartReplica(int i) {
    ServerProcess::Options options;
    options.models = {"bert=" + TinyBertDir()};
    options.metrics_port = FreeTcpPort();
    options.extra_flags = {absl::StrCat("--listen=127.0.0.1:", ports_[i])};
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    servers_[i] = *std::move(server);
  }

  // Waits until the balancer's health checks have put replica `i` in the rotation.
  void WaitUntilUp(int i) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    std::string last;
    while (absl::Now() < deadline) {
      absl::StatusOr<std::map<std::string, BalancedReplica>> replicas =
          BalancerReplicas(stats_port_);
      if (replicas.ok() && replicas->count(ReplicaName(i))) {
        last = replicas->at(ReplicaName(i)).status;
        if (last == "UP") return;
      } else {
        last = replicas.ok() ? "absent" : replicas.status().ToString();
      }
      ASSERT_TRUE(balancer_->Running()) << balancer_->Log();
      absl::SleepFor(absl::Milliseconds(20));
    }
    FAIL() << ReplicaName(i) << " not UP in the balancer after 30 s: " << last << "\n"
           << balancer_->Log();
  }

  // When SetUp began: the test's whole time, replicas' and balancer's starts included.
  absl::Time start_;
  TempDir dir_;
  std::vector<int> ports_;
  std::vector<std::unique_ptr<ServerProcess>> servers_;
  int balancer_port_ = 0;
  int stats_port_ = 0;
  std::unique_ptr<BackgroundProcess> balancer_;
};

TEST_F(RollingRestartTest, EveryCallSucceedsWhileEachReplicaRestartsInTurn) {
  v1::TokenizeRequest tokenize;
  tokenize.set_model("bert");
  tokenize.set_text(kText);
  v1::GetAttentionRequest attention;
  attention.set_model("bert");
  attention.set_text(kText);

  {
    // A call whose headers a replica takes (64 KiB of metadata) passes the balancer too; at
    // HAProxy's default buffer, 15 KB of headers ended the client's connection.
    ClientOptions options;
    options.target = absl::StrCat("127.0.0.1:", balancer_port_);
    options.api_key = std::string(60000, 'k');
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    absl::StatusOr<v1::TokenizeResponse> answer = (*client)->Tokenize(tokenize);
    EXPECT_TRUE(answer.ok()) << answer.status() << "\n" << balancer_->Log();
  }

  // Eight clients, each with its own channel (one HTTP/2 connection to the balancer) and the
  // library's default retry policy, each cycling through the three RPCs.
  std::atomic<bool> stop{false};
  std::atomic<int> calls{0};
  std::vector<std::vector<CallRecord>> records(kClients);
  std::vector<std::thread> clients;
  // Stops and joins the clients also when an assertion below ends the test early.
  absl::Cleanup join_clients = [&] {
    stop = true;
    for (std::thread& client : clients) client.join();
  };
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      ClientOptions options;
      options.target = absl::StrCat("127.0.0.1:", balancer_port_);
      options.default_timeout = absl::Seconds(30);
      absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
      if (!client.ok()) {
        records[c].push_back({absl::Now(), absl::ZeroDuration(), client.status()});
        return;
      }
      for (int k = c; !stop.load(); ++k) {
        const absl::Time start = absl::Now();
        absl::Status status;
        switch (k % 3) {
          case 0:
            status = (*client)->Tokenize(tokenize).status();
            break;
          case 1:
            status = (*client)->GetAttention(attention).status();
            break;
          default: {
            absl::StatusOr<AttentionResult> streamed = (*client)->StreamAttention(attention);
            // Every layer of the tiny model reassembled, not a stream cut short.
            if (streamed.ok() && streamed->layers.size() != 3) {
              status = absl::InternalError(absl::StrCat("StreamAttention: expected 3 layers, got ",
                                                        streamed->layers.size()));
            } else {
              status = streamed.status();
            }
          }
        }
        records[c].push_back({start, absl::Now() - start, status});
        ++calls;
      }
    });
  }
  auto wait_for_calls = [&](int more) {
    const int target = calls.load() + more;
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (calls.load() < target && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
    EXPECT_GE(calls.load(), target) << "the clients stalled";
  };
  wait_for_calls(10 * kClients);

  // Each replica in turn: SIGTERM, its drain and exit, a new process on the same port, and calls
  // answered by it through the balancer before the next one stops.
  const absl::Time restart_start = absl::Now();
  for (int i = 0; i < kReplicas; ++i) {
    servers_[i]->Signal(SIGTERM);
    absl::StatusOr<int> exit_status = servers_[i]->Wait(absl::Seconds(30));
    ASSERT_TRUE(exit_status.ok()) << exit_status.status() << "\n" << servers_[i]->Log();
    EXPECT_TRUE(WIFEXITED(*exit_status) && WEXITSTATUS(*exit_status) == 0)
        << "exit status " << *exit_status << "\n"
        << servers_[i]->Log();
    ASSERT_NO_FATAL_FAILURE(StartReplica(i));
    ASSERT_NO_FATAL_FAILURE(WaitUntilUp(i));
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (CallsAnswered(*servers_[i]) == 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_GT(CallsAnswered(*servers_[i]), 0) << ReplicaName(i) << " gets no calls after restart";
  }
  const absl::Time restart_end = absl::Now();
  wait_for_calls(10 * kClients);
  std::move(join_clients).Invoke();

  // Every replica went out of the rotation once, on its health checks, and is back in it.
  absl::StatusOr<std::map<std::string, BalancedReplica>> replicas = BalancerReplicas(stats_port_);
  ASSERT_TRUE(replicas.ok()) << replicas.status();
  ASSERT_EQ(replicas->size(), kReplicas);
  for (const auto& [name, replica] : *replicas) {
    EXPECT_EQ(replica.status, "UP") << name;
    EXPECT_EQ(replica.down_transitions, 1) << name;
  }

  // Why each replica left the rotation, from HAProxy's log: its health check answered other than
  // SERVING (the drain) or its port refused the check (the replica had stopped listening).
  int not_serving = 0;
  int refused = 0;
  for (absl::string_view line : absl::StrSplit(balancer_->Log(), '\n')) {
    if (!absl::StrContains(line, " is DOWN, reason: ")) continue;
    if (absl::StrContains(line, "grpc.health.v1 answered other than SERVING")) {
      ++not_serving;
    } else if (absl::StrContains(line, "Connection refused")) {
      ++refused;
    } else {
      ADD_FAILURE() << "taken out for another reason: " << line;
    }
  }
  EXPECT_EQ(not_serving + refused, kReplicas);

  int total = 0;
  int failed = 0;
  std::string first_error;
  std::vector<absl::Duration> during;
  for (const std::vector<CallRecord>& client : records) {
    for (const CallRecord& record : client) {
      ++total;
      if (!record.status.ok() && failed++ == 0) first_error = record.status.ToString();
      if (record.start >= restart_start && record.start < restart_end) {
        during.push_back(record.latency);
      }
    }
  }
  std::sort(during.begin(), during.end());
  std::printf(
      "rolling restart of %d replicas behind HAProxy, %d clients: %d calls, %d failed; %zu calls "
      "started during the %.1f s of restarts, latency p50 %.1f ms, p99 %.1f ms, max %.1f ms; "
      "replicas taken out on NOT_SERVING %d, on a refused connection %d; test %.1f s\n",
      kReplicas, kClients, total, failed, during.size(),
      absl::ToDoubleSeconds(restart_end - restart_start), QuantileMs(during, 0.5),
      QuantileMs(during, 0.99), during.empty() ? 0 : absl::ToDoubleMilliseconds(during.back()),
      not_serving, refused, absl::ToDoubleSeconds(absl::Now() - start_));
  EXPECT_EQ(failed, 0) << "first error: " << first_error << "\n" << balancer_->Log();
  EXPECT_GT(during.size(), 10u * kClients);
}

}  // namespace
}  // namespace attnscope::testing

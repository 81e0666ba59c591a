// What hostile or careless HTTP clients can make attnscope-server do, on a real server over
// loopback sockets: a unary call whose client went away stops computing and is counted CANCELLED;
// request bodies and headers are bounded before they are read, and the API key checked before the
// body is; clients that send a byte a second hold neither the API port nor the metrics port, and
// are cut at the read deadlines; and hostile peers, many at once,
// leave no work running, a normal client served and the memory bounded. Figures (CPU seconds,
// RSS, latency) are measured on the server process through /proc, with margins wide enough for a
// loaded 2-core machine.
#include <algorithm>
#include <atomic>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

constexpr char kPath[] = "/attnscope.v1.AttentionService/";
constexpr int64_t kMiB = int64_t{1} << 20;

std::unique_ptr<ServerProcess> StartServer(std::vector<std::string> models,
                                           std::vector<std::string> flags = {}) {
  ServerProcess::Options options;
  options.models = std::move(models);
  options.metrics_port = FreeTcpPort();
  options.extra_flags = std::move(flags);
  options.extra_flags.push_back("--dashboard_dir=");
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

double RequestsCounted(int metrics_port, const std::string& rpc, const std::string& code) {
  absl::StatusOr<std::string> body = HttpGet(metrics_port, "/metrics");
  if (!body.ok()) return -1;
  double total = 0;
  for (const MetricSample& sample :
       FindSamples(ParseMetrics(*body), "attnscope_requests_total",
                   {{"rpc", rpc}, {"code", code}, {"transport", "http"}})) {
    total += sample.value;
  }
  return total;
}

// A cross-encoder big enough that 1000 integrated-gradients steps at 120 tokens take many
// seconds; the engine checks the call between batches of 8 steps.
BertShape RankerShape() {
  BertShape shape;
  shape.layers = 4;
  shape.hidden = 64;
  shape.heads = 4;
  shape.intermediate = 256;
  shape.max_positions = 128;
  shape.classifier = true;
  return shape;
}

// An Attribute call on the model "ranker" (RankerShape) that computes for many seconds.
std::string HeavyAttribute() {
  const nlohmann::json request = {{"model", "ranker"},
                                  {"text", RandomBertText(RankerShape(), 120)},
                                  {"methods", {"ATTRIBUTION_METHOD_INTEGRATED_GRADIENTS"}},
                                  {"integratedGradientsSteps", 1000}};
  return RawPost("Attribute", request.dump());
}

TEST(HttpLimitsTest, AUnaryCallWhoseClientWentAwayStopsAndIsCountedCancelled) {
  TempDir dir;
  ASSERT_TRUE(WriteRandomBert(RankerShape(), dir.path()).ok());
  std::unique_ptr<ServerProcess> server = StartServer({"ranker=" + dir.path()});
  ASSERT_NE(server, nullptr);

  absl::StatusOr<std::unique_ptr<RawConnection>> client = RawConnection::Open(server->http_port());
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Send(HeavyAttribute()));
  absl::SleepFor(absl::Milliseconds(300));
  (*client)->Close();

  // Within a second the call has stopped: the server then burns (almost) no CPU.
  absl::SleepFor(absl::Seconds(1));
  const double cpu_before = ProcessCpuSeconds(server->pid());
  absl::SleepFor(absl::Seconds(1));
  const double cpu_used = ProcessCpuSeconds(server->pid()) - cpu_before;
  std::cout << "# CPU used in the second after the abandoned call stopped: " << cpu_used << " s\n";
  EXPECT_LT(cpu_used, 0.15) << "the abandoned Attribute kept computing\n" << server->Log();

  double cancelled = 0;
  for (int i = 0; i < 50 && cancelled < 1; ++i) {
    cancelled = RequestsCounted(server->metrics_port(), "Attribute", "CANCELLED");
    if (cancelled < 1) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(cancelled, 1);
  EXPECT_EQ(RequestsCounted(server->metrics_port(), "Attribute", "OK"), 0);
}

TEST(HttpLimitsTest, BodiesAndHeadersAreBoundedBeforeTheyAreRead) {
  std::unique_ptr<ServerProcess> server = StartServer({"bert=" + TinyBertDir()});
  ASSERT_NE(server, nullptr);
  const int port = server->http_port();
  const int64_t rss_before = ProcessRssBytes(server->pid());

  {
    SCOPED_TRACE("100 MB in chunks against the default 4 MiB limit");
    absl::StatusOr<std::unique_ptr<RawConnection>> client = RawConnection::Open(port);
    ASSERT_TRUE(client.ok());
    ASSERT_TRUE((*client)->Send(absl::StrCat("POST ", kPath,
                                             "Tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                             "Content-Type: application/json\r\n"
                                             "Transfer-Encoding: chunked\r\n\r\n")));
    std::thread sender([&] {
      const std::string chunk = absl::StrCat("100000\r\n", std::string(kMiB, ' '), "\r\n");
      for (int i = 0; i < 100 && (*client)->Send(chunk); ++i) {
      }
    });
    absl::StatusOr<RawResponse> answer = (*client)->ReadResponse(absl::Seconds(30));
    sender.join();
    ASSERT_TRUE(answer.ok()) << answer.status() << server->Log();
    EXPECT_EQ(answer->status, 413);
    const nlohmann::json error = JsonErrorOf(*answer);
    EXPECT_EQ(error.value("code", ""), "resource_exhausted");
    EXPECT_NE(error.value("message", "").find("4194304 bytes (--max_request_bytes"),
              std::string::npos)
        << answer->body;
  }
  {
    SCOPED_TRACE("a Content-Length over the limit, and no body sent");
    absl::StatusOr<RawResponse> answer =
        RawExchange(port,
                    absl::StrCat("POST ", kPath,
                                 "Tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                 "Content-Type: application/json\r\nContent-Length: ",
                                 100 * kMiB, "\r\n\r\n"),
                    absl::Seconds(3));
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->status, 413);
    EXPECT_NE(JsonErrorOf(*answer).value("message", "").find("--max_request_bytes"),
              std::string::npos);
  }
  // Both refused calls are counted as calls, as gRPC's are.
  EXPECT_EQ(RequestsCounted(server->metrics_port(), "Tokenize", "RESOURCE_EXHAUSTED"), 2);
  {
    SCOPED_TRACE("1 MB of headers");
    std::string headers;
    for (int i = 0; headers.size() < static_cast<size_t>(kMiB); ++i) {
      absl::StrAppend(&headers, "X-Padding-", i, ": ", std::string(1000, 'p'), "\r\n");
    }
    absl::StatusOr<std::unique_ptr<RawConnection>> client = RawConnection::Open(port);
    ASSERT_TRUE(client.ok());
    std::thread sender([&] {
      (*client)->Send(absl::StrCat("GET ", kPath, "ListModels HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                                   headers, "\r\n"));
    });
    absl::StatusOr<RawResponse> answer = (*client)->ReadResponse(absl::Seconds(10));
    sender.join();
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->status, 431);
    EXPECT_EQ(JsonErrorOf(*answer).value("code", ""), "resource_exhausted");
  }
  {
    SCOPED_TRACE("a 100 KB URI");
    absl::StatusOr<RawResponse> answer =
        RawExchange(port, absl::StrCat("GET ", kPath,
                                       "Tokenize?encoding=json&message=", std::string(100000, 'a'),
                                       " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->status, 414);
    EXPECT_NE(JsonErrorOf(*answer).value("message", "").find("URI"), std::string::npos);
  }
  const int64_t rss_growth = ProcessRssBytes(server->pid()) - rss_before;
  std::cout << "# RSS growth after the oversized requests: " << rss_growth / kMiB << " MiB\n";
  EXPECT_LT(rss_growth, 32 * kMiB);
  // And the server goes on answering.
  absl::StatusOr<RawResponse> answer =
      RawExchange(port, RawPost("Tokenize", R"({"text": "paris"})"));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->status, 200) << answer->body;
}

// A body in a coding the server does not read is refused and the connection closed, so that its
// bytes are never read as a request of their own (request smuggling); a header too long gets 431
// for the header, not 414 for the request line.
TEST(HttpLimitsTest, FramingTheServerDoesNotReadIsRefused) {
  using ::testing::HasSubstr;
  std::unique_ptr<ServerProcess> server = StartServer({"bert=" + TinyBertDir()});
  ASSERT_NE(server, nullptr);
  for (const std::string coding : {"gzip", "identity", "xchunked", "chunked, gzip"}) {
    SCOPED_TRACE(coding);
    absl::StatusOr<std::unique_ptr<RawConnection>> client =
        RawConnection::Open(server->http_port());
    ASSERT_TRUE(client.ok());
    ASSERT_TRUE((*client)->Send(
        absl::StrCat("POST ", kPath,
                     "Tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n",
                     "Transfer-Encoding: ", coding, "\r\n\r\nGET ", kPath,
                     "ListModels HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")));
    absl::StatusOr<RawResponse> answer = (*client)->ReadResponse(absl::Seconds(10));
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->status, 400);
    EXPECT_THAT(answer->body, HasSubstr("Transfer-Encoding"));
    EXPECT_TRUE((*client)->WaitClosed(absl::Seconds(5))) << "the smuggled request was read";
  }

  absl::StatusOr<std::unique_ptr<RawConnection>> client = RawConnection::Open(server->http_port());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->Send(absl::StrCat(
      "POST ", kPath, "Tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ", std::string(70000, 'a'),
      "\r\n\r\n")));
  absl::StatusOr<RawResponse> answer = (*client)->ReadResponse(absl::Seconds(10));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->status, 431);
  EXPECT_THAT(answer->body, HasSubstr("request headers: expected at most"));
}

// After refusing a body, the server reads and drops what its client still sends only up to a
// bound (the body limit and 1 MiB), then closes: a client sending a 100 MB body flat out kept a
// core busy for the two seconds the connection lingered.
TEST(HttpLimitsTest, ARefusedBodyIsDroppedOnlyBrieflyAfterItsAnswer) {
  std::unique_ptr<ServerProcess> server = StartServer({"bert=" + TinyBertDir()});
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::unique_ptr<RawConnection>> client = RawConnection::Open(server->http_port());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->Send(
      absl::StrCat("POST ", kPath,
                   "Tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   "Content-Length: ",
                   100 * kMiB, "\r\n\r\n")));
  absl::StatusOr<RawResponse> answer = (*client)->ReadResponse(absl::Seconds(10));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->status, 413);
  const std::string chunk(64 << 10, 'x');
  int64_t sent = 0;
  while (sent < 256 * kMiB && (*client)->Send(chunk)) sent += static_cast<int64_t>(chunk.size());
  // What the kernel's socket buffers take, plus what the server drops: the 4 MiB body limit and
  // 1 MiB.
  EXPECT_LT(sent, 64 * kMiB) << "the server read on after refusing the body";
}

// A body that does not parse is answered 400 and counted like any call, as gRPC counts its own.
// Every call refused before its method ran is counted, as the methods count theirs: the alerts'
// ratios (refused or failed calls over all calls) need both sides.
TEST(HttpLimitsTest, CallsRefusedBeforeTheirMethodRanAreCounted) {
  std::unique_ptr<ServerProcess> server = StartServer({"bert=" + TinyBertDir()});
  ASSERT_NE(server, nullptr);
  for (const std::string body : {R"({"model":)", R"({"nosuchfield": 1})", "[1, 2]"}) {
    absl::StatusOr<RawResponse> answer =
        RawExchange(server->http_port(), RawPost("GetTrainingRecord", body));
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->status, 400) << body;
  }
  const std::string request_line = absl::StrCat(kPath, "GetTrainingRecord HTTP/1.1\r\n");
  const std::vector<std::pair<std::string, int>> refused = {
      {absl::StrCat("PUT ", request_line, "Host: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}"), 405},
      {absl::StrCat("POST ", request_line,
                    "Host: 127.0.0.1\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}"),
       415},
      {absl::StrCat("POST ", request_line,
                    "Host: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    "Origin: http://elsewhere.example\r\nContent-Length: 2\r\n\r\n{}"),
       403}};
  for (const auto& [request, status] : refused) {
    absl::StatusOr<RawResponse> answer = RawExchange(server->http_port(), request);
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->status, status) << request;
  }
  EXPECT_EQ(RequestsCounted(server->metrics_port(), "GetTrainingRecord", "INVALID_ARGUMENT"), 5);
  EXPECT_EQ(RequestsCounted(server->metrics_port(), "GetTrainingRecord", "PERMISSION_DENIED"), 1);
  // A path that is no method of the service is refused but makes no series of its own.
  absl::StatusOr<RawResponse> unknown =
      RawExchange(server->http_port(), RawPost("NoSuchMethod", "{}"));
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  EXPECT_EQ(unknown->status, 404);
  EXPECT_EQ(RequestsCounted(server->metrics_port(), "NoSuchMethod", "UNIMPLEMENTED"), 0);
}

TEST(HttpLimitsTest, TheKeyIsCheckedBeforeTheBodyIsRead) {
  TempDir dir;
  std::ofstream(dir.path() + "/keys") << "limits-test-key-0042\n";
  std::unique_ptr<ServerProcess> server = StartServer(
      {"bert=" + TinyBertDir()},
      {"--api_keys_file=" + dir.path() + "/keys", absl::StrCat("--max_request_bytes=", 64 * kMiB)});
  ASSERT_NE(server, nullptr);
  const int64_t rss_before = ProcessRssBytes(server->pid());
  absl::StatusOr<std::unique_ptr<RawConnection>> client = RawConnection::Open(server->http_port());
  ASSERT_TRUE(client.ok());
  const int64_t size = 20 * kMiB;
  // The headers alone: the refusal must come without a byte of the body.
  ASSERT_TRUE((*client)->Send(absl::StrCat("POST ", kPath,
                                           "Tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                           "Content-Type: application/json\r\nContent-Length: ",
                                           size, "\r\n\r\n")));
  absl::StatusOr<RawResponse> answer = (*client)->ReadResponse(absl::Seconds(3));
  ASSERT_TRUE(answer.ok()) << answer.status() << server->Log();
  EXPECT_EQ(answer->status, 401);
  EXPECT_EQ(JsonErrorOf(*answer).value("code", ""), "unauthenticated");
  EXPECT_EQ(RequestsCounted(server->metrics_port(), "Tokenize", "UNAUTHENTICATED"), 1);
  // The body sent anyway is not kept.
  const std::string body =
      absl::StrCat(R"({"text": ")", std::string(static_cast<size_t>(size) - 12, 'a'), R"("})");
  (*client)->Send(body);
  absl::SleepFor(absl::Milliseconds(500));
  const int64_t rss_growth = ProcessRssBytes(server->pid()) - rss_before;
  std::cout << "# RSS growth after a keyless 20 MiB body: " << rss_growth / kMiB << " MiB\n";
  EXPECT_LT(rss_growth, 8 * kMiB);
}

// Sends `request` on each of `count` connections to `port`, its first `at_once` bytes at once and
// the others one a second, until destroyed.
class SlowClients {
 public:
  SlowClients(int port, int count, const std::string& request, size_t at_once = 0) {
    for (int i = 0; i < count; ++i) {
      absl::StatusOr<std::unique_ptr<RawConnection>> connection = RawConnection::Open(port);
      EXPECT_TRUE(connection.ok()) << connection.status();
      if (connection.ok()) connections_.push_back(*std::move(connection));
    }
    for (auto& connection : connections_) connection->Send(request.substr(0, at_once));
    thread_ = std::thread([this, request, at_once] {
      for (size_t at = at_once; at < request.size() && !stop_; ++at) {
        for (auto& connection : connections_) connection->Send(request.substr(at, 1));
        for (int i = 0; i < 10 && !stop_; ++i) absl::SleepFor(absl::Milliseconds(100));
      }
    });
  }
  ~SlowClients() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::vector<std::unique_ptr<RawConnection>> connections_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// One client keeping thousands of keep-alive connections idle took every descriptor of the
// process, and new clients of both ports waited in vain: at --max_http_connections the one that
// has waited longest for a request is closed to make room.
TEST(HttpLimitsTest, IdleConnectionsMakeRoomAtTheConnectionLimit) {
  std::unique_ptr<ServerProcess> server =
      StartServer({"bert=" + TinyBertDir()}, {"--max_http_connections=64"});
  ASSERT_NE(server, nullptr);
  const int port = server->http_port();
  const std::string list =
      absl::StrCat("GET ", kPath, "ListModels HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  const int descriptors_before = OpenFileDescriptors(server->pid());
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (int i = 0; i < 160; ++i) {
    absl::StatusOr<std::unique_ptr<RawConnection>> connection = RawConnection::Open(port);
    ASSERT_TRUE(connection.ok()) << connection.status();
    ASSERT_TRUE((*connection)->Send(list));
    absl::StatusOr<RawResponse> answer = (*connection)->ReadResponse(absl::Seconds(10));
    ASSERT_TRUE(answer.ok()) << i << ": " << answer.status();
    EXPECT_EQ(answer->status, 200);
    idle.push_back(*std::move(connection));
  }
  // A new client is answered at once, and the server holds about the limit, not 160.
  const absl::Time start = absl::Now();
  absl::StatusOr<RawResponse> answer =
      RawExchange(port, RawPost("Tokenize", R"({"text": "paris"})"));
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->status, 200) << answer->body;
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_LE(OpenFileDescriptors(server->pid()) - descriptors_before, 64 + 2);
  // The first connections are the ones closed: the longest idle.
  EXPECT_FALSE(idle.front()->Send(list) && idle.front()->ReadResponse(absl::Seconds(2)).ok());
  // The latest are still open and answered.
  ASSERT_TRUE(idle.back()->Send(list));
  absl::StatusOr<RawResponse> again = idle.back()->ReadResponse(absl::Seconds(10));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->status, 200);
}

TEST(HttpLimitsTest, ClientsSendingAByteASecondHoldNothing) {
  std::unique_ptr<ServerProcess> server = StartServer({"bert=" + TinyBertDir()});
  ASSERT_NE(server, nullptr);
  const int64_t rss_before = ProcessRssBytes(server->pid());
  SlowClients api(server->http_port(), 64, RawPost("ListModels", "{}"));
  SlowClients metrics(server->metrics_port(), 64,
                      "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  absl::SleepFor(absl::Milliseconds(1500));
  for (int round = 0; round < 2; ++round) {
    absl::Time start = absl::Now();
    absl::StatusOr<RawResponse> answer =
        RawExchange(server->http_port(), RawPost("ListModels", "{}"), absl::Seconds(5));
    const absl::Duration api_latency = absl::Now() - start;
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->status, 200);
    start = absl::Now();
    answer = RawExchange(server->metrics_port(), "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                         absl::Seconds(5));
    const absl::Duration metrics_latency = absl::Now() - start;
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->status, 200);
    std::cout << "# beside 2 x 64 slow clients: the API answered in "
              << absl::FormatDuration(api_latency) << ", /metrics in "
              << absl::FormatDuration(metrics_latency) << "\n";
    EXPECT_LT(api_latency, absl::Seconds(1));
    EXPECT_LT(metrics_latency, absl::Seconds(1));
  }
  const int64_t rss_growth = ProcessRssBytes(server->pid()) - rss_before;
  std::cout << "# RSS growth with 128 slow clients: " << rss_growth / kMiB << " MiB\n";
  EXPECT_LT(rss_growth, 16 * kMiB);
}

TEST(HttpLimitsTest, SlowHeadersSlowBodiesAndIdleConnectionsAreCutAtTheirDeadlines) {
  std::unique_ptr<ServerProcess> server =
      StartServer({"bert=" + TinyBertDir()},
                  {"--http_header_timeout_seconds=2", "--http_body_timeout_seconds=3",
                   "--http_idle_timeout_seconds=2"});
  ASSERT_NE(server, nullptr);
  const int port = server->http_port();
  struct Case {
    std::string name;
    std::string sent_at_once;
    absl::Duration deadline;
  };
  const std::vector<Case> cases = {
      {"headers", absl::StrCat("POST ", kPath, "ListModels HTTP/1.1\r\nHost: 127"),
       absl::Seconds(2)},
      {"body",
       absl::StrCat("POST ", kPath, "ListModels HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                    "Content-Length: 100\r\n\r\n{"),
       absl::Seconds(3)},
      {"idle", RawPost("ListModels", "{}"), absl::Seconds(2)},
  };
  std::vector<std::thread> threads;
  for (const Case& c : cases) {
    threads.emplace_back([&, c] {
      absl::StatusOr<std::unique_ptr<RawConnection>> client = RawConnection::Open(port);
      ASSERT_TRUE(client.ok());
      const absl::Time start = absl::Now();
      (*client)->Send(c.sent_at_once);
      bool closed = false;
      if (c.name == "idle") {
        absl::StatusOr<RawResponse> answer = (*client)->ReadResponse(absl::Seconds(5));
        ASSERT_TRUE(answer.ok()) << answer.status();
        EXPECT_EQ(answer->status, 200);
        closed = (*client)->WaitClosed(c.deadline + absl::Seconds(3));
      } else {
        // One more byte a second keeps an unbounded reader waiting for ever.
        for (int i = 0; i < 6 && !closed; ++i) {
          closed = (*client)->WaitClosed(absl::Seconds(1));
          if (!closed) (*client)->Send(c.name == "body" ? " " : ".");
        }
      }
      const absl::Duration open = absl::Now() - start;
      EXPECT_TRUE(closed) << c.name << ": still open " << absl::FormatDuration(open) << " later";
      std::cout << "# " << c.name << ": closed after " << absl::FormatDuration(open) << "\n";
      EXPECT_GE(open, c.deadline - absl::Milliseconds(100)) << c.name;
      EXPECT_LE(open, c.deadline + absl::Seconds(1)) << c.name;
    });
  }
  for (std::thread& thread : threads) thread.join();
}

// The highest resident memory of process `pid`, sampled every 50 ms from construction to Stop.
class PeakRss {
 public:
  explicit PeakRss(pid_t pid)
      : thread_([this, pid] {
          while (!stop_) {
            peak_ = std::max(peak_.load(), ProcessRssBytes(pid));
            absl::SleepFor(absl::Milliseconds(50));
          }
        }) {}
  ~PeakRss() { Stop(); }
  int64_t Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return peak_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> peak_{0};
  std::thread thread_;
};

// Hostile peers, first half: with the default flags, 64 clients that leave their heavy
// calls after 0.3 s leave nothing computing a second later, and nothing holding
// --max_concurrent_requests.
// A request that finds every HTTP thread busy and --max_concurrent_requests more waiting is
// refused at once: before, it waited without bound for a thread, with no answer at all.
TEST(HttpLimitsTest, RequestsBeyondTheThreadsAndTheWaitingAreRefusedAtOnce) {
  TempDir dir;
  ASSERT_TRUE(WriteRandomBert(RankerShape(), dir.path()).ok());
  std::unique_ptr<ServerProcess> server =
      StartServer({"ranker=" + dir.path()}, {"--http_threads=1", "--max_concurrent_requests=1"});
  ASSERT_NE(server, nullptr);
  // One heavy call holds the thread, one waits for it.
  std::vector<std::unique_ptr<RawConnection>> heavy;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<RawConnection>> client =
        RawConnection::Open(server->http_port());
    ASSERT_TRUE(client.ok()) << client.status();
    ASSERT_TRUE((*client)->Send(HeavyAttribute()));
    heavy.push_back(*std::move(client));
    absl::SleepFor(absl::Milliseconds(300));
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<RawResponse> refused =
      RawExchange(server->http_port(), RawPost("ListModels", "{}"), absl::Seconds(5));
  ASSERT_TRUE(refused.ok()) << refused.status() << "\n" << server->Log();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(refused->status, 429);
  const nlohmann::json error = JsonErrorOf(*refused);
  EXPECT_EQ(error.value("code", ""), "resource_exhausted");
  EXPECT_THAT(error.value("message", ""), ::testing::HasSubstr("--http_threads"));
  EXPECT_THAT(error.value("message", ""), ::testing::HasSubstr("retry with backoff"));
  absl::StatusOr<std::string> metrics = HttpGet(server->metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok());
  double rejected = 0;
  for (const MetricSample& sample :
       FindSamples(ParseMetrics(*metrics), "attnscope_rejected_requests_total",
                   {{"reason", "concurrency_limit"}})) {
    rejected += sample.value;
  }
  EXPECT_GE(rejected, 1);
  // Each refusal is a call too, so that the share of calls refused stays at most 1.
  EXPECT_EQ(RequestsCounted(server->metrics_port(), "ListModels", "RESOURCE_EXHAUSTED"), rejected);
  // Once the heavy calls have seen their clients go, requests are answered again.
  for (auto& client : heavy) client->Close();
  absl::StatusOr<RawResponse> answered;
  do {
    absl::SleepFor(absl::Milliseconds(200));
    answered = RawExchange(server->http_port(), RawPost("ListModels", "{}"), absl::Seconds(10));
  } while (answered.ok() && answered->status == 429 && absl::Now() - start < absl::Seconds(20));
  ASSERT_TRUE(answered.ok()) << answered.status();
  EXPECT_EQ(answered->status, 200) << answered->body;
}

TEST(HttpLimitsTest, SixtyFourAbandonedHeavyCallsLeaveNoWorkRunning) {
  TempDir dir;
  ASSERT_TRUE(WriteRandomBert(RankerShape(), dir.path()).ok());
  // Every slot for the one test process: no per-client share.
  std::unique_ptr<ServerProcess> server =
      StartServer({"ranker=" + dir.path()}, {"--max_concurrent_requests_per_client=64"});
  ASSERT_NE(server, nullptr);
  const int port = server->http_port();
  const std::string tokenize = RawPost("Tokenize", R"({"model": "ranker", "text": "paris"})");
  ASSERT_TRUE(RawExchange(port, tokenize).ok());
  const int64_t rss_idle = ProcessRssBytes(server->pid());
  PeakRss peak(server->pid());

  constexpr int kClients = 64;
  const std::string heavy = HeavyAttribute();
  std::vector<std::unique_ptr<RawConnection>> clients;
  for (int i = 0; i < kClients; ++i) {
    absl::StatusOr<std::unique_ptr<RawConnection>> client = RawConnection::Open(port);
    ASSERT_TRUE(client.ok()) << client.status();
    ASSERT_TRUE((*client)->Send(heavy));
    clients.push_back(*std::move(client));
  }
  absl::SleepFor(absl::Milliseconds(300));
  clients.clear();
  absl::SleepFor(absl::Seconds(1));
  const double cpu_before = ProcessCpuSeconds(server->pid());
  absl::SleepFor(absl::Seconds(1));
  const double cpu_used = ProcessCpuSeconds(server->pid()) - cpu_before;
  std::cout << "# CPU used in the second that began 1 s after " << kClients
            << " abandoned calls: " << cpu_used << " s\n";
  EXPECT_LT(cpu_used, 0.15) << "abandoned calls kept computing\n" << server->Log();

  const absl::Time start = absl::Now();
  absl::StatusOr<RawResponse> answer = RawExchange(port, tokenize);
  const absl::Duration latency = absl::Now() - start;
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->status, 200) << answer->body;
  EXPECT_LT(latency, absl::Seconds(1));
  double cancelled = 0;
  for (int i = 0; i < 50 && cancelled < kClients; ++i) {
    cancelled = RequestsCounted(server->metrics_port(), "Attribute", "CANCELLED");
    if (cancelled < kClients) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(cancelled, kClients);
  EXPECT_EQ(RequestsCounted(server->metrics_port(), "Attribute", "OK"), 0);
  const int64_t rss_growth = peak.Stop() - rss_idle;
  std::cout << "# then a call answered in " << absl::FormatDuration(latency)
            << "; peak RSS over idle: " << rss_growth / kMiB << " MiB\n";
  EXPECT_LT(rss_growth, 100 * kMiB);
}

// Hostile peers, second half: with the default flags, 64 clients sending their bodies
// a byte a second, 64 sending 100 MB chunked bodies and 64 sending 1 MB of headers, all at once,
// while a normal client's calls are answered within a second and the server's memory stays
// within 100 MB of its idle level.
TEST(HttpLimitsTest, HostileClientsAtOnceLeaveANormalClientServedAndMemoryBounded) {
  std::unique_ptr<ServerProcess> server = StartServer({"bert=" + TinyBertDir()});
  ASSERT_NE(server, nullptr);
  const int port = server->http_port();
  const std::string tokenize = RawPost("Tokenize", R"({"text": "paris"})");
  ASSERT_TRUE(RawExchange(port, tokenize).ok());
  const int64_t rss_idle = ProcessRssBytes(server->pid());
  PeakRss peak(server->pid());

  constexpr int kClients = 64;
  const std::string slow_body = absl::StrCat(R"({"text": ")", std::string(1000, 'a'), R"("})");
  const std::string slow_request = RawPost("Tokenize", slow_body);
  SlowClients slow(port, kClients, slow_request, slow_request.size() - slow_body.size());

  // Refused as too large (413), or as more than the server takes in bodies at once (429).
  std::atomic<int> bodies_refused{0};
  std::atomic<int> headers_too_large{0};
  std::vector<std::thread> hostile;
  for (int i = 0; i < kClients; ++i) {
    hostile.emplace_back([&] {
      absl::StatusOr<std::unique_ptr<RawConnection>> client = RawConnection::Open(port);
      ASSERT_TRUE(client.ok()) << client.status();
      (*client)->Send(absl::StrCat("POST ", kPath,
                                   "Tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                   "Content-Type: application/json\r\n"
                                   "Transfer-Encoding: chunked\r\n\r\n"));
      std::thread sender([&] {
        const std::string chunk = absl::StrCat("100000\r\n", std::string(kMiB, ' '), "\r\n");
        for (int j = 0; j < 100 && (*client)->Send(chunk); ++j) {
        }
      });
      absl::StatusOr<RawResponse> answer = (*client)->ReadResponse(absl::Seconds(60));
      sender.join();
      if (!answer.ok() || (answer->status != 413 && answer->status != 429)) return;
      EXPECT_EQ(JsonErrorOf(*answer).value("code", ""), "resource_exhausted") << answer->body;
      ++bodies_refused;
    });
    hostile.emplace_back([&] {
      std::string headers;
      for (int j = 0; headers.size() < static_cast<size_t>(kMiB); ++j) {
        absl::StrAppend(&headers, "X-Padding-", j, ": ", std::string(1000, 'p'), "\r\n");
      }
      absl::StatusOr<std::unique_ptr<RawConnection>> client = RawConnection::Open(port);
      ASSERT_TRUE(client.ok()) << client.status();
      std::thread sender([&] {
        (*client)->Send(absl::StrCat("GET ", kPath, "ListModels HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                                     headers, "\r\n"));
      });
      absl::StatusOr<RawResponse> answer = (*client)->ReadResponse(absl::Seconds(60));
      sender.join();
      if (answer.ok() && answer->status == 431) ++headers_too_large;
    });
  }

  // The normal client calls every 100 ms until the hostile ones are done, and for 5 s at least.
  std::atomic<bool> hostile_done{false};
  std::thread waiter([&] {
    for (std::thread& thread : hostile) thread.join();
    hostile_done = true;
  });
  const absl::Time start = absl::Now();
  absl::Duration slowest;
  int calls = 0;
  while (!hostile_done || absl::Now() - start < absl::Seconds(5)) {
    const absl::Time sent = absl::Now();
    absl::StatusOr<RawResponse> answer = RawExchange(port, tokenize, absl::Seconds(10));
    const absl::Duration latency = absl::Now() - sent;
    if (!answer.ok()) {
      // Not an ASSERT: the hostile clients' threads are joined below.
      ADD_FAILURE() << answer.status();
      break;
    }
    EXPECT_EQ(answer->status, 200) << answer->body;
    slowest = std::max(slowest, latency);
    ++calls;
    absl::SleepFor(absl::Milliseconds(100));
  }
  waiter.join();
  const absl::Duration hostile_time = absl::Now() - start;
  const int64_t rss_growth = peak.Stop() - rss_idle;
  std::cout << "# " << kClients << " slow-body, " << kClients << " chunked 100 MB and " << kClients
            << " 1 MB-header clients over " << absl::FormatDuration(hostile_time) << ": " << calls
            << " normal calls, the slowest answered in " << absl::FormatDuration(slowest)
            << "; peak RSS over idle: " << rss_growth / kMiB << " MiB\n";
  EXPECT_LT(slowest, absl::Seconds(1));
  EXPECT_LT(rss_growth, 100 * kMiB);
  EXPECT_EQ(bodies_refused, kClients);
  EXPECT_EQ(headers_too_large, kClients);
}

}  // namespace
}  // namespace attnscope::testing

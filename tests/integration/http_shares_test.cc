// What one client's slow or unfinished HTTP traffic may hold of what the server shares among its
// clients, on a real server over loopback sockets: the request bodies being read at once (one
// address's share, a part kept free for another), and the write of a large answer to a slow but
// steady reader (a deadline per piece, not for the whole).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
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

std::unique_ptr<ServerProcess> StartServer(const std::string& model,
                                           std::vector<std::string> flags = {}) {
  ServerProcess::Options options;
  options.models = {model};
  options.metrics_port = FreeTcpPort();
  options.extra_flags = std::move(flags);
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

// A client reading a large answer slowly but steadily gets all of it: the write deadline is per
// piece of the answer, not for the whole (before, a client reading an 80 MB answer at 100 KB/s was
// cut after 7 MB, its call counted OK).
TEST(HttpSharesTest, ASlowSteadyReaderGetsTheWholeAnswer) {
  std::unique_ptr<ServerProcess> server =
      StartServer("llama=" + Stories260kDir(), {"--write_timeout_seconds=2"});
  ASSERT_NE(server, nullptr);
  std::string text;
  for (int i = 0; i < 20; ++i) text += "Once upon a time there was a little girl. ";
  const std::string request =
      RawPost("GetAttention", nlohmann::json{{"model", "llama"}, {"text", text}}.dump());
  // A small receive window, so that the server's writes wait on this reader.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  const int window = 64 << 10;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &window, sizeof(window));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(server->http_port()));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  // About 2.6 MB/s: the answer (12 MB of JSON) takes several times the write timeout in all,
  // and each MiB a fraction of it.
  std::string received;
  const absl::Time start = absl::Now();
  std::vector<char> buffer(64 << 10);
  while (absl::Now() - start < absl::Seconds(60)) {
    const ssize_t n = recv(fd, buffer.data(), buffer.size(), 0);
    if (n <= 0) break;
    received.append(buffer.data(), static_cast<size_t>(n));
    const size_t head_end = received.find("\r\n\r\n");
    if (head_end != std::string::npos) {
      const size_t length_at = received.find("Content-Length: ");
      ASSERT_NE(length_at, std::string::npos) << received.substr(0, head_end);
      const size_t length = std::stoul(received.substr(length_at + 16));
      if (received.size() >= head_end + 4 + length) break;
    }
    absl::SleepFor(absl::Milliseconds(25));
  }
  const absl::Duration took = absl::Now() - start;
  close(fd);
  ASSERT_EQ(received.substr(0, 12), "HTTP/1.1 200") << received.substr(0, 300);
  const size_t head_end = received.find("\r\n\r\n");
  const size_t length = std::stoul(received.substr(received.find("Content-Length: ") + 16));
  EXPECT_GT(length, size_t{8} << 20);
  EXPECT_EQ(received.size() - head_end - 4, length) << "after " << took;
  EXPECT_GT(took, absl::Seconds(2)) << "the reader was not slower than the write timeout";
  const nlohmann::json answer =
      nlohmann::json::parse(received.substr(head_end + 4), nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(answer.is_object() && answer.contains("layers"));
}

// One client address holds at most half of the bodies the server reads at once (32 MiB), less
// near the limit, and an equal part stays free for an address sending none: before, one client's
// eight unfinished 4 MiB bodies held all of it, and every other client's body over 64 KiB was
// refused (429) until they timed out 30 s later; then three addresses still filled it.
TEST(HttpSharesTest, ClientsUnfinishedBodiesLeaveRoomForAnother) {
  std::unique_ptr<ServerProcess> server = StartServer("bert=" + TinyBertDir());
  ASSERT_NE(server, nullptr);
  const int port = server->http_port();
  const std::string body(4 * kMiB - 16, ' ');
  std::vector<std::unique_ptr<RawConnection>> held;
  std::mutex held_mutex;
  int refused_in_all = 0;
  // Starts `bodies` unfinished bodies from `source` at once; returns how many were refused.
  auto hold_bodies = [&](const std::string& source, int bodies) {
    std::vector<absl::StatusOr<RawResponse>> answers(bodies, absl::UnknownError("not read"));
    std::vector<std::thread> senders;
    for (int i = 0; i < bodies; ++i) {
      senders.emplace_back([&, i] {
        absl::StatusOr<std::unique_ptr<RawConnection>> connection =
            RawConnection::Open(port, source);
        if (!connection.ok()) return;
        // All but the last 10 bytes: the body stays unfinished, and counted, until it times out.
        (*connection)
            ->Send(absl::StrCat("POST ", kPath,
                                "Tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                "Content-Type: application/json\r\nContent-Length: ",
                                body.size() + 10, "\r\n\r\n", body));
        answers[i] = (*connection)->ReadResponse(absl::Seconds(3));
        std::lock_guard<std::mutex> lock(held_mutex);
        held.push_back(*std::move(connection));
      });
    }
    for (std::thread& sender : senders) sender.join();
    int refused = 0;
    for (const absl::StatusOr<RawResponse>& answer : answers) {
      if (!answer.ok()) continue;  // still waiting for the rest of its body
      ++refused;
      EXPECT_EQ(answer->status, 429);
      EXPECT_THAT(JsonErrorOf(*answer).value("message", ""),
                  ::testing::HasSubstr("would hold over its share of the 33554432 bytes"));
    }
    refused_in_all += refused;
    return refused;
  };
  // Another client's large body: JSON spaces around a small request.
  auto another_client_is_read = [&] {
    absl::StatusOr<RawResponse> answer = RawExchange(
        port,
        RawPost("Tokenize", absl::StrCat(R"({"text": "paris")", std::string(3 * kMiB, ' '), "}")));
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->status, 200) << answer->body.substr(0, 300);
  };
  // Half of 32 MiB holds at most four bodies of 4 MiB less the 64 KiB of each that is not counted
  // (fewer when the bodies' pieces arrive interleaved and each passes the share at once).
  EXPECT_GE(hold_bodies("127.0.0.2", 8), 4);
  another_client_is_read();
  // Two more addresses: past three quarters, a second body of either would take the total into
  // the part kept free.
  EXPECT_GE(hold_bodies("127.0.0.3", 4), 2);
  EXPECT_GE(hold_bodies("127.0.0.4", 4), 3);
  another_client_is_read();
  // Operators tell these refusals from the concurrency limit's.
  absl::StatusOr<std::string> metrics = HttpGet(server->metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const std::vector<MetricSample> samples = ParseMetrics(*metrics);
  for (const auto& [reason, count] :
       {std::pair<std::string, int>{"body_bytes_client_limit", refused_in_all},
        {"body_bytes_limit", 0},
        {"concurrency_limit", 0}}) {
    const std::vector<MetricSample> found =
        FindSamples(samples, "attnscope_rejected_requests_total", {{"reason", reason}});
    ASSERT_EQ(found.size(), 1u) << reason;
    EXPECT_EQ(found[0].value, count) << reason;
  }
}

}  // namespace
}  // namespace attnscope::testing

#include "server/metrics_http.h"

#include <netinet/in.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace attnscope::server {

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    int port, std::vector<std::shared_ptr<prometheus::Collectable>> collectables) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t length = sizeof(address);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(fd, 16) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const std::string error = std::strerror(errno);
    if (fd >= 0) close(fd);
    return absl::UnavailableError(absl::StrCat("--metrics_port ", port, ": cannot listen (", error,
                                               "); choose a free port or 0 to disable"));
  }
  return std::unique_ptr<MetricsHttpServer>(
      new MetricsHttpServer(fd, ntohs(address.sin_port), std::move(collectables)));
}

MetricsHttpServer::MetricsHttpServer(
    int fd, int port, std::vector<std::shared_ptr<prometheus::Collectable>> collectables)
    : fd_(fd), port_(port), collectables_(std::move(collectables)) {
  thread_ = std::thread([this] { Serve(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  stopping_.store(true);
  // Wakes the blocked accept().
  shutdown(fd_, SHUT_RDWR);
  thread_.join();
  close(fd_);
}

void MetricsHttpServer::Serve() {
  while (!stopping_.load()) {
    const int client = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    // A silent client must not hold the only thread for long.
    timeval timeout{5, 0};
    setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    Answer(client);
    close(client);
  }
}

void MetricsHttpServer::Answer(int client) const {
  std::string request;
  char buffer[4096];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 65536) {
    const ssize_t n = recv(client, buffer, sizeof(buffer), 0);
    if (n <= 0) return;
    request.append(buffer, static_cast<size_t>(n));
  }
  std::string status = "200 OK";
  std::string body;
  if (absl::StartsWith(request, "GET /metrics ") || absl::StartsWith(request, "GET /metrics?")) {
    std::vector<prometheus::MetricFamily> families;
    for (const auto& collectable : collectables_) {
      for (auto& family : collectable->Collect()) families.push_back(std::move(family));
    }
    body = prometheus::TextSerializer().Serialize(families);
  } else {
    status = "404 Not Found";
    body = "attnscope-server serves GET /metrics\n";
  }
  const std::string response =
      absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: text/plain; version=0.0.4\r\n",
                   "Content-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
  size_t sent = 0;
  while (sent < response.size()) {
    const ssize_t n = send(client, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

}  // namespace attnscope::server

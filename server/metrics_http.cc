#include "server/metrics_http.h"

#include <httplib.h>
#include <prometheus/text_serializer.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/listen_address.h"

namespace attnscope::server {

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& host, int port,
    std::vector<std::shared_ptr<prometheus::Collectable>> collectables) {
  auto http = std::make_unique<httplib::Server>();
  http->set_socket_options(SetExclusiveListenerOptions);
  http->Get("/metrics", [collectables](const httplib::Request&, httplib::Response& response) {
    std::vector<prometheus::MetricFamily> families;
    for (const auto& collectable : collectables) {
      for (auto& family : collectable->Collect()) families.push_back(std::move(family));
    }
    response.set_content(prometheus::TextSerializer().Serialize(families),
                         "text/plain; version=0.0.4; charset=utf-8");
  });
  const int bound =
      port == 0 ? http->bind_to_any_port(host) : (http->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("--metrics_host '", host, "' --metrics_port ", port,
                                               ": cannot listen there; choose a free port, a "
                                               "local address, or port 0 to disable metrics"));
  }
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(http), bound));
}

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<httplib::Server> http, int port)
    : http_(std::move(http)), port_(port) {
  thread_ = std::thread([this] { http_->listen_after_bind(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  http_->stop();
  thread_.join();
}

}  // namespace attnscope::server

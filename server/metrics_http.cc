#include "server/metrics_http.h"

#include <prometheus/text_serializer.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/host_check.h"
#include "server/http_connection.h"

namespace attnscope::server {

class MetricsHandler : public HttpHandler {
 public:
  MetricsHandler(std::vector<std::shared_ptr<prometheus::Collectable>> collectables,
                 HostCheck host_check)
      : collectables_(std::move(collectables)), host_check_(std::move(host_check)) {}

  std::optional<HttpResponse> Screen(const HttpRequestHeader& request, HttpFields&) override {
    if (absl::Status host = host_check_.Check(request); !host.ok()) return ErrorResponse(host);
    const std::string target(request.target());
    if (target.substr(0, target.find('?')) != "/metrics") {
      return ErrorResponse(absl::NotFoundError(absl::StrCat(
          "path '", target.substr(0, 200), "': not found; the metrics are at GET /metrics")));
    }
    if (request.method() != boost::beast::http::verb::get &&
        request.method() != boost::beast::http::verb::head) {
      HttpResponse refusal =
          ErrorResponse(absl::InvalidArgumentError(
                            absl::StrCat("HTTP method '", std::string(request.method_string()),
                                         "' for /metrics: expected GET or HEAD")),
                        405);
      refusal.set(boost::beast::http::field::allow, "GET, HEAD");
      return refusal;
    }
    return std::nullopt;
  }

  // Scrapes have no body and the port lets them wait (max_waiting 0): nothing to count.
  void OnRefused(const HttpRequestHeader&, const absl::Status&, int, absl::string_view) override {}

  void Handle(const HttpRequest&, HttpExchange& exchange) override {
    std::vector<prometheus::MetricFamily> families;
    for (const auto& collectable : collectables_) {
      for (auto& family : collectable->Collect()) families.push_back(std::move(family));
    }
    HttpResponse response(boost::beast::http::status::ok, 11);
    response.set(boost::beast::http::field::content_type,
                 "text/plain; version=0.0.4; charset=utf-8");
    response.body() = prometheus::TextSerializer().Serialize(families);
    exchange.Respond(std::move(response));
  }

 private:
  const std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  const HostCheck host_check_;
};

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& host, int port,
    std::vector<std::shared_ptr<prometheus::Collectable>> collectables, const HttpLimits& limits,
    const std::vector<std::string>& allowed_hosts) {
  HttpListener::Options options;
  options.host = host;
  options.port = port;
  options.limits = limits;
  // A GET carries no body; a scraper sending one gets 413 at once.
  options.limits.max_body_bytes = 0;
  options.limits.body_limit_source = "a GET of /metrics takes none";
  // Scrapes are answered in milliseconds; two let a slow collection not hold up the next scraper.
  options.workers = 2;
  absl::StatusOr<std::unique_ptr<HttpListener>> listener = HttpListener::Bind(options);
  if (!listener.ok()) {
    return absl::UnavailableError(
        absl::StrCat("--metrics_host '", host, "' --metrics_port ", port, ": cannot listen there (",
                     listener.status().message(),
                     "); choose a free port, a local address, or port 0 to disable metrics"));
  }
  auto handler = std::make_unique<MetricsHandler>(
      std::move(collectables), HostCheck((*listener)->loopback(), allowed_hosts));
  (*listener)->Start(handler.get());
  return std::unique_ptr<MetricsHttpServer>(
      new MetricsHttpServer(std::move(handler), *std::move(listener)));
}

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<MetricsHandler> handler,
                                     std::unique_ptr<HttpListener> listener)
    : handler_(std::move(handler)), listener_(std::move(listener)) {}

MetricsHttpServer::~MetricsHttpServer() = default;

int MetricsHttpServer::port() const { return listener_->port(); }

}  // namespace attnscope::server

// The HTTP endpoint serving GET /metrics in the Prometheus text format, on the transport of
// server/http_connection.h, so that slow or idle scrapers hold no thread and the same bounds and
// deadlines apply as on the API's port.
//
// Why not prometheus::Exposer: its civetweb worker threads get a fixed 100 KiB stack, and in a
// process that loads LibTorch the static TLS of libopenblas, libglog and libtorch_cpu alone is
// larger, so civetweb cannot start a single thread ("Cannot create first worker thread"). The
// workers here are std::threads with the default stack size.
#ifndef ATTNSCOPE_SERVER_METRICS_HTTP_H_
#define ATTNSCOPE_SERVER_METRICS_HTTP_H_

#include <prometheus/collectable.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/http_limits.h"

namespace attnscope::server {

class HttpListener;
class MetricsHandler;

class MetricsHttpServer {
 public:
  // Listens on `host`:`port` (0 = any free port) and serves `collectables` at /metrics, with the
  // deadlines of `limits` (its body limit is not used: /metrics takes no body). On a loopback
  // `host`, scrapes must name a loopback host or one of `allowed_hosts` (server/host_check.h; the
  // API port's --http_allowed_hosts), so that a rebound DNS name cannot read the metrics from a
  // browser. Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& host, int port,
      std::vector<std::shared_ptr<prometheus::Collectable>> collectables,
      const HttpLimits& limits = HttpLimits(), const std::vector<std::string>& allowed_hosts = {});
  // Stops accepting, closes idle connections and waits for the scrapes in flight.
  ~MetricsHttpServer();

  // The bound port.
  int port() const;

 private:
  MetricsHttpServer(std::unique_ptr<MetricsHandler> handler,
                    std::unique_ptr<HttpListener> listener);

  std::unique_ptr<MetricsHandler> handler_;
  std::unique_ptr<HttpListener> listener_;
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_METRICS_HTTP_H_

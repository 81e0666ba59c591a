// The HTTP endpoint serving GET /metrics in the Prometheus text format, on cpp-httplib.
//
// Why not prometheus::Exposer: its civetweb worker threads get a fixed 100 KiB stack, and in a
// process that loads LibTorch the static TLS of libopenblas, libglog and libtorch_cpu alone is
// larger, so civetweb cannot start a single thread ("Cannot create first worker thread").
// cpp-httplib's workers are std::threads with the default stack size.
#ifndef ATTNSCOPE_SERVER_METRICS_HTTP_H_
#define ATTNSCOPE_SERVER_METRICS_HTTP_H_

#include <prometheus/collectable.h>

#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace attnscope::server {

class MetricsHttpServer {
 public:
  // Listens on `host`:`port` (0 = any free port) and serves `collectables` at /metrics.
  // Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& host, int port,
      std::vector<std::shared_ptr<prometheus::Collectable>> collectables);
  ~MetricsHttpServer();

  // The bound port.
  int port() const { return port_; }

 private:
  MetricsHttpServer(std::unique_ptr<httplib::Server> http, int port);

  std::unique_ptr<httplib::Server> http_;
  const int port_;
  std::thread thread_;
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_METRICS_HTTP_H_

// A minimal HTTP/1.1 endpoint serving GET /metrics in the Prometheus text format.
//
// Why not prometheus::Exposer: its civetweb worker threads get a fixed 100 KiB stack, and in a
// process that loads LibTorch the static TLS of libopenblas, libglog and libtorch_cpu alone is
// larger, so civetweb cannot start a single thread ("Cannot create first worker thread"). This
// server's thread has the default stack size. Scrapes are rare and tiny, so one thread answers them
// in turn.
#ifndef ATTNSCOPE_SERVER_METRICS_HTTP_H_
#define ATTNSCOPE_SERVER_METRICS_HTTP_H_

#include <prometheus/collectable.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace attnscope::server {

class MetricsHttpServer {
 public:
  // Listens on 0.0.0.0:`port` (0 = any free port) and serves `collectables` at /metrics.
  // Unavailable when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      int port, std::vector<std::shared_ptr<prometheus::Collectable>> collectables);
  ~MetricsHttpServer();

  // The bound port.
  int port() const { return port_; }

 private:
  MetricsHttpServer(int fd, int port,
                    std::vector<std::shared_ptr<prometheus::Collectable>> collectables);
  void Serve();
  void Answer(int client) const;

  const int fd_;
  const int port_;
  const std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_METRICS_HTTP_H_

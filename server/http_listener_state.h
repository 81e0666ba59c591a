// What an HttpListener shares with its connections: its limits, the handler, the count of calls
// and of bodies being read, the open connections (for the drain), the threads and the acceptor.
// Internal to server/http_listener.cc (accepting, starting, the drain) and
// server/http_connection.cc (each connection).
#ifndef ATTNSCOPE_SERVER_HTTP_LISTENER_STATE_H_
#define ATTNSCOPE_SERVER_HTTP_LISTENER_STATE_H_

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/time/time.h"
#include "server/http_connection.h"

namespace attnscope::server {
namespace http_internal {

// Threads running every connection's reads and writes; they never wait for a call.
inline constexpr int kIoThreads = 2;
// After the grace period, how long calls get to write their last words (a stream's error line)
// before the connections still open are closed.
inline constexpr absl::Duration kHardStopDelay = absl::Milliseconds(500);

inline std::chrono::steady_clock::duration ToSteady(absl::Duration duration) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      absl::ToChronoNanoseconds(duration));
}

// An open connection, as the listener's drain sees it.
class ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  // Closes the connection if it waits for a request; otherwise it closes once answered.
  virtual void Drain() = 0;
  virtual void ForceClose() = 0;
  // Since when (steady clock, nanoseconds) the connection has waited for its next request: idle
  // between requests, or still reading one's headers (a TLS handshake too); INT64_MAX while a
  // request's body is read or the request is answered. Any thread.
  virtual int64_t WaitingSince() const = 0;
};

}  // namespace http_internal

class HttpListener::State {
 public:
  explicit State(const Options& options)
      : max_connections(options.max_connections),
        limits(options.limits),
        max_buffered_body_bytes(
            std::max(options.limits.max_buffered_body_bytes, options.limits.max_body_bytes)),
        workers_count(options.workers),
        max_waiting(options.max_waiting),
        workers(static_cast<size_t>(options.workers)) {}

  void Register(http_internal::ConnectionBase* connection,
                std::weak_ptr<http_internal::ConnectionBase> weak) {
    std::lock_guard<std::mutex> lock(mutex);
    connections.emplace(connection, std::move(weak));
  }
  void Unregister(http_internal::ConnectionBase* connection) {
    std::lock_guard<std::mutex> lock(mutex);
    connections.erase(connection);
    if (connections.empty()) changed.notify_all();
  }
  // Runs `action` on every open connection.
  template <typename Action>
  void ForEachConnection(Action action) {
    std::vector<std::shared_ptr<http_internal::ConnectionBase>> open;
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (auto& [raw, weak] : connections) {
        if (std::shared_ptr<http_internal::ConnectionBase> connection = weak.lock())
          open.push_back(connection);
      }
    }
    for (auto& connection : open) action(*connection);
  }

  void Accept();
  // At Options::max_connections, closes the connection that has waited longest for a request to
  // make room for a new one: a client keeping thousands of idle keep-alive connections took
  // every descriptor of the process, and new clients of both ports waited in vain. False when
  // every connection is being answered (the new one is then refused).
  bool MakeRoom();
  // Serves one accepted connection until it closes (server/http_connection.cc).
  void Serve(boost::beast::tcp_stream stream);
  void Serve(boost::beast::ssl_stream<boost::beast::tcp_stream> stream);

  // Connections open at once (Options::max_connections).
  const int max_connections;
  const HttpLimits limits;
  // At least one largest body.
  const int64_t max_buffered_body_bytes;

  // Counts `more` bytes of a body being read from `client` (its source address; "" = unknown: no
  // share). False, counting nothing, when they would take the bodies being read on every
  // connection past max_buffered_body_bytes, or `client`'s bodies past OverClientShare
  // (*over_share set): one client sending eight unfinished 4 MiB bodies filled the 32 MiB, and
  // every other client's body over 64 KiB was refused until they timed out. Any thread.
  // `counted`: what this body has counted so far (a client's other bodies are what the share
  // rules weigh: one body is never stopped halfway by them).
  bool CountBodyBytes(const std::string& client, int64_t counted, int64_t more, bool* over_share);
  // Gives back bytes CountBodyBytes counted for `client`.
  void UncountBodyBytes(const std::string& client, int64_t bytes);
  // Whether a client whose bodies would hold `mine` once the bodies of all `clients` hold `total`
  // is over its share: half of max_buffered_body_bytes, and where `total` is in its last quarter
  // an equal part among the clients and one more (as the call and answer shares), never less than
  // one largest body; or, there, `total` in the last such part, which stays free for an address
  // sending none.
  bool OverClientShare(int64_t total, size_t clients, int64_t mine) const;
  HttpHandler* handler = nullptr;
  const int workers_count;
  const int max_waiting;
  // Requests handed to the workers and not yet done with: answered now or waiting for a worker.
  std::atomic<int> calls{0};
  std::atomic<bool> draining{false};
  std::atomic<bool> grace_over{false};
  bool hard_stopped = false;  // under mutex
  bool shut_down = false;     // under mutex
  std::mutex mutex;
  std::condition_variable changed;
  // What the bodies being read count against max_buffered_body_bytes, in all and per client.
  std::mutex body_mutex;
  int64_t buffered_body_bytes = 0;                                         // under body_mutex
  std::unordered_map<std::string, int64_t> buffered_body_bytes_by_client;  // under body_mutex
  std::unordered_map<http_internal::ConnectionBase*, std::weak_ptr<http_internal::ConnectionBase>>
      connections;
  std::optional<boost::asio::ssl::context> tls;
  boost::asio::thread_pool workers;
  std::vector<std::thread> io_threads;
  int port = 0;
  bool loopback = false;
  // Destroyed first: the handlers it still holds may end connections, which use the above.
  boost::asio::io_context io{http_internal::kIoThreads};
  boost::asio::strand<boost::asio::io_context::executor_type> strand{io.get_executor()};
  boost::asio::ip::tcp::acceptor acceptor{strand};
  boost::asio::steady_timer accept_retry{strand};
  boost::asio::steady_timer grace_timer{strand};
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_HTTP_LISTENER_STATE_H_

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "server/http_connection.h"
#include "server/http_listener_state.h"
#include "server/listen_address.h"
#include "server/security.h"

namespace attnscope::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using http_internal::ConnectionBase;
using http_internal::kHardStopDelay;
using http_internal::kIoThreads;
using http_internal::ToSteady;

bool HttpListener::State::CountBodyBytes(const std::string& client, int64_t counted, int64_t more,
                                         bool* over_share) {
  std::lock_guard<std::mutex> lock(body_mutex);
  const int64_t total = buffered_body_bytes + more;
  if (total > max_buffered_body_bytes) return false;
  if (!client.empty()) {
    const auto found = buffered_body_bytes_by_client.find(client);
    const int64_t mine = found == buffered_body_bytes_by_client.end() ? 0 : found->second;
    const size_t clients =
        buffered_body_bytes_by_client.size() + (found == buffered_body_bytes_by_client.end());
    // Only a client's other bodies weigh: one body is never stopped halfway by the shares.
    if (mine > counted && OverClientShare(total, clients, mine + more)) {
      *over_share = true;
      return false;
    }
    buffered_body_bytes_by_client[client] = mine + more;
  }
  buffered_body_bytes = total;
  return true;
}

void HttpListener::State::UncountBodyBytes(const std::string& client, int64_t bytes) {
  if (bytes == 0) return;
  std::lock_guard<std::mutex> lock(body_mutex);
  buffered_body_bytes -= bytes;
  if (client.empty()) return;
  const auto found = buffered_body_bytes_by_client.find(client);
  if (found == buffered_body_bytes_by_client.end()) return;
  found->second -= bytes;
  if (found->second <= 0) buffered_body_bytes_by_client.erase(found);
}

bool HttpListener::State::OverClientShare(int64_t total, size_t clients, int64_t mine) const {
  const int64_t part = max_buffered_body_bytes / static_cast<int64_t>(clients + 1);
  const bool near_full = total > max_buffered_body_bytes - max_buffered_body_bytes / 4;
  const int64_t share = std::max(
      near_full ? std::min(max_buffered_body_bytes / 2, part) : max_buffered_body_bytes / 2,
      limits.max_body_bytes);
  return mine > share || (near_full && total > max_buffered_body_bytes - part);
}

void HttpListener::State::Accept() {
  acceptor.async_accept(asio::make_strand(io), [this](beast::error_code error, tcp::socket socket) {
    if (!acceptor.is_open()) return;
    if (error) {
      // Out of file descriptors, typically: wait for connections to close instead of
      // spinning.
      accept_retry.expires_after(std::chrono::milliseconds(100));
      accept_retry.async_wait([this](beast::error_code timer_error) {
        if (!timer_error) Accept();
      });
      return;
    }
    beast::error_code ignored;
    if (!MakeRoom()) {
      socket.close(ignored);
      return Accept();
    }
    socket.set_option(tcp::no_delay(true), ignored);
    if (tls.has_value()) {
      Serve(beast::ssl_stream<beast::tcp_stream>(std::move(socket), *tls));
    } else {
      Serve(beast::tcp_stream(std::move(socket)));
    }
    Accept();
  });
}

bool HttpListener::State::MakeRoom() {
  std::shared_ptr<ConnectionBase> longest;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (max_connections <= 0 || static_cast<int>(connections.size()) < max_connections) {
      return true;
    }
    int64_t since = std::numeric_limits<int64_t>::max();
    for (auto& [raw, weak] : connections) {
      const int64_t waiting = raw->WaitingSince();
      if (waiting >= since) continue;
      if (std::shared_ptr<ConnectionBase> connection = weak.lock()) {
        since = waiting;
        longest = std::move(connection);
      }
    }
  }
  if (longest == nullptr) return false;
  longest->ForceClose();
  return true;
}

HttpListener::HttpListener(std::unique_ptr<State> state) : state_(std::move(state)) {}

absl::StatusOr<std::unique_ptr<HttpListener>> HttpListener::Bind(const Options& options) {
  auto state = std::make_unique<State>(options);
  if (options.tls.enabled()) {
    asio::ssl::context& context = state->tls.emplace(asio::ssl::context::tls_server);
    if (absl::Status configured = ConfigureServerTls(options.tls, context.native_handle());
        !configured.ok()) {
      return configured;
    }
  }
  if (absl::Status bound = ListenOn(options.host, options.port, state->acceptor); !bound.ok()) {
    return bound;
  }
  state->port = state->acceptor.local_endpoint().port();
  state->loopback = state->acceptor.local_endpoint().address().is_loopback();
  return std::unique_ptr<HttpListener>(new HttpListener(std::move(state)));
}

void HttpListener::Start(HttpHandler* handler) {
  state_->handler = handler;
  asio::post(state_->strand, [state = state_.get()] { state->Accept(); });
  for (int i = 0; i < kIoThreads; ++i) {
    state_->io_threads.emplace_back([state = state_.get()] { state->io.run(); });
  }
}

void HttpListener::Shutdown(absl::Time deadline) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->shut_down) return;
    state_->shut_down = true;
  }
  state_->draining = true;
  asio::post(state_->strand, [state = state_.get(), deadline] {
    beast::error_code ignored;
    state->acceptor.close(ignored);
    state->accept_retry.cancel();
    state->ForEachConnection([](ConnectionBase& connection) { connection.Drain(); });
    state->grace_timer.expires_after(
        ToSteady(std::max(deadline - absl::Now(), absl::ZeroDuration())));
    state->grace_timer.async_wait([state](beast::error_code error) {
      if (error) return;
      state->grace_over = true;
      state->grace_timer.expires_after(ToSteady(kHardStopDelay));
      state->grace_timer.async_wait([state](beast::error_code error) {
        if (error) return;
        state->ForEachConnection([](ConnectionBase& connection) { connection.ForceClose(); });
        std::lock_guard<std::mutex> lock(state->mutex);
        state->hard_stopped = true;
        state->changed.notify_all();
      });
    });
  });
}

HttpListener::~HttpListener() {
  if (!state_->io_threads.empty()) {
    Shutdown(absl::Now());
    {
      // Every connection gone, or closed by the hard stop.
      std::unique_lock<std::mutex> lock(state_->mutex);
      state_->changed.wait(lock,
                           [this] { return state_->connections.empty() || state_->hard_stopped; });
    }
    // The calls still running were told to stop (GraceOver); their writes fail on the closed
    // connections, so they return.
    state_->workers.join();
  }
  state_->io.stop();
  for (std::thread& thread : state_->io_threads) thread.join();
}

int HttpListener::port() const { return state_->port; }
bool HttpListener::loopback() const { return state_->loopback; }

}  // namespace attnscope::server

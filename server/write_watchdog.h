// Ends gRPC streams whose clients have stopped reading. The synchronous API's
// ServerWriter::Write blocks while the client's HTTP/2 flow-control window is full and has no
// deadline of its own, so a client that opens StreamAttention or Generate and never reads held the
// call's thread and its --max_concurrent_requests slot until the caller's deadline (none by
// default): --max_call_seconds is only checked between writes. The HTTP front end bounds each
// write with the same timeout (HttpLimits::write_timeout).
#ifndef ATTNSCOPE_SERVER_WRITE_WATCHDOG_H_
#define ATTNSCOPE_SERVER_WRITE_WATCHDOG_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "absl/time/time.h"

namespace attnscope::server {

class WriteWatchdog {
 public:
  // `timeout` (above zero) is how long one write may wait for the client (--write_timeout_seconds).
  explicit WriteWatchdog(absl::Duration timeout);
  // Joins the watchdog's thread; no Write may be running.
  ~WriteWatchdog();
  WriteWatchdog(const WriteWatchdog&) = delete;
  WriteWatchdog& operator=(const WriteWatchdog&) = delete;

  // Runs `write`, one blocking write on `context`'s call, and cancels the call
  // (ServerContext::TryCancel, which makes a blocked write return false and ends the stream with
  // CANCELLED at the client) when it has not returned within the timeout. Returns what `write`
  // returned; `*timed_out` says whether the watchdog cancelled the call.
  bool Write(grpc::ServerContext* context, const std::function<bool()>& write, bool* timed_out);

  // The two halves of Write, for a write that the caller does not run itself (a unary answer,
  // which gRPC writes after the handler returns): from Begin on, `context`'s call is cancelled
  // unless End(id) comes within the timeout. End returns whether it was; it must be called before
  // `context` is destroyed.
  uint64_t Begin(grpc::ServerContextBase* context);
  bool End(uint64_t id);

  absl::Duration timeout() const { return timeout_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    grpc::ServerContextBase* context;
    Clock::time_point deadline;
    bool timed_out = false;
  };

  void Watch();

  const absl::Duration timeout_;
  std::mutex mutex_;
  std::condition_variable changed_;
  // The writes in progress by id; an entry lives while its write runs, so that TryCancel, called
  // under mutex_, never reaches a call that has ended.
  std::map<uint64_t, Pending> pending_;  // under mutex_
  uint64_t next_id_ = 0;                 // under mutex_
  bool stopping_ = false;                // under mutex_
  std::thread thread_;
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_WRITE_WATCHDOG_H_

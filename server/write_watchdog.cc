#include "server/write_watchdog.h"

#include <algorithm>

namespace attnscope::server {

WriteWatchdog::WriteWatchdog(absl::Duration timeout)
    : timeout_(timeout), thread_([this] { Watch(); }) {}

WriteWatchdog::~WriteWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

bool WriteWatchdog::Write(grpc::ServerContext* context, const std::function<bool()>& write,
                          bool* timed_out) {
  const uint64_t id = Begin(context);
  const bool written = write();
  *timed_out = End(id);
  return written;
}

uint64_t WriteWatchdog::Begin(grpc::ServerContextBase* context) {
  uint64_t id = 0;
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = next_id_++;
    first = pending_.empty();
    pending_.emplace(id, Pending{context, Clock::now() + absl::ToChronoNanoseconds(timeout_)});
  }
  // Every deadline is the same time after its write began, so a new one is never the earliest
  // unless the watch was waiting for none.
  if (first) changed_.notify_all();
  return id;
}

bool WriteWatchdog::End(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  const bool timed_out = pending_.at(id).timed_out;
  pending_.erase(id);
  return timed_out;
}

void WriteWatchdog::Watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    const Clock::time_point now = Clock::now();
    Clock::time_point next = Clock::time_point::max();
    for (auto& [id, write] : pending_) {
      if (write.timed_out) continue;
      if (write.deadline <= now) {
        write.timed_out = true;
        write.context->TryCancel();
      } else {
        next = std::min(next, write.deadline);
      }
    }
    if (next == Clock::time_point::max()) {
      changed_.wait(lock);
    } else {
      changed_.wait_until(lock, next);
    }
  }
}

}  // namespace attnscope::server

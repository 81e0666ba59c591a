#include "server/worker_pool.h"

#include <algorithm>
#include <utility>

namespace attnscope::server {

WorkerPool::WorkerPool(int threads, int max_queued) : max_queued_(std::max(0, max_queued)) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { Work(); });
}

WorkerPool::~WorkerPool() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

bool WorkerPool::TrySchedule(std::function<void()> task) {
  absl::MutexLock lock(&mutex_);
  if (static_cast<int64_t>(queue_.size()) >= idle_ + max_queued_) return false;
  queue_.push_back(std::move(task));
  return true;
}

void WorkerPool::Work() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mutex_);
      ++idle_;
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
        return !queue_.empty() || stopping_;
      };
      mutex_.Await(absl::Condition(&ready));
      --idle_;
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace attnscope::server

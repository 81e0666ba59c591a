#include "server/worker_pool.h"

#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

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

bool WorkerPool::TrySchedule(Task task) {
  std::vector<Task> dropped;
  bool queued = false;
  {
    absl::MutexLock lock(&mutex_);
    if (static_cast<int64_t>(queue_.size()) >= idle_ + max_queued_) {
      auto gone = std::stable_partition(queue_.begin(), queue_.end(), [](const Task& waiting) {
        return !waiting.cancelled || !waiting.cancelled();
      });
      std::move(gone, queue_.end(), std::back_inserter(dropped));
      queue_.erase(gone, queue_.end());
    }
    if (static_cast<int64_t>(queue_.size()) < idle_ + max_queued_) {
      queue_.push_back(std::move(task));
      queued = true;
    }
  }
  for (Task& task : dropped) {
    if (task.drop) task.drop();
  }
  return queued;
}

void WorkerPool::Work() {
  while (true) {
    Task task;
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
    task.run();
  }
}

}  // namespace attnscope::server

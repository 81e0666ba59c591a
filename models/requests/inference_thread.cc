#include "models/requests/inference_thread.h"

namespace attnscope {

InferenceThread::InferenceThread() : thread_([this] { Loop(); }) {}

InferenceThread::~InferenceThread() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  thread_.join();
}

void InferenceThread::Run(absl::FunctionRef<void()> work) {
  Task task(work);
  {
    absl::MutexLock lock(&mutex_);
    queue_.push_back(&task);
  }
  task.done.WaitForNotification();
  if (task.error) std::rethrow_exception(task.error);
}

bool InferenceThread::HasWorkOrStopping() const { return stopping_ || !queue_.empty(); }

void InferenceThread::Loop() {
  while (true) {
    Task* task;
    {
      absl::MutexLock lock(&mutex_);
      mutex_.Await(absl::Condition(this, &InferenceThread::HasWorkOrStopping));
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = queue_.front();
      queue_.pop_front();
    }
    try {
      task->work();
    } catch (...) {
      task->error = std::current_exception();
    }
    task->done.Notify();
  }
}

}  // namespace attnscope

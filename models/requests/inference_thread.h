// Runs forward passes one at a time on one long-lived thread.
//
// Why one thread: LibTorch's OpenMP thread team and glibc's malloc arena belong to the thread that
// runs a forward pass, and gRPC's synchronous server hands successive calls to different threads of
// its pool. A BERT-base GetAttention forward run that way measured about 15% slower than the same
// forward in a loop on one thread (bench/service_bench). Running forwards one at a time loses no
// throughput either: each already uses every intra-op thread, so concurrent forwards only compete
// for the same cores. (Triton serves a model instance the same way: one execution thread.)
#ifndef ATTNSCOPE_MODELS_REQUESTS_INFERENCE_THREAD_H_
#define ATTNSCOPE_MODELS_REQUESTS_INFERENCE_THREAD_H_

#include <deque>
#include <exception>
#include <thread>

#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace attnscope {

class InferenceThread {
 public:
  InferenceThread();
  // Finishes the work already queued, then joins the thread.
  ~InferenceThread();
  InferenceThread(const InferenceThread&) = delete;
  InferenceThread& operator=(const InferenceThread&) = delete;

  // Runs `work` on the inference thread after the work queued before it, and returns when it has
  // run. An exception thrown by `work` is rethrown here, in the caller's thread. Thread-safe.
  void Run(absl::FunctionRef<void()> work);

 private:
  struct Task {
    explicit Task(absl::FunctionRef<void()> work) : work(work) {}
    absl::FunctionRef<void()> work;
    std::exception_ptr error;
    absl::Notification done;
  };

  void Loop();
  bool HasWorkOrStopping() const ABSL_SHARED_LOCKS_REQUIRED(mutex_);

  absl::Mutex mutex_;
  std::deque<Task*> queue_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_REQUESTS_INFERENCE_THREAD_H_

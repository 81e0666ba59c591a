// The threads that run the gRPC front end's unary calls. gRPC's callback API takes the calls and
// sends their answers without a thread of its own per call; a unary method's work (admission,
// tokenization, waiting for the batcher's pass) blocks, so it runs here. Why not gRPC's
// synchronous server, as before: it sends a unary answer from the handler's thread and waits
// there until the client has taken all of it, so 85 connections that opened their HTTP/2 window
// to 0 and asked for ListModels held every thread of its pool, and every other gRPC caller got
// "Server Threadpool Exhausted" for as long as they stayed.
#ifndef ATTNSCOPE_SERVER_WORKER_POOL_H_
#define ATTNSCOPE_SERVER_WORKER_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace attnscope::server {

class WorkerPool {
 public:
  // `threads` (at least 1) run the tasks; at most `max_queued` more wait for one.
  WorkerPool(int threads, int max_queued);
  // Runs the tasks already queued, then joins the threads.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // A unit of work, and what to do instead when its caller has gone before it ran.
  struct Task {
    std::function<void()> run;
    // True once nobody waits for the task any more (the client cancelled the call); empty:
    // never.
    std::function<bool()> cancelled;
    // Called instead of `run` for a task dropped because `cancelled` said so.
    std::function<void()> drop;
  };

  // Queues `task` for the next free thread; false (and `task` dropped unrun) when every thread
  // is busy and `max_queued` tasks already wait. Waiting tasks whose caller has gone make room
  // first (each gets its `drop` on this thread): clients that send calls and leave at once
  // otherwise filled the queue, and everyone else got RESOURCE_EXHAUSTED while workers went
  // through calls nobody waited for. Thread-safe.
  bool TrySchedule(Task task);

 private:
  void Work();

  const int64_t max_queued_;
  absl::Mutex mutex_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mutex_);
  int64_t idle_ ABSL_GUARDED_BY(mutex_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_WORKER_POOL_H_

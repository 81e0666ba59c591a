#include "server/worker_pool.h"

#include <atomic>
#include <utility>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace attnscope::server {
namespace {

// A task that counts whether it ran or was dropped, and is cancelled once `*cancelled` is true.
WorkerPool::Task Counted(std::atomic<bool>* cancelled, std::atomic<int>* ran,
                         std::atomic<int>* dropped) {
  WorkerPool::Task task;
  task.run = [ran] { ++*ran; };
  task.cancelled = [cancelled] { return cancelled->load(); };
  task.drop = [dropped] { ++*dropped; };
  return task;
}

TEST(WorkerPoolTest, TasksWhoseCallerHasGoneMakeRoomWhenTheQueueIsFull) {
  absl::Notification release;
  std::atomic<int> ran{0};
  std::atomic<int> dropped{0};
  std::atomic<bool> first_cancelled{false};
  std::atomic<bool> never{false};
  {
    WorkerPool pool(/*threads=*/1, /*max_queued=*/2);
    absl::Notification started;
    ASSERT_TRUE(pool.TrySchedule({[&] {
                                    started.Notify();
                                    release.WaitForNotification();
                                  },
                                  nullptr, nullptr}));
    started.WaitForNotification();
    // The thread is busy: two may wait.
    ASSERT_TRUE(pool.TrySchedule(Counted(&first_cancelled, &ran, &dropped)));
    ASSERT_TRUE(pool.TrySchedule(Counted(&never, &ran, &dropped)));
    EXPECT_FALSE(pool.TrySchedule(Counted(&never, &ran, &dropped)));
    EXPECT_EQ(dropped.load(), 0);
    // The first waiting task's caller goes: it is dropped to make room, never run.
    first_cancelled = true;
    EXPECT_TRUE(pool.TrySchedule(Counted(&never, &ran, &dropped)));
    EXPECT_EQ(dropped.load(), 1);
    EXPECT_FALSE(pool.TrySchedule(Counted(&never, &ran, &dropped)));
    release.Notify();
  }
  // The pool ran what was left before its threads ended: the two that waited.
  EXPECT_EQ(ran.load(), 2);
  EXPECT_EQ(dropped.load(), 1);
}

}  // namespace
}  // namespace attnscope::server

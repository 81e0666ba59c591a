// The turns of ComputeGate (models/requests/compute_gate.h): one call at a time per slot, waiting
// calls served first come first served within each client and round the clients, and a waiting call
// whose check fails leaving the queue without a turn, within the check interval.
#include "models/requests/compute_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"

namespace attnscope {
namespace {

const CallCheck kNoCheck;

// Returns once `checks` reaches 2: a call's check runs once before it queues and then only while
// it waits in the queue (every kCheckInterval), so a second check means that it is queued. A
// fixed sleep instead let a thread started on a loaded machine queue after the next one.
void AwaitQueued(const std::atomic<int>& checks) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (checks < 2 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_GE(checks, 2) << "a waiting call was not checked twice in 30 s";
}

// The order in which calls of `clients` take their turns when they queue one after another while
// a call of `holder` holds the only slot, then leaves it: indices into `clients`.
std::vector<int> TurnOrder(const std::string& holder, const std::vector<std::string>& clients) {
  ComputeGate gate(1);
  ComputeGate::Turn first(gate, kNoCheck, holder);
  EXPECT_TRUE(first.Take("first").ok());

  absl::Mutex mutex;
  std::vector<int> order;
  std::vector<std::atomic<int>> checks(clients.size());
  std::vector<CallCheck> counted;
  for (std::atomic<int>& count : checks) {
    counted.push_back([&count](absl::string_view) {
      ++count;
      return absl::OkStatus();
    });
  }
  std::vector<std::thread> waiters;
  for (size_t i = 0; i < clients.size(); ++i) {
    waiters.emplace_back([&, i] {
      ComputeGate::Turn turn(gate, counted[i], clients[i]);
      EXPECT_TRUE(turn.Take("waiter").ok());
      absl::MutexLock lock(&mutex);
      order.push_back(static_cast<int>(i));
    });
    AwaitQueued(checks[i]);
  }
  {
    absl::MutexLock lock(&mutex);
    EXPECT_TRUE(order.empty()) << "a call computed beside the one holding the only slot";
  }
  first.Leave();
  for (std::thread& waiter : waiters) waiter.join();
  return order;
}

TEST(ComputeGateTest, WaitingCallsTakeTheirTurnsInOrder) {
  EXPECT_EQ(TurnOrder("", {"", "", ""}), (std::vector<int>{0, 1, 2}));
}

// Turns go round the clients: with one client's call computing and two more of its calls waiting
// before another client's, that client's call comes second, not last.
TEST(ComputeGateTest, TurnsGoRoundTheClients) {
  EXPECT_EQ(TurnOrder("a", {"a", "a", "b"}), (std::vector<int>{0, 2, 1}));
}

// A client that comes back between its calls (a generation step after each token) goes next, not
// after another client's calls that have waited through that client's own turn.
TEST(ComputeGateTest, AClientJoiningWhileAnotherComputesGoesNext) {
  ComputeGate gate(1);
  ComputeGate::Turn first(gate, kNoCheck, "a");
  ASSERT_TRUE(first.Take("first").ok());
  absl::Mutex mutex;
  std::vector<std::string> order;
  std::vector<std::atomic<int>> checks(3);
  std::vector<CallCheck> counted;
  for (std::atomic<int>& count : checks) {
    counted.push_back([&count](absl::string_view) {
      ++count;
      return absl::OkStatus();
    });
  }
  absl::Notification b_queued;
  // a's second call computes until b has queued; a's third waits through it.
  std::thread second([&] {
    ComputeGate::Turn turn(gate, counted[0], "a");
    EXPECT_TRUE(turn.Take("second").ok());
    {
      absl::MutexLock lock(&mutex);
      order.push_back("a2");
    }
    b_queued.WaitForNotification();
  });
  AwaitQueued(checks[0]);
  std::thread third([&] {
    ComputeGate::Turn turn(gate, counted[1], "a");
    EXPECT_TRUE(turn.Take("third").ok());
    absl::MutexLock lock(&mutex);
    order.push_back("a3");
  });
  AwaitQueued(checks[1]);
  first.Leave();
  {
    absl::MutexLock lock(&mutex);
    mutex.Await(absl::Condition(
        +[](std::vector<std::string>* seen) { return !seen->empty(); }, &order));
  }
  std::thread other([&] {
    ComputeGate::Turn turn(gate, counted[2], "b");
    EXPECT_TRUE(turn.Take("other").ok());
    absl::MutexLock lock(&mutex);
    order.push_back("b");
  });
  AwaitQueued(checks[2]);
  b_queued.Notify();
  for (std::thread* thread : {&second, &third, &other}) thread->join();
  EXPECT_EQ(order, (std::vector<std::string>{"a2", "b", "a3"}));
}

TEST(ComputeGateTest, ACallWhoseCheckFailsLeavesTheQueueAtOnce) {
  ComputeGate gate(1);
  ComputeGate::Turn holder(gate, kNoCheck);
  ASSERT_TRUE(holder.Take("holder").ok());

  std::atomic<bool> cancelled{false};
  std::atomic<int> checks{0};
  const CallCheck check = [&](absl::string_view when) {
    ++checks;
    return cancelled ? absl::CancelledError(std::string(when)) : absl::OkStatus();
  };
  absl::Status status;
  absl::Time left;
  std::thread waiter([&] {
    ComputeGate::Turn turn(gate, check);
    status = turn.Take("waiting");
    left = absl::Now();
  });
  AwaitQueued(checks);
  const absl::Time cancel = absl::Now();
  cancelled = true;
  waiter.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(status.message(), "waiting");
  EXPECT_LT(left - cancel, ComputeGate::kCheckInterval + absl::Milliseconds(200));

  // The call that left holds nothing, and took no place in the queue: the next one gets the slot
  // once the holder leaves it.
  holder.Leave();
  ComputeGate::Turn next(gate, kNoCheck);
  EXPECT_TRUE(next.Take("next").ok());
}

TEST(ComputeGateTest, TakingAHeldTurnOnlyChecksTheCall) {
  ComputeGate gate(1);
  std::atomic<int> checks{0};
  const CallCheck check = [&](absl::string_view) {
    ++checks;
    return absl::OkStatus();
  };
  ComputeGate::Turn turn(gate, check);
  ASSERT_TRUE(turn.Take("first").ok());
  ASSERT_TRUE(turn.Take("again").ok());
  EXPECT_EQ(checks, 2);
}

}  // namespace
}  // namespace attnscope

// Turns for the compute that runs on the callers' own threads, outside the ForwardBatcher: the
// passes of Attribute, the steps of Generate and a teacher-forced GetAttention's pass.
//
// Why: each such call already uses every intra-op thread, so running many at once gains nothing
// (the batcher runs its passes one at a time for the same reason) and costs twice: the memory of
// every call's activations at once, and the time a call takes to notice that it should stop, as
// its piece of work between two checks runs as many times slower as there are calls. 64 Attribute
// calls on a small cross-encoder, abandoned by their HTTP clients after 0.3 s, held 1.4 GB and
// computed on for 3 s after their clients had gone. With turns, `slots` calls compute at once and
// the others wait, checking their call, so that a cancelled or expired one leaves the queue at
// once. Calls take turns a piece of work at a time (a batch of attribution passes, a generation
// step), so that a long call does not hold a short one up for its whole length, and the turns go
// round the clients, first come first served within each: 16 long Attribute calls of one client
// held another's 3-token Generate 4.4 s when every waiting call had its turn in order.
#ifndef ATTNSCOPE_MODELS_REQUESTS_COMPUTE_GATE_H_
#define ATTNSCOPE_MODELS_REQUESTS_COMPUTE_GATE_H_

#include <cstdint>
#include <deque>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "models/requests/batcher.h"

namespace attnscope {

class ComputeGate {
 public:
  // At least one slot.
  explicit ComputeGate(int slots);
  ComputeGate(const ComputeGate&) = delete;
  ComputeGate& operator=(const ComputeGate&) = delete;

  // One call's turns. Not thread-safe: the call's own thread uses it.
  class Turn {
   public:
    // `check` (may be empty) says when the call should stop; both must outlive the Turn.
    // `client` names who asks (any name; empty is a client too), for the round of clients.
    Turn(ComputeGate& gate, const CallCheck& check, absl::string_view client = "")
        : gate_(gate), check_(check), client_(client) {}
    // Leaves the slot if it holds one.
    ~Turn();
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;

    // Checks the call, then waits for a slot unless it holds one, after the calls that waited
    // before it, checking the call again every kCheckInterval. The first status of `check` that
    // is not OK is returned, without a slot.
    absl::Status Take(absl::string_view when);
    // Gives the slot back, if held, to the call that has waited longest: between two pieces of
    // work, and before the call waits for something else (its client reading an answer).
    void Leave();

   private:
    ComputeGate& gate_;
    const CallCheck& check_;
    const std::string client_;
    bool held_ = false;
  };

  // How often a waiting call is checked.
  static constexpr absl::Duration kCheckInterval = absl::Milliseconds(20);

 private:
  absl::Mutex mutex_;
  int free_ ABSL_GUARDED_BY(mutex_);
  struct Waiting {
    uint64_t ticket;
    std::string client;
  };
  // The ticket whose turn comes next: the oldest of the client whose turn was longest ago.
  uint64_t Next() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Takes `ticket` out of the queue, and forgets the clients with nothing waiting.
  void Remove(uint64_t ticket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // The waiting calls' tickets, oldest first.
  std::deque<Waiting> waiting_ ABSL_GUARDED_BY(mutex_);
  uint64_t next_ticket_ ABSL_GUARDED_BY(mutex_) = 0;
  // The turns given so far, and for each client with a call waiting the turn that last went to
  // it (or the one before the latest turn when it began waiting with nothing else waiting).
  uint64_t turns_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::flat_hash_map<std::string, uint64_t> last_turn_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_REQUESTS_COMPUTE_GATE_H_

#include "models/requests/compute_gate.h"

#include <algorithm>

namespace attnscope {

ComputeGate::ComputeGate(int slots) : free_(std::max(1, slots)) {}

ComputeGate::Turn::~Turn() { Leave(); }

absl::Status ComputeGate::Turn::Take(absl::string_view when) {
  if (check_) {
    if (absl::Status status = check_(when); !status.ok()) return status;
  }
  if (held_) return absl::OkStatus();
  absl::MutexLock lock(&gate_.mutex_);
  const uint64_t ticket = gate_.next_ticket_++;
  gate_.waiting_.push_back({ticket, client_});
  // A client with nothing waiting joins the round as if its last turn had come just before the
  // latest one: behind the clients waiting since before that turn, ahead of the one it went to.
  // Joining as if its turn were now tied it with that client, whose older calls went first: a
  // 20-token Generate waited two batches of another client's Attribute passes a token, 2 s
  // instead of 0.02 s.
  gate_.last_turn_.try_emplace(client_, gate_.turns_ > 0 ? gate_.turns_ - 1 : 0);
  auto turn_come = [this, ticket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(gate_.mutex_) {
    return gate_.free_ > 0 && gate_.Next() == ticket;
  };
  while (!gate_.mutex_.AwaitWithTimeout(absl::Condition(&turn_come), kCheckInterval)) {
    if (!check_) continue;
    gate_.mutex_.Unlock();
    absl::Status status = check_(when);
    gate_.mutex_.Lock();
    if (!status.ok()) {
      gate_.Remove(ticket);
      return status;
    }
  }
  gate_.last_turn_[client_] = ++gate_.turns_;
  gate_.Remove(ticket);
  --gate_.free_;
  held_ = true;
  return absl::OkStatus();
}

void ComputeGate::Turn::Leave() {
  if (!held_) return;
  absl::MutexLock lock(&gate_.mutex_);
  ++gate_.free_;
  held_ = false;
}

uint64_t ComputeGate::Next() const {
  const Waiting* next = nullptr;
  uint64_t next_turn = 0;
  for (const Waiting& waiting : waiting_) {
    const uint64_t turn = last_turn_.at(waiting.client);
    if (next == nullptr || turn < next_turn) {
      next = &waiting;
      next_turn = turn;
    }
  }
  return next->ticket;
}

void ComputeGate::Remove(uint64_t ticket) {
  waiting_.erase(std::find_if(waiting_.begin(), waiting_.end(), [ticket](const Waiting& waiting) {
    return waiting.ticket == ticket;
  }));
  absl::erase_if(last_turn_, [this](const auto& entry) {
    return std::none_of(waiting_.begin(), waiting_.end(),
                        [&entry](const Waiting& waiting) { return waiting.client == entry.first; });
  });
}

}  // namespace attnscope

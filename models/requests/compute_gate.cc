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
  gate_.waiting_.push_back(ticket);
  auto turn_come = [this, ticket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(gate_.mutex_) {
    return gate_.free_ > 0 && gate_.waiting_.front() == ticket;
  };
  while (!gate_.mutex_.AwaitWithTimeout(absl::Condition(&turn_come), kCheckInterval)) {
    if (!check_) continue;
    gate_.mutex_.Unlock();
    absl::Status status = check_(when);
    gate_.mutex_.Lock();
    if (!status.ok()) {
      gate_.waiting_.erase(std::find(gate_.waiting_.begin(), gate_.waiting_.end(), ticket));
      return status;
    }
  }
  gate_.waiting_.pop_front();
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

}  // namespace attnscope

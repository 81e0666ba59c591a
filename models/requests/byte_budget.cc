#include "models/requests/byte_budget.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace attnscope {

ByteBudget::ByteBudget(int64_t limit, absl::string_view flag) : limit_(limit), flag_(flag) {}

absl::StatusOr<ByteBudget::Hold> ByteBudget::Reserve(int64_t bytes, absl::string_view what) {
  {
    absl::MutexLock lock(&mutex_);
    if (limit_ > 0 && holds_ > 0 && held_ + bytes > limit_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          what, " would hold ", bytes,
          " bytes while the answers being computed or read by their clients hold ", held_,
          ", over this server's limit of ", limit_, " bytes (", flag_,
          "); retry with backoff, or ask for fewer layers or heads, a smaller window or top_k"));
    }
    held_ += bytes;
    ++holds_;
  }
  // The deleter gives the bytes back; the pointer itself is never read.
  return Hold(static_cast<const void*>(this), [this, bytes](const void*) { Release(bytes); });
}

int64_t ByteBudget::held() const {
  absl::MutexLock lock(&mutex_);
  return held_;
}

absl::Time ByteBudget::last_release() const {
  absl::MutexLock lock(&mutex_);
  return last_release_;
}

void ByteBudget::Release(int64_t bytes) {
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mutex_);
  held_ -= bytes;
  --holds_;
  last_release_ = now;
}

}  // namespace attnscope

// A server-wide bound on the bytes of attention that computed answers hold while their clients
// read them. A stream's answer lives until its last message is written, and a client that reads
// nothing keeps it until --write_timeout_seconds: 64 unread StreamAttention calls of 421 tokens on
// a 5-layer Llama held 2.7 GB between them. With a budget, a call reserves its answer's bytes
// before its forward pass and gets ResourceExhausted when the answers already held would take the
// total over the limit, so the memory of answers in flight is bounded by the limit (plus one
// answer: a call alone may hold more than the limit, as it would without the budget).
#ifndef ATTNSCOPE_MODELS_REQUESTS_BYTE_BUDGET_H_
#define ATTNSCOPE_MODELS_REQUESTS_BYTE_BUDGET_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace attnscope {

class ByteBudget {
 public:
  // A reservation: its bytes go back to the budget when the last copy is destroyed.
  using Hold = std::shared_ptr<const void>;

  // `limit` in bytes; 0 = no limit (Reserve always succeeds). `flag` names the setting in errors.
  ByteBudget(int64_t limit, absl::string_view flag);
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  // Reserves `bytes` (at least 0) for `what` (e.g. "StreamAttention's answer"). ResourceExhausted,
  // naming the bytes held, the limit and its flag, when other reservations are held and all
  // together would exceed the limit; a reservation alone is always granted. Thread-safe; the
  // budget must outlive its holds.
  absl::StatusOr<Hold> Reserve(int64_t bytes, absl::string_view what);
  // Bytes reserved now.
  int64_t held() const;
  // When a reservation last went back (absl::InfinitePast() before any): for a server's answer
  // budget, when its last answer finished being written.
  absl::Time last_release() const;

 private:
  void Release(int64_t bytes);

  const int64_t limit_;
  const std::string flag_;
  mutable absl::Mutex mutex_;
  int64_t held_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t holds_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::Time last_release_ ABSL_GUARDED_BY(mutex_) = absl::InfinitePast();
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_REQUESTS_BYTE_BUDGET_H_

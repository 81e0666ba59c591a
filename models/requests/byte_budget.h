// A server-wide bound on the bytes of attention that computed answers hold while their clients
// read them. A stream's answer lives until its last message is written, and a client that reads
// nothing keeps it until --write_timeout_seconds: 64 unread StreamAttention calls of 421 tokens on
// a 5-layer Llama held 2.7 GB between them. With a budget, a call reserves its answer's bytes
// before its forward pass and gets ResourceExhausted when the answers already held would take the
// total over the limit, so the memory of answers in flight is bounded by the limit (plus one
// answer: a call alone may hold more than the limit, as it would without the budget).
//
// Each client also has a share of the budget: 27 unread StreamAttention streams of one client,
// within its share of the server's calls, held all but 6 KB of 512 MiB, and every other client's
// attention was refused until the streams' writes timed out. A client whose answers already hold
// bytes is refused an answer that would take them over its share; its first answer is granted,
// as a call alone is. Where the answers held would fill the budget's last quarter, the share is at
// most an equal part of the budget among the clients holding answers and one more, and such a part
// of the budget stays free for a client holding none: a client that took half before the last
// quarter and two more clients filled it all, and a fourth was refused.
#ifndef ATTNSCOPE_MODELS_REQUESTS_BYTE_BUDGET_H_
#define ATTNSCOPE_MODELS_REQUESTS_BYTE_BUDGET_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace attnscope {

class ByteBudget {
 public:
  // A reservation: its bytes go back to the budget when the last copy is destroyed.
  using Hold = std::shared_ptr<const void>;

  // Called with each refusal of Reserve, outside the budget's lock: true when the client's share
  // refused it, false when the limit did.
  using OnRefused = std::function<void(bool over_client_share)>;

  // `limit` in bytes; 0 = no limit. `flag` names the setting in errors. `client_limit`: the most
  // bytes the reservations of one client may hold (0 = no share), `client_flag` its setting.
  // `on_refused` may be empty.
  ByteBudget(int64_t limit, absl::string_view flag, int64_t client_limit = 0,
             absl::string_view client_flag = "", OnRefused on_refused = nullptr);
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  // Reserves `bytes` (at least 0) for `what` (e.g. "StreamAttention's answer") of `client` (any
  // name; empty = no client, no share). ResourceExhausted, naming the bytes held, the limit and
  // its flag, and `fixes` (what makes the answer smaller, e.g. "send fewer inputs"), when the
  // client's other reservations would take it over its share, or when other reservations are held
  // and all together would exceed the limit; a reservation alone (of the server, of the client) is
  // always granted. Thread-safe; the budget must outlive its holds.
  absl::StatusOr<Hold> Reserve(int64_t bytes, absl::string_view what, absl::string_view client,
                               absl::string_view fixes);
  // Replaces `wide`, a reservation of this budget for at least `bytes`, by one of `bytes` for
  // the same `client`, without a check: the bytes held never grow. For an answer whose size is
  // known only once it is made (its printed form) and that was reserved at an upper bound.
  Hold Narrow(Hold wide, int64_t bytes, absl::string_view client = "");
  // When a reservation last went back (absl::InfinitePast() before any): for a server's answer
  // budget, when its last answer finished being written.
  absl::Time last_release() const;

 private:
  struct Held {
    int64_t bytes = 0;
    int64_t holds = 0;
  };

  // Reserve's refusal, or OK when the reservation fits (`over_client_share`: set when the client's
  // share refuses it).
  absl::Status Check(int64_t bytes, absl::string_view what, absl::string_view client,
                     absl::string_view fixes, bool* over_client_share) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Counts a reservation of `bytes` for `client`.
  void Add(int64_t bytes, absl::string_view client) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The hold whose end gives back what Add counted.
  Hold HoldOf(int64_t bytes, absl::string_view client);
  void Release(int64_t bytes, const std::string& client);

  const int64_t limit_;
  const std::string flag_;
  const int64_t client_limit_;
  const std::string client_flag_;
  const OnRefused on_refused_;
  mutable absl::Mutex mutex_;
  int64_t held_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t holds_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::Time last_release_ ABSL_GUARDED_BY(mutex_) = absl::InfinitePast();
  // The clients with reservations held; one leaves when its last goes back.
  absl::flat_hash_map<std::string, Held> clients_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_REQUESTS_BYTE_BUDGET_H_

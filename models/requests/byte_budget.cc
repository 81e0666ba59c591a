#include "models/requests/byte_budget.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace attnscope {

ByteBudget::ByteBudget(int64_t limit, absl::string_view flag, int64_t client_limit,
                       absl::string_view client_flag, OnRefused on_refused)
    : limit_(limit),
      flag_(flag),
      client_limit_(client_limit),
      client_flag_(client_flag),
      on_refused_(std::move(on_refused)) {}

absl::StatusOr<ByteBudget::Hold> ByteBudget::Reserve(int64_t bytes, absl::string_view what,
                                                     absl::string_view client,
                                                     absl::string_view fixes) {
  absl::Status refused;
  bool over_client_share = false;
  {
    absl::MutexLock lock(&mutex_);
    refused = Check(bytes, what, client, fixes, &over_client_share);
    if (refused.ok()) Add(bytes, client);
  }
  if (!refused.ok()) {
    if (on_refused_) on_refused_(over_client_share);
    return refused;
  }
  return HoldOf(bytes, client);
}

absl::Status ByteBudget::Check(int64_t bytes, absl::string_view what, absl::string_view client,
                               absl::string_view fixes, bool* over_client_share) const {
  // A share of the whole budget or more is no share: the limit refuses, and says so.
  const bool shared = client_limit_ > 0 && (limit_ == 0 || client_limit_ < limit_);
  if (shared && !client.empty()) {
    const auto found = clients_.find(client);
    // In the budget's last quarter the share shrinks to an equal part among the clients holding
    // answers and one more: two clients of half the budget each would otherwise leave nothing
    // for a third (as the call shares do near --max_concurrent_requests).
    const bool near_full = limit_ > 0 && held_ + bytes > limit_ - limit_ / 4;
    const int64_t part = static_cast<int64_t>(limit_ / (clients_.size() + 1));
    const int64_t share = near_full ? std::min(client_limit_, part) : client_limit_;
    // And one such part stays free for a client holding nothing: a client that took its half
    // before the last quarter would otherwise let two more fill the rest.
    const bool takes_newcomers_room = near_full && held_ + bytes > limit_ - part;
    if (found != clients_.end() && (found->second.bytes + bytes > share || takes_newcomers_room)) {
      *over_client_share = true;
      const std::string why =
          share < client_limit_ || takes_newcomers_room
              ? absl::StrCat("while the answers held fill over three quarters of ", flag_, " and ",
                             clients_.size(),
                             " clients hold some, each may hold an equal part of it with room "
                             "left for one more; ",
                             client_flag_, "'s ", client_limit_, " otherwise")
              : absl::StrCat(client_flag_, ", so that one client cannot hold all of ", flag_);
      return absl::ResourceExhaustedError(absl::StrCat(
          what, " would hold ", bytes,
          " bytes while this client's answers being computed or read hold ", found->second.bytes,
          ", over its share of ", share, " bytes (", why, "); read the answers under way first",
          fixes.empty() ? "" : absl::StrCat(", or ", fixes)));
    }
  }
  if (limit_ > 0 && holds_ > 0 && held_ + bytes > limit_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " would hold ", bytes,
                     " bytes while the answers being computed or read by their clients hold ",
                     held_, ", over this server's limit of ", limit_, " bytes (", flag_,
                     "); retry with backoff", fixes.empty() ? "" : absl::StrCat(", or ", fixes)));
  }
  return absl::OkStatus();
}

ByteBudget::Hold ByteBudget::Narrow(Hold wide, int64_t bytes, absl::string_view client) {
  {
    absl::MutexLock lock(&mutex_);
    Add(bytes, client);
  }
  wide.reset();
  return HoldOf(bytes, client);
}

void ByteBudget::Add(int64_t bytes, absl::string_view client) {
  held_ += bytes;
  ++holds_;
  if (client.empty()) return;
  Held& mine = clients_[client];
  mine.bytes += bytes;
  ++mine.holds;
}

ByteBudget::Hold ByteBudget::HoldOf(int64_t bytes, absl::string_view client) {
  // The deleter gives the bytes back; the pointer itself is never read.
  return Hold(static_cast<const void*>(this),
              [this, bytes, client = std::string(client)](const void*) { Release(bytes, client); });
}

absl::Time ByteBudget::last_release() const {
  absl::MutexLock lock(&mutex_);
  return last_release_;
}

void ByteBudget::Release(int64_t bytes, const std::string& client) {
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mutex_);
  held_ -= bytes;
  --holds_;
  last_release_ = now;
  if (client.empty()) return;
  const auto found = clients_.find(client);
  if (found == clients_.end()) return;
  found->second.bytes -= bytes;
  if (--found->second.holds <= 0) clients_.erase(found);
}

}  // namespace attnscope

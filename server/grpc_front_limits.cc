#include "server/grpc_front_limits.h"

#include <sys/resource.h>

#include <algorithm>
#include <vector>

namespace attnscope::server {

bool StreamSlots::TryTake() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (free_ == 0 || !waiting_.empty()) return false;
  --free_;
  return true;
}

void StreamSlots::Wait(std::weak_ptr<SlotWaiter> waiter) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    waiting_.push_back(std::move(waiter));
  }
  Give(0);
}

void StreamSlots::Give(int slots) {
  std::vector<std::shared_ptr<SlotWaiter>> granted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    free_ += slots;
    while (free_ > 0 && !waiting_.empty()) {
      std::shared_ptr<SlotWaiter> waiter = waiting_.front().lock();
      waiting_.pop_front();
      if (waiter == nullptr || waiter->Gone()) continue;
      --free_;
      granted.push_back(std::move(waiter));
    }
  }
  for (const std::shared_ptr<SlotWaiter>& waiter : granted) waiter->Grant();
}

void OpenRequests::Count(Holder* holder, std::weak_ptr<Holder> owner, uint32_t stream_id,
                         int64_t bytes, bool added) {
  std::vector<std::pair<std::weak_ptr<Holder>, uint32_t>> evicted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = connections_.find(holder);
    if (!added && (found == connections_.end() || !found->second.requests.contains(stream_id))) {
      return;
    }
    Connection& connection = found != connections_.end() ? found->second : connections_[holder];
    if (connection.owner.expired()) connection.owner = std::move(owner);
    Unrank(holder, connection);
    auto [it, is_new] = connection.requests.try_emplace(stream_id, 0);
    if (is_new) ++count_;
    Change(connection, it->second, bytes);
    Rank(holder, connection);
    while (count_ > max_requests_ || bytes_ > max_bytes_) {
      const bool over_bytes = bytes_ > max_bytes_;
      Holder* victim = over_bytes ? by_bytes_.rbegin()->second : by_count_.rbegin()->second;
      Connection& held = connections_[victim];
      auto request = held.requests.begin();
      if (over_bytes) {
        request =
            std::max_element(held.requests.begin(), held.requests.end(),
                             [](const auto& a, const auto& b) { return a.second < b.second; });
      }
      evicted.emplace_back(held.owner, request->first);
      Remove(victim, request);
    }
  }
  for (const auto& [owner, stream_id] : evicted) {
    if (std::shared_ptr<Holder> connection = owner.lock()) connection->Evict(stream_id);
  }
}

void OpenRequests::End(Holder* holder, uint32_t stream_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto connection = connections_.find(holder);
  if (connection == connections_.end()) return;
  auto request = connection->second.requests.find(stream_id);
  if (request != connection->second.requests.end()) Remove(holder, request);
}

void OpenRequests::EndAll(Holder* holder) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto connection = connections_.find(holder);
  if (connection == connections_.end()) return;
  Unrank(holder, connection->second);
  count_ -= static_cast<int>(connection->second.requests.size());
  bytes_ -= connection->second.bytes;
  connections_.erase(connection);
}

void OpenRequests::Change(Connection& connection, int64_t& request_bytes, int64_t bytes) {
  connection.bytes += bytes - request_bytes;
  bytes_ += bytes - request_bytes;
  request_bytes = bytes;
}

void OpenRequests::Unrank(Holder* holder, const Connection& connection) {
  by_count_.erase({static_cast<int>(connection.requests.size()), holder});
  by_bytes_.erase({connection.bytes, holder});
}

void OpenRequests::Rank(Holder* holder, const Connection& connection) {
  if (connection.requests.empty()) return;
  by_count_.insert({static_cast<int>(connection.requests.size()), holder});
  by_bytes_.insert({connection.bytes, holder});
}

void OpenRequests::Remove(Holder* holder, absl::btree_map<uint32_t, int64_t>::iterator request) {
  Connection& connection = connections_[holder];
  Unrank(holder, connection);
  Change(connection, request->second, 0);
  connection.requests.erase(request);
  --count_;
  Rank(holder, connection);
}

bool Connections::Add(absl::Time now, const std::string& source) {
  std::shared_ptr<Member> closing;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (open_ < max_) {
      Count(source, +1);
      ++open_;
      return true;
    }
    // Its client already gone: it would close another for nothing.
    if (source.empty()) return false;
    const int own = CountOf(source);
    const bool hog = !by_count_.empty() && by_count_.rbegin()->first > kHogShare * (own + 1);
    if (closing_ >= (hog ? 2 : 1) * max_closing_) return false;
    Member* member = nullptr;
    if (hog) {
      const Source& largest = sources_[by_count_.rbegin()->second];
      if (!largest.idle.empty()) {
        member = largest.idle.begin()->second;
      } else if (!largest.busy.empty()) {
        member = largest.busy.begin()->second;
      }
    }
    if (member == nullptr) member = FirstOf(idle_, now - kIdleGrace, own);
    if (member == nullptr) member = FirstOf(busy_, now - kQuietGrace, own);
    if (member == nullptr) return false;
    Entry& entry = entries_[member];
    Unrank(member, entry);
    Uncount(entry);
    entry.closing = true;
    ++closing_;
    closing = entry.owner.lock();
    // The one closing counts for the limit until it is gone (Remove).
    Count(source, +1);
    ++open_;
  }
  if (closing != nullptr) closing->CloseToMakeRoom();
  return true;
}

Connections::Member* Connections::FirstOf(const Ranking& ranking, absl::Time before, int least) {
  int looked_at = 0;
  for (const auto& [since, member] : ranking) {
    if (since > before || ++looked_at > kMaxLookedAt) break;
    if (CountOf(entries_[member].source) >= least) return member;
  }
  return nullptr;
}

void Connections::Update(Member* member, std::weak_ptr<Member> owner, const std::string& source,
                         bool idle, absl::Time since) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& entry = entries_[member];
  if (!entry.counted) return;
  Unrank(member, entry);
  if (entry.owner.expired()) {
    entry.owner = std::move(owner);
    entry.source = source;
  }
  entry.idle = idle;
  entry.since = since;
  Source& from = sources_[source];
  (idle ? from.idle : from.busy).insert({since, member});
  (idle ? idle_ : busy_).insert({since, member});
  entry.ranked = true;
}

void Connections::Unlist(Member* member) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(member);
  if (it == entries_.end()) return;
  Unrank(member, it->second);
  Uncount(it->second);
}

void Connections::Remove(Member* member, const std::string& source) {
  std::lock_guard<std::mutex> lock(mutex_);
  --open_;
  auto it = entries_.find(member);
  if (it == entries_.end()) {
    // Gone before it reported (Update).
    Count(source, -1);
    return;
  }
  if (it->second.closing) --closing_;
  Unrank(member, it->second);
  if (it->second.counted) Count(source, -1);
  entries_.erase(it);
}

void Connections::Unrank(Member* member, Entry& entry) {
  if (!entry.ranked) return;
  entry.ranked = false;
  Source& from = sources_[entry.source];
  (entry.idle ? from.idle : from.busy).erase({entry.since, member});
  (entry.idle ? idle_ : busy_).erase({entry.since, member});
}

void Connections::Uncount(Entry& entry) {
  if (!std::exchange(entry.counted, false)) return;
  Count(entry.source, -1);
}

void Connections::Count(const std::string& source, int change) {
  Source& from = sources_[source];
  by_count_.erase({from.count, source});
  from.count += change;
  if (from.count > 0) {
    by_count_.insert({from.count, source});
  } else {
    sources_.erase(source);
  }
}

int Connections::CountOf(const std::string& source) const {
  auto it = sources_.find(source);
  return it == sources_.end() ? 0 : it->second.count;
}

int MaxConnections(int wanted) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return wanted;
  const int64_t allowed = (static_cast<int64_t>(limit.rlim_cur) - 512) / 3;
  return static_cast<int>(std::min<int64_t>(wanted, std::max<int64_t>(64, allowed)));
}

}  // namespace attnscope::server

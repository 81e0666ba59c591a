// The gRPC port listener's bounds over every connection (server/grpc_front.h): the streams handed
// to gRPC at a time, the requests it holds unfinished, and the connections open. Each is a
// thread-safe registry the connections report to and that tells them what to give up.
#ifndef ATTNSCOPE_SERVER_GRPC_FRONT_LIMITS_H_
#define ATTNSCOPE_SERVER_GRPC_FRONT_LIMITS_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace attnscope::server {

// A connection with a stream waiting for a slot.
class SlotWaiter {
 public:
  virtual ~SlotWaiter() = default;
  // A slot is now the waiter's (thread-safe; called without StreamSlots' lock held).
  virtual void Grant() = 0;
  // True once the waiter will take no more slots (its client or gRPC has gone).
  virtual bool Gone() const = 0;
};

// GrpcFront::Options::stream_slots, shared by every connection, and the connections waiting for
// one, each served in turn.
class StreamSlots {
 public:
  explicit StreamSlots(int slots) : free_(slots) {}

  // Takes a slot; false when none is free or connections wait for one (they come first).
  bool TryTake();

  // `waiter` is granted a slot after those already waiting.
  void Wait(std::weak_ptr<SlotWaiter> waiter);

  // Frees `slots`, and grants the free ones to the waiters.
  void Give(int slots);

 private:
  std::mutex mutex_;
  int free_;
  std::deque<std::weak_ptr<SlotWaiter>> waiting_;
};

// GrpcFront::Options::max_open_requests and max_open_request_bytes, over every connection. Past
// either, a request of the connection that holds the most (requests, or bytes) is cancelled: its
// oldest, or its largest for bytes. A client flooding gRPC with unfinished requests thus loses
// its own, while another's upload under way, on a connection holding less, goes on: by age
// alone, an upload whose second half came 0.5 s after its first was cancelled under such a flood.
class OpenRequests {
 public:
  // A connection whose open requests are counted here.
  class Holder {
   public:
    virtual ~Holder() = default;
    // Cancel `stream_id` in gRPC (thread-safe; called without OpenRequests' lock held). It is no
    // longer counted.
    virtual void Evict(uint32_t stream_id) = 0;
  };

  OpenRequests(int max_requests, int64_t max_bytes)
      : max_requests_(max_requests), max_bytes_(max_bytes) {}

  // Counts an open request of `holder` with `bytes` of its message: a new one (`added`), or one
  // counted already whose bytes have grown to `bytes` (nothing if it is no longer counted: it was
  // evicted, and Evict is on its way). Then cancels requests past the limits.
  void Count(Holder* holder, std::weak_ptr<Holder> owner, uint32_t stream_id, int64_t bytes,
             bool added);

  // The request is no longer open (nothing if it is no longer counted).
  void End(Holder* holder, uint32_t stream_id);

  // None of `holder`'s requests is open any more (it has closed).
  void EndAll(Holder* holder);

 private:
  struct Connection {
    std::weak_ptr<Holder> owner;
    absl::btree_map<uint32_t, int64_t> requests;  // bytes by stream id: the oldest first
    int64_t bytes = 0;
  };

  void Change(Connection& connection, int64_t& request_bytes, int64_t bytes);
  void Unrank(Holder* holder, const Connection& connection);
  void Rank(Holder* holder, const Connection& connection);
  void Remove(Holder* holder, absl::btree_map<uint32_t, int64_t>::iterator request);

  const int max_requests_;
  const int64_t max_bytes_;
  std::mutex mutex_;
  absl::flat_hash_map<Holder*, Connection> connections_;
  absl::btree_set<std::pair<int, Holder*>> by_count_;
  absl::btree_set<std::pair<int64_t, Holder*>> by_bytes_;
  int count_ = 0;
  int64_t bytes_ = 0;
};

// GrpcFront::Options::max_connections: the connections open, and which to close to make room for
// a new one at the limit. Each holds three descriptors and about 70 KB in gRPC: 7,000 idle
// connections took all 20,000 descriptors, and every gRPC call then failed with UNAVAILABLE until
// they closed.
//
// Connections are counted by source address (IPv4, or IPv6 /64). At the limit, the one closed is,
// in this order:
// 1. when an address holds more than kHogShare times what the new connection's address would
//    with it, a connection of the address holding the most: its idle longest, else its busy one
//    whose latest call began longest ago, at once: one address holding every connection, even
//    with calls always under way, makes room for others;
// 2. of the addresses holding at least as many as the new connection's (its own included), the
//    connection idle longest (no call under way but those whose request is still arriving), once
//    idle for kIdleGrace: a client that has just connected, or whose channel has just connected
//    again after being closed this way, gets the time to make its call, and an address cannot
//    choose whose connection goes (the order is by idle time, not by address);
// 3. of those, the connection whose latest call began longest ago, once kQuietGrace ago: streams
//    that never end (grpc.health.v1.Health/Watch, answers the client never lets through its
//    window) would otherwise lock every new client out.
// Failing all three, the new connection is refused. A connection closed this way, or closing of
// its own accord, no longer counts for its address, but counts for the limit until its
// descriptors are closed; while 1/kMaxClosingShare of the limit are so closed and not yet gone
// (twice that when making room under 1.), a new connection is refused instead, so that clients
// connecting faster than connections close cannot take the count far past the limit.
class Connections {
 public:
  class Member {
   public:
    virtual ~Member() = default;
    // Close to make room, telling the client (thread-safe; called without Connections' lock
    // held).
    virtual void CloseToMakeRoom() = 0;
  };

  explicit Connections(int max) : max_(max), max_closing_(std::max(16, max / kMaxClosingShare)) {}

  // Counts a connection from `source` accepted at `now`, closing another to make room at the
  // limit; false (not counted) when it must be refused. `source` is empty for a connection whose
  // client was gone before it was accepted (no remote address): at the limit it is refused.
  bool Add(absl::Time now, const std::string& source);

  // `member`, from `source`, is idle since `since`, or busy with its latest call begun at
  // `since`.
  void Update(Member* member, std::weak_ptr<Member> owner, const std::string& source, bool idle,
              absl::Time since);

  // `member` is closing of its own accord: not one to close any more.
  void Unlist(Member* member);

  // A connection from `source` counted by Add is gone (its descriptors closed).
  void Remove(Member* member, const std::string& source);

 private:
  static constexpr int kHogShare = 4;
  // Idle for this long, a connection may be closed to make room.
  static constexpr absl::Duration kIdleGrace = absl::Seconds(1);
  // With no call begun for this long, a busy one may.
  static constexpr absl::Duration kQuietGrace = absl::Seconds(10);
  static constexpr int kMaxClosingShare = 8;
  // Connections looked at in an order (2., 3.) for one of an address holding enough.
  static constexpr int kMaxLookedAt = 64;

  using Ranking = absl::btree_set<std::pair<absl::Time, Member*>>;
  struct Entry {
    std::weak_ptr<Member> owner;
    std::string source;
    bool idle = false;
    absl::Time since;
    bool ranked = false;   // in the idle or busy rankings
    bool counted = true;   // counted for its address
    bool closing = false;  // closed to make room, counted in closing_
  };
  // The connections of one source address, by since when they are idle or their latest call
  // began.
  struct Source {
    int count = 0;
    Ranking idle;
    Ranking busy;
  };

  // The first connection in `ranking` ranked at or before `before` whose address holds at least
  // `least` connections; nullptr if none among the first kMaxLookedAt.
  Member* FirstOf(const Ranking& ranking, absl::Time before, int least);
  // Takes `member` out of the rankings and its address's count.
  void Unrank(Member* member, Entry& entry);
  void Uncount(Entry& entry);
  void Count(const std::string& source, int change);
  int CountOf(const std::string& source) const;

  const int max_;
  const int max_closing_;
  std::mutex mutex_;
  int open_ = 0;
  int closing_ = 0;
  absl::flat_hash_map<Member*, Entry> entries_;
  absl::flat_hash_map<std::string, Source> sources_;
  absl::btree_set<std::pair<int, std::string>> by_count_;
  // Every address's connections together.
  Ranking idle_;
  Ranking busy_;
};

// GrpcFront::Options::max_connections `wanted`, as the descriptor limit allows: at most a third of
// RLIMIT_NOFILE less 512 (three descriptors a connection), and at least 64.
int MaxConnections(int wanted);

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_GRPC_FRONT_LIMITS_H_

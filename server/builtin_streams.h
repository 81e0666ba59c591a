// Bounds the streams of gRPC's own services that any client may keep open, API key or not:
// server reflection (grpc.reflection.v1alpha.ServerReflection, what grpcurl and grpcui ask) and
// health Watch (grpc.health.v1.Health).
// - Reflection is a synchronous service: each open stream holds a thread of gRPC's synchronous
//   pool (--worker_threads) until its client closes it, and StreamAttention and Generate take
//   their threads from the same pool. 80 idle reflection streams of one client without a key had
//   every other client's streams refused "Server Threadpool Exhausted", counted nowhere, and held
//   each shutdown for its whole grace period.
// - A Watch stream costs gRPC about 16.5 KB, and only the 100 streams of a connection and the
//   connections (--max_grpc_connections) bounded them: 100,000 unread ones from one address took
//   the server from 245 MB to 1.9 GB, and its shutdown past its grace period.
// Here, per service:
// - at most Options::max_streams of its streams are open at once, and
//   Options::max_streams_per_client of one client (its address); a stream beyond is cancelled as
//   it opens (CANCELLED at the client, whose thread or memory goes back at once) and counted by
//   `on_refused`;
// - CancelAll ends the open ones, and every later one, when the server stops.
#ifndef ATTNSCOPE_SERVER_BUILTIN_STREAMS_H_
#define ATTNSCOPE_SERVER_BUILTIN_STREAMS_H_

#include <grpcpp/support/server_interceptor.h>

#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "server/client_addresses.h"

namespace attnscope::server {

class BuiltinStreams : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  struct Options {
    // The calls bounded: those whose method ("/package.Service/Method") starts with this.
    std::string method_prefix;
    // Streams open at once over every client.
    int max_streams = 8;
    // Streams one client (its address) may keep open at once.
    int max_streams_per_client = 2;
  };

  // `addresses` (may be null: every stream is one unknown client's) tells each stream's client
  // source; `on_refused` (may be empty) is called for each stream cancelled over a limit. Both
  // must outlive the server.
  BuiltinStreams(Options options, const ClientAddresses* addresses,
                 std::function<void()> on_refused);

  // The interceptor of each call of Options::method_prefix; other calls pass untouched (nullptr).
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

  // Cancels the streams open now, and every one opened from now on: before gRPC's Shutdown,
  // which otherwise waits for them until its deadline.
  void CancelAll();

  // The client source of the call of `context` (once gRPC has begun it: its first interception).
  std::string ClientOf(grpc::ServerContextBase* context) const;
  // Takes a place for the stream of `context` from `client`; false over a limit (counted by
  // on_refused) or after CancelAll.
  bool Open(grpc::ServerContextBase* context, const std::string& client);
  // Gives back the place that Open took.
  void Close(grpc::ServerContextBase* context, const std::string& client);

 private:
  const Options options_;
  const ClientAddresses* const addresses_;
  const std::function<void()> on_refused_;
  absl::Mutex mutex_;
  bool stopped_ ABSL_GUARDED_BY(mutex_) = false;
  absl::flat_hash_set<grpc::ServerContextBase*> open_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<std::string, int> open_by_client_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_BUILTIN_STREAMS_H_

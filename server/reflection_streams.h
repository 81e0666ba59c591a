// Bounds the streams of gRPC server reflection (grpc.reflection.v1alpha.ServerReflection, gRPC's
// own service, which grpcurl and grpcui use). Reflection is a synchronous service: each open
// stream holds a thread of gRPC's synchronous pool (--worker_threads) until its client closes it,
// and StreamAttention and Generate take their threads from the same pool. 80 idle reflection
// streams of one client without an API key (reflection needs none) had every other client's
// streams refused "Server Threadpool Exhausted" for as long as it kept them, counted nowhere, and
// held each shutdown for its whole grace period. Here:
// - at most Options::max_streams reflection streams are open at once, and
//   Options::max_streams_per_client of one client (its address); a stream beyond is cancelled as
//   it opens (CANCELLED at the client, whose gRPC frees the thread at once) and counted by
//   `on_refused`;
// - CancelAll ends the open ones, and every later one, when the server stops.
#ifndef ATTNSCOPE_SERVER_REFLECTION_STREAMS_H_
#define ATTNSCOPE_SERVER_REFLECTION_STREAMS_H_

#include <grpcpp/support/server_interceptor.h>

#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "server/client_addresses.h"

namespace attnscope::server {

class ReflectionStreams : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  struct Options {
    // Reflection streams open at once over every client: few next to the pool's threads
    // (--worker_threads is --max_concurrent_requests + 16 by default), and more than tools
    // browsing the API at once need (grpcurl opens one stream per command).
    int max_streams = 8;
    // Reflection streams one client (its address) may keep open at once.
    int max_streams_per_client = 2;
  };

  // `addresses` (may be null: every stream is one unknown client's) tells each stream's client
  // source; `on_refused` (may be empty) is called for each stream cancelled over a limit. Both
  // must outlive the server.
  ReflectionStreams(Options options, const ClientAddresses* addresses,
                    std::function<void()> on_refused);

  // The interceptor of each reflection stream; other calls pass untouched (nullptr).
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

  // Cancels the reflection streams open now, and every one opened from now on: before gRPC's
  // Shutdown, which otherwise waits for them until its deadline.
  void CancelAll();

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

#endif  // ATTNSCOPE_SERVER_REFLECTION_STREAMS_H_

// Who a call comes from, for the per-client share of --max_concurrent_requests
// (ServiceOptions::max_concurrent_requests_per_client): its client's address, as the listeners
// saw the connection.
//
// gRPC is handed each connection as one end of a socket pair (server/grpc_front.h), so its
// ServerContext::peer() is "fd:N" for the descriptor it was given, not the client; the front
// records the client's address under N when it hands N over, and a call looks its own up.
#ifndef ATTNSCOPE_SERVER_CLIENT_ADDRESSES_H_
#define ATTNSCOPE_SERVER_CLIENT_ADDRESSES_H_

#include <boost/asio/ip/tcp.hpp>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace attnscope::server {

// The source a connection is counted under: its IPv4 address (IPv4-mapped IPv6 ones too), or the
// /64 prefix of its IPv6 address (8 bytes, not printable), where one host usually has a whole /64.
std::string SourceOf(const boost::asio::ip::tcp::endpoint& remote);

// The client sources of gRPC's connections, by the descriptor gRPC was given. Thread-safe. A
// descriptor number is used again only once gRPC has closed it, and its new connection's source
// replaces the old one, so that the table never holds more entries than descriptors.
class ClientAddresses {
 public:
  // Records `source` (SourceOf) for the connection handed to gRPC as descriptor `fd`.
  void Set(int fd, std::string source);
  // The source of the connection whose ServerContext::peer() is `peer` ("fd:N"); "" when it is
  // not one the front handed over.
  std::string Of(absl::string_view peer) const;

 private:
  mutable absl::Mutex mutex_;
  absl::flat_hash_map<int, std::string> sources_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_CLIENT_ADDRESSES_H_

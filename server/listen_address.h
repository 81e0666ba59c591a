// HOST:PORT listen addresses of the server's flags (--listen, --http_listen).
#ifndef ATTNSCOPE_SERVER_LISTEN_ADDRESS_H_
#define ATTNSCOPE_SERVER_LISTEN_ADDRESS_H_

#include <boost/asio/ip/tcp.hpp>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attnscope::server {

struct ListenAddress {
  // Without brackets: "0.0.0.0", "::1", "localhost".
  std::string host;
  // 0 picks a free port.
  int port = 0;
};

// Parses HOST:PORT (IPv6 hosts in brackets, "[::1]:8080"). InvalidArgument naming `flag` and
// showing `example` when there is no host, no port, or a port outside [0, 65535].
absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view flag, absl::string_view value,
                                                 absl::string_view example);

// Resolves `host` and makes `acceptor` (not open yet) listen on its first address and `port` (0: a
// free one), with SetExclusiveListenerOptions. Unavailable: the host does not resolve ("no address
// 'HOST' (why)"), or the address cannot be bound (in use, not local: the system's message).
absl::Status ListenOn(const std::string& host, int port, boost::asio::ip::tcp::acceptor& acceptor);

// Socket options of every listener: SO_REUSEADDR (a restart binds at once, without waiting for the
// old connections' TIME_WAIT), never SO_REUSEPORT, which would let a second server bind the same
// port and the kernel split the calls between the two.
void SetExclusiveListenerOptions(int socket);

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_LISTEN_ADDRESS_H_

#include "server/listen_address.h"

#include <sys/socket.h>

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace attnscope::server {

absl::Status ListenOn(const std::string& host, int port, boost::asio::ip::tcp::acceptor& acceptor) {
  using tcp = boost::asio::ip::tcp;
  boost::system::error_code error;
  tcp::resolver resolver(acceptor.get_executor());
  const tcp::resolver::results_type found = resolver.resolve(host, std::to_string(port), error);
  if (error || found.empty()) {
    return absl::UnavailableError(absl::StrCat("no address '", host, "' (", error.message(), ")"));
  }
  const tcp::endpoint endpoint = found.begin()->endpoint();
  acceptor.open(endpoint.protocol(), error);
  if (!error) SetExclusiveListenerOptions(acceptor.native_handle());
  if (!error) acceptor.bind(endpoint, error);
  if (!error) acceptor.listen(boost::asio::socket_base::max_listen_connections, error);
  if (error) return absl::UnavailableError(error.message());
  return absl::OkStatus();
}

absl::StatusOr<ListenAddress> ParseListenAddress(absl::string_view flag, absl::string_view value,
                                                 absl::string_view example) {
  constexpr int kMaxPort = 65535;
  const size_t colon = value.rfind(':');
  ListenAddress address;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(value.substr(colon + 1), &address.port) || address.port < 0 ||
      address.port > kMaxPort) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", value, "': expected HOST:PORT with a port in [0, ", kMaxPort,
                     "] (0 picks a free port), e.g. ", example));
  }
  address.host = std::string(value.substr(0, colon));
  if (address.host.size() >= 2 && address.host.front() == '[' && address.host.back() == ']') {
    address.host = address.host.substr(1, address.host.size() - 2);
  }
  return address;
}

void SetExclusiveListenerOptions(int socket) {
  const int yes = 1;
  setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
}

}  // namespace attnscope::server

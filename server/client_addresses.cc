#include "server/client_addresses.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"

namespace attnscope::server {

std::string SourceOf(const boost::asio::ip::tcp::endpoint& remote) {
  boost::asio::ip::address address = remote.address();
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    address = boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, address.to_v6());
  }
  if (address.is_v4()) return address.to_string();
  const boost::asio::ip::address_v6::bytes_type bytes = address.to_v6().to_bytes();
  return std::string(reinterpret_cast<const char*>(bytes.data()), 8);
}

void ClientAddresses::Set(int fd, std::string source) {
  absl::MutexLock lock(&mutex_);
  sources_[fd] = std::move(source);
}

std::string ClientAddresses::Of(absl::string_view peer) const {
  int fd = 0;
  if (!absl::ConsumePrefix(&peer, "fd:") || !absl::SimpleAtoi(peer, &fd)) return "";
  absl::MutexLock lock(&mutex_);
  const auto found = sources_.find(fd);
  return found == sources_.end() ? "" : found->second;
}

}  // namespace attnscope::server

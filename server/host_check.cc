#include "server/host_check.h"

#include <arpa/inet.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace attnscope::server {
namespace {

// The host name of a Host header: lower-cased, without the port (IPv6 literals keep brackets).
std::string HostName(const std::string& host) {
  std::string name = absl::AsciiStrToLower(host);
  const size_t bracket = name.rfind(']');
  const size_t colon = name.rfind(':');
  if (colon != std::string::npos && (bracket == std::string::npos || colon > bracket)) {
    name.resize(colon);
  }
  return name;
}

bool LoopbackName(const std::string& name) {
  if (name == "localhost" || absl::EndsWith(name, ".localhost") || name == "[::1]") return true;
  in_addr address{};
  return inet_pton(AF_INET, name.c_str(), &address) == 1 && (ntohl(address.s_addr) >> 24) == 127;
}

}  // namespace

HostCheck::HostCheck(bool loopback, const std::vector<std::string>& allowed_hosts)
    : loopback_(loopback) {
  for (const std::string& host : allowed_hosts) {
    allowed_hosts_.push_back(absl::AsciiStrToLower(host));
  }
}

absl::Status HostCheck::Check(const HttpRequestHeader& request) const {
  const size_t hosts = request.count(boost::beast::http::field::host);
  if (hosts > 1 || (hosts == 0 && request.version() >= 11)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Host header: expected exactly one on an HTTP/1.1 request (RFC 9112, section 3.2), got ",
        hosts, "; send one Host"));
  }
  const std::string host(request[boost::beast::http::field::host]);
  if (!loopback_ || host.empty()) return absl::OkStatus();
  const std::string name = HostName(host);
  if (LoopbackName(name)) return absl::OkStatus();
  for (const std::string& allowed : allowed_hosts_) {
    if (allowed == name || allowed == absl::AsciiStrToLower(host)) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "Host '", host,
      "': expected a loopback name (localhost, 127.0.0.1, [::1]) on this loopback listener, "
      "got another, as a page whose DNS name was rebound to this machine would send; list the "
      "name in --http_allowed_hosts if a proxy or an alias uses it"));
}

}  // namespace attnscope::server

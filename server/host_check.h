// The Host header check of both HTTP ports (the API's and /metrics), against DNS rebinding: a page
// of evil.example whose name now resolves to 127.0.0.1 reaches a loopback listener with its own
// name as the Host, and the browser treats the answer as evil.example's to read.
#ifndef ATTNSCOPE_SERVER_HOST_CHECK_H_
#define ATTNSCOPE_SERVER_HOST_CHECK_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/http_connection.h"

namespace attnscope::server {

class HostCheck {
 public:
  // `loopback`: whether the listener is bound to a loopback address only; on other addresses the
  // name is the deployment's to choose, so only the header count is checked there.
  // `allowed_hosts`: further names to accept (a local proxy's, an alias), as --http_allowed_hosts
  // gives them: a bare name accepts every port, name:port only that port. Case-insensitive.
  HostCheck(bool loopback, const std::vector<std::string>& allowed_hosts);

  // OK for a request with exactly one Host header (none is accepted on HTTP/1.0) naming a loopback
  // host (localhost, *.localhost, 127.0.0.0/8, [::1]) or a listed one. InvalidArgument (400) for
  // none or several on HTTP/1.1 (RFC 9112, section 3.2); PermissionDenied (403) for another name
  // on a loopback listener, naming --http_allowed_hosts.
  absl::Status Check(const HttpRequestHeader& request) const;

 private:
  const bool loopback_;
  std::vector<std::string> allowed_hosts_;
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_HOST_CHECK_H_

// The one gRPC failure that never reaches a handler: a request whose bytes do not parse as its
// method's message (proto3 also refuses a string field that is not valid UTF-8, which is how an
// invalid text arrives). gRPC answers those INTERNAL (synchronous methods) or UNIMPLEMENTED
// (callback methods) with no useful message, and no handler counts them; this server interceptor
// turns them into INVALID_ARGUMENT naming the message type, as the HTTP front end answers the same
// body, and counts them in the request metrics. A call whose stream ended before its message
// arrived (a client's RST_STREAM) is CANCELLED instead, as gRPC counts a call its client cancels.
#ifndef ATTNSCOPE_SERVER_PARSE_FAILURE_INTERCEPTOR_H_
#define ATTNSCOPE_SERVER_PARSE_FAILURE_INTERCEPTOR_H_

#include <grpcpp/support/server_interceptor.h>

#include "server/metrics.h"

namespace attnscope::server {

// Creates the interceptor for each call of attnscope.v1.AttentionService (other services, health
// and reflection, pass untouched). `metrics` must outlive the server.
class ParseFailureInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit ParseFailureInterceptorFactory(Metrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  Metrics* const metrics_;
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_PARSE_FAILURE_INTERCEPTOR_H_

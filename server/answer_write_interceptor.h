// Bounds a unary gRPC answer after its handler has returned. The synchronous server writes the
// answer from the handler's thread and waits there until the client's HTTP/2 window has taken all
// of it, with no deadline of its own: a client that asked for tens of MB of attention and never
// read them held that thread (one of the ResourceQuota's, so enough such clients left every other
// caller "Server Threadpool Exhausted") and the serialized answer for as long as it stayed
// connected. Here, as on the HTTP front end:
// - the answer takes its size from --max_answer_bytes_in_flight until written; when the answers
//   being written leave no room, the call is answered RESOURCE_EXHAUSTED naming the flag instead;
// - the write ends at --write_timeout_seconds: the call is cancelled (CANCELLED at the client).
#ifndef ATTNSCOPE_SERVER_ANSWER_WRITE_INTERCEPTOR_H_
#define ATTNSCOPE_SERVER_ANSWER_WRITE_INTERCEPTOR_H_

#include <grpcpp/support/server_interceptor.h>

#include "server/client_addresses.h"
#include "server/service_core.h"
#include "server/write_watchdog.h"

namespace attnscope::server {

// Creates the interceptor for each unary call of attnscope.v1.AttentionService (streams are
// bounded per message by AttentionService; other services pass untouched). `core`, `watchdog`
// and `addresses` (may be null; each call's client source, whose share of the budget its answer
// takes) must outlive the server.
class AnswerWriteInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  AnswerWriteInterceptorFactory(const ServiceCore* core, WriteWatchdog* watchdog,
                                const ClientAddresses* addresses)
      : core_(core), watchdog_(watchdog), addresses_(addresses) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  const ServiceCore* const core_;
  WriteWatchdog* const watchdog_;
  const ClientAddresses* const addresses_;
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_ANSWER_WRITE_INTERCEPTOR_H_

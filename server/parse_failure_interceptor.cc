#include "server/parse_failure_interceptor.h"

#include <chrono>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "attnscope/v1/attnscope.grpc.pb.h"

namespace attnscope::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

constexpr char kNoPayload[] = "No payload";
constexpr char kNoBuffer[] = "Couldn't initialize byte buffer reader";

class ParseFailureInterceptor : public grpc::experimental::Interceptor {
 public:
  ParseFailureInterceptor(std::string rpc, grpc::ServerContextBase* context, Metrics* metrics)
      : rpc_(std::move(rpc)),
        context_(context),
        metrics_(metrics),
        start_(std::chrono::steady_clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      // Null when the bytes did not parse: the handler will not run.
      unparsed_ = methods->GetRecvMessage() == nullptr;
    }
    const grpc::StatusCode code =
        methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)
            ? methods->GetSendStatus().error_code()
            : grpc::StatusCode::OK;
    if (unparsed_ && code == grpc::StatusCode::INTERNAL) {
      // The synchronous API (the streams) answers INTERNAL with the deserializer's message. The
      // stream ended before its message did: the client reset or cancelled it (HTTP/2
      // RST_STREAM), which is no fault of the request's bytes. gRPC's deserializer says so in two
      // ways, both compiled in from its headers: "No payload" (grpcpp/impl/codegen/proto_utils.h,
      // GenericDeserialize) without a buffer, and "Couldn't initialize byte buffer reader"
      // (grpcpp/support/proto_buffer_reader.h) with an empty one, which is what a reset stream
      // gives.
      const std::string& message = methods->GetSendStatus().error_message();
      const bool no_message = message == kNoPayload || message == kNoBuffer;
      methods->ModifySendStatus(no_message ? EndedEarly() : Unparsed());
      Record(no_message ? "CANCELLED" : "INVALID_ARGUMENT");
    } else if (unparsed_ && code == grpc::StatusCode::UNIMPLEMENTED) {
      // The callback API (the unary methods) answers UNIMPLEMENTED with no message either way:
      // whether the client reset the stream shows only when the call closes (below). A client
      // still there reads why its bytes were refused.
      methods->ModifySendStatus(Unparsed());
      count_at_close_ = true;
    }
    if (count_at_close_ &&
        methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_CLOSE)) {
      Record(context_->IsCancelled() ? "CANCELLED" : "INVALID_ARGUMENT");
      count_at_close_ = false;
    }
    methods->Proceed();
  }

 private:
  grpc::Status EndedEarly() const {
    return grpc::Status(grpc::StatusCode::CANCELLED,
                        absl::StrCat("request: the call ended before its ", rpc_,
                                     " message arrived (cancelled or reset by the client)"));
  }
  grpc::Status Unparsed() const {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("request: not a serialized attnscope.v1 request of ", rpc_,
                                     ", or a text in it is not valid UTF-8; send texts as "
                                     "UTF-8 strings"));
  }
  void Record(absl::string_view code) const {
    metrics_->RecordRequest(
        rpc_, "grpc", "", code,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }

  const std::string rpc_;
  grpc::ServerContextBase* const context_;
  Metrics* const metrics_;
  const std::chrono::steady_clock::time_point start_;
  bool unparsed_ = false;
  // A callback method's refusal, counted when the call closes.
  bool count_at_close_ = false;
};

}  // namespace

grpc::experimental::Interceptor* ParseFailureInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  const std::string prefix = absl::StrCat("/", v1::AttentionService::service_full_name(), "/");
  if (!absl::StartsWith(info->method(), prefix)) return nullptr;
  return new ParseFailureInterceptor(std::string(info->method()).substr(prefix.size()),
                                     info->server_context(), metrics_);
}

}  // namespace attnscope::server

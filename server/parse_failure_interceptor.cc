#include "server/parse_failure_interceptor.h"

#include <chrono>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "attnscope/v1/attnscope.grpc.pb.h"

namespace attnscope::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

class ParseFailureInterceptor : public grpc::experimental::Interceptor {
 public:
  ParseFailureInterceptor(std::string rpc, Metrics* metrics)
      : rpc_(std::move(rpc)), metrics_(metrics), start_(std::chrono::steady_clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      // Null when the bytes did not parse: the handler will not run.
      unparsed_ = methods->GetRecvMessage() == nullptr;
    }
    if (unparsed_ && methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS) &&
        methods->GetSendStatus().error_code() == grpc::StatusCode::INTERNAL) {
      methods->ModifySendStatus(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("request: not a serialized attnscope.v1 request of ", rpc_,
                       ", or a text in it is not valid UTF-8; send texts as UTF-8 strings")));
      metrics_->RecordRequest(
          rpc_, "grpc", "", "INVALID_ARGUMENT",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    }
    methods->Proceed();
  }

 private:
  const std::string rpc_;
  Metrics* const metrics_;
  const std::chrono::steady_clock::time_point start_;
  bool unparsed_ = false;
};

}  // namespace

grpc::experimental::Interceptor* ParseFailureInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  const std::string prefix = absl::StrCat("/", v1::AttentionService::service_full_name(), "/");
  if (!absl::StartsWith(info->method(), prefix)) return nullptr;
  return new ParseFailureInterceptor(std::string(info->method()).substr(prefix.size()), metrics_);
}

}  // namespace attnscope::server

#include "server/answer_write_interceptor.h"

#include <google/protobuf/message.h>

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "attnscope/v1/attnscope.grpc.pb.h"
#include "server/attention_service.h"

namespace attnscope::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

class AnswerWriteInterceptor : public grpc::experimental::Interceptor {
 public:
  AnswerWriteInterceptor(std::string rpc, grpc::ServerContextBase* context, const ServiceCore* core,
                         WriteWatchdog* watchdog, const ClientAddresses* addresses)
      : rpc_(std::move(rpc)),
        context_(context),
        core_(core),
        watchdog_(watchdog),
        addresses_(addresses) {}

  // POST_SEND_MESSAGE has always come before: the handler's thread waits for the answer's batch.
  ~AnswerWriteInterceptor() override { EndWrite(); }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      // The unary handler sends its response unserialized (SendMessagePtr), so that its size is
      // known here without serializing it, and gRPC reports POST_SEND_MESSAGE only for such a
      // message (grpcpp/impl/call_op_set.h, CallOpSendMessage). Every AttentionService response
      // is a protobuf Message.
      const auto* message =
          static_cast<const google::protobuf::Message*>(methods->GetSendMessage());
      const int64_t bytes =
          message == nullptr ? static_cast<int64_t>(methods->GetSerializedSendMessage()->Length())
                             : static_cast<int64_t>(message->ByteSizeLong());
      absl::StatusOr<ByteBudget::Hold> hold =
          core_->HoldAnswerBytes(core_->AnsweredClientOf(GrpcCall(context_, addresses_)), bytes,
                                 absl::StrCat(rpc_, "'s answer"), ServiceCore::AnswerFixes(rpc_));
      if (hold.ok()) {
        hold_ = *std::move(hold);
        write_ = watchdog_->Begin(context_);
      } else {
        // An empty buffer is no message at all: the batch then carries only the status.
        methods->GetSerializedSendMessage()->Clear();
        refusal_ = hold.status();
      }
    }
    if (!refusal_.ok() &&
        methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      methods->ModifySendStatus(ToGrpcStatus(refusal_));
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_SEND_MESSAGE)) {
      EndWrite();
    }
    methods->Proceed();
  }

 private:
  void EndWrite() {
    if (write_.has_value()) watchdog_->End(*write_);
    write_.reset();
    hold_.reset();
  }

  const std::string rpc_;
  grpc::ServerContextBase* const context_;
  const ServiceCore* const core_;
  WriteWatchdog* const watchdog_;
  const ClientAddresses* const addresses_;
  ByteBudget::Hold hold_;
  std::optional<uint64_t> write_;
  absl::Status refusal_;
};

}  // namespace

grpc::experimental::Interceptor* AnswerWriteInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  const std::string prefix = absl::StrCat("/", v1::AttentionService::service_full_name(), "/");
  if (info->type() != grpc::experimental::ServerRpcInfo::Type::UNARY ||
      !absl::StartsWith(info->method(), prefix)) {
    return nullptr;
  }
  return new AnswerWriteInterceptor(std::string(info->method()).substr(prefix.size()),
                                    info->server_context(), core_, watchdog_, addresses_);
}

}  // namespace attnscope::server

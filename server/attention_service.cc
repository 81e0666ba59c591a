#include "server/attention_service.h"

#include <grpc/support/time.h>

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/metrics.h"

namespace attnscope::server {
namespace {

// The call's deadline. ServerContextBase::deadline() wraps around for one past the year 2262
// (system_clock's nanoseconds overflow) and made a grpc-timeout of 2,070,000 hours (a client's
// "longest deadline") already expired: such a deadline is none.
std::chrono::system_clock::time_point DeadlineOf(const grpc::ServerContextBase& context) {
  constexpr int64_t kLastSecond =
      std::chrono::duration_cast<std::chrono::seconds>(
          std::chrono::system_clock::time_point::max().time_since_epoch())
          .count();
  const gpr_timespec raw = gpr_convert_clock_type(context.raw_deadline(), GPR_CLOCK_REALTIME);
  if (raw.tv_sec >= kLastSecond) return std::chrono::system_clock::time_point::max();
  return context.deadline();
}

}  // namespace

Call GrpcCall(grpc::ServerContextBase* context, const ClientAddresses* addresses) {
  const auto& metadata = context->client_metadata();
  const auto authorization = metadata.find("authorization");
  return MakeCall(
      "grpc", DeadlineOf(*context), [context] { return context->IsCancelled(); },
      authorization == metadata.end()
          ? std::string()
          : std::string(authorization->second.data(), authorization->second.size()),
      addresses == nullptr ? std::string() : addresses->Of(context->peer()));
}

template <typename Message>
absl::Status AttentionService::WriteWithin(grpc::ServerContext* context,
                                           grpc::ServerWriter<Message>* writer,
                                           const Message& message) {
  bool timed_out = false;
  if (watchdog_->Write(
          context, [writer, &message] { return writer->Write(message); }, &timed_out)) {
    return absl::OkStatus();
  }
  if (timed_out) {
    return absl::CancelledError(
        absl::StrCat("the client took no message for ", absl::FormatDuration(watchdog_->timeout()),
                     " (--write_timeout_seconds); read the stream as it comes"));
  }
  return absl::CancelledError("the client closed the stream before it was complete");
}

grpc::ServerUnaryReactor* AttentionService::Unary(grpc::CallbackServerContext* context,
                                                  std::function<absl::Status(const Call&)> method) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Call call = GrpcCall(context, addresses_);
  WorkerPool::Task task;
  task.run = [reactor, call = std::move(call), method = std::move(method)] {
    reactor->Finish(ToGrpcStatus(method(call)));
  };
  task.cancelled = [context] { return context->IsCancelled(); };
  task.drop = [reactor] {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the call before it began"));
  };
  if (!workers_->TrySchedule(std::move(task))) {
    core_->RecordBusy();
    reactor->Finish(ToGrpcStatus(absl::ResourceExhaustedError(
        "every worker thread of the server is busy and as many calls wait for one "
        "(--max_concurrent_requests); retry with backoff")));
  }
  return reactor;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), ClientMessage(status));
}

grpc::ServerUnaryReactor* AttentionService::ListModels(grpc::CallbackServerContext* context,
                                                       const v1::ListModelsRequest* request,
                                                       v1::ListModelsResponse* response) {
  return Unary(context, [this, request, response](const Call& call) {
    return core_->ListModels(call, *request, response);
  });
}

grpc::ServerUnaryReactor* AttentionService::GetModelInfo(grpc::CallbackServerContext* context,
                                                         const v1::GetModelInfoRequest* request,
                                                         v1::ModelInfo* response) {
  return Unary(context, [this, request, response](const Call& call) {
    return core_->GetModelInfo(call, *request, response);
  });
}

grpc::ServerUnaryReactor* AttentionService::Tokenize(grpc::CallbackServerContext* context,
                                                     const v1::TokenizeRequest* request,
                                                     v1::TokenizeResponse* response) {
  return Unary(context, [this, request, response](const Call& call) {
    return core_->Tokenize(call, *request, response);
  });
}

grpc::ServerUnaryReactor* AttentionService::GetAttention(grpc::CallbackServerContext* context,
                                                         const v1::GetAttentionRequest* request,
                                                         v1::GetAttentionResponse* response) {
  return Unary(context, [this, request, response](const Call& call) {
    return core_->GetAttention(call, *request, response);
  });
}

grpc::Status AttentionService::StreamAttention(
    grpc::ServerContext* context, const v1::GetAttentionRequest* request,
    grpc::ServerWriter<v1::StreamAttentionResponse>* writer) {
  return ToGrpcStatus(core_->StreamAttention(GrpcCall(context, addresses_), *request,
                                             [&](const v1::StreamAttentionResponse& message) {
                                               return WriteWithin(context, writer, message);
                                             }));
}

grpc::Status AttentionService::Generate(grpc::ServerContext* context,
                                        const v1::GenerateRequest* request,
                                        grpc::ServerWriter<v1::GenerateResponse>* writer) {
  return ToGrpcStatus(core_->Generate(
      GrpcCall(context, addresses_), *request,
      [&](const v1::GenerateResponse& message) { return WriteWithin(context, writer, message); }));
}

grpc::ServerUnaryReactor* AttentionService::Encode(grpc::CallbackServerContext* context,
                                                   const v1::EncodeRequest* request,
                                                   v1::EncodeResponse* response) {
  return Unary(context, [this, request, response](const Call& call) {
    return core_->Encode(call, *request, response);
  });
}

grpc::ServerUnaryReactor* AttentionService::CrossAttention(grpc::CallbackServerContext* context,
                                                           const v1::CrossAttentionRequest* request,
                                                           v1::CrossAttentionResponse* response) {
  return Unary(context, [this, request, response](const Call& call) {
    return core_->CrossAttention(call, *request, response);
  });
}

grpc::ServerUnaryReactor* AttentionService::ListParameters(grpc::CallbackServerContext* context,
                                                           const v1::ListParametersRequest* request,
                                                           v1::ListParametersResponse* response) {
  return Unary(context, [this, request, response](const Call& call) {
    return core_->ListParameters(call, *request, response);
  });
}

grpc::ServerUnaryReactor* AttentionService::GetParameter(grpc::CallbackServerContext* context,
                                                         const v1::GetParameterRequest* request,
                                                         v1::GetParameterResponse* response) {
  return Unary(context, [this, request, response](const Call& call) {
    return core_->GetParameter(call, *request, response);
  });
}

grpc::ServerUnaryReactor* AttentionService::GetTrainingRecord(
    grpc::CallbackServerContext* context, const v1::GetTrainingRecordRequest* request,
    v1::TrainingRecord* response) {
  return Unary(context, [this, request, response](const Call& call) {
    return core_->GetTrainingRecord(call, *request, response);
  });
}

grpc::ServerUnaryReactor* AttentionService::Attribute(grpc::CallbackServerContext* context,
                                                      const v1::AttributeRequest* request,
                                                      v1::AttributeResponse* response) {
  return Unary(context, [this, request, response](const Call& call) {
    return core_->Attribute(call, *request, response);
  });
}

grpc::ServerGenericBidiReactor* UnknownMethodService::CreateReactor(
    grpc::GenericCallbackServerContext* context) {
  class Refusal : public grpc::ServerGenericBidiReactor {
   public:
    explicit Refusal(const std::string& method) {
      Finish(ToGrpcStatus(absl::UnimplementedError(absl::StrCat(
          "method '", method, "': not a method of this server; attnscope.v1.AttentionService has ",
          absl::StrJoin(Metrics::RpcNames(), ", "),
          " (proto/attnscope/v1/attnscope.proto); grpc.health.v1.Health and server reflection "
          "(grpc.reflection.v1alpha: grpcurl and grpcui fall back to it) are served too"))));
    }
    void OnDone() override { delete this; }
  };
  return new Refusal(context->method());
}

}  // namespace attnscope::server

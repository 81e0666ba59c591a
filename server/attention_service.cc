#include "server/attention_service.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/metrics.h"

namespace attnscope::server {
namespace {

Call GrpcCall(grpc::ServerContext* context) {
  const auto& metadata = context->client_metadata();
  const auto authorization = metadata.find("authorization");
  return MakeCall(
      "grpc", context->deadline(), [context] { return context->IsCancelled(); },
      authorization == metadata.end()
          ? std::string()
          : std::string(authorization->second.data(), authorization->second.size()));
}

}  // namespace

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

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), ClientMessage(status));
}

grpc::Status AttentionService::ListModels(grpc::ServerContext* context,
                                          const v1::ListModelsRequest* request,
                                          v1::ListModelsResponse* response) {
  return ToGrpcStatus(core_->ListModels(GrpcCall(context), *request, response));
}

grpc::Status AttentionService::GetModelInfo(grpc::ServerContext* context,
                                            const v1::GetModelInfoRequest* request,
                                            v1::ModelInfo* response) {
  return ToGrpcStatus(core_->GetModelInfo(GrpcCall(context), *request, response));
}

grpc::Status AttentionService::Tokenize(grpc::ServerContext* context,
                                        const v1::TokenizeRequest* request,
                                        v1::TokenizeResponse* response) {
  return ToGrpcStatus(core_->Tokenize(GrpcCall(context), *request, response));
}

grpc::Status AttentionService::GetAttention(grpc::ServerContext* context,
                                            const v1::GetAttentionRequest* request,
                                            v1::GetAttentionResponse* response) {
  return ToGrpcStatus(core_->GetAttention(GrpcCall(context), *request, response));
}

grpc::Status AttentionService::StreamAttention(
    grpc::ServerContext* context, const v1::GetAttentionRequest* request,
    grpc::ServerWriter<v1::StreamAttentionResponse>* writer) {
  return ToGrpcStatus(core_->StreamAttention(GrpcCall(context), *request,
                                             [&](const v1::StreamAttentionResponse& message) {
                                               return WriteWithin(context, writer, message);
                                             }));
}

grpc::Status AttentionService::Generate(grpc::ServerContext* context,
                                        const v1::GenerateRequest* request,
                                        grpc::ServerWriter<v1::GenerateResponse>* writer) {
  return ToGrpcStatus(core_->Generate(
      GrpcCall(context), *request,
      [&](const v1::GenerateResponse& message) { return WriteWithin(context, writer, message); }));
}

grpc::Status AttentionService::Encode(grpc::ServerContext* context,
                                      const v1::EncodeRequest* request,
                                      v1::EncodeResponse* response) {
  return ToGrpcStatus(core_->Encode(GrpcCall(context), *request, response));
}

grpc::Status AttentionService::CrossAttention(grpc::ServerContext* context,
                                              const v1::CrossAttentionRequest* request,
                                              v1::CrossAttentionResponse* response) {
  return ToGrpcStatus(core_->CrossAttention(GrpcCall(context), *request, response));
}

grpc::Status AttentionService::ListParameters(grpc::ServerContext* context,
                                              const v1::ListParametersRequest* request,
                                              v1::ListParametersResponse* response) {
  return ToGrpcStatus(core_->ListParameters(GrpcCall(context), *request, response));
}

grpc::Status AttentionService::GetParameter(grpc::ServerContext* context,
                                            const v1::GetParameterRequest* request,
                                            v1::GetParameterResponse* response) {
  return ToGrpcStatus(core_->GetParameter(GrpcCall(context), *request, response));
}

grpc::Status AttentionService::GetTrainingRecord(grpc::ServerContext* context,
                                                 const v1::GetTrainingRecordRequest* request,
                                                 v1::TrainingRecord* response) {
  return ToGrpcStatus(core_->GetTrainingRecord(GrpcCall(context), *request, response));
}

grpc::Status AttentionService::Attribute(grpc::ServerContext* context,
                                         const v1::AttributeRequest* request,
                                         v1::AttributeResponse* response) {
  return ToGrpcStatus(core_->Attribute(GrpcCall(context), *request, response));
}

grpc::ServerGenericBidiReactor* UnknownMethodService::CreateReactor(
    grpc::GenericCallbackServerContext* context) {
  class Refusal : public grpc::ServerGenericBidiReactor {
   public:
    explicit Refusal(const std::string& method) {
      Finish(ToGrpcStatus(absl::UnimplementedError(absl::StrCat(
          "method '", method, "': not a method of this server; attnscope.v1.AttentionService has ",
          absl::StrJoin(Metrics::RpcNames(), ", "),
          " (proto/attnscope/v1/attnscope.proto); grpc.health.v1.Health and server reflection are "
          "served too"))));
    }
    void OnDone() override { delete this; }
  };
  return new Refusal(context->method());
}

}  // namespace attnscope::server

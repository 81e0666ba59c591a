// The gRPC front end of attnscope.v1.AttentionService: each RPC turns its ServerContext into a
// Call, runs the ServiceCore method of the same name and converts the status. ToGrpcStatus is the
// one conversion from absl::Status to grpc::Status.
#ifndef ATTNSCOPE_SERVER_ATTENTION_SERVICE_H_
#define ATTNSCOPE_SERVER_ATTENTION_SERVICE_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "attnscope/v1/attnscope.grpc.pb.h"
#include "server/service_core.h"
#include "server/write_watchdog.h"

namespace attnscope::server {

// The canonical codes are the same numbers on both sides; the message is ClientMessage(status).
grpc::Status ToGrpcStatus(const absl::Status& status);

class AttentionService final : public v1::AttentionService::Service {
 public:
  // `core` and `watchdog` must outlive the service. A stream whose client takes none of its
  // messages for the watchdog's timeout (--write_timeout_seconds) is cancelled.
  AttentionService(ServiceCore* core, WriteWatchdog* watchdog) : core_(core), watchdog_(watchdog) {}

  grpc::Status ListModels(grpc::ServerContext* context, const v1::ListModelsRequest* request,
                          v1::ListModelsResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context, const v1::GetModelInfoRequest* request,
                            v1::ModelInfo* response) override;
  grpc::Status Tokenize(grpc::ServerContext* context, const v1::TokenizeRequest* request,
                        v1::TokenizeResponse* response) override;
  grpc::Status GetAttention(grpc::ServerContext* context, const v1::GetAttentionRequest* request,
                            v1::GetAttentionResponse* response) override;
  grpc::Status StreamAttention(grpc::ServerContext* context, const v1::GetAttentionRequest* request,
                               grpc::ServerWriter<v1::StreamAttentionResponse>* writer) override;
  grpc::Status Encode(grpc::ServerContext* context, const v1::EncodeRequest* request,
                      v1::EncodeResponse* response) override;
  grpc::Status CrossAttention(grpc::ServerContext* context,
                              const v1::CrossAttentionRequest* request,
                              v1::CrossAttentionResponse* response) override;
  grpc::Status ListParameters(grpc::ServerContext* context,
                              const v1::ListParametersRequest* request,
                              v1::ListParametersResponse* response) override;
  grpc::Status GetParameter(grpc::ServerContext* context, const v1::GetParameterRequest* request,
                            v1::GetParameterResponse* response) override;
  grpc::Status GetTrainingRecord(grpc::ServerContext* context,
                                 const v1::GetTrainingRecordRequest* request,
                                 v1::TrainingRecord* response) override;
  grpc::Status Attribute(grpc::ServerContext* context, const v1::AttributeRequest* request,
                         v1::AttributeResponse* response) override;
  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;

 private:
  // Writes `message` on `writer` within the watchdog's timeout; Cancelled, saying why, when the
  // client has gone or stopped reading.
  template <typename Message>
  absl::Status WriteWithin(grpc::ServerContext* context, grpc::ServerWriter<Message>* writer,
                           const Message& message);

  ServiceCore* const core_;
  WriteWatchdog* const watchdog_;
};

// Answers a call to a method no registered service has (a client built from another proto, a
// typo) with UNIMPLEMENTED naming the method and the service's methods; gRPC's own answer to it
// has an empty message.
class UnknownMethodService final : public grpc::CallbackGenericService {
 public:
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override;
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_ATTENTION_SERVICE_H_

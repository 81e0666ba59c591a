// The gRPC front end of attnscope.v1.AttentionService: each RPC turns its ServerContext into a
// Call, runs the ServiceCore method of the same name and converts the status. ToGrpcStatus is the
// one conversion from absl::Status to grpc::Status.
#ifndef ATTNSCOPE_SERVER_ATTENTION_SERVICE_H_
#define ATTNSCOPE_SERVER_ATTENTION_SERVICE_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "attnscope/v1/attnscope.grpc.pb.h"
#include "server/client_addresses.h"
#include "server/service_core.h"
#include "server/worker_pool.h"
#include "server/write_watchdog.h"

namespace attnscope::server {

// The canonical codes are the same numbers on both sides; the message is ClientMessage(status).
grpc::Status ToGrpcStatus(const absl::Status& status);

// The Call of a gRPC call: its deadline (none past the year 2262), cancellation, `authorization`
// metadata, and its client's source from `addresses` (may be null: no source).
Call GrpcCall(grpc::ServerContextBase* context, const ClientAddresses* addresses);

// The unary methods on gRPC's callback API, their work on a WorkerPool (server/worker_pool.h says
// why); the two streams on the synchronous API, whose writes the watchdog bounds.
using UnaryCallbackService = v1::AttentionService::WithCallbackMethod_ListModels<
    v1::AttentionService::WithCallbackMethod_GetModelInfo<
        v1::AttentionService::WithCallbackMethod_Tokenize<
            v1::AttentionService::WithCallbackMethod_GetAttention<
                v1::AttentionService::WithCallbackMethod_Encode<
                    v1::AttentionService::WithCallbackMethod_CrossAttention<
                        v1::AttentionService::WithCallbackMethod_ListParameters<
                            v1::AttentionService::WithCallbackMethod_GetParameter<
                                v1::AttentionService::WithCallbackMethod_GetTrainingRecord<
                                    v1::AttentionService::WithCallbackMethod_Attribute<
                                        v1::AttentionService::Service>>>>>>>>>>;

class AttentionService final : public UnaryCallbackService {
 public:
  // `core`, `watchdog` and `workers` must outlive the service. A stream whose client takes none
  // of its messages for the watchdog's timeout (--write_timeout_seconds) is cancelled; a unary
  // call that finds every worker busy and the pool's queue full is refused RESOURCE_EXHAUSTED,
  // counted as the concurrency limit's rejection.
  // `addresses` (may be null) tells each call's client source, for the per-client share.
  AttentionService(ServiceCore* core, WriteWatchdog* watchdog, WorkerPool* workers,
                   const ClientAddresses* addresses = nullptr)
      : core_(core), watchdog_(watchdog), workers_(workers), addresses_(addresses) {}

  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::ModelInfo* response) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* GetAttention(grpc::CallbackServerContext* context,
                                         const v1::GetAttentionRequest* request,
                                         v1::GetAttentionResponse* response) override;
  grpc::ServerUnaryReactor* Encode(grpc::CallbackServerContext* context,
                                   const v1::EncodeRequest* request,
                                   v1::EncodeResponse* response) override;
  grpc::ServerUnaryReactor* CrossAttention(grpc::CallbackServerContext* context,
                                           const v1::CrossAttentionRequest* request,
                                           v1::CrossAttentionResponse* response) override;
  grpc::ServerUnaryReactor* ListParameters(grpc::CallbackServerContext* context,
                                           const v1::ListParametersRequest* request,
                                           v1::ListParametersResponse* response) override;
  grpc::ServerUnaryReactor* GetParameter(grpc::CallbackServerContext* context,
                                         const v1::GetParameterRequest* request,
                                         v1::GetParameterResponse* response) override;
  grpc::ServerUnaryReactor* GetTrainingRecord(grpc::CallbackServerContext* context,
                                              const v1::GetTrainingRecordRequest* request,
                                              v1::TrainingRecord* response) override;
  grpc::ServerUnaryReactor* Attribute(grpc::CallbackServerContext* context,
                                      const v1::AttributeRequest* request,
                                      v1::AttributeResponse* response) override;

  grpc::Status StreamAttention(grpc::ServerContext* context, const v1::GetAttentionRequest* request,
                               grpc::ServerWriter<v1::StreamAttentionResponse>* writer) override;
  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;

 private:
  // Writes `message` on `writer` within the watchdog's timeout; Cancelled, saying why, when the
  // client has gone or stopped reading.
  template <typename Message>
  absl::Status WriteWithin(grpc::ServerContext* context, grpc::ServerWriter<Message>* writer,
                           const Message& message);

  // Runs `method` on a worker and finishes the call with its status.
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* context,
                                  std::function<absl::Status(const Call&)> method);

  ServiceCore* const core_;
  WriteWatchdog* const watchdog_;
  WorkerPool* const workers_;
  const ClientAddresses* const addresses_;
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

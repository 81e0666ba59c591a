// attnscope.v1.AttentionService: validates requests, runs the engine, encodes tensors, records
// metrics. absl::Status inside; ToGrpcStatus is the one conversion to grpc::Status.
#ifndef ATTNSCOPE_SERVER_ATTENTION_SERVICE_H_
#define ATTNSCOPE_SERVER_ATTENTION_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "attnscope/v1/attnscope.grpc.pb.h"
#include "models/engine.h"
#include "server/inference_thread.h"
#include "server/metrics.h"

namespace attnscope::server {

// Default cap on one unary response, in bytes (--max_response_bytes). Clients need a receive limit
// of at least this much; the attnscope client library uses the same value.
inline constexpr int64_t kDefaultMaxResponseBytes = int64_t{64} << 20;

struct ServiceOptions {
  // Unary responses whose serialized size would exceed this fail with RESOURCE_EXHAUSTED.
  int64_t max_response_bytes = kDefaultMaxResponseBytes;
  // Calls handled at once; more fail with RESOURCE_EXHAUSTED. 0 = no limit.
  int max_concurrent_requests = 16;
};

// Longest error message sent to a client, in bytes. gRPC carries the message in the trailing
// HTTP/2 headers, and a client refuses headers over its limit (8 KB by default) with a
// RESOURCE_EXHAUSTED of its own that hides the real error; longer messages are cut to this.
inline constexpr size_t kMaxErrorMessageBytes = 4096;

// The one absl::Status -> grpc::Status conversion (the canonical codes are the same numbers);
// messages over kMaxErrorMessageBytes are cut at a UTF-8 character boundary and say so.
grpc::Status ToGrpcStatus(const absl::Status& status);

class AttentionService final : public v1::AttentionService::Service {
 public:
  AttentionService(ServiceOptions options, Metrics* metrics)
      : options_(options), metrics_(metrics) {}

  // Hands over the loaded models; until then every call fails with UNAVAILABLE. Call once.
  void SetModels(std::vector<std::unique_ptr<LoadedModel>> models);
  // New calls fail with UNAVAILABLE from now on; calls in flight finish.
  void StartDraining() { draining_.store(true); }

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

 private:
  struct Attention;

  // Admission (loading, draining, concurrency), metrics and the status conversion around `handler`.
  // `response` (may be null for streams) is size-checked against the cap and recorded; `fixes`
  // names what shrinks it.
  template <typename Handler>
  grpc::Status Serve(const char* rpc, const google::protobuf::Message* response,
                     absl::string_view fixes, Handler&& handler);
  // The model named `name` (empty = the first); NotFound listing the loaded ones.
  absl::StatusOr<const LoadedModel*> FindModel(const std::string& name) const;
  // Tokenizes one text or pair (`text_pair` may be null) and records tokenization metrics.
  // `default_truncation` applies when the request leaves truncation unspecified.
  absl::StatusOr<Encoding> EncodeText(const LoadedModel& model, const std::string& text,
                                      const std::string* text_pair,
                                      const v1::TokenizationOptions& options,
                                      Truncation default_truncation) const;
  // Runs a batch on the inference thread, after the calls queued before it, with deadline /
  // cancellation checks before the forward pass and between layers; records inference time.
  absl::StatusOr<BatchOutput> Run(const LoadedModel& model, std::vector<Encoding> encodings,
                                  ForwardOptions options, grpc::ServerContext* context) const;
  // Validates a GetAttention request, runs it and post-processes the attention. `unary` refuses
  // answers over the size cap before the forward pass.
  absl::StatusOr<Attention> ComputeAttention(const v1::GetAttentionRequest& request,
                                             grpc::ServerContext* context, bool unary) const;

  const ServiceOptions options_;
  Metrics* const metrics_;
  std::vector<std::unique_ptr<LoadedModel>> models_;  // written once before ready_
  // Every forward pass runs here (see inference_thread.h for why).
  mutable InferenceThread inference_thread_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  std::atomic<int> inflight_{0};
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_ATTENTION_SERVICE_H_

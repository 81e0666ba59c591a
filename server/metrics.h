// Prometheus metrics of the service (prometheus-cpp). Every metric family is registered once, when
// Metrics is constructed; per-model series are added once per model at start-up. Requests only
// look series up and update them.
#ifndef ATTNSCOPE_SERVER_METRICS_H_
#define ATTNSCOPE_SERVER_METRICS_H_

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace attnscope {
class LoadedModel;
}  // namespace attnscope

namespace attnscope::server {

class Metrics {
 public:
  // The RPC names used as the `rpc` label, e.g. "GetAttention": the methods of
  // attnscope.v1.AttentionService, in the contract's order.
  static const std::vector<std::string>& RpcNames();
  // The values of the `transport` label: "grpc" and "http".
  static const std::vector<std::string>& Transports();

  Metrics();

  // The series to expose: the registry plus the process memory collector.
  std::vector<std::shared_ptr<prometheus::Collectable>> Collectables() const;

  // Adds attnscope_model_info{model,architecture,layers,heads} = 1,
  // attnscope_model_load_seconds{model} and the model's inference, queue-wait and request-duration
  // histograms. Call at start-up.
  void AddModel(const LoadedModel& model);

  // attnscope_requests_total{rpc,transport,model,code} and
  // attnscope_request_duration_seconds{rpc,transport,model}. `code` is the gRPC code name, e.g.
  // "OK", "INVALID_ARGUMENT", whatever the transport (HTTP statuses map onto the same codes).
  // `model` is a loaded model's name, or "" for calls about no model (ListModels) and for names
  // no model has, so that callers cannot grow the series without bound. Every call of a method
  // of the service is counted once, a call refused before its method ran too (unauthenticated,
  // over a limit, unparsed, the wrong HTTP method or codec: the alerts' ratios need every call),
  // except a gRPC request message over --max_request_bytes, which gRPC refuses before any of the
  // server's code sees the call.
  void RecordRequest(absl::string_view rpc, absl::string_view transport, absl::string_view model,
                     absl::string_view code, double seconds);
  // attnscope_tokenization_duration_seconds and attnscope_input_tokens, once per encoded input.
  void RecordTokenization(double seconds, int64_t tokens);
  // attnscope_queue_wait_seconds{model}: how long a call waited for its forward pass to start.
  void RecordQueueWait(const std::string& model, double seconds);
  // attnscope_rejected_requests_total{reason}: calls refused before they ran, `reason` one of
  // "unauthenticated" (UNAUTHENTICATED), "concurrency_limit" and "client_limit"
  // (RESOURCE_EXHAUSTED:
  // --max_concurrent_requests, --max_concurrent_requests_per_client), "loading" and
  // "draining" (UNAVAILABLE), or "http2_limits": a gRPC connection closed, with whatever calls it
  // had opened, for crossing a limit on its HTTP/2 frames (GrpcFront), or "connection_limit": a
  // gRPC connection refused at --max_grpc_connections with none idle to close instead, or
  // "answer_bytes_limit" and "answer_bytes_client_limit" (RESOURCE_EXHAUSTED: an attention answer
  // over --max_answer_bytes_in_flight or --max_answer_bytes_per_client; reflection_limit and
  // health_watch_limit are in server/builtin_streams.h).
  void RecordRejection(absl::string_view reason);
  // One forward pass (a batch counts once): attnscope_inference_duration_seconds{model},
  // attnscope_batch_size{model} (inputs in the pass) and attnscope_batch_tokens{model} (inputs x
  // longest input: the padded tokens the pass computed).
  void RecordForwardPass(const std::string& model, int64_t sequences, int64_t padded_tokens,
                         double seconds);
  // attnscope_generated_tokens_total{model}: tokens a Generate call sent, whether it finished or
  // was cancelled or cut by its deadline after them.
  void RecordGeneratedTokens(const std::string& model, int64_t tokens);
  // attnscope_response_bytes: serialized size of a unary response or of a whole stream.
  void RecordResponseBytes(int64_t bytes);
  // attnscope_inflight_requests.
  prometheus::Gauge& inflight() { return *inflight_; }

 private:
  // The request-duration histograms of every (rpc, transport) for `model`.
  void AddRequestDurations(const std::string& model);

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<prometheus::Collectable> memory_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Histogram>* request_duration_family_;
  // Keyed by (rpc, transport, model); every triple is added up front (model "" in the
  // constructor, each model's in AddModel).
  std::map<std::tuple<std::string, std::string, std::string>, prometheus::Histogram*, std::less<>>
      request_duration_;
  prometheus::Histogram* tokenization_duration_;
  prometheus::Family<prometheus::Histogram>* inference_family_;
  prometheus::Family<prometheus::Histogram>* queue_wait_family_;
  prometheus::Family<prometheus::Histogram>* batch_size_family_;
  prometheus::Family<prometheus::Histogram>* batch_tokens_family_;
  prometheus::Family<prometheus::Counter>* generated_tokens_family_;
  struct ModelHistograms {
    prometheus::Histogram* inference_duration;
    prometheus::Histogram* queue_wait;
    prometheus::Histogram* batch_size;
    prometheus::Histogram* batch_tokens;
    prometheus::Counter* generated_tokens;
  };
  // Filled by AddModel before serving starts, read-only afterwards.
  std::map<std::string, ModelHistograms, std::less<>> per_model_;
  // Keyed by reason; every reason is added up front.
  std::map<std::string, prometheus::Counter*, std::less<>> rejections_;
  prometheus::Histogram* input_tokens_;
  prometheus::Gauge* inflight_;
  prometheus::Histogram* response_bytes_;
  prometheus::Family<prometheus::Gauge>* model_load_seconds_;
  prometheus::Family<prometheus::Gauge>* model_info_;
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_METRICS_H_

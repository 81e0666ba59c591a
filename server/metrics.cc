#include "server/metrics.h"

#include <unistd.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "attnscope/v1/attnscope.pb.h"
#include "models/engine.h"
#include "models/kernels/fused_ops.h"
#include "models/kernels/row_kernel.h"

namespace attnscope::server {
namespace {

// Up to --max_call_seconds' default (kDefaultMaxCallSeconds), so that a long Generate or
// StreamAttention lands in a bucket of its own rather than only in +Inf.
const prometheus::Histogram::BucketBoundaries& DurationBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
  return *buckets;
}

prometheus::Histogram::BucketBoundaries PowersOf(double base, double first, int count) {
  prometheus::Histogram::BucketBoundaries buckets;
  for (double bound = first; count-- > 0; bound *= base) buckets.push_back(bound);
  return buckets;
}

// attnscope_process_resident_memory_bytes, read from /proc/self/statm when scraped so that the
// value is never stale and nothing runs between scrapes.
class ResidentMemoryCollectable : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    int64_t size_pages = 0;
    int64_t resident_pages = 0;
    std::ifstream statm("/proc/self/statm");
    statm >> size_pages >> resident_pages;
    prometheus::MetricFamily family;
    family.name = "attnscope_process_resident_memory_bytes";
    family.help = "Resident set size of the server process in bytes (/proc/self/statm).";
    family.type = prometheus::MetricType::Gauge;
    prometheus::ClientMetric metric;
    metric.gauge.value = static_cast<double>(resident_pages) * sysconf(_SC_PAGESIZE);
    family.metric.push_back(std::move(metric));
    return {std::move(family)};
  }
};

}  // namespace

const std::vector<std::string>& Metrics::RpcNames() {
  static const auto* names = [] {
    // The contract's own list, so that a new RPC gets its series without a second list here.
    const google::protobuf::ServiceDescriptor* service =
        v1::ListModelsRequest::descriptor()->file()->FindServiceByName("AttentionService");
    auto* names = new std::vector<std::string>();
    for (int i = 0; i < service->method_count(); ++i) names->push_back(service->method(i)->name());
    return names;
  }();
  return *names;
}

const std::vector<std::string>& Metrics::Transports() {
  static const auto* transports = new std::vector<std::string>{"grpc", "http"};
  return *transports;
}

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      memory_(std::make_shared<ResidentMemoryCollectable>()) {
  requests_ = &prometheus::BuildCounter()
                   .Name("attnscope_requests_total")
                   .Help("RPCs finished, by method, transport, model and gRPC status code.")
                   .Register(*registry_);
  request_duration_family_ =
      &prometheus::BuildHistogram()
           .Name("attnscope_request_duration_seconds")
           .Help("Wall time of an RPC in the handler, by method, transport and model.")
           .Register(*registry_);
  AddRequestDurations(/*model=*/"");
  tokenization_duration_ = &prometheus::BuildHistogram()
                                .Name("attnscope_tokenization_duration_seconds")
                                .Help("Time to tokenize one input (text or text pair).")
                                .Register(*registry_)
                                .Add({}, DurationBuckets());
  inference_family_ = &prometheus::BuildHistogram()
                           .Name("attnscope_inference_duration_seconds")
                           .Help("Time of one forward pass (one batch), by model.")
                           .Register(*registry_);
  queue_wait_family_ = &prometheus::BuildHistogram()
                            .Name("attnscope_queue_wait_seconds")
                            .Help("Time a call waited for its forward pass to start, by model.")
                            .Register(*registry_);
  batch_size_family_ = &prometheus::BuildHistogram()
                            .Name("attnscope_batch_size")
                            .Help("Inputs in one forward pass (dynamic batching), by model.")
                            .Register(*registry_);
  batch_tokens_family_ =
      &prometheus::BuildHistogram()
           .Name("attnscope_batch_tokens")
           .Help("Padded tokens (inputs x longest input) in one forward pass, by model.")
           .Register(*registry_);
  generated_tokens_family_ = &prometheus::BuildCounter()
                                  .Name("attnscope_generated_tokens_total")
                                  .Help("Tokens Generate calls sent, finished or not, by model.")
                                  .Register(*registry_);
  auto& rejections =
      prometheus::BuildCounter()
          .Name("attnscope_rejected_requests_total")
          .Help(
              "Calls refused before they ran, by reason (unauthenticated, "
              "concurrency_limit, client_limit: --max_concurrent_requests_per_client, "
              "loading, draining; http2_limits: a gRPC connection closed for its "
              "HTTP/2 frames; connection_limit: a gRPC connection refused at "
              "--max_grpc_connections; reflection_limit, health_watch_limit: a gRPC server "
              "reflection or health Watch stream over its limits, server/builtin_streams.h; "
              "answer_bytes_limit, answer_bytes_client_limit: an answer over "
              "--max_answer_bytes_in_flight or --max_answer_bytes_per_client; body_bytes_limit, "
              "body_bytes_client_limit: an HTTP request body over the bodies read at once, or "
              "one client address's share of them).")
          .Register(*registry_);
  for (const char* reason :
       {"unauthenticated", "concurrency_limit", "client_limit", "loading", "draining",
        "http2_limits", "connection_limit", "reflection_limit", "health_watch_limit",
        "answer_bytes_limit", "answer_bytes_client_limit", "body_bytes_limit",
        "body_bytes_client_limit"}) {
    rejections_[reason] = &rejections.Add({{"reason", reason}});
  }
  input_tokens_ = &prometheus::BuildHistogram()
                       .Name("attnscope_input_tokens")
                       .Help("Tokens per input, special tokens included.")
                       .Register(*registry_)
                       .Add({}, PowersOf(2, 8, 10));
  inflight_ = &prometheus::BuildGauge()
                   .Name("attnscope_inflight_requests")
                   .Help("RPCs being handled right now.")
                   .Register(*registry_)
                   .Add({});
  response_bytes_ = &prometheus::BuildHistogram()
                         .Name("attnscope_response_bytes")
                         .Help("Serialized size of a unary response or a whole stream, in bytes.")
                         .Register(*registry_)
                         .Add({}, PowersOf(4, 1024, 12));
  model_load_seconds_ = &prometheus::BuildGauge()
                             .Name("attnscope_model_load_seconds")
                             .Help("Time to load, validate and warm up a model at start-up.")
                             .Register(*registry_);
  model_info_ = &prometheus::BuildGauge()
                     .Name("attnscope_model_info")
                     .Help("1 for each loaded model, with its architecture and sizes as labels.")
                     .Register(*registry_);
  prometheus::BuildGauge()
      .Name("attnscope_kernels_info")
      .Help(
          "1, with the kernels the forward passes run on as labels: kernels avx512, avx2 or "
          "libtorch; bfloat16 (the products of --compute_dtype=bfloat16) amx, avx512_bf16 or "
          "none.")
      .Register(*registry_)
      .Add({{"kernels", KernelsName()}, {"bfloat16", Bf16KernelsName()}})
      .Set(1);
}

std::vector<std::shared_ptr<prometheus::Collectable>> Metrics::Collectables() const {
  return {registry_, memory_};
}

void Metrics::AddModel(const LoadedModel& model) {
  const ModelConfig& config = model.config();
  model_info_
      ->Add({{"model", model.name()},
             {"architecture", std::string(ArchitectureName(config.architecture))},
             {"layers", absl::StrCat(config.num_hidden_layers)},
             {"heads", absl::StrCat(config.num_attention_heads)}})
      .Set(1);
  model_load_seconds_->Add({{"model", model.name()}}).Set(model.load_seconds());
  const prometheus::Labels labels = {{"model", model.name()}};
  per_model_[model.name()] = {
      &inference_family_->Add(labels, DurationBuckets()),
      &queue_wait_family_->Add(labels, DurationBuckets()),
      &batch_size_family_->Add(labels, PowersOf(2, 1, 8)),
      &batch_tokens_family_->Add(labels, PowersOf(2, 16, 12)),
      &generated_tokens_family_->Add(labels),
  };
  AddRequestDurations(model.name());
}

void Metrics::AddRequestDurations(const std::string& model) {
  for (const std::string& rpc : RpcNames()) {
    for (const std::string& transport : Transports()) {
      request_duration_[{rpc, transport, model}] = &request_duration_family_->Add(
          {{"rpc", rpc}, {"transport", transport}, {"model", model}}, DurationBuckets());
    }
  }
}

void Metrics::RecordQueueWait(const std::string& model, double seconds) {
  if (auto it = per_model_.find(model); it != per_model_.end()) {
    it->second.queue_wait->Observe(seconds);
  }
}

void Metrics::RecordRejection(absl::string_view reason) {
  if (auto it = rejections_.find(reason); it != rejections_.end()) it->second->Increment();
}

void Metrics::RecordRequest(absl::string_view rpc, absl::string_view transport,
                            absl::string_view model, absl::string_view code, double seconds) {
  requests_
      ->Add({{"rpc", std::string(rpc)},
             {"transport", std::string(transport)},
             {"model", std::string(model)},
             {"code", std::string(code)}})
      .Increment();
  if (auto it = request_duration_.find(std::make_tuple(rpc, transport, model));
      it != request_duration_.end()) {
    it->second->Observe(seconds);
  }
}

void Metrics::RecordTokenization(double seconds, int64_t tokens) {
  tokenization_duration_->Observe(seconds);
  input_tokens_->Observe(static_cast<double>(tokens));
}

void Metrics::RecordForwardPass(const std::string& model, int64_t sequences, int64_t padded_tokens,
                                double seconds) {
  if (auto it = per_model_.find(model); it != per_model_.end()) {
    it->second.inference_duration->Observe(seconds);
    it->second.batch_size->Observe(static_cast<double>(sequences));
    it->second.batch_tokens->Observe(static_cast<double>(padded_tokens));
  }
}

void Metrics::RecordGeneratedTokens(const std::string& model, int64_t tokens) {
  if (auto it = per_model_.find(model); it != per_model_.end()) {
    it->second.generated_tokens->Increment(static_cast<double>(tokens));
  }
}

void Metrics::RecordResponseBytes(int64_t bytes) {
  response_bytes_->Observe(static_cast<double>(bytes));
}

}  // namespace attnscope::server

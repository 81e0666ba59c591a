// attnscope::Client: the C++ client library of the attnscope.v1 service. It depends on the
// generated proto and gRPC only (never on LibTorch or models/), so any service can link it.
//
// Every method returns absl::StatusOr. A gRPC error comes back as an absl::Status with the same
// code and message as the server sent (see FromGrpcStatus); the codes are the ones documented in
// proto/attnscope/v1/attnscope.proto: INVALID_ARGUMENT (bad input), NOT_FOUND (unknown model),
// RESOURCE_EXHAUSTED (response over the size cap, or server at its concurrency limit), UNAVAILABLE
// (loading, shutting down or unreachable, after the retries of ClientOptions), DEADLINE_EXCEEDED
// (the call's timeout passed), UNAUTHENTICATED and INTERNAL. INTERNAL also reports a malformed
// response (a tensor whose byte size does not match its shape, a stream out of order).
//
// Tensors arrive decoded (DecodedTensor, float16/bfloat16 widened to float); token lists and model
// descriptions are the proto messages themselves.
//
// A Client is thread-safe: one instance (one channel) is meant to be shared by all threads.
#ifndef ATTNSCOPE_CLIENT_CLIENT_H_
#define ATTNSCOPE_CLIENT_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "attnscope/v1/attnscope.grpc.pb.h"
#include "client/tensor.h"
#include "common/limits.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace attnscope {

struct ClientOptions {
  // gRPC target: "host:port" (e.g. "127.0.0.1:50051") or a resolver URI such as
  // "dns:///attnscope.example:50051". Calls are spread round-robin over every address the name
  // resolves to, so one client balances across the replicas behind a DNS name.
  std::string target = "127.0.0.1:50051";
  // Deadline of each call that does not set its own (CallOptions::timeout). For StreamAttention it
  // bounds the whole stream.
  absl::Duration default_timeout = absl::Seconds(60);
  // The server's unary response cap in bytes; set it to the server's --max_response_bytes. The
  // channel accepts messages up to this plus 1 MiB (the response envelope: tokens and offsets), so
  // that an oversized answer is refused by the server with its RESOURCE_EXHAUSTED message naming
  // the fixes, rather than by the client with gRPC's generic one.
  int64_t max_response_bytes = kDefaultMaxResponseBytes;
  // Attempts per call (first try included) when the server answers UNAVAILABLE, via the gRPC
  // service config retryPolicy; gRPC caps this at 5. 1 disables retries.
  int max_attempts = 4;
  // Exponential backoff between attempts (gRPC adds jitter): initial_backoff, times
  // backoff_multiplier per attempt, at most max_backoff.
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(2);
  double backoff_multiplier = 2.0;
  // Channel credentials, e.g. TlsCredentials(...) for a TLS server; null means plaintext
  // (grpc::InsecureChannelCredentials()).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // Sent as `authorization: Bearer <api_key>` on every call when not empty (a server started with
  // --api_keys_file answers UNAUTHENTICATED without a valid one).
  std::string api_key;
};

// TLS channel credentials from PEM files: `ca_file` verifies the server's certificate (empty: the
// system's roots), `cert_file` and `key_file` (both or neither) are the client's certificate for
// a server that requires one (--tls_client_ca_file). NotFound names a file that cannot be read;
// InvalidArgument when only one of cert_file and key_file is given.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> TlsCredentials(
    const std::string& ca_file, const std::string& cert_file, const std::string& key_file);

// Per-call settings.
struct CallOptions {
  // Overrides ClientOptions::default_timeout for this call.
  std::optional<absl::Duration> timeout;
};

// Answer of GetAttention and (reassembled) StreamAttention. Tensor shapes follow the proto:
// attentions [layer, head, query_token, key_token] (key_token becomes k with top_k), values in
// [0, 1]; scores the same shape, unbounded; top_k_indices [layer, head, query_token, k] INT32
// absolute key positions; rollout [query_token, key_token].
struct AttentionResult {
  std::string model;
  v1::Tokens tokens;
  // Resolved (non-negative) layer and head indices, in output order.
  std::vector<int32_t> layers;
  std::vector<int32_t> heads;
  // Token position of output query / key index 0 (the window's start); a word index with
  // aggregate_words.
  int32_t query_start = 0;
  int32_t key_start = 0;
  // With aggregate_words: the words the query and key axes count, in order.
  std::vector<v1::Word> words;
  DecodedTensor attentions;
  // Present when the request asked for them (include_scores, top_k, rollout).
  std::optional<DecodedTensor> scores;
  std::optional<DecodedTensor> top_k_indices;
  std::optional<DecodedTensor> rollout;

  // With decoder_text (encoder-decoders): the decoder's side. The fields above are then the
  // encoder's.
  struct Decoder {
    // The decoder's input: its start token, then the target's tokens.
    v1::Tokens tokens;
    // The token each decoder position writes: the target's tokens, then the end-of-sequence token.
    v1::Tokens labels;
    std::vector<int32_t> layers;
    std::vector<int32_t> heads;
    // Decoder position of output query / key index 0 (decoder_window's start).
    int32_t query_start = 0;
    int32_t key_start = 0;
    // [layer, head, decoder_token, decoder_token] causal self-attention ([..., k] with top_k).
    DecodedTensor attentions;
    std::optional<DecodedTensor> top_k_indices;
    // [layer, head, decoder_token, encoder_token] ([..., k] with top_k); the encoder axis starts
    // at key_start of the encoder above.
    DecodedTensor cross_attentions;
    std::optional<DecodedTensor> cross_top_k_indices;
  };
  std::optional<Decoder> decoder;
};

// One input's answer of Encode.
struct EncodeResult {
  v1::Tokens tokens;
  // [token, hidden].
  DecodedTensor last_hidden_state;
  // [layer + 1, token, hidden] (embeddings first), when output_hidden_states.
  std::optional<DecodedTensor> hidden_states;
  // [hidden], when pooling was requested.
  std::optional<DecodedTensor> pooled;
};

struct EncodeResponse {
  std::string model;
  // One per input, in request order.
  std::vector<EncodeResult> results;
};

// One document's answer of CrossAttention.
struct DocumentAttentionResult {
  // The joint input ([CLS] query [SEP] document [SEP] for encoders).
  v1::Tokens tokens;
  // Positions in `tokens` of the query's and the document's text tokens.
  std::vector<int32_t> query_positions;
  std::vector<int32_t> document_positions;
  // [layer, head, query_token, document_token].
  DecodedTensor query_to_document;
  // [layer, head, document_token, query_token], when include_document_to_query.
  std::optional<DecodedTensor> document_to_query;
  // Classifier logits [num_labels]; empty for models without a classifier head.
  std::vector<float> logits;
  // Relevance score of a cross-encoder.
  std::optional<float> relevance_score;
  // Whether truncation cut the query's or the document's tokens (the model read the first ones).
  bool query_truncated = false;
  bool document_truncated = false;
};

struct CrossAttentionResult {
  std::string model;
  std::vector<int32_t> layers;
  std::vector<int32_t> heads;
  // One per document, in request order.
  std::vector<DocumentAttentionResult> documents;
};

// Answer of GetParameter: rows [row_start, row_start + tensor.shape[0]) of a checkpoint tensor.
struct ParameterResult {
  std::string model;
  std::string name;
  int64_t row_start = 0;
  DecodedTensor tensor;
};

// One token of a Generate stream, its attention decoded.
struct GeneratedTokenResult {
  // The message as sent, its `attention` field cleared.
  v1::GeneratedToken token;
  // [layer, head, key_token] over the `token.position` tokens before it, when the request set
  // output_attentions.
  std::optional<DecodedTensor> attention;
};

// A whole Generate stream.
struct GenerateResult {
  v1::GenerateHeader header;
  std::vector<GeneratedTokenResult> tokens;
  v1::GenerateDone done;
};

// grpc.health.v1 serving status.
using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

// Converts a gRPC status to an absl::Status with the same code and message (both use the canonical
// codes 0..16). One exception: gRPC's own RESOURCE_EXHAUSTED "Received message larger than max
// (N vs. M)" also says how to fix it. When M is `receive_limit_bytes` (this client's channel
// limit) the answer was too large: raise ClientOptions.max_response_bytes, ask for less, or
// stream. Otherwise the server refused the request: send shorter texts or fewer inputs. A non-OK
// result carries the payload kCallStatusPayload, which tells a call's status from the caller's
// own errors (a file the CLI could not write).
absl::Status FromGrpcStatus(const grpc::Status& status, int64_t receive_limit_bytes = 0);

// The type URL of the (empty) payload FromGrpcStatus puts on a call's non-OK status.
inline constexpr absl::string_view kCallStatusPayload = "type.attnscope.dev/call-status";

// Whether `status` is a call's (FromGrpcStatus), rather than one made on this side.
bool IsCallStatus(const absl::Status& status);

// The gRPC service config (JSON) a client with `options` installs on its channel: round_robin load
// balancing and a retryPolicy on UNAVAILABLE for the attnscope and health services.
std::string ServiceConfigJson(const ClientOptions& options);

class Client {
 public:
  // Creates the channel. Connecting is lazy: an unreachable server shows up as UNAVAILABLE on the
  // first call, not here. InvalidArgument: an empty target, max_attempts < 1, max_response_bytes
  // outside [1, 2 GiB - 1 MiB], or a non-positive timeout or backoff.
  static absl::StatusOr<std::unique_ptr<Client>> Create(const ClientOptions& options);

  // The loaded models.
  absl::StatusOr<std::vector<v1::ModelInfo>> ListModels(const CallOptions& call = {});
  // One model's description; an empty name selects the server's default model. NOT_FOUND.
  absl::StatusOr<v1::ModelInfo> GetModelInfo(const std::string& model,
                                             const CallOptions& call = {});
  // Tokens, ids and offsets of a text or text pair.
  absl::StatusOr<v1::TokenizeResponse> Tokenize(const v1::TokenizeRequest& request,
                                                const CallOptions& call = {});
  // Attention in one message; RESOURCE_EXHAUSTED when the answer exceeds the server's cap.
  absl::StatusOr<AttentionResult> GetAttention(const v1::GetAttentionRequest& request,
                                               const CallOptions& call = {});
  // The same request over StreamAttention: the header and per-layer messages are reassembled into
  // one AttentionResult identical in shape and values to GetAttention's, without the size cap.
  absl::StatusOr<AttentionResult> StreamAttention(const v1::GetAttentionRequest& request,
                                                  const CallOptions& call = {});
  // Hidden states and pooled vectors for a batch of inputs.
  absl::StatusOr<EncodeResponse> Encode(const v1::EncodeRequest& request,
                                        const CallOptions& call = {});
  // Query-to-document attention (and relevance scores) for one query and several documents.
  absl::StatusOr<CrossAttentionResult> CrossAttention(const v1::CrossAttentionRequest& request,
                                                      const CallOptions& call = {});
  // The names and shapes of a model's checkpoint tensors, in name order. NOT_FOUND for an unknown
  // model.
  absl::StatusOr<std::vector<v1::ParameterInfo>> ListParameters(const std::string& model,
                                                                const CallOptions& call = {});
  // One checkpoint tensor (or some of its rows). NOT_FOUND for an unknown name; RESOURCE_EXHAUSTED
  // over the server's cap.
  absl::StatusOr<ParameterResult> GetParameter(const v1::GetParameterRequest& request,
                                               const CallOptions& call = {});
  // The training curves of a model folder's training_record.json. NOT_FOUND without one.
  absl::StatusOr<v1::TrainingRecord> GetTrainingRecord(const std::string& model,
                                                       const CallOptions& call = {});
  // Token and word attributions of a cross-encoder's score (occlusion, gradient x input,
  // integrated gradients). UNIMPLEMENTED for a decoder-only model; INVALID_ARGUMENT for a model
  // without a classifier head or bad options.
  absl::StatusOr<v1::AttributeResponse> Attribute(const v1::AttributeRequest& request,
                                                  const CallOptions& call = {});
  // Text generation with a decoder-only or encoder-decoder model, streamed: `on_header` (may be
  // empty) sees the header when it arrives, `on_token` (may be empty) each token as it arrives
  // (greedy search and sampling send them as they are chosen, beam search at the end), and the
  // whole stream is returned. INVALID_ARGUMENT for an encoder-only model or options out of range;
  // INTERNAL for a stream out of order (no header first, a token index skipped, no GenerateDone
  // last).
  absl::StatusOr<GenerateResult> Generate(
      const v1::GenerateRequest& request,
      const std::function<void(const GeneratedTokenResult&)>& on_token = {},
      const CallOptions& call = {},
      const std::function<void(const v1::GenerateHeader&)>& on_header = {});
  // grpc.health.v1 Check of `service` ("" = the whole server). NOT_FOUND for a service the server
  // does not know.
  absl::StatusOr<ServingStatus> Health(const std::string& service = "",
                                       const CallOptions& call = {});

  const ClientOptions& options() const { return options_; }

 private:
  Client(ClientOptions options, std::shared_ptr<grpc::Channel> channel);
  // Sets the deadline of `context` from `call` or the default timeout.
  void PrepareContext(const CallOptions& call, grpc::ClientContext* context) const;
  // FromGrpcStatus with this client's receive limit.
  absl::Status Convert(const grpc::Status& status) const;

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::AttentionService::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_stub_;
};

}  // namespace attnscope

#endif  // ATTNSCOPE_CLIENT_CLIENT_H_

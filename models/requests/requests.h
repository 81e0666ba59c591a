// The request layer: every RPC of attnscope.v1.AttentionService as a proto-free query and answer
// (TokenizeQuery -> Tokenize -> TokenizeAnswer, AttentionQuery -> RunAttention -> AttentionAnswer,
// EncodeQuery -> RunEncode -> EncodeAnswer, CrossAttentionQuery -> RunCrossAttention ->
// CrossAttentionAnswer, AttributeQuery -> RunAttribute -> AttributeAnswer, GenerateQuery ->
// RunGenerate -> GenerateHeader, GenerateStep..., GenerateSummary). A RequestRunner does
// all validation, tokenization, forward passes, post-processing and response-size estimates, so
// that the gRPC and HTTP front ends only map messages. LibTorch and Abseil only: it knows nothing
// of gRPC, protobuf or HTTP.
//
// Shapes follow proto/attnscope/v1/attnscope.proto: one tensor per selected layer, stacked on the
// wire into [layer, head, query_token, key_token]. Answer tensors are float32 views of the engine's
// output where possible; the front ends' tensor codec converts them to `dtype` as it copies them
// out, once.
//
// Errors (absl::Status, the codes of the contract): InvalidArgument for bad input, naming the field
// and the fix; NotFound for an unknown model; ResourceExhausted when a unary answer would exceed
// Options::max_response_bytes (checked before the forward pass); DeadlineExceeded / Cancelled from
// the call's CallCheck, before the forward pass and between layers; Internal for a bug.
#ifndef ATTNSCOPE_MODELS_REQUESTS_REQUESTS_H_
#define ATTNSCOPE_MODELS_REQUESTS_REQUESTS_H_

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/limits.h"
#include "models/attention_ops.h"
#include "models/attribution.h"
#include "models/engine.h"
#include "models/generation.h"
#include "models/requests/attention.h"
#include "models/requests/attribute.h"
#include "models/requests/batcher.h"
#include "models/requests/byte_budget.h"
#include "models/requests/compute_gate.h"
#include "models/requests/cross_attention.h"
#include "models/requests/encode.h"
#include "models/requests/generate.h"
#include "models/requests/inspect.h"
#include "models/requests/types.h"

namespace attnscope {

// Events of the request layer, for metrics: tokenization here, queue waits and forward passes from
// the batcher. Called on the calling thread (tokenization) or the batcher's thread (forward
// passes); implementations must be thread-safe.
class RequestObserver : public BatchObserver {
 public:
  // One text or text pair tokenized, in `seconds`, giving `tokens` tokens.
  virtual void OnTokenized(double seconds, int64_t tokens) = 0;
  // An answer refused its bytes by the answer budget (ResourceExhausted): by its client's share
  // (Options::max_answer_bytes_per_client) when `over_client_share`, else by the server's limit
  // (Options::max_answer_bytes_in_flight). Default: nothing.
  virtual void OnAnswerBytesRefused(bool /*over_client_share*/) {}
};

// Runs queries against the loaded models. Forward passes run one at a time on the batcher's thread,
// concurrent calls' passes batched together (see batcher.h); everything else runs on the calling
// thread. Thread-safe.
class RequestRunner {
 public:
  struct Options {
    // Largest unary answer in bytes (the server's --max_response_bytes).
    int64_t max_response_bytes = kDefaultMaxResponseBytes;
    // Most inputs of one Encode and documents of one CrossAttention (the server's
    // --max_inputs_per_request); more get InvalidArgument.
    int max_inputs_per_request = kDefaultMaxInputsPerRequest;
    // Most token passes one call may run (the server's --max_call_tokens; see
    // kDefaultMaxCallTokens for how they count): Encode, CrossAttention, Attribute and Generate
    // over it get ResourceExhausted before their first pass.
    int64_t max_call_tokens = kDefaultMaxCallTokens;
    // Dynamic batching of the forward passes of GetAttention, StreamAttention, Encode and
    // CrossAttention.
    ForwardBatcher::Options batching;
    // Most bytes of attention maps one CrossAttention pass may hold: a pass returns every
    // layer's full maps (layers x heads x length^2 float32 a document) before the query/document
    // blocks are cut out, so 64 documents of 512 tokens in one pass held 1.4-3.8 GB. The
    // documents go through in groups under it (a document over it alone, alone).
    int64_t max_pass_attention_bytes = int64_t{256} << 20;
    // Most bytes of attention the answers of GetAttention and StreamAttention may hold at once,
    // from before their forward pass until they are written out (a stream's, until its client
    // has read it): a call that would take the total over it gets ResourceExhausted (see
    // byte_budget.h). 0 = no limit.
    int64_t max_answer_bytes_in_flight = kDefaultMaxAnswerBytesInFlight;
    // Most of those bytes the answers of one client (RunAttention's `client`) may hold at once;
    // 0 = no share.
    int64_t max_answer_bytes_per_client = 0;
  };

  // `observer` may be null; it must outlive the runner.
  RequestRunner(const Options& options, std::vector<std::unique_ptr<LoadedModel>> models,
                RequestObserver* observer);

  // The model named `name` (empty = the first loaded). NotFound listing the loaded ones.
  absl::StatusOr<const LoadedModel*> FindModel(const std::string& name) const;
  const std::vector<std::unique_ptr<LoadedModel>>& models() const { return models_; }

  absl::StatusOr<TokenizeAnswer> Tokenize(const TokenizeQuery& query) const;
  // In every Run method `client` names who asks (empty = nobody in particular): its passes take
  // turns with other clients' (batcher.h, compute_gate.h), and its attention answers hold at most
  // Options::max_answer_bytes_per_client of the answer budget.
  absl::StatusOr<AttentionAnswer> RunAttention(const AttentionQuery& query, const CallCheck& check,
                                               Delivery delivery,
                                               absl::string_view client = "") const;
  absl::StatusOr<EncodeAnswer> RunEncode(const EncodeQuery& query, const CallCheck& check,
                                         absl::string_view client = "") const;
  absl::StatusOr<CrossAttentionAnswer> RunCrossAttention(const CrossAttentionQuery& query,
                                                         const CallCheck& check,
                                                         absl::string_view client = "") const;
  // Token attributions of a classifier logit (models/attribution.h), computed with autograd on
  // the calling thread, not the batcher's: its passes need gradients, which the batched inference
  // kernels do not record. `check` is called before the first pass and after each batch of passes.
  // Errors: InvalidArgument for bad input or options (naming the field), a model without a
  // classifier head, or an occlusion token the vocabulary lacks; Unimplemented for a decoder-only
  // model; NotFound for an unknown model; ResourceExhausted over the size cap; the status of
  // `check`.
  absl::StatusOr<AttributeAnswer> RunAttribute(const AttributeQuery& query, const CallCheck& check,
                                               absl::string_view client = "") const;
  // Generates after query.prompt (models/generation.h) on the calling thread: the passes of one
  // generation are sequential and share its KV cache, so they are not batched with other calls.
  // Calls on_header once, then on_step per token as Generate hands it on, and returns the
  // summary; a non-OK status from a callback (the client went away) ends the generation.
  // `check` runs before every step. Errors: InvalidArgument for an encoder-only model, invalid
  // UTF-8, an empty source for an encoder-decoder, options out of range or a layer/head index
  // outside the model (naming the field);
  // ResourceExhausted when one token's attention at the longest context would exceed
  // max_response_bytes; NotFound for an unknown model; the status of `check`.
  absl::StatusOr<GenerateSummary> RunGenerate(
      const GenerateQuery& query, const CallCheck& check,
      const std::function<absl::Status(const GenerateHeader&)>& on_header,
      const std::function<absl::Status(const GenerateStep&)>& on_step,
      absl::string_view client = "") const;
  // Every tensor of the model's checkpoint. NotFound for an unknown model.
  absl::StatusOr<ParameterListAnswer> ListParameters(const std::string& model) const;
  // One checkpoint tensor. NotFound for an unknown name (naming similar ones); InvalidArgument
  // for rows outside the tensor; ResourceExhausted over the size cap (naming the rows and dtype
  // options).
  absl::StatusOr<ParameterAnswer> GetParameter(const ParameterQuery& query) const;
  // The series of the model folder's training_record.json: its "history" (every N steps), or else
  // its "first_steps" and "last_window". NotFound when the folder has no record; InvalidArgument
  // when it is not the trainer's JSON.
  absl::StatusOr<TrainingRecordAnswer> GetTrainingRecord(const std::string& model) const;

  int64_t max_response_bytes() const { return options_.max_response_bytes; }
  // Reserves `bytes` of the answer budget (Options::max_answer_bytes_in_flight) for `what` of
  // `client` (as RunAttention's), for a front end that holds an answer's serialized form while a
  // client reads it: the reservations of RunAttention end with its answer, before the serialized
  // copy is written out. ResourceExhausted as ByteBudget::Reserve, naming `fixes`.
  absl::StatusOr<ByteBudget::Hold> ReserveAnswerBytes(int64_t bytes, absl::string_view what,
                                                      absl::string_view client,
                                                      absl::string_view fixes) const {
    return answer_budget_.Reserve(bytes, what, client, fixes);
  }
  // ByteBudget::Narrow on the answer budget: `wide`, a reservation of ReserveAnswerBytes for at
  // least `bytes`, becomes one of `bytes`.
  ByteBudget::Hold NarrowAnswerBytes(ByteBudget::Hold wide, int64_t bytes,
                                     absl::string_view client) const {
    return answer_budget_.Narrow(std::move(wide), bytes, client);
  }
  // When the answer budget's last reservation went back (absl::InfinitePast() before any): the
  // end of the last answer's write, or of an answer that was never written.
  absl::Time LastAnswerReleased() const { return answer_budget_.last_release(); }

 private:
  // ResourceExhausted naming --max_call_tokens when `token_passes` (what `work` describes, e.g.
  // "3 documents over 96 tokens") exceeds Options::max_call_tokens; `fixes` says what to send
  // instead.
  absl::Status CheckWork(absl::string_view rpc, int64_t token_passes, absl::string_view work,
                         absl::string_view fixes) const;
  // Tokenizes one (checked) text or pair and records it with the observer. InvalidArgument naming
  // the field (`field_prefix` + "text" or "text_pair") when a text yields no token of its own.
  absl::StatusOr<EncodedText> TokenizeInput(const LoadedModel& model, const TextInput& input,
                                            const TextOptions& options,
                                            absl::string_view field_prefix) const;
  // RunAttention's second step (after the query's own checks): the layers, heads and windows of
  // `query` resolved against answer->model, the text tokenized (its words' token spans in `spans`
  // with aggregate_words), and the decoder's side of teacher forcing. InvalidArgument naming the
  // field out of range.
  absl::Status ResolveAttention(const AttentionQuery& query, AttentionAnswer* answer,
                                std::vector<WordSpan>* spans) const;
  // RunAttention's forward pass: on the batcher for one text, or teacher-forced on the calling
  // thread (in its ComputeGate turn) with a decoder text. The status of `check` when it fails.
  absl::StatusOr<ForwardOutput> RunAttentionPass(const AttentionQuery& query,
                                                 const AttentionAnswer& answer,
                                                 const CallCheck& check,
                                                 absl::string_view client) const;

  const Options options_;
  const std::vector<std::unique_ptr<LoadedModel>> models_;
  RequestObserver* const observer_;
  mutable ForwardBatcher batcher_;
  // One call computes on its own thread at a time, beside the batcher's pass: each uses every
  // intra-op thread (see compute_gate.h).
  static constexpr int kComputeSlots = 1;
  mutable ComputeGate gate_;
  mutable ByteBudget answer_budget_;
};

// The message of a ResourceExhausted answer over the cap: "<rpc> response would be N bytes, over
// this server's cap of M bytes (--max_response_bytes); <fixes>".
std::string TooLargeMessage(absl::string_view rpc, int64_t bytes, int64_t cap,
                            absl::string_view fixes);

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_REQUESTS_REQUESTS_H_

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
#include "models/requests/batcher.h"
#include "models/requests/compute_gate.h"

namespace attnscope {

// Element type of the float tensors of an answer on the wire (DTYPE_FLOAT32, DTYPE_FLOAT16,
// DTYPE_BFLOAT16 in the contract).
enum class OutputDType { kFloat32, kFloat16, kBFloat16 };

// Bytes per element: 4 for float32, 2 for float16 and bfloat16.
int64_t BytesPerElement(OutputDType dtype);

// How a text or text pair becomes tokens (TokenizationOptions in the contract).
struct TokenizationQuery {
  // Unset: the RPC's default (none; longest_first for CrossAttention).
  std::optional<Truncation> truncation;
  // Token budget including special tokens when truncating; 0 = the model's limit. InvalidArgument
  // when negative, or when set without truncation.
  int64_t max_length = 0;
  bool skip_special_tokens = false;
};

// One text or text pair. Texts must be valid UTF-8 and yield at least one token of their own (an
// empty or whitespace-only text is refused, whatever the field).
struct TextInput {
  std::string text;
  std::optional<std::string> text_pair;
};

// An encoding together with each token's original text: the bytes of the text it came from at its
// byte offsets ("" for special tokens), so that a display can show "Tôi" where the token is "toi".
struct EncodedText {
  Encoding encoding;
  std::vector<std::string> original_texts;
};

// Whether an answer is sent as one message (size-checked against the cap before the forward pass)
// or streamed layer by layer (no cap).
enum class Delivery { kUnary, kStream };

struct TokenizeQuery {
  std::string model;  // empty = the first loaded model
  TextInput input;
  TokenizationQuery tokenization;
};

struct TokenizeAnswer {
  const LoadedModel* model = nullptr;
  EncodedText tokens;
};

struct AttentionQuery {
  std::string model;
  TextInput input;
  TokenizationQuery tokenization;
  // Negative indices count from the end; empty = all, in model order.
  std::vector<int32_t> layers;
  std::vector<int32_t> heads;
  HeadAggregation head_aggregation = HeadAggregation::kNone;
  // Attention rollout (Abnar & Zuidema 2020) over every layer and head, cut to the window.
  bool rollout = false;
  // Also the pre-softmax scores QK^T / sqrt(head_dim) (dense only, not with top_k).
  bool include_scores = false;
  OutputDType dtype = OutputDType::kFloat32;
  // > 0: the k largest entries of each row, with their key positions. 0 = dense.
  int64_t top_k = 0;
  // Query and key positions; an end of 0 means the end of the sequence. Word positions with
  // aggregate_words.
  AttentionWindow window;
  // Word-level attention (AggregateWords in attention_ops.h): query and key axes count words.
  // Not with include_scores (a sum of pre-softmax scores means nothing).
  bool aggregate_words = false;
  // Encoder-decoders only: the target text the decoder reads (teacher forcing). The answer then
  // also holds the decoder's self-attention and its cross-attention over `input`'s tokens, with
  // the same layer and head selection (resolved against the decoder), head_aggregation, dtype and
  // top_k. Not with include_scores, rollout or aggregate_words.
  std::optional<std::string> decoder_text;
  // Decoder positions: the query rows of the decoder's self- and cross-attention and the key
  // columns of its self-attention; the cross-attention's key columns are `window`'s.
  AttentionWindow decoder_window;
};

// One word of an answer whose axes count words (aggregate_words).
struct Word {
  // The caller's text from the word's first token to its last ("Tôi" for "to" "##i"); the token
  // itself for a special token.
  std::string text;
  WordSpan tokens;
  // 0 = first text, 1 = second, -1 = special token.
  int64_t sequence_id = -1;
  // Code-point and byte span in the text given by sequence_id; {0, 0} for special tokens.
  Offset offsets;
  Offset byte_offsets;
};

struct AttentionAnswer {
  const LoadedModel* model = nullptr;
  EncodedText tokens;
  // The query/key units with aggregate_words, in order; empty otherwise.
  std::vector<Word> words;
  // Resolved (non-negative) indices, in output order.
  std::vector<int64_t> layers;
  std::vector<int64_t> heads;
  // The resolved window (ends filled in).
  AttentionWindow window;
  OutputDType dtype = OutputDType::kFloat32;
  bool top_k = false;
  // One per selected layer: [head, query_token, key_token], or [head, query_token, k] top-k values
  // (descending) with top_k. Float32.
  std::vector<torch::Tensor> attentions;
  // One per selected layer, [head, query_token, key_token], when include_scores.
  std::vector<torch::Tensor> scores;
  // One per selected layer, int32 [head, query_token, k] absolute key positions, with top_k.
  std::vector<torch::Tensor> top_k_indices;
  // [query_token, key_token], when rollout; undefined otherwise.
  torch::Tensor rollout;

  // With decoder_text (encoder-decoders), teacher forcing as transformers' shift_tokens_right:
  // the decoder reads decoder_start_token_id and then the target's tokens, its last token's row
  // predicting "</s>". `tokens`, `attentions` and `window` are the encoder's.
  std::optional<EncodedText> decoder_tokens;
  // The token each decoder position writes (transformers' `labels`): decoder_tokens shifted left,
  // then the end-of-sequence token. Set with decoder_tokens.
  std::optional<EncodedText> decoder_labels;
  std::vector<int64_t> decoder_layers;
  std::vector<int64_t> decoder_heads;
  // Decoder query rows and decoder key columns (self-attention).
  AttentionWindow decoder_window;
  // One per selected decoder layer: [head, decoder_token, decoder_token] causal self-attention
  // and [head, decoder_token, encoder_token] cross-attention, or [head, decoder_token, k] with
  // top_k (key positions in the *_top_k_indices, int32). Float32.
  std::vector<torch::Tensor> decoder_attentions;
  std::vector<torch::Tensor> decoder_top_k_indices;
  std::vector<torch::Tensor> cross_attentions;
  std::vector<torch::Tensor> cross_top_k_indices;

  // Dimension names of the stacked attentions: layer, head, query_token, key_token (query_word,
  // key_word with aggregate_words; k with top_k).
  std::vector<std::string> dim_names() const;
  // Shape of the stacked attentions: [layers, heads, queries, keys or k].
  std::vector<int64_t> shape() const;
  // The same for decoder_attentions (layer, head, decoder_token, decoder_token or k) and
  // cross_attentions (layer, head, decoder_token, encoder_token or k).
  std::vector<std::string> decoder_dim_names() const;
  std::vector<std::string> cross_dim_names() const;
  std::vector<int64_t> decoder_shape() const;
  std::vector<int64_t> cross_shape() const;
};

struct EncodeQuery {
  std::string model;
  std::vector<TextInput> inputs;
  TokenizationQuery tokenization;
  // Also every layer's hidden states (embeddings first).
  bool output_hidden_states = false;
  // Unset: no pooled vector.
  std::optional<Pooling> pooling;
  // L2-normalise the pooled vector; InvalidArgument without pooling.
  bool normalize = false;
  OutputDType dtype = OutputDType::kFloat32;
};

struct EncodedInput {
  EncodedText tokens;
  // [token, hidden].
  torch::Tensor last_hidden_state;
  // L + 1 tensors [token, hidden] (embeddings first), when output_hidden_states.
  std::vector<torch::Tensor> hidden_states;
  // [hidden], when pooling is set.
  torch::Tensor pooled;
};

struct EncodeAnswer {
  const LoadedModel* model = nullptr;
  OutputDType dtype = OutputDType::kFloat32;
  // One per input, in query order.
  std::vector<EncodedInput> results;
};

struct CrossAttentionQuery {
  std::string model;
  std::string query;
  std::vector<std::string> documents;
  // Truncation defaults to longest_first.
  TokenizationQuery tokenization;
  std::vector<int32_t> layers;
  std::vector<int32_t> heads;
  HeadAggregation head_aggregation = HeadAggregation::kNone;
  // Also the document-to-query block (encoders only).
  bool include_document_to_query = false;
  OutputDType dtype = OutputDType::kFloat32;
};

struct DocumentAnswer {
  // The joint input: [CLS] query [SEP] document [SEP] for encoders, <s> document <s> query for
  // decoder-only models.
  EncodedText tokens;
  // Positions of the query's and the document's text tokens in `tokens`.
  std::vector<int64_t> query_positions;
  std::vector<int64_t> document_positions;
  // One per selected layer: [head, query_token, document_token].
  std::vector<torch::Tensor> query_to_document;
  // One per selected layer: [head, document_token, query_token], when include_document_to_query.
  std::vector<torch::Tensor> document_to_query;
  // The classifier's logits [num_labels]; empty without a classifier head.
  std::vector<float> logits;
  // The single logit of a one-label classifier, or the last label's logit.
  std::optional<float> relevance_score;
};

struct CrossAttentionAnswer {
  const LoadedModel* model = nullptr;
  std::vector<int64_t> layers;
  std::vector<int64_t> heads;
  OutputDType dtype = OutputDType::kFloat32;
  // One per document, in query order.
  std::vector<DocumentAnswer> documents;
};

// Token attribution methods (models/attribution.h).
enum class AttributionMethod { kOcclusion, kGradientXInput, kIntegratedGradients };

// What replaces each token in turn for occlusion: the tokenizer's [MASK] or [UNK].
enum class OcclusionToken { kMask, kUnk };

// Integrated-gradients steps: the default (Captum's), and the most a call may ask for: each step
// is a forward and a backward pass, so 1000 steps of a 512-token bert-base input take minutes.
inline constexpr int64_t kDefaultIntegratedGradientsSteps = 50;
inline constexpr int64_t kMaxIntegratedGradientsSteps = 1000;

struct AttributeQuery {
  std::string model;
  // For a cross-encoder: the query (text) and the document (text_pair).
  TextInput input;
  // Truncation defaults to none, as for GetAttention.
  TokenizationQuery tokenization;
  // The classifier label whose logit is attributed.
  int64_t target = 0;
  // Empty = all three; a method listed twice runs once.
  std::vector<AttributionMethod> methods;
  OcclusionToken occlusion_token = OcclusionToken::kMask;
  // kTokenEmbedding: the pad token's embedding.
  AttributionBaseline baseline = AttributionBaseline::kTokenEmbedding;
  // 0 = kDefaultIntegratedGradientsSteps; InvalidArgument when negative or above
  // kMaxIntegratedGradientsSteps.
  int64_t integrated_gradients_steps = 0;
};

// One word of the texts and the sums of its tokens' values (WordSums in attribution.h).
struct AttributedWord {
  // Its text, token span, sequence id (0 or 1) and offsets.
  Word word;
  // Index within its text (Encoding::word_ids).
  int64_t word_id = 0;
  // Present for the methods that ran.
  std::optional<double> occlusion;
  std::optional<double> gradient_x_input;
  std::optional<double> integrated_gradients;
};

struct AttributeAnswer {
  const LoadedModel* model = nullptr;
  EncodedText tokens;
  int64_t target = 0;
  // config.json id2label's name of the target; "" when it has none.
  std::string target_label;
  // The target logit on the input, and on the integrated-gradients baseline (0 without them).
  double score = 0.0;
  double baseline_score = 0.0;
  // One value per token of `tokens` for each method that ran; empty for the others.
  std::vector<float> occlusion;
  std::vector<float> gradient_x_input;
  std::vector<float> integrated_gradients;
  // The steps integrated gradients used; 0 when they did not run.
  int64_t integrated_gradients_steps = 0;
  // sum(integrated_gradients) - (score - baseline_score), with integrated gradients.
  std::optional<double> convergence_delta;
  // The words of the texts in order (special tokens are not words).
  std::vector<AttributedWord> words;
};

// The default of GenerateRequest.max_new_tokens (0) and num_beams (0).
inline constexpr int64_t kDefaultMaxNewTokens = 20;
inline constexpr int64_t kDefaultNumBeams = 4;

struct GenerateQuery {
  std::string model;
  // Valid UTF-8; may be empty (the model's special tokens alone, e.g. <s>). For an encoder-decoder
  // the source text the encoder reads (not empty), the decoder starting from its start token.
  std::string prompt;
  // method, max_new_tokens, num_beams, length_penalty, temperature, top_k, top_p, seed and
  // use_cache; RunGenerate sets eos_token_id, output_attentions and check.
  GenerationOptions generation;
  // Do not stop at config.json's eos_token_id.
  bool ignore_eos = false;
  // Each token's attention over its context, for the selected layers and heads.
  bool output_attentions = false;
  std::vector<int32_t> layers;
  std::vector<int32_t> heads;
  HeadAggregation head_aggregation = HeadAggregation::kNone;
  OutputDType dtype = OutputDType::kFloat32;
};

// What a generation starts from, sent before its first token.
struct GenerateHeader {
  const LoadedModel* model = nullptr;
  EncodedText prompt_tokens;
  DecodingMethod method = DecodingMethod::kGreedy;
  // Resolved indices of the attention's layers and heads; empty without output_attentions.
  std::vector<int64_t> layers;
  std::vector<int64_t> heads;
  OutputDType dtype = OutputDType::kFloat32;
};

struct GenerateStep {
  // 0 for the first new token; position = prompt tokens + index (decoder-only), or 1 + index for
  // an encoder-decoder (the decoder's position; its start token is at 0).
  int64_t index = 0;
  int64_t position = 0;
  int64_t id = 0;
  // The vocabulary entry, and the decoded text it adds ("" while a character is incomplete).
  std::string token;
  std::string text;
  double logprob = 0.0;
  // [layer, head, key_token] float32 over the `position` tokens before it (an encoder-decoder's
  // cross-attention over the source tokens), with output_attentions (heads aggregated to 1 with
  // head_aggregation); undefined otherwise.
  torch::Tensor attention;
};

struct GenerateSummary {
  FinishReason finish_reason = FinishReason::kLength;
  std::vector<int64_t> ids;
  // The decoded generated text, special tokens left out.
  std::string text;
  // GenerationResult::score.
  double score = 0.0;
};

// A weight tensor by its checkpoint name (ListParameters, GetParameter).
struct ParameterInfo {
  std::string name;
  std::vector<int64_t> shape;
};

struct ParameterListAnswer {
  const LoadedModel* model = nullptr;
  // In name order.
  std::vector<ParameterInfo> parameters;
};

struct ParameterQuery {
  std::string model;
  // A checkpoint tensor name, e.g. "embeddings.position_embeddings.weight".
  std::string name;
  OutputDType dtype = OutputDType::kFloat32;
  // Rows [row_start, row_end) of the first dimension; an end of 0 means the last row.
  int64_t row_start = 0;
  int64_t row_end = 0;
};

struct ParameterAnswer {
  const LoadedModel* model = nullptr;
  std::string name;
  OutputDType dtype = OutputDType::kFloat32;
  // The first row returned (row_start).
  int64_t row_start = 0;
  // The tensor, cut to the rows; float32, a view of the checkpoint's.
  torch::Tensor tensor;
};

// One recorded training step: "loss", "learning_rate" and whatever else the record holds.
struct TrainingPoint {
  int64_t step = 0;
  std::vector<std::pair<std::string, double>> values;
};

struct TrainingRecordAnswer {
  const LoadedModel* model = nullptr;
  // In step order.
  std::vector<TrainingPoint> points;
  // training_record.json as written by the trainer.
  std::string record_json;
};

// Events of the request layer, for metrics: tokenization here, queue waits and forward passes from
// the batcher. Called on the calling thread (tokenization) or the batcher's thread (forward
// passes); implementations must be thread-safe.
class RequestObserver : public BatchObserver {
 public:
  // One text or text pair tokenized, in `seconds`, giving `tokens` tokens.
  virtual void OnTokenized(double seconds, int64_t tokens) = 0;
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
  };

  // `observer` may be null; it must outlive the runner.
  RequestRunner(const Options& options, std::vector<std::unique_ptr<LoadedModel>> models,
                RequestObserver* observer);

  // The model named `name` (empty = the first loaded). NotFound listing the loaded ones.
  absl::StatusOr<const LoadedModel*> FindModel(const std::string& name) const;
  const std::vector<std::unique_ptr<LoadedModel>>& models() const { return models_; }

  absl::StatusOr<TokenizeAnswer> Tokenize(const TokenizeQuery& query) const;
  absl::StatusOr<AttentionAnswer> RunAttention(const AttentionQuery& query, const CallCheck& check,
                                               Delivery delivery) const;
  absl::StatusOr<EncodeAnswer> RunEncode(const EncodeQuery& query, const CallCheck& check) const;
  absl::StatusOr<CrossAttentionAnswer> RunCrossAttention(const CrossAttentionQuery& query,
                                                         const CallCheck& check) const;
  // Token attributions of a classifier logit (models/attribution.h), computed with autograd on
  // the calling thread, not the batcher's: its passes need gradients, which the batched inference
  // kernels do not record. `check` is called before the first pass and after each batch of passes.
  // Errors: InvalidArgument for bad input or options (naming the field), a model without a
  // classifier head, or an occlusion token the vocabulary lacks; Unimplemented for a decoder-only
  // model; NotFound for an unknown model; ResourceExhausted over the size cap; the status of
  // `check`.
  absl::StatusOr<AttributeAnswer> RunAttribute(const AttributeQuery& query,
                                               const CallCheck& check) const;
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
      const std::function<absl::Status(const GenerateStep&)>& on_step) const;
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

 private:
  // ResourceExhausted naming --max_call_tokens when `token_passes` (what `work` describes, e.g.
  // "3 documents over 96 tokens") exceeds Options::max_call_tokens; `fixes` says what to send
  // instead.
  absl::Status CheckWork(absl::string_view rpc, int64_t token_passes, absl::string_view work,
                         absl::string_view fixes) const;
  // Tokenizes one (checked) text or pair and records it with the observer. InvalidArgument naming
  // the field (`field_prefix` + "text" or "text_pair") when a text yields no token of its own.
  absl::StatusOr<EncodedText> EncodeInput(const LoadedModel& model, const TextInput& input,
                                          const TextOptions& options,
                                          absl::string_view field_prefix) const;

  const Options options_;
  const std::vector<std::unique_ptr<LoadedModel>> models_;
  RequestObserver* const observer_;
  mutable ForwardBatcher batcher_;
  // One call computes on its own thread at a time, beside the batcher's pass: each uses every
  // intra-op thread (see compute_gate.h).
  static constexpr int kComputeSlots = 1;
  mutable ComputeGate gate_;
};

// What shrinks an over-cap GetAttention answer, among the fixes `query` does not already use (e.g.
// "use StreamAttention, request fewer layers or heads, a smaller window, dtype DTYPE_FLOAT16,
// top_k").
std::string AttentionFixes(const AttentionQuery& query);
// The same for Encode and CrossAttention answers, and for Tokenize.
inline constexpr absl::string_view kEncodeFixes =
    "send fewer inputs per call, leave output_hidden_states off, or use dtype DTYPE_FLOAT16";
inline constexpr absl::string_view kCrossAttentionFixes =
    "send fewer documents per call, request fewer layers or heads, use head_aggregation, or dtype "
    "DTYPE_FLOAT16";
inline constexpr absl::string_view kTokenizeFixes = "send a shorter text";
inline constexpr absl::string_view kAttributeFixes = "send shorter texts or fewer methods";

// The message of a ResourceExhausted answer over the cap: "<rpc> response would be N bytes, over
// this server's cap of M bytes (--max_response_bytes); <fixes>".
std::string TooLargeMessage(absl::string_view rpc, int64_t bytes, int64_t cap,
                            absl::string_view fixes);

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_REQUESTS_REQUESTS_H_

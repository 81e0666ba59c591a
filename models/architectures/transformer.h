// The transformer architectures attnscope serves, behind one interface that returns exactly the
// attention probabilities the forward pass used.
//
// Shapes: batch B, sequence S (padded length), hidden H, heads N, layers L. Tensors are float32 on
// CPU unless stated. Inputs are right-padded: real tokens first, attention_mask 0 after them.
#ifndef ATTNSCOPE_MODELS_TRANSFORMER_H_
#define ATTNSCOPE_MODELS_TRANSFORMER_H_

#include <torch/types.h>
#include <torch/utils.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/checkpoint/checkpoint.h"
#include "models/checkpoint/config.h"

namespace attnscope {

// The arithmetic of a model's projections (the Linear layers: attention's query, key, value and
// output, the MLP's). kBfloat16 converts their weights to bfloat16 once at load and rounds their
// inputs to bfloat16, with float32 sums (Linear in gemm.h); embeddings, LayerNorm, softmax, the
// attention products and the residual stream stay float32. See docs/models.md for its error.
enum class ComputeDtype { kFloat32, kBfloat16 };

// "float32" or "bfloat16". InvalidArgument for any other name (naming --compute_dtype).
absl::StatusOr<ComputeDtype> ParseComputeDtype(absl::string_view name);
// The name ParseComputeDtype accepts.
absl::string_view ComputeDtypeName(ComputeDtype dtype);

struct ForwardInput {
  torch::Tensor input_ids;       // [B, S] int64
  torch::Tensor attention_mask;  // [B, S] int64, 1 = real token, 0 = padding; undefined = all 1
  torch::Tensor token_type_ids;  // [B, S] int64 (BERT segment ids); undefined = all 0
  // Encoder-decoders only: the decoder's input [B, T] int64 (teacher forcing: the target text
  // after decoder_start_token_id), right-padded as decoder_attention_mask [B, T] says (undefined =
  // all 1). Undefined decoder_input_ids: the encoder alone runs.
  torch::Tensor decoder_input_ids;
  torch::Tensor decoder_attention_mask;
};

struct ForwardOptions {
  // Softmax probabilities of every layer (`attentions`).
  bool output_attentions = true;
  // Embedding output plus every layer's output (`hidden_states`).
  bool output_hidden_states = false;
  // Pre-softmax scores QK^T / sqrt(head_dim), before the mask is added (`attention_scores`).
  bool output_attention_scores = false;
  // Classifier logits (BERT or RoBERTa with a classifier head) or language-model logits (Llama).
  bool output_logits = true;
  // Called after each layer with its index (0-based). A non-OK status stops the pass and is
  // returned by Forward: the way callers honour deadlines and cancellation between layers.
  std::function<absl::Status(int64_t layer)> on_layer_done;
};

struct ForwardOutput {
  // [B, S, H]: the last layer's output (BERT) or the final RMSNorm of it (Llama), as Hugging Face
  // transformers' last_hidden_state.
  torch::Tensor last_hidden_state;
  // L + 1 tensors [B, S, H]: embeddings, then each layer; the last entry equals last_hidden_state
  // (for T5, as transformers' T5Stack gives them, the last layer's output after final_layer_norm).
  std::vector<torch::Tensor> hidden_states;
  // L tensors [B, N, S, S]: softmax(QK^T / sqrt(head_dim) + mask), rows over keys. Keys that are
  // padding (or in the future, for causal models) get exactly 0.
  std::vector<torch::Tensor> attentions;
  // L tensors [B, N, S, S]: QK^T / sqrt(head_dim) before the mask, when requested (for T5, which
  // does not scale, QK^T plus the relative position bias, as T5Attention adds it).
  // Encoder-decoders: the encoder's.
  std::vector<torch::Tensor> attention_scores;
  // Encoder-decoders, with decoder_input_ids: `attentions` and `hidden_states` are the
  // encoder's (transformers' encoder_attentions, encoder_hidden_states), last_hidden_state is the
  // decoder's. Undefined / empty otherwise.
  torch::Tensor encoder_last_hidden_state;  // [B, S, H]
  // L_dec tensors [B, N_dec, T, T]: the decoder's causal self-attention.
  std::vector<torch::Tensor> decoder_attentions;
  // L_dec tensors [B, N_dec, T, S]: each decoder position's attention over the encoder output,
  // padded source positions 0.
  std::vector<torch::Tensor> cross_attentions;
  // [B, H]: BERT pooler output tanh(W h_[CLS] + b), when the checkpoint has a pooler
  // (RobertaForSequenceClassification has none).
  torch::Tensor pooler_output;
  // [B, num_labels] for a BERT classifier (classifier(pooler_output)) or a RoBERTa one
  // (out_proj(tanh(dense(h_<s>)))); [B, S, vocab] for Llama; [B, T, vocab] for an
  // encoder-decoder with decoder_input_ids (lm_head + final_logits_bias); undefined otherwise.
  torch::Tensor logits;
};

// The keys and values a decoder has computed for the positions it has seen, so that each
// generated token costs one position's work rather than the whole sequence's (the "past key
// values" of Hugging Face transformers). One entry per layer, [B, N_kv, T, head_dim] float32 (keys
// after the rotary embedding); empty before the first Decode.
//
// Each entry is the first T positions of a larger buffer (key_storage, value_storage:
// [B, N_kv, capacity, head_dim]) that Decode writes each new position into, as transformers'
// StaticCache does, so that a step copies nothing already cached: a cache grown by concatenation
// copies all of it at every token. The first Decode allocates room for reserved_positions (a
// generation's prompt and new tokens); past it the room doubles.
struct KvCache {
  std::vector<torch::Tensor> keys;
  std::vector<torch::Tensor> values;
  std::vector<torch::Tensor> key_storage;
  std::vector<torch::Tensor> value_storage;
  int64_t reserved_positions = 0;
  // Encoder-decoders, filled by TransformerModel::Encode: each decoder layer's keys and values of
  // the encoder output, [B, N, S, head_dim], and the source's attention_mask [B, S] int64. With a
  // batch of 1 they are every sequence's (broadcast over the B of keys and values): SelectRows
  // leaves them as they are.
  std::vector<torch::Tensor> cross_keys;
  std::vector<torch::Tensor> cross_values;
  torch::Tensor encoder_attention_mask;

  // T, the positions cached; 0 when empty.
  int64_t length() const { return keys.empty() ? 0 : keys[0].size(2); }
  // B, the sequences cached; 0 when empty.
  int64_t batch_size() const {
    if (!keys.empty()) return keys[0].size(0);
    return encoder_attention_mask.defined() ? encoder_attention_mask.size(0) : 0;
  }
  // Row b of the cache becomes the old row rows[b] ([B'] int64, values in [0, B)): beam search's
  // reordering of its hypotheses (Hugging Face's _reorder_cache). Rows 0..B-1 in order (greedy
  // search and sampling at every step) copy nothing, nor do cross-attention tensors of batch 1.
  void SelectRows(const torch::Tensor& rows);
};

struct DecodeOutput {
  // [B, T, vocab]: the next-token logits at each new position.
  torch::Tensor logits;
  // L tensors [B, N, T, past + T], when requested: each new position's attention probabilities
  // over every position so far (cached ones first), rows over keys; future keys are not included.
  std::vector<torch::Tensor> attentions;
  // Encoder-decoders, when requested: L_dec tensors [B, N_dec, T, S], each new position's
  // attention over the source.
  std::vector<torch::Tensor> cross_attentions;
};

struct ModelOptions;

// A loaded model. Immutable after Create; Forward may run from many threads at once.
class TransformerModel {
 public:
  virtual ~TransformerModel() = default;

  // Runs the model under torch::InferenceMode. InvalidArgument: inputs of the wrong shape or dtype,
  // ids outside the vocabulary, sequences longer than max_positions(), decoder_input_ids
  // for a model that is not an encoder-decoder. Any status
  // returned by options.on_layer_done. Internal: a LibTorch error (a bug).
  absl::StatusOr<ForwardOutput> Forward(const ForwardInput& input,
                                        const ForwardOptions& options) const;

  // Runs `input_ids` [B, T] int64 (no padding) as the positions cache->length() ..
  // cache->length() + T - 1 of B sequences, reading the cached keys and values of the earlier
  // positions and appending the new ones: the incremental forward pass of generation. The result
  // equals Forward on the whole sequence (tested to 1e-5). InvalidArgument: ids of the wrong shape
  // or dtype or outside the vocabulary, a cache of another batch size, more positions in all than
  // max_position_embeddings, a cache without the encoder's part for an encoder-decoder.
  // Unimplemented for encoder-only architectures.
  // Internal: a LibTorch error (a bug); the cache is then unspecified.
  absl::StatusOr<DecodeOutput> Decode(const torch::Tensor& input_ids, KvCache* cache,
                                      bool output_attentions) const;
  // Encoder-decoders: runs the encoder on `source` (input_ids and attention_mask, [B, S]) and
  // puts each decoder layer's cross-attention keys and values, and the source mask, into a new
  // cache for Decode, which then runs decoder positions (decoder_input_ids) over it.
  // InvalidArgument as Forward; Unimplemented for other architectures.
  absl::StatusOr<KvCache> RunEncoder(const ForwardInput& source) const;

  const ModelConfig& config() const { return config_; }
  // True for architectures that generate text left to right (Llama), which Decode runs.
  virtual bool is_decoder() const { return false; }
  // True for cross-encoder checkpoints: BertForSequenceClassification (pooler + classifier
  // weights) and RobertaForSequenceClassification (classifier.dense + classifier.out_proj).
  virtual bool has_classifier() const { return false; }
  // The longest input the model accepts, in tokens (ModelConfig::max_input_tokens:
  // max_position_embeddings, less pad_token_id + 1 for RoBERTa).
  int64_t max_positions() const { return config_.max_input_tokens(); }
  // The checkpoint the weights came from, every tensor by its checkpoint name; null for a model
  // built without LoadTransformerModel. Safetensors float32 data stay mapped, so keeping it costs
  // no memory beyond the model's own.
  const Checkpoint* checkpoint() const { return checkpoint_.get(); }

  // The checks of Forward (ids, masks and lengths shared by every architecture), with defaults
  // filled in for undefined masks; public for code that runs its own passes over checkpoint()
  // (attribution.h). InvalidArgument as Forward.
  absl::StatusOr<ForwardInput> CheckInput(const ForwardInput& input) const;

 protected:
  explicit TransformerModel(ModelConfig config) : config_(std::move(config)) {}

  // The architecture's forward pass on checked inputs (every mask defined), called by Forward under
  // InferenceMode; LibTorch exceptions it throws become Internal there.
  virtual absl::StatusOr<ForwardOutput> Run(const ForwardInput& input,
                                            const ForwardOptions& options) const = 0;
  // Converts the weights of the projections Linear runs to `dtype` (torch::kBFloat16), once, at
  // load. InvalidArgument unless the architecture overrides it (naming the architectures that do).
  virtual absl::Status ConvertProjections(torch::ScalarType dtype);
  // The architecture's incremental pass on checked ids, called by Decode under InferenceMode.
  // Unimplemented unless overridden.
  virtual absl::StatusOr<DecodeOutput> RunDecode(const torch::Tensor& input_ids, KvCache* cache,
                                                 bool output_attentions) const;
  // The encoder pass of RunEncoder on checked input, under InferenceMode. Unimplemented unless
  // overridden.
  virtual absl::StatusOr<KvCache> RunEncoderImpl(const ForwardInput& source) const;

 private:
  friend absl::StatusOr<std::unique_ptr<TransformerModel>> LoadTransformerModel(
      const ModelOptions& options);

  ModelConfig config_;
  std::unique_ptr<const Checkpoint> checkpoint_;
};

struct ModelOptions {
  // A Hugging Face checkpoint directory: config.json plus weights.
  std::string model_dir;
  // Threads of LibTorch's and oneDNN's OpenMP regions, 0 = every core. Process-wide: the first
  // model loaded in a process sets it (see ConfigureIntraOpThreads in gemm.h).
  int intra_op_threads = 0;
  // kBfloat16 needs a CPU with AVX512_BF16 (HasAvx512Bf16 in row_kernel.h) and an architecture of
  // the BERT family or a decoder-only one (IsDecoderOnly).
  ComputeDtype compute_dtype = ComputeDtype::kFloat32;
};

// Loads config.json and the weights of options.model_dir, validates every tensor against the
// architecture and builds the model. Also measures the BLAS speed once per process (see
// blas_check.h) and sets the intra-op thread count. NotFound / InvalidArgument as Checkpoint::Open,
// LoadModelConfig and the Create functions below; InvalidArgument for compute_dtype kBfloat16 on a
// CPU without AVX512_BF16 or an architecture without bfloat16 projections; no exception leaves
// it.
absl::StatusOr<std::unique_ptr<TransformerModel>> LoadTransformerModel(const ModelOptions& options);

// Architecture-specific constructors, used by LoadTransformerModel. Each checks config.json's
// layer counts and sizes against the tensors' shapes in the checkpoint's headers, then loads the
// tensors it uses (Checkpoint::Load: converted once, checked finite) and builds the model.
// InvalidArgument: config.json and the weights disagree (naming the field, the tensor and the
// file), a tensor is missing, mis-shaped or unexpected, or holds NaN or infinite values.
// ResourceExhausted: memory ran out while building. CreateBertModel builds kBert, kRoberta,
// kDistilBert, kMpnet and kElectra (bert.h).
absl::StatusOr<std::unique_ptr<TransformerModel>> CreateBertModel(ModelConfig config,
                                                                  Checkpoint& checkpoint);
absl::StatusOr<std::unique_ptr<TransformerModel>> CreateLlamaModel(ModelConfig config,
                                                                   Checkpoint& checkpoint);
absl::StatusOr<std::unique_ptr<TransformerModel>> CreateEncoderDecoderModel(ModelConfig config,
                                                                            Checkpoint& checkpoint);
absl::StatusOr<std::unique_ptr<TransformerModel>> CreateT5Model(ModelConfig config,
                                                                Checkpoint& checkpoint);
absl::StatusOr<std::unique_ptr<TransformerModel>> CreateGpt2Model(ModelConfig config,
                                                                  Checkpoint& checkpoint);
absl::StatusOr<std::unique_ptr<TransformerModel>> CreateGptNeoxModel(ModelConfig config,
                                                                     Checkpoint& checkpoint);
absl::StatusOr<std::unique_ptr<TransformerModel>> CreateOptModel(ModelConfig config,
                                                                 Checkpoint& checkpoint);

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_TRANSFORMER_H_

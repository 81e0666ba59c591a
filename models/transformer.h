// The transformer architectures attnscope serves, behind one interface that returns exactly the
// attention probabilities the forward pass used.
//
// Shapes: batch B, sequence S (padded length), hidden H, heads N, layers L. Tensors are float32 on
// CPU unless stated. Inputs are right-padded: real tokens first, attention_mask 0 after them.
#ifndef ATTNSCOPE_MODELS_TRANSFORMER_H_
#define ATTNSCOPE_MODELS_TRANSFORMER_H_

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/checkpoint.h"
#include "models/config.h"

namespace attnscope {

struct ForwardInput {
  torch::Tensor input_ids;       // [B, S] int64
  torch::Tensor attention_mask;  // [B, S] int64, 1 = real token, 0 = padding; undefined = all 1
  torch::Tensor token_type_ids;  // [B, S] int64 (BERT segment ids); undefined = all 0
};

struct ForwardOptions {
  // Softmax probabilities of every layer (`attentions`).
  bool output_attentions = true;
  // Embedding output plus every layer's output (`hidden_states`).
  bool output_hidden_states = false;
  // Pre-softmax scores QK^T / sqrt(head_dim), before the mask is added (`attention_scores`).
  bool output_attention_scores = false;
  // Classifier logits (BERT with a classifier head) or language-model logits (Llama).
  bool output_logits = true;
  // Called after each layer with its index (0-based). A non-OK status stops the pass and is
  // returned by Forward: the way callers honour deadlines and cancellation between layers.
  std::function<absl::Status(int64_t layer)> on_layer_done;
};

struct ForwardOutput {
  // [B, S, H]: the last layer's output (BERT) or the final RMSNorm of it (Llama), as Hugging Face
  // transformers' last_hidden_state.
  torch::Tensor last_hidden_state;
  // L + 1 tensors [B, S, H]: embeddings, then each layer; the last entry equals last_hidden_state.
  std::vector<torch::Tensor> hidden_states;
  // L tensors [B, N, S, S]: softmax(QK^T / sqrt(head_dim) + mask), rows over keys. Keys that are
  // padding (or in the future, for causal models) get exactly 0.
  std::vector<torch::Tensor> attentions;
  // L tensors [B, N, S, S]: QK^T / sqrt(head_dim) before the mask, when requested.
  std::vector<torch::Tensor> attention_scores;
  // [B, H]: BERT pooler output tanh(W h_[CLS] + b), when the checkpoint has a pooler.
  torch::Tensor pooler_output;
  // [B, num_labels] for a BERT classifier; [B, S, vocab] for Llama; undefined otherwise.
  torch::Tensor logits;
};

struct ModelOptions;

// A loaded model. Immutable after Create; Forward may run from many threads at once.
class TransformerModel {
 public:
  virtual ~TransformerModel() = default;

  // Runs the model under torch::InferenceMode. InvalidArgument: inputs of the wrong shape or dtype,
  // ids outside the vocabulary, sequences longer than max_position_embeddings. Any status
  // returned by options.on_layer_done. Internal: a LibTorch error (a bug).
  absl::StatusOr<ForwardOutput> Forward(const ForwardInput& input,
                                        const ForwardOptions& options) const;

  const ModelConfig& config() const { return config_; }
  // True for BertForSequenceClassification-style checkpoints (pooler + classifier weights).
  virtual bool has_classifier() const { return false; }
  // The longest input the model accepts, in tokens.
  int64_t max_positions() const { return config_.max_position_embeddings; }
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
};

// Loads config.json and the weights of options.model_dir, validates every tensor against the
// architecture and builds the model. Also measures the BLAS speed once per process (see
// blas_check.h) and sets the intra-op thread count. NotFound / InvalidArgument as Checkpoint::Open,
// ParseModelConfig and Checkpoint::Validate.
absl::StatusOr<std::unique_ptr<TransformerModel>> LoadTransformerModel(const ModelOptions& options);

// Architecture-specific constructors, used by LoadTransformerModel.
absl::StatusOr<std::unique_ptr<TransformerModel>> CreateBertModel(ModelConfig config,
                                                                  const Checkpoint& checkpoint);
absl::StatusOr<std::unique_ptr<TransformerModel>> CreateLlamaModel(ModelConfig config,
                                                                   const Checkpoint& checkpoint);

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_TRANSFORMER_H_

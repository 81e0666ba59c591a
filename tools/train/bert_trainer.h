// Trains the default model: a small BERT (post-LayerNorm, exact GELU, as Hugging Face's BertModel)
// with a masked-LM head tied to the word embeddings and a one-logit relevance classifier on the
// pooled [CLS] vector, and saves it as a BertForSequenceClassification checkpoint that attnscope's
// inference engine loads. The engine is inference-only; this is the differentiable twin built from
// torch::nn modules.
#ifndef ATTNSCOPE_TOOLS_TRAIN_BERT_TRAINER_H_
#define ATTNSCOPE_TOOLS_TRAIN_BERT_TRAINER_H_

#include <torch/torch.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/tokenizers/tokenizer.h"
#include "nlohmann/json.hpp"

namespace attnscope::train {

// Model shape and recipe. Every field is recorded next to the model (training_record.json), so a
// rerun can use the same values.
struct TrainConfig {
  int64_t vocab_size = 0;  // taken from the tokenizer
  int64_t hidden_size = 128;
  int64_t num_layers = 4;
  int64_t num_heads = 4;
  int64_t intermediate_size = 512;
  int64_t max_positions = 128;
  double dropout = 0.1;

  int64_t batch_size = 32;
  int64_t steps = 3000;
  // Adam with the transformer paper's betas, linear warm-up to peak_lr over warmup_steps, then
  // peak_lr * sqrt(warmup_steps / step), or with linear_decay a straight line from peak_lr down to
  // 0 at `steps` (BERT's own schedule, Devlin et al. 2019): the run ends annealed, which matters
  // when the budget is a fixed time rather than convergence.
  double peak_lr = 1e-3;
  int64_t warmup_steps = 300;
  bool linear_decay = false;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.98;
  double adam_eps = 1e-9;
  double clip_grad_norm = 1.0;
  // Masked LM as BERT: 15% of the text tokens; of those 80% [MASK], 10% a random token, 10% kept.
  double mask_prob = 0.15;
  // Masking rate of a pair's query tokens (0: mask_prob). Words of a relevant document's query
  // mostly occur in the document, so predicting them teaches attention to match tokens across
  // the two segments, which the relevance classifier builds on.
  double query_mask_prob = 0;
  // Relevance targets become 1 - s/2 and s/2.
  double label_smoothing = 0.1;
  // Each layer's query projection starts as a copy of its key projection, both drawn with this
  // times the usual 0.02 deviation (0: independent draws): a token then attends most to itself
  // and its copies from the first step, the matching a cross-encoder needs between query and
  // document, which a small model otherwise learns only after a long plateau.
  double tied_query_key_init = 0;
  // loss = mlm_loss + relevance_weight * relevance_loss.
  double relevance_weight = 1.0;
  // Batches are cut from windows of this many batches' worth of shuffled examples, sorted by
  // length inside the window (1: no sorting). Texts vary from a few tokens to max_positions, so
  // a random batch is mostly padding; sorting within a window keeps batches random in content.
  int64_t length_bucket_batches = 1;
  uint64_t seed = 20261129;
  // Fixed, so that float reductions split the same way on every run.
  int threads = 2;

  nlohmann::json ToJson() const;
  // InvalidArgument naming the field when one is missing or of the wrong type.
  static absl::StatusOr<TrainConfig> FromJson(const nlohmann::json& json);
};

// One training example: a text (masked LM only, label -1) or a query/document pair with a
// relevance label (1 relevant, 0 not), which is masked too.
struct Example {
  std::string a;
  std::string b;  // empty for a single text
  int label = -1;
};

// Reads train.jsonl lines {"a", "b"?, "label"}. NotFound / InvalidArgument naming the line.
absl::StatusOr<std::vector<Example>> ReadExamples(const std::string& path);
// Writes examples in the same format.
absl::Status WriteExamples(const std::vector<Example>& examples, const std::string& path);

struct StepStats {
  int64_t step = 0;  // 1-based
  double loss = 0;   // mlm_loss + relevance_weight * relevance_loss
  double mlm_loss = 0;
  double relevance_loss = 0;
  double lr = 0;
  int64_t tokens = 0;  // real (non-padding) tokens in the batch
};

class BertTrainer {
 public:
  // Seeds LibTorch and the masking generator from config.seed and initialises the weights (normal
  // 0.02, zero biases, unit LayerNorms, as BERT). Examples are consumed in the given order, then
  // again in a seeded shuffle. InvalidArgument: no examples, a text that does not tokenize, shapes
  // that do not divide.
  static absl::StatusOr<std::unique_ptr<BertTrainer>> Create(TrainConfig config,
                                                             const Tokenizer& tokenizer,
                                                             std::vector<Example> examples);
  ~BertTrainer();

  // Reorders the examples not yet consumed into length-bucketed batches
  // (config.length_bucket_batches), drawing from a generator of its own so that the masking and
  // dropout draws stay those of a trainer consuming the same examples in the resulting order.
  void BucketRemainingByLength();

  // One optimiser step on the next batch. When the examples run out they are reshuffled (and
  // bucketed by length) for the next pass.
  StepStats Step();

  // The examples the next `steps` steps would consume, without consuming them (for the
  // reproducibility record).
  std::vector<Example> UpcomingExamples(int64_t steps) const;

  // The relevance logits [B] of a batch in evaluation mode (no dropout), as the saved checkpoint
  // should give them in the engine. ids, type_ids, mask: [B, S] int64.
  torch::Tensor RelevanceLogits(const torch::Tensor& ids, const torch::Tensor& type_ids,
                                const torch::Tensor& mask);

  // Replaces the weights with those of a checkpoint this class saved (model.safetensors in `dir`),
  // to continue training in a further stage (the optimiser starts afresh). NotFound /
  // InvalidArgument: a missing file, tensor or shape mismatch.
  absl::Status LoadWeights(const std::string& dir);

  // Writes config.json, model.safetensors (float32; the masked-LM head under cls.predictions.*,
  // which the engine ignores) and tokenizer_config.json into `dir`. Internal on I/O errors.
  absl::Status Save(const std::string& dir) const;

  const TrainConfig& config() const { return config_; }

 private:
  struct Model;
  struct Tokenized {
    std::vector<int64_t> ids;
    std::vector<int64_t> type_ids;
    std::vector<uint8_t> maskable;  // 1 for text tokens, 0 for [CLS]/[SEP]
    int label;
  };

  BertTrainer(TrainConfig config, std::vector<Example> examples, std::vector<Tokenized> tokenized,
              int64_t mask_id);

  TrainConfig config_;
  std::vector<Example> examples_;
  std::vector<Tokenized> tokenized_;
  std::vector<size_t> order_;
  size_t next_ = 0;
  int64_t mask_id_;
  int64_t step_ = 0;
  std::mt19937_64 rng_;
  std::mt19937_64 order_rng_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<torch::optim::Adam> optimizer_;
};

}  // namespace attnscope::train

#endif  // ATTNSCOPE_TOOLS_TRAIN_BERT_TRAINER_H_

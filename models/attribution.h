// Token attributions of a cross-encoder's score: which input tokens made a document relevant.
//
// Three methods, each giving one value per input position (Captum's definitions, with the target
// classifier logit as the score):
//  - occlusion: score(input) - score(input with token i replaced by `occlusion_token_id`), one
//    forward pass per real token, batched (Captum Occlusion with a one-token window);
//  - gradient x input: sum over hidden of d score / d e_i * e_i (Captum InputXGradient, taken
//    on the word embedding layer as LayerGradientXActivation does);
//  - integrated gradients (Sundararajan et al. 2017, "Axiomatic Attribution for Deep Networks"):
//    sum over hidden of (e_i - b_i) * (1/m) sum_k d score / d e_i at b + alpha_k (e - b), with the
//    Riemann midpoint rule alpha_k = (k + 1/2) / m (Captum LayerIntegratedGradients on
//    word_embeddings with method="riemann_middle").
// e is the output of the word embedding lookup only, the usual choice for BERT (Captum's BERT
// tutorials): position and token type embeddings are added to it unchanged, and never interpolated.
// By completeness, integrated gradients sum to score(input) - score(baseline) up to the
// integration error; the midpoint rule's error falls as 1/m^2. At the default 50 steps (Captum's
// default too) it stayed below 0.6% of that difference on tests/data/tiny-bert and on 80 held-out
// query-document pairs of the default model (0.15% at 100 steps); make_attribution_golden.py
// --completeness MODEL_DIR measures it for another checkpoint.
//
// Gradients need autograd, so the forward passes here run through LibTorch's own operations (the
// portable path: torch::linear, matmul, softmax, layer_norm, gelu), never the AVX-512 inference
// kernels of TransformerModel::Forward (fused_ops, row_kernel, gemm), which record no graph. Both
// compute the same function: the scores agree to float32 rounding.
//
// Only BERT and RoBERTa cross-encoders for now: BertForSequenceClassification (a pooler and a
// classifier) and (XLM)RobertaForSequenceClassification (classifier.dense and out_proj). RoBERTa's
// positions follow the ids: an occlusion pass numbers its own ids (replacing a typed <pad>
// renumbers the tokens after it), integrated gradients keep the input's, as only word embeddings
// are interpolated.
#ifndef ATTNSCOPE_MODELS_ATTRIBUTION_H_
#define ATTNSCOPE_MODELS_ATTRIBUTION_H_

#include <torch/types.h>
#include <torch/utils.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "models/architectures/transformer.h"

namespace attnscope {

// One encoded text or text pair, batch size 1.
struct AttributionInput {
  torch::Tensor input_ids;       // [1, S] int64
  torch::Tensor attention_mask;  // [1, S] int64, 1 = real token, 0 = padding; undefined = all 1
  torch::Tensor token_type_ids;  // [1, S] int64; undefined = all 0
  // [1, S] int64, 1 at special tokens ([CLS], [SEP]) and padding, as Encoding::special_tokens_mask:
  // the integrated-gradients baseline keeps these tokens. Undefined = no special tokens.
  torch::Tensor special_tokens_mask;
};

// What the integrated-gradients baseline puts at each non-special real token.
enum class AttributionBaseline {
  // The word embedding of `baseline_token_id` ([PAD]): the input with its text blanked out.
  kTokenEmbedding,
  // A zero vector, the baseline of the original paper.
  kZero,
};

struct AttributionOptions {
  // The classifier logit attributed, in [0, num_labels).
  int64_t target = 0;
  bool occlusion = true;
  bool gradient_x_input = true;
  bool integrated_gradients = true;
  // The id that replaces each token in turn: the tokenizer's [MASK] (or [UNK]) id. The model alone
  // does not know it, so the caller must set it when `occlusion` is on.
  int64_t occlusion_token_id = -1;
  AttributionBaseline baseline = AttributionBaseline::kTokenEmbedding;
  // For kTokenEmbedding; -1 = config.json's pad_token_id.
  int64_t baseline_token_id = -1;
  // Points of the path integral (m above), at least 1.
  int64_t integrated_gradients_steps = 50;
  // Forward passes are batched up to this many tokens (passes x S; at least one pass a batch):
  // occlusion makes one pass per real token, integrated gradients one per step. Integrated
  // gradients keep a batch's activations for its backward pass, roughly
  // layers * (heads * S + 20 * hidden) * 4 bytes per token: about 500 MB for bert-base. A batch
  // is also what other calls wait for at the compute gate (models/requests/compute_gate.h):
  // against 1,024 tokens, another client's 20-token Generate beside 8 Attribute calls took
  // 0.3-0.5 s instead of 1.0, and an Attribute call alone no longer.
  int64_t max_batch_tokens = 512;
  // Called after each batch of passes; a non-OK status stops the work and is returned: the way
  // callers honour deadlines and cancellation.
  std::function<absl::Status()> on_batch_done;
};

struct Attributions {
  // [S] float32 each, one value per position of the input (special tokens included), 0 at
  // padding. Undefined when the method was not asked for.
  torch::Tensor occlusion;
  torch::Tensor gradient_x_input;
  torch::Tensor integrated_gradients;
  // The target logit on the input, and on the integrated-gradients baseline (0 when integrated
  // gradients were not asked for).
  double score = 0.0;
  double baseline_score = 0.0;
};

// Attributes the target logit of a BERT-family cross-encoder (BERT, RoBERTa, DistilBERT, MPNet,
// ELECTRA) to the tokens of `input`. Safe to
// call from many threads at once: autograd is enabled only inside the call (also when the caller
// runs under torch::InferenceMode), on graphs of its own; the checkpoint's tensors
// (TransformerModel::checkpoint()) are read as constants.
// Errors, in the form "<what> '<name>': expected X, got Y":
//  - InvalidArgument: a model without a classifier head or without a checkpoint; inputs as
//    TransformerModel::Forward refuses them, or a batch size other than 1; a target outside
//    [0, num_labels); occlusion without an occlusion_token_id, ids outside the vocabulary, no
//    baseline token (no pad_token_id in config.json), integrated_gradients_steps or
//    max_batch_tokens below 1.
//  - Unimplemented: any other architecture (Llama, the encoder-decoders).
//  - Any status returned by options.on_batch_done.
//  - Internal: a LibTorch error (a bug).
absl::StatusOr<Attributions> Attribute(const TransformerModel& model, const AttributionInput& input,
                                       const AttributionOptions& options);

// One word's total: the sum of the values of its tokens.
struct WordValue {
  int64_t sequence_id = 0;  // 0 = first text, 1 = second
  int64_t word_id = 0;      // word index within its text, as Encoding::word_ids
  double value = 0.0;
};

// Sums per-token values (an [S] tensor of Attributions) by word: one entry per distinct (sequence
// id, word id) in order of first appearance. Positions with word id -1 (special tokens, padding)
// are left out. Word ids restart at 0 in the second text of a pair, so `sequence_ids`
// (Encoding::sequence_ids) tells the texts apart; empty = one text.
// InvalidArgument: token_values not one-dimensional, or word_ids / sequence_ids of another length.
absl::StatusOr<std::vector<WordValue>> WordSums(const torch::Tensor& token_values,
                                                absl::Span<const int64_t> word_ids,
                                                absl::Span<const int64_t> sequence_ids);

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_ATTRIBUTION_H_

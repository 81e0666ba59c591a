// Text generation by a decoder, one token at a time over a KV cache (transformer.h, KvCache), with
// the attention each new token was chosen with. The decoding methods follow Hugging Face
// transformers' generate(): greedy search, beam search (Wu et al. 2016's length penalty, as
// transformers' BeamHypotheses) and sampling with temperature, top-k (Fan et al. 2018) and top-p
// (nucleus; Holtzman et al. 2020). tests/data/make_generation_golden.py holds the reference each is
// tested against.
#ifndef ATTNSCOPE_MODELS_GENERATION_H_
#define ATTNSCOPE_MODELS_GENERATION_H_

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/architectures/transformer.h"

namespace attnscope {

// The most tokens one generation may add, and the widest beam. Each new token is one pass of one
// position per beam; the bounds keep a call's work and its stream finite.
inline constexpr int64_t kMaxNewTokens = 1024;
inline constexpr int64_t kMaxBeams = 64;
// Bounds that keep the float32 arithmetic finite: logits / temperature, and a finished beam's
// log-probability / length ^ length_penalty.
inline constexpr double kMinTemperature = 1e-6;
inline constexpr double kMaxLengthPenalty = 10.0;

enum class DecodingMethod {
  // The most probable token at each step.
  kGreedy,
  // num_beams hypotheses kept by total log-probability; the best finished one by
  // sum(log p) / generated_length ^ length_penalty wins.
  kBeamSearch,
  // A draw from the model's distribution after temperature, top_k and top_p, from a seeded
  // generator.
  kSampling,
};

struct GenerationOptions {
  DecodingMethod method = DecodingMethod::kGreedy;
  // Tokens to add, in [1, kMaxNewTokens]; the prompt (for an encoder-decoder the decoder's start
  // token) plus these must fit max_position_embeddings.
  int64_t max_new_tokens = 20;
  // Beam search: hypotheses kept, in [1, min(vocab_size, kMaxBeams)].
  int64_t num_beams = 4;
  // Beam search: the exponent of the generated length that divides a finished hypothesis's
  // log-probability, in [-kMaxLengthPenalty, kMaxLengthPenalty]; above 0 favours longer outputs,
  // below 0 shorter ones.
  double length_penalty = 1.0;
  // Sampling: logits are divided by temperature (at least kMinTemperature) before top_k and
  // top_p.
  double temperature = 1.0;
  // Sampling: keep the k most probable tokens (0 = all).
  int64_t top_k = 0;
  // Sampling: keep the smallest set of most probable tokens whose probability reaches top_p, in
  // (0, 1] (1 = all).
  double top_p = 1.0;
  // Sampling: the seed of the generator; the same seed, prompt and options give the same tokens.
  uint64_t seed = 0;
  // Generation ends after any of these tokens (config.json eos_token_id, which may list several);
  // empty = only at max_new_tokens.
  std::vector<int64_t> eos_token_ids;
  // Also each new token's attention over its context (GeneratedToken::attention).
  bool output_attentions = false;
  // false: every step runs the whole sequence again instead of one position over the cache. The
  // reference the cached path is tested against; quadratic in the length.
  bool use_cache = true;
  // Called before each step's pass; a non-OK status (deadline, cancellation) ends the generation
  // and is returned.
  std::function<absl::Status()> check;
};

struct GeneratedToken {
  int64_t id = 0;
  // log p(id | context) under the model itself: log_softmax of the logits, before temperature,
  // top_k and top_p.
  double logprob = 0.0;
  // [layer, head, context] float32, with output_attentions: the attention probabilities of the
  // position that predicted this token (the last one before it) over the prompt and the tokens
  // generated before it, or for an encoder-decoder its cross-attention over the source tokens;
  // row sums 1. Undefined otherwise.
  torch::Tensor attention;
};

enum class FinishReason {
  kEos,     // the last token is one of eos_token_ids
  kLength,  // max_new_tokens were generated
};

struct GenerationResult {
  std::vector<GeneratedToken> tokens;
  FinishReason finish_reason = FinishReason::kLength;
  // Sum of the tokens' log-probabilities, divided by length ^ length_penalty for beam search.
  double score = 0.0;
};

// The checks of Generate on its arguments alone (InvalidArgument as below), for callers that
// must refuse a request before they answer anything.
absl::Status CheckGenerationOptions(const TransformerModel& model,
                                    const std::vector<int64_t>& prompt_ids,
                                    const GenerationOptions& options);

// Generates up to options.max_new_tokens after `prompt_ids` (token ids, special tokens included,
// at least one) with a decoder-only `model`, or from the source `prompt_ids` with an
// encoder-decoder (its decoder starting from decoder_start_token_id), calling `on_token` with each
// token as it is chosen (greedy search and sampling) or, for beam search, with the winning
// hypothesis's tokens once the search ends; a non-OK status from on_token (the client went away)
// ends the generation and is returned. InvalidArgument, naming the option: an encoder-only model,
// an encoder-decoder without decoder_start_token_id, an empty prompt or ids outside the vocabulary,
// options outside the ranges above, a prompt plus max_new_tokens over max_position_embeddings. The
// status of options.check. Internal: a LibTorch error (a bug).
absl::StatusOr<GenerationResult> Generate(
    const TransformerModel& model, const std::vector<int64_t>& prompt_ids,
    const GenerationOptions& options,
    const std::function<absl::Status(const GeneratedToken&)>& on_token);

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_GENERATION_H_

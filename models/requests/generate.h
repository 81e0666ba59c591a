// Generate: the query, the header, each step and the summary (RequestRunner::RunGenerate).
#ifndef ATTNSCOPE_MODELS_REQUESTS_GENERATE_H_
#define ATTNSCOPE_MODELS_REQUESTS_GENERATE_H_

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/attention_ops.h"
#include "models/generation.h"
#include "models/requests/types.h"

namespace attnscope {

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
  // The decoded generated text, special tokens left out: the steps' texts joined, then the
  // complete characters the last steps held back before a character they leave incomplete.
  std::string text;
  // GenerationResult::score.
  double score = 0.0;
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_REQUESTS_GENERATE_H_

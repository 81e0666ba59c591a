// Attribute: the query and answer (RequestRunner::RunAttribute).
#ifndef ATTNSCOPE_MODELS_REQUESTS_ATTRIBUTE_H_
#define ATTNSCOPE_MODELS_REQUESTS_ATTRIBUTE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "models/attribution.h"
#include "models/requests/types.h"

namespace attnscope {

// Token attribution methods (models/attribution.h).
enum class AttributionMethod { kOcclusion, kGradientXInput, kIntegratedGradients };

// What replaces each token in turn for occlusion: the tokenizer's [MASK] or [UNK] (RoBERTa's and
// XLM-R's <mask> or <unk>).
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

// What shrinks an over-cap Attribute answer.
inline constexpr absl::string_view kAttributeFixes = "send shorter texts or fewer methods";

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_REQUESTS_ATTRIBUTE_H_

// GetAttention and StreamAttention: the query and answer (RequestRunner::RunAttention).
#ifndef ATTNSCOPE_MODELS_REQUESTS_ATTENTION_H_
#define ATTNSCOPE_MODELS_REQUESTS_ATTENTION_H_

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/attention_ops.h"
#include "models/requests/byte_budget.h"
#include "models/requests/types.h"

namespace attnscope {

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

  // The answer's bytes reserved in the runner's answer budget (see byte_budget.h), given back
  // when the answer (its last copy) is destroyed.
  ByteBudget::Hold budget_hold;

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

// What shrinks an over-cap GetAttention answer, among the fixes `query` does not already use (e.g.
// "use StreamAttention, request fewer layers or heads, a smaller window, dtype DTYPE_FLOAT16,
// top_k").
std::string AttentionFixes(const AttentionQuery& query);

// What makes an attention answer hold fewer bytes while it is computed and read (a stream's too).
inline constexpr absl::string_view kAttentionAnswerFixes =
    "ask for fewer layers or heads, a smaller window or top_k";

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_REQUESTS_ATTENTION_H_

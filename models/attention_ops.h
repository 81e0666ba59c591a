// Post-processing of the engine's attention tensors for serving: padding removal, layer and head
// selection, head aggregation, attention rollout, windows, per-row top-k, pooling and
// cross-attention blocks.
//
// Shapes: heads N, sequence S (real tokens only once padding is stripped), query rows Q, key
// columns K, hidden H. Every tensor is float32 on CPU unless stated. Functions return views of
// their input where they can (no copy), so that the tensor codec copies attention data exactly once
// on its way to the wire. LibTorch errors are caught here and returned as Internal.
#ifndef ATTNSCOPE_MODELS_ATTENTION_OPS_H_
#define ATTNSCOPE_MODELS_ATTENTION_OPS_H_

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace attnscope {

// Resolves requested indices into [0, count): a negative index counts from the end (-1 is the
// last), as Python indexing does; an empty request selects every index in order. `what` names the
// index kind ("layer", "head") and `option` the request field that sets it, for messages.
// InvalidArgument when an index is outside [-count, count), naming the valid range, e.g.
// "layer 7: expected an index in [-3, 3) (the model has 3 layers), got 7; fix `layers`", and when
// an index comes twice (itself or counted from the end).
absl::StatusOr<std::vector<int64_t>> ResolveIndices(absl::Span<const int32_t> requested,
                                                    int64_t count, absl::string_view what,
                                                    absl::string_view option);

// The [start, end) rectangle of query and key positions to return. An end of 0 means the end of
// the sequence.
struct AttentionWindow {
  int64_t query_start = 0;
  int64_t query_end = 0;
  int64_t key_start = 0;
  int64_t key_end = 0;
};

// Replaces 0 ends by `length` and checks 0 <= start < end <= length for both axes.
// InvalidArgument otherwise, naming the axis, the bounds, the sequence length in its `unit`
// ("tokens", or "words" where the axes are words) and the request field (`field`.query_start ...)
// to fix.
absl::StatusOr<AttentionWindow> ResolveWindow(const AttentionWindow& window, int64_t length,
                                              absl::string_view field = "window",
                                              absl::string_view unit = "tokens");

// One batch item of a [B, N, S, S] layer tensor with padding removed: [N, length, length] (a view).
// Inputs are right-padded, so the real tokens are the first `length` positions.
torch::Tensor StripPadding(const torch::Tensor& layer, int64_t batch_index, int64_t length);

enum class HeadAggregation {
  kNone,  // every selected head, in the order given
  kMean,  // element-wise mean over the selected heads: one head, rows still sum to 1
  kMax,   // element-wise max over the selected heads: one head, rows no longer sum to 1
};

// Selects `heads` of one layer [N, S, S] (or a block [N, Q', K']), aggregates them and cuts
// `window` (from ResolveWindow; an end of 0 again means the end, so AttentionWindow{} keeps
// everything): [heads.size(), Q, K] for kNone, [1, Q, K] otherwise. A view of `layer` when every
// head is selected in order without aggregation. Works for probabilities and pre-softmax scores
// alike.
absl::StatusOr<torch::Tensor> SelectHeads(const torch::Tensor& layer,
                                          const std::vector<int64_t>& heads,
                                          HeadAggregation aggregation,
                                          const AttentionWindow& window);

// Attention rollout (Abnar & Zuidema 2020) over `layers`, each [N, S, S] in model order: for each
// layer A~ = 0.5 * mean_over_heads(A) + 0.5 * I, rows re-normalised to sum to 1; the result
// A~_{L-1} x ... x A~_0 (last layer on the left) is [S, S], rows summing to 1.
// InvalidArgument when `layers` is empty or the shapes differ.
absl::StatusOr<torch::Tensor> AttentionRollout(const std::vector<torch::Tensor>& layers);

// The k largest entries of each row of `rows` [..., K].
struct RowTopK {
  torch::Tensor values;   // [..., k] float32, descending along the last dimension
  torch::Tensor indices;  // [..., k] int32: key position = column + key_offset
};

// Per-row top-k. `key_offset` is added to the column indices so that they are absolute key
// positions when `rows` is a window starting at key_offset. Ties keep the lower index first.
// InvalidArgument when k <= 0 or k exceeds the row length K, naming both and the fix.
absl::StatusOr<RowTopK> TopKPerRow(const torch::Tensor& rows, int64_t k, int64_t key_offset);

enum class Pooling {
  kCls,   // the first token's final hidden state ([CLS] for BERT)
  kMean,  // mean over the real tokens (attention_mask 1), special tokens included
};

// Pools last_hidden_state [B, S, H] with attention_mask [B, S] (int64, 1 = real token) into
// [B, H].
absl::StatusOr<torch::Tensor> PoolHiddenStates(const torch::Tensor& last_hidden_state,
                                               const torch::Tensor& attention_mask,
                                               Pooling pooling);

// Divides each row of `vectors` [B, H] by its L2 norm (a zero row stays zero): [B, H].
absl::StatusOr<torch::Tensor> L2Normalize(const torch::Tensor& vectors);

// Positions i with sequence_ids[i] == sequence (0 = first text, 1 = second), in order: the text
// tokens of one side of a pair, special tokens and padding (-1) excluded.
std::vector<int64_t> PositionsOfSequence(absl::Span<const int64_t> sequence_ids, int64_t sequence);

// The block of `layer` [N, S, S] with the rows `rows` and the columns `columns`:
// [N, rows.size(), columns.size()]. Used for query-to-document (rows = query positions, columns =
// document positions) and document-to-query blocks. InvalidArgument on an empty or out-of-range
// position list.
absl::StatusOr<torch::Tensor> AttentionBlock(const torch::Tensor& layer,
                                             const std::vector<int64_t>& rows,
                                             const std::vector<int64_t>& columns);

// One word of an encoding: the token positions [token_start, token_end) that share a word id
// within one text. Special tokens are words of their own.
struct WordSpan {
  int64_t token_start = 0;
  int64_t token_end = 0;
};

// The words of an encoding, in order: runs of consecutive tokens with the same (sequence id, word
// id); every token with word id -1 (special tokens) alone. Each token belongs to exactly one word.
// With `tokens` (the encoding's token strings), a token that begins with U+2581 "▁"
// (SentencePiece's mark of a word's start) begins a word too: Llama 2's, Mistral's and Gemma's
// tokenizer.json have no pre-tokenizer, and their word ids (Hugging Face's word_ids) count a whole
// text as one word.
std::vector<WordSpan> WordSpans(absl::Span<const int64_t> word_ids,
                                absl::Span<const int64_t> sequence_ids,
                                absl::Span<const std::string> tokens = {});

// Word-level attention (Clark et al. 2019, "What Does BERT Look At?", section 4.1): of `layer`
// [N, S, S] (S = the tokens the spans cover), the rows of each word's tokens are averaged
// (attention from a word) and the columns summed (attention to a word), so that rows still sum to
// 1: [N, W, W]. Works on rollout [S, S] too (as [1, S, S]). InvalidArgument when the spans do not
// tile [0, S).
absl::StatusOr<torch::Tensor> AggregateWords(const torch::Tensor& layer,
                                             const std::vector<WordSpan>& words);

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_ATTENTION_OPS_H_

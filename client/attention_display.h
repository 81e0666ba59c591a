// What people see of attention answers: token labels, heatmaps of GetAttention answers (drawn by
// client/render/heatmap.h), and per-token summaries for terminals (the CLI's --format text).
#ifndef ATTNSCOPE_CLIENT_ATTENTION_DISPLAY_H_
#define ATTNSCOPE_CLIENT_ATTENTION_DISPLAY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "attnscope/v1/attnscope.pb.h"
#include "client/client.h"
#include "client/render/heatmap.h"

namespace attnscope {

// The label of token `index`: its original text (Tokens.original_texts, e.g. "Việt" where the
// token is "viet"), or the token itself where that is empty, blank or absent: special tokens
// ([CLS], [SEP], <s>), byte-fallback pieces that cover no character, and SentencePiece's "▁" for a
// space. `index` must be in range of tokens.tokens().
std::string TokenLabel(const v1::Tokens& tokens, int index);

// Ascending index lists as runs: {0, 1, 2, 3} -> "0-3", {0, 2, 5, 6, 7} -> "0, 2, 5-7"; other
// orders are listed as given.
std::string DescribeIndices(const std::vector<int32_t>& indices);

// The heatmap of a dense GetAttention / StreamAttention answer, `aggregation` being the request's
// head_aggregation. One panel per [layer, head] slice, rows the window's query tokens and columns
// its key tokens (labels by TokenLabel), titled by what varies:
//   one layer, one head:     "MODEL: layer 3, head 1" (or "..., mean of heads 0-3"), one panel;
//   one layer, several heads: "MODEL: layer 3", panels "head 0", "head 1", ... in a square grid;
//   several layers, one head or aggregated: "MODEL: mean of heads 0-3", panels "layer 0", ...;
//   several layers and heads: "MODEL", a row of panels "layer L, head H" per layer.
// With decoder_text (an encoder-decoder's answer) the cross-attention is drawn: target tokens
// down, each row labelled by the token its position writes (decoder_labels), source tokens across,
// titled "MODEL cross-attention: ...".
// The colour scale is left unset (0 to the largest value). `info` (may be null: nothing masked) is
// the model's: in a decoder-only model's self-attention (is_causal) each panel marks the cells its
// masks hid (HeatmapPanel::masked): keys after the query, and keys at least the panel's layer's
// window back (layer_sliding_windows; not over words, which a window may cut), the cells the
// answer holds exactly 0 for. InvalidArgument for an answer with top_k (not a dense matrix) or
// whose attention is not [layer, head, query_token, key_token] with one token per row and column.
absl::StatusOr<render::Heatmap> AttentionHeatmap(const AttentionResult& result,
                                                 v1::HeadAggregation aggregation,
                                                 const v1::ModelInfo* info = nullptr);

// Rows of one [query, key] matrix for a terminal: for each query token its `top` most attended key
// tokens, largest weight first (equal weights in key order), leaving out keys of weight exactly 0
// (keys the row could not see: a causal model's later tokens, keys outside a sliding window,
// padding), weights with two decimals, and the
// query labels padded to one display width (Hangul counts two columns) so the arrows line up:
//   Tôi   -> yêu 0.41, Việt 0.22, [SEP] 0.10
// `weights` holds row_labels.size() x column_labels.size() values, row-major; each line ends in
// "\n". `top` below 1 is taken as 1; more than the columns shows them all.
std::string TopAttendedLines(const std::vector<std::string>& row_labels,
                             const std::vector<std::string>& column_labels,
                             absl::Span<const float> weights, int top);

// A GetAttention / StreamAttention answer as text: for each [layer, head] slice a header line
// ("layer 3, head 1:" or "layer 3, mean of heads 0-3:") and TopAttendedLines, blocks separated by
// an empty line; then "rollout:" and its rows when the answer has a rollout. With decoder_text the
// blocks of the encoder's self-attention, the decoder's self-attention and the cross-attention
// follow each other, each header line starting with its name ("cross-attention, layer 1, ...:");
// the decoder self-attention's rows are the tokens each position reads, the cross-attention's the
// tokens each writes. A top_k answer shows its k entries per row (at most `top`). Scores are not
// shown. InvalidArgument when the tensor shapes do not match the tokens.
absl::StatusOr<std::string> AttentionText(const AttentionResult& result,
                                          v1::HeadAggregation aggregation, int top);

// A CrossAttention answer as text: per document a line "document N: relevance S" (or "document N"
// without a classifier), then for each [layer, head] slice "layer 3, head 1, query -> document:"
// and the query tokens' most attended document tokens; with document_to_query also the
// documents' tokens' most attended query tokens. Blocks and documents are separated by an empty
// line. InvalidArgument when shapes or positions do not match the tokens.
absl::StatusOr<std::string> CrossAttentionText(const CrossAttentionResult& result,
                                               v1::HeadAggregation aggregation, int top);

// An Attribute answer as tables for a terminal: a line with the score (and the baseline score,
// steps and convergence delta with integrated gradients); then the words of text_pair (the
// document of a cross-encoder) and of text, each highest first by the first method that ran of
// integrated gradients, occlusion, gradient x input; then every token in order. One column per
// method that ran, labels padded to one display width:
//   score 2.345 (model bert, target 0 "relevant")
//   ...
//   words of text_pair, highest integrated_gradients first:
//     word      integrated_gradients  occlusion  gradient_x_input
//     paris                   +0.8120    +0.5012           +0.0331
// InvalidArgument when a method's values do not have one entry per token.
absl::StatusOr<std::string> AttributionText(const v1::AttributeResponse& response);

}  // namespace attnscope

#endif  // ATTNSCOPE_CLIENT_ATTENTION_DISPLAY_H_

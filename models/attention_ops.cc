#include "models/attention_ops.h"

#include <torch/utils.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace attnscope {
namespace {

absl::Status TorchError(absl::string_view what, const c10::Error& error) {
  return absl::InternalError(absl::StrCat(what, " failed: ", error.what_without_backtrace()));
}

std::string ShapeOf(const torch::Tensor& tensor) {
  return absl::StrCat("[", absl::StrJoin(tensor.sizes(), ", "), "]");
}

// Narrows dimension `dim` to [start, end), end 0 meaning the end: a view.
torch::Tensor Slice(const torch::Tensor& tensor, int64_t dim, int64_t start, int64_t end) {
  const int64_t stop = end == 0 ? tensor.size(dim) : end;
  if (start == 0 && stop == tensor.size(dim)) return tensor;
  return tensor.narrow(dim, start, stop - start);
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> ResolveIndices(absl::Span<const int32_t> requested,
                                                    int64_t count, absl::string_view what,
                                                    absl::string_view option) {
  std::vector<int64_t> resolved;
  if (requested.empty()) {
    for (int64_t i = 0; i < count; ++i) resolved.push_back(i);
    return resolved;
  }
  // Each index at most once: a repeated one adds nothing to see, while 4 million repeats of one
  // layer in a 4 MB request streamed for minutes and 10 000 of one head took gigabytes.
  std::vector<bool> seen(static_cast<size_t>(count), false);
  for (const int32_t index : requested) {
    if (index < -count || index >= count) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " ", index, ": expected an index in [", -count, ", ", count, ") (the model has ",
          count, " ", what, "s), got ", index, "; fix `", option, "`"));
    }
    const int64_t resolved_index = index < 0 ? index + count : index;
    if (seen[static_cast<size_t>(resolved_index)]) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", index, ": expected each ", what, " at most once, got ", what, " ",
                       resolved_index, " again; list each once in `", option, "`"));
    }
    seen[static_cast<size_t>(resolved_index)] = true;
    resolved.push_back(resolved_index);
  }
  return resolved;
}

absl::StatusOr<AttentionWindow> ResolveWindow(const AttentionWindow& window, int64_t length,
                                              absl::string_view field, absl::string_view unit) {
  AttentionWindow resolved = window;
  if (resolved.query_end == 0) resolved.query_end = length;
  if (resolved.key_end == 0) resolved.key_end = length;
  auto check = [length, field, unit](absl::string_view axis, int64_t start,
                                     int64_t end) -> absl::Status {
    if (start < 0 || start >= end || end > length) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " ", axis, " positions [", start, ", ", end, "): expected 0 <= ", axis,
          "_start < ", axis, "_end <= ", length, " (the sequence has ", length, " ", unit,
          "; an end of 0 means the end), got start ", start, " and end ", end, "; fix `", field,
          ".", axis, "_start` / `", field, ".", axis, "_end`"));
    }
    return absl::OkStatus();
  };
  if (absl::Status status = check("query", resolved.query_start, resolved.query_end);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = check("key", resolved.key_start, resolved.key_end); !status.ok()) {
    return status;
  }
  return resolved;
}

torch::Tensor StripPadding(const torch::Tensor& layer, int64_t batch_index, int64_t length) {
  return layer.select(0, batch_index).narrow(1, 0, length).narrow(2, 0, length);
}

absl::StatusOr<torch::Tensor> SelectHeads(const torch::Tensor& layer,
                                          const std::vector<int64_t>& heads,
                                          HeadAggregation aggregation,
                                          const AttentionWindow& window) {
  if (layer.dim() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention layer: expected [head, query, key], got ", ShapeOf(layer)));
  }
  try {
    torch::Tensor windowed = Slice(Slice(layer, 1, window.query_start, window.query_end), 2,
                                   window.key_start, window.key_end);
    bool all_heads = static_cast<int64_t>(heads.size()) == layer.size(0);
    for (size_t i = 0; all_heads && i < heads.size(); ++i) {
      all_heads = heads[i] == static_cast<int64_t>(i);
    }
    torch::Tensor selected =
        all_heads ? windowed
                  : windowed.index_select(0, torch::tensor(heads, torch::dtype(torch::kInt64)));
    switch (aggregation) {
      case HeadAggregation::kNone:
        return selected;
      case HeadAggregation::kMean:
        return selected.mean(0, /*keepdim=*/true);
      case HeadAggregation::kMax:
        return std::get<0>(selected.max(0, /*keepdim=*/true));
    }
  } catch (const c10::Error& error) {
    return TorchError("head selection", error);
  }
  return absl::InternalError("unhandled head aggregation");
}

absl::StatusOr<torch::Tensor> AttentionRollout(const std::vector<torch::Tensor>& layers) {
  if (layers.empty()) return absl::InvalidArgumentError("rollout: expected at least one layer");
  for (const torch::Tensor& layer : layers) {
    if (layer.dim() != 3 || layer.size(1) != layer.size(2) || layer.sizes() != layers[0].sizes()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rollout: expected layers of one shape [head, S, S], got ", ShapeOf(layer),
                       " and ", ShapeOf(layers[0])));
    }
  }
  try {
    torch::NoGradGuard no_grad;
    const torch::Tensor identity = torch::eye(layers[0].size(1), torch::kFloat32);
    torch::Tensor rollout;
    for (const torch::Tensor& layer : layers) {
      torch::Tensor mixed = layer.mean(0).mul(0.5).add_(identity, 0.5);
      mixed.div_(mixed.sum(-1, /*keepdim=*/true));
      // Later layers act on the output of earlier ones, so they multiply from the left.
      rollout = rollout.defined() ? torch::matmul(mixed, rollout) : mixed;
    }
    return rollout;
  } catch (const c10::Error& error) {
    return TorchError("rollout", error);
  }
}

absl::StatusOr<RowTopK> TopKPerRow(const torch::Tensor& rows, int64_t k, int64_t key_offset) {
  const int64_t row_length = rows.dim() == 0 ? 0 : rows.size(-1);
  if (k <= 0 || k > row_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k ", k, ": expected a value in [1, ", row_length, "] (the row has ",
                     row_length, " keys after the window), got ", k, "; set `top_k` to at most ",
                     row_length, " or 0 for dense attention"));
  }
  try {
    // A stable sort keeps equal values (common: the zeros above a causal diagonal) in key order,
    // so the result is deterministic; torch::topk does not promise that.
    auto [values, order] = torch::sort(rows, /*stable=*/true, /*dim=*/-1, /*descending=*/true);
    RowTopK top;
    top.values = values.narrow(-1, 0, k);
    top.indices = order.narrow(-1, 0, k).add(key_offset).to(torch::kInt32);
    return top;
  } catch (const c10::Error& error) {
    return TorchError("top-k", error);
  }
}

absl::StatusOr<torch::Tensor> PoolHiddenStates(const torch::Tensor& last_hidden_state,
                                               const torch::Tensor& attention_mask,
                                               Pooling pooling) {
  if (last_hidden_state.dim() != 3 || attention_mask.dim() != 2 ||
      attention_mask.size(0) != last_hidden_state.size(0) ||
      attention_mask.size(1) != last_hidden_state.size(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pooling: expected last_hidden_state [B, S, H] and attention_mask [B, S], got ",
        ShapeOf(last_hidden_state), " and ", ShapeOf(attention_mask)));
  }
  try {
    if (pooling == Pooling::kCls) return last_hidden_state.select(1, 0);
    const torch::Tensor mask = attention_mask.to(torch::kFloat32).unsqueeze(-1);  // [B, S, 1]
    return (last_hidden_state * mask).sum(1).div_(mask.sum(1).clamp_min(1.0));
  } catch (const c10::Error& error) {
    return TorchError("pooling", error);
  }
}

absl::StatusOr<torch::Tensor> L2Normalize(const torch::Tensor& vectors) {
  if (vectors.dim() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("L2 normalisation: expected [B, H], got ", ShapeOf(vectors)));
  }
  try {
    // The floor keeps a zero vector at zero instead of dividing by zero.
    return vectors / vectors.norm(2, /*dim=*/{1}, /*keepdim=*/true).clamp_min(1e-12);
  } catch (const c10::Error& error) {
    return TorchError("L2 normalisation", error);
  }
}

std::vector<int64_t> PositionsOfSequence(absl::Span<const int64_t> sequence_ids, int64_t sequence) {
  std::vector<int64_t> positions;
  for (size_t i = 0; i < sequence_ids.size(); ++i) {
    if (sequence_ids[i] == sequence) positions.push_back(static_cast<int64_t>(i));
  }
  return positions;
}

absl::StatusOr<torch::Tensor> AttentionBlock(const torch::Tensor& layer,
                                             const std::vector<int64_t>& rows,
                                             const std::vector<int64_t>& columns) {
  if (layer.dim() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention block: expected [head, S, S], got ", ShapeOf(layer)));
  }
  for (const auto& [positions, dim] : {std::pair(&rows, 1), std::pair(&columns, 2)}) {
    if (positions->empty()) {
      return absl::InvalidArgumentError(
          "attention block: expected at least one row and one column position, got none");
    }
    for (const int64_t position : *positions) {
      if (position < 0 || position >= layer.size(dim)) {
        return absl::InvalidArgumentError(absl::StrCat("attention block: position ", position,
                                                       " is outside [0, ", layer.size(dim), ")"));
      }
    }
  }
  try {
    const auto index = [](const std::vector<int64_t>& positions) {
      return torch::tensor(positions, torch::dtype(torch::kInt64));
    };
    return layer.index_select(1, index(rows)).index_select(2, index(columns));
  } catch (const c10::Error& error) {
    return TorchError("attention block", error);
  }
}

std::vector<WordSpan> WordSpans(absl::Span<const int64_t> word_ids,
                                absl::Span<const int64_t> sequence_ids,
                                absl::Span<const std::string> tokens) {
  constexpr absl::string_view kWordStart = "\xE2\x96\x81";  // U+2581
  std::vector<WordSpan> words;
  for (size_t i = 0; i < word_ids.size(); ++i) {
    const bool starts_word = i < tokens.size() && absl::StartsWith(tokens[i], kWordStart);
    const bool continues = i > 0 && word_ids[i] >= 0 && word_ids[i] == word_ids[i - 1] &&
                           sequence_ids[i] == sequence_ids[i - 1] && !starts_word;
    if (continues) {
      words.back().token_end = static_cast<int64_t>(i) + 1;
    } else {
      words.push_back({static_cast<int64_t>(i), static_cast<int64_t>(i) + 1});
    }
  }
  return words;
}

absl::StatusOr<torch::Tensor> AggregateWords(const torch::Tensor& layer,
                                             const std::vector<WordSpan>& words) {
  if (layer.dim() != 3 || layer.size(1) != layer.size(2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("word aggregation: expected [head, S, S], got ", ShapeOf(layer)));
  }
  const int64_t length = layer.size(1);
  std::vector<int64_t> word_of_token;
  std::vector<float> tokens_per_word;
  for (const WordSpan& word : words) {
    if (word.token_start != static_cast<int64_t>(word_of_token.size()) ||
        word.token_end <= word.token_start) {
      return absl::InvalidArgumentError(absl::StrCat(
          "word aggregation: expected word spans tiling [0, ", length, "), got a word [",
          word.token_start, ", ", word.token_end, ") after ", word_of_token.size(), " tokens"));
    }
    word_of_token.insert(word_of_token.end(), word.token_end - word.token_start,
                         static_cast<int64_t>(tokens_per_word.size()));
    tokens_per_word.push_back(static_cast<float>(word.token_end - word.token_start));
  }
  if (static_cast<int64_t>(word_of_token.size()) != length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "word aggregation: the words cover ", word_of_token.size(), " tokens, expected ", length));
  }
  try {
    const int64_t count = static_cast<int64_t>(words.size());
    const torch::Tensor index = torch::tensor(word_of_token, torch::dtype(torch::kInt64));
    // Index sums touch every element once; a product with [W, S] grouping matrices would cost W
    // times more.
    const torch::Tensor to_words =
        torch::zeros({layer.size(0), length, count}, layer.options()).index_add_(2, index, layer);
    const torch::Tensor from_words =
        torch::zeros({layer.size(0), count, count}, layer.options()).index_add_(1, index, to_words);
    return from_words.div_(torch::tensor(tokens_per_word).view({1, count, 1}));
  } catch (const c10::Error& error) {
    return TorchError("word aggregation", error);
  }
}

}  // namespace attnscope

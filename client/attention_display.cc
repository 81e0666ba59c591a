#include "client/attention_display.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace attnscope {
namespace {

// One attended token of a row: its label and weight.
using Entry = std::pair<std::string, float>;

// Terminal columns `text` takes: East Asian wide characters (Hangul, CJK) count two, combining
// marks none. Invalid UTF-8 counts a column per byte.
int DisplayWidth(const std::string& text) {
  int width = 0;
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  utf8proc_ssize_t offset = 0;
  const auto size = static_cast<utf8proc_ssize_t>(text.size());
  while (offset < size) {
    utf8proc_int32_t code_point;
    const utf8proc_ssize_t length = utf8proc_iterate(bytes + offset, size - offset, &code_point);
    if (length <= 0) {
      ++width;
      ++offset;
      continue;
    }
    width += std::max(0, utf8proc_charwidth(code_point));
    offset += length;
  }
  return width;
}

std::string FormatRows(const std::vector<std::string>& row_labels,
                       const std::vector<std::vector<Entry>>& rows) {
  int label_width = 0;
  for (const std::string& label : row_labels) {
    label_width = std::max(label_width, DisplayWidth(label));
  }
  std::string out;
  for (size_t r = 0; r < rows.size(); ++r) {
    absl::StrAppend(&out, row_labels[r],
                    std::string(label_width - DisplayWidth(row_labels[r]), ' '), " ->");
    for (size_t i = 0; i < rows[r].size(); ++i) {
      absl::StrAppend(&out, i == 0 ? " " : ", ", rows[r][i].first,
                      absl::StrFormat(" %.2f", rows[r][i].second));
    }
    out += "\n";
  }
  return out;
}

// The `top` largest entries of `weights` (one row), largest first, equal weights in key order.
std::vector<Entry> TopEntries(const std::vector<std::string>& column_labels,
                              absl::Span<const float> weights, int top) {
  std::vector<size_t> order(weights.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return weights[a] > weights[b]; });
  order.resize(std::min(order.size(), static_cast<size_t>(std::max(top, 1))));
  std::vector<Entry> entries;
  for (size_t key : order) {
    // Exactly 0 is a key the row could not see (a later token of a causal model, one outside a
    // sliding window, padding): listing it as attended would mislead.
    if (weights[key] != 0.0f) entries.emplace_back(column_labels[key], weights[key]);
  }
  return entries;
}

std::vector<std::string> LabelsFrom(const v1::Tokens& tokens, int64_t start, int64_t count) {
  std::vector<std::string> labels;
  for (int64_t i = 0; i < count; ++i) labels.push_back(TokenLabel(tokens, start + i));
  return labels;
}

std::vector<std::string> LabelsAt(const v1::Tokens& tokens, const std::vector<int32_t>& positions) {
  std::vector<std::string> labels;
  for (int32_t position : positions) labels.push_back(TokenLabel(tokens, position));
  return labels;
}

bool Aggregated(v1::HeadAggregation aggregation) {
  return aggregation == v1::HEAD_AGGREGATION_MEAN || aggregation == v1::HEAD_AGGREGATION_MAX;
}

// "head 2", or "mean of heads 0-3" / "max of heads 0-3" for an aggregated answer.
std::string HeadName(const std::vector<int32_t>& heads, v1::HeadAggregation aggregation,
                     size_t head) {
  if (Aggregated(aggregation)) {
    return absl::StrCat(aggregation == v1::HEAD_AGGREGATION_MEAN ? "mean" : "max", " of heads ",
                        DescribeIndices(heads));
  }
  return absl::StrCat("head ", heads[head]);
}

// Checks that `tensor` is [layers, heads, rows, columns] with the answer's layer and head counts.
absl::Status CheckAttentionShape(const std::string& what, const DecodedTensor& tensor,
                                 size_t layers, size_t heads, v1::HeadAggregation aggregation,
                                 int64_t rows, int64_t columns) {
  const std::vector<int64_t> expected = {static_cast<int64_t>(layers),
                                         Aggregated(aggregation) ? 1 : static_cast<int64_t>(heads),
                                         rows, columns};
  if (tensor.shape != expected) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected shape [",
                                                   absl::StrJoin(expected, ", "), "], got [",
                                                   absl::StrJoin(tensor.shape, ", "), "]"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string TokenLabel(const v1::Tokens& tokens, int index) {
  if (index < tokens.original_texts_size()) {
    const std::string& original = tokens.original_texts(index);
    // A piece that stands for a space (SentencePiece's "▁") would be an invisible label.
    if (!absl::StripAsciiWhitespace(original).empty()) return original;
  }
  return tokens.tokens(index);
}

std::string DescribeIndices(const std::vector<int32_t>& indices) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < indices.size();) {
    size_t end = i + 1;
    while (end < indices.size() && indices[end] == indices[end - 1] + 1) ++end;
    if (end - i >= 2) {
      parts.push_back(absl::StrCat(indices[i], "-", indices[end - 1]));
    } else {
      parts.push_back(absl::StrCat(indices[i]));
    }
    i = end;
  }
  return absl::StrJoin(parts, ", ");
}

namespace {

// One attention block of an answer: the encoder's (or only) self-attention, the decoder's
// self-attention, or its cross-attention, with the tokens of each axis.
struct BlockView {
  // "" for the self-attention of a model without decoder_text; otherwise prefixes titles.
  std::string name;
  const v1::Tokens* row_tokens = nullptr;
  int32_t query_start = 0;
  const v1::Tokens* column_tokens = nullptr;
  int32_t key_start = 0;
  const std::vector<int32_t>* layers = nullptr;
  const std::vector<int32_t>* heads = nullptr;
  const DecodedTensor* attentions = nullptr;
  const std::optional<DecodedTensor>* top_k_indices = nullptr;
};

std::vector<BlockView> BlocksOf(const AttentionResult& result) {
  std::vector<BlockView> blocks = {{"", &result.tokens, result.query_start, &result.tokens,
                                    result.key_start, &result.layers, &result.heads,
                                    &result.attentions, &result.top_k_indices}};
  if (!result.decoder.has_value()) return blocks;
  const AttentionResult::Decoder& decoder = *result.decoder;
  blocks[0].name = "encoder self-attention";
  blocks.push_back({"decoder self-attention", &decoder.tokens, decoder.query_start, &decoder.tokens,
                    decoder.key_start, &decoder.layers, &decoder.heads, &decoder.attentions,
                    &decoder.top_k_indices});
  // Rows by the token each position writes: the alignment reads "Tạo -> Creat", where the row of
  // the start token it reads would say "<pad> -> Creat".
  blocks.push_back({"cross-attention", &decoder.labels, decoder.query_start, &result.tokens,
                    result.key_start, &decoder.layers, &decoder.heads, &decoder.cross_attentions,
                    &decoder.cross_top_k_indices});
  return blocks;
}

}  // namespace

absl::StatusOr<render::Heatmap> AttentionHeatmap(const AttentionResult& result,
                                                 v1::HeadAggregation aggregation,
                                                 const v1::ModelInfo* info) {
  // With decoder_text the picture people ask for is the alignment: target rows, source columns.
  const std::vector<BlockView> blocks = BlocksOf(result);
  const BlockView& block = blocks.back();
  if (block.top_k_indices->has_value()) {
    return absl::InvalidArgumentError(
        "heatmap: expected dense attention, got a top_k answer; leave --top_k out");
  }
  const DecodedTensor& attentions = *block.attentions;
  if (attentions.shape.size() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("heatmap: expected attention [layer, head, query_token, key_token], got ",
                     attentions.shape.size(), " dimensions"));
  }
  const int64_t rows = attentions.shape[2];
  const int64_t columns = attentions.shape[3];
  if (block.query_start + rows > block.row_tokens->tokens_size() ||
      block.key_start + columns > block.column_tokens->tokens_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "heatmap: expected the window within the ", block.row_tokens->tokens_size(), " x ",
        block.column_tokens->tokens_size(), " tokens, got queries from ", block.query_start, " x ",
        rows, " and keys from ", block.key_start, " x ", columns));
  }
  ATTNSCOPE_RETURN_IF_ERROR(CheckAttentionShape("heatmap attention", attentions,
                                                block.layers->size(), block.heads->size(),
                                                aggregation, rows, columns));
  render::Heatmap heatmap;
  heatmap.row_labels = LabelsFrom(*block.row_tokens, block.query_start, rows);
  heatmap.column_labels = LabelsFrom(*block.column_tokens, block.key_start, columns);
  const size_t layers = attentions.shape[0];
  const size_t heads = attentions.shape[1];
  const size_t slice = static_cast<size_t>(rows * columns);
  for (size_t l = 0; l < layers; ++l) {
    for (size_t h = 0; h < heads; ++h) {
      render::HeatmapPanel panel;
      const auto begin = attentions.values.begin() + (l * heads + h) * slice;
      panel.values.assign(begin, begin + slice);
      // A decoder-only model's self-attention; an encoder-decoder's answer draws cross-attention.
      if (info != nullptr && info->is_causal() && !result.decoder.has_value()) {
        const int32_t layer_index = (*block.layers)[l];
        const int64_t window = result.words.empty() && layer_index >= 0 &&
                                       layer_index < info->layer_sliding_windows_size()
                                   ? info->layer_sliding_windows(layer_index)
                                   : 0;
        panel.masked.resize(slice);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < columns; ++c) {
            const int64_t query = block.query_start + r;
            const int64_t key = block.key_start + c;
            panel.masked[r * columns + c] = key > query || (window > 0 && query - key >= window);
          }
        }
      }
      const std::string layer = absl::StrCat("layer ", (*block.layers)[l]);
      const std::string head = HeadName(*block.heads, aggregation, h);
      if (layers > 1 && heads > 1) {
        panel.title = absl::StrCat(layer, ", ", head);
      } else if (layers > 1) {
        panel.title = layer;
      } else if (heads > 1) {
        panel.title = head;
      }
      heatmap.panels.push_back(std::move(panel));
    }
  }
  const std::string model =
      block.name.empty() ? result.model : absl::StrCat(result.model, " ", block.name);
  const std::string layer = absl::StrCat("layer ", block.layers->empty() ? 0 : (*block.layers)[0]);
  const std::string head = HeadName(*block.heads, aggregation, 0);
  if (layers == 1 && heads == 1) {
    heatmap.title = absl::StrCat(model, ": ", layer, ", ", head);
  } else if (layers == 1) {
    heatmap.title = absl::StrCat(model, ": ", layer);
  } else if (heads == 1) {
    heatmap.title = absl::StrCat(model, ": ", head);
  } else {
    heatmap.title = model;
    // One figure row per layer, one column per head, as bertviz's model view.
    heatmap.panel_columns = static_cast<int>(heads);
  }
  return heatmap;
}

std::string TopAttendedLines(const std::vector<std::string>& row_labels,
                             const std::vector<std::string>& column_labels,
                             absl::Span<const float> weights, int top) {
  const size_t columns = column_labels.size();
  std::vector<std::vector<Entry>> rows;
  for (size_t r = 0; r < row_labels.size(); ++r) {
    rows.push_back(TopEntries(column_labels, weights.subspan(r * columns, columns), top));
  }
  return FormatRows(row_labels, rows);
}

namespace {

// AttentionText's lines for one block, appended to `out`.
absl::Status AppendBlockText(const BlockView& block, v1::HeadAggregation aggregation, int top,
                             std::string& out) {
  const DecodedTensor& attentions = *block.attentions;
  const int64_t row_tokens = block.row_tokens->tokens_size();
  const int64_t column_tokens = block.column_tokens->tokens_size();
  if (attentions.shape.size() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention text: expected attention [layer, head, query_token, key_token], got ",
        attentions.shape.size(), " dimensions"));
  }
  const int64_t rows = attentions.shape[2];
  const int64_t columns = attentions.shape[3];
  const bool sparse = block.top_k_indices->has_value();
  const int64_t keys = sparse ? column_tokens - block.key_start : columns;
  if (block.query_start + rows > row_tokens || block.key_start + keys > column_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention text: expected the window within the ", row_tokens, " x ",
                     column_tokens, " tokens, got queries from ", block.query_start, " x ", rows,
                     " and keys from ", block.key_start, " x ", keys));
  }
  ATTNSCOPE_RETURN_IF_ERROR(CheckAttentionShape("attention text", attentions, block.layers->size(),
                                                block.heads->size(), aggregation, rows, columns));
  if (sparse && (*block.top_k_indices)->shape != attentions.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention text: expected top_k_indices of shape [", absl::StrJoin(attentions.shape, ", "),
        "], got [", absl::StrJoin((*block.top_k_indices)->shape, ", "), "]"));
  }
  const std::vector<std::string> row_labels =
      LabelsFrom(*block.row_tokens, block.query_start, rows);
  const std::vector<std::string> column_labels =
      LabelsFrom(*block.column_tokens, block.key_start, columns);
  const size_t layers = attentions.shape[0];
  const size_t heads = attentions.shape[1];
  const size_t slice = static_cast<size_t>(rows * columns);
  for (size_t l = 0; l < layers; ++l) {
    for (size_t h = 0; h < heads; ++h) {
      if (!out.empty()) out += "\n";
      if (!block.name.empty()) absl::StrAppend(&out, block.name, ", ");
      absl::StrAppend(&out, "layer ", (*block.layers)[l], ", ",
                      HeadName(*block.heads, aggregation, h), ":\n");
      const size_t offset = (l * heads + h) * slice;
      const absl::Span<const float> weights(attentions.values.data() + offset, slice);
      if (!sparse) {
        absl::StrAppend(&out, TopAttendedLines(row_labels, column_labels, weights, top));
        continue;
      }
      // A top_k answer: each row's entries are already its k largest, in order.
      std::vector<std::vector<Entry>> entries(rows);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < std::min<int64_t>(columns, std::max(top, 1)); ++i) {
          const size_t at = offset + r * columns + i;
          const int32_t key = (*block.top_k_indices)->int_values[at];
          if (key < 0 || key >= column_tokens) {
            return absl::InvalidArgumentError(absl::StrCat(
                "attention text: expected top_k_indices in [0, ", column_tokens, "), got ", key));
          }
          if (attentions.values[at] == 0.0f) continue;  // a key the row could not see
          entries[r].emplace_back(TokenLabel(*block.column_tokens, key), attentions.values[at]);
        }
      }
      absl::StrAppend(&out, FormatRows(row_labels, entries));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> AttentionText(const AttentionResult& result,
                                          v1::HeadAggregation aggregation, int top) {
  std::string out;
  for (const BlockView& block : BlocksOf(result)) {
    ATTNSCOPE_RETURN_IF_ERROR(AppendBlockText(block, aggregation, top, out));
  }
  if (result.rollout.has_value()) {
    const int64_t tokens = result.tokens.tokens_size();
    const int64_t rows = result.attentions.shape[2];
    const DecodedTensor& rollout = *result.rollout;
    if (rollout.shape.size() != 2 || rollout.shape[0] != rows ||
        result.key_start + rollout.shape[1] > tokens) {
      return absl::InvalidArgumentError(absl::StrCat("attention text: expected rollout [", rows,
                                                     ", key_token], got [",
                                                     absl::StrJoin(rollout.shape, ", "), "]"));
    }
    absl::StrAppend(&out, "\nrollout:\n",
                    TopAttendedLines(LabelsFrom(result.tokens, result.query_start, rows),
                                     LabelsFrom(result.tokens, result.key_start, rollout.shape[1]),
                                     rollout.values, top));
  }
  return out;
}

absl::StatusOr<std::string> CrossAttentionText(const CrossAttentionResult& result,
                                               v1::HeadAggregation aggregation, int top) {
  std::string out;
  for (size_t d = 0; d < result.documents.size(); ++d) {
    const DocumentAttentionResult& document = result.documents[d];
    const int tokens = document.tokens.tokens_size();
    for (const std::vector<int32_t>* positions :
         {&document.query_positions, &document.document_positions}) {
      for (int32_t position : *positions) {
        if (position < 0 || position >= tokens) {
          return absl::InvalidArgumentError(absl::StrCat("cross text: document ", d,
                                                         ": expected positions in [0, ", tokens,
                                                         "), got ", position));
        }
      }
    }
    const std::vector<std::string> query = LabelsAt(document.tokens, document.query_positions);
    const std::vector<std::string> text = LabelsAt(document.tokens, document.document_positions);
    if (d > 0) out += "\n";
    absl::StrAppend(&out, "document ", d);
    if (document.relevance_score.has_value()) {
      absl::StrAppend(&out, absl::StrFormat(": relevance %.4g", *document.relevance_score));
    }
    if (document.query_truncated) {
      absl::StrAppend(&out, " (query cut to its first ", query.size(), " tokens)");
    }
    if (document.document_truncated) {
      absl::StrAppend(&out, " (document cut to its first ", text.size(), " tokens)");
    }
    out += "\n";
    struct Block {
      const DecodedTensor* tensor;
      const std::vector<std::string>* rows;
      const std::vector<std::string>* columns;
      const char* direction;
    };
    std::vector<Block> blocks = {{&document.query_to_document, &query, &text, "query -> document"}};
    if (document.document_to_query.has_value()) {
      blocks.push_back({&*document.document_to_query, &text, &query, "document -> query"});
    }
    bool first_block = true;
    for (const Block& block : blocks) {
      const int64_t rows = block.rows->size();
      const int64_t columns = block.columns->size();
      ATTNSCOPE_RETURN_IF_ERROR(CheckAttentionShape(
          absl::StrCat("cross text: document ", d, " ", block.direction), *block.tensor,
          result.layers.size(), result.heads.size(), aggregation, rows, columns));
      const size_t layers = block.tensor->shape[0];
      const size_t heads = block.tensor->shape[1];
      const size_t slice = static_cast<size_t>(rows * columns);
      for (size_t l = 0; l < layers; ++l) {
        for (size_t h = 0; h < heads; ++h) {
          if (!first_block) out += "\n";
          first_block = false;
          absl::StrAppend(&out, "layer ", result.layers[l], ", ",
                          HeadName(result.heads, aggregation, h), ", ", block.direction, ":\n");
          const absl::Span<const float> weights(
              block.tensor->values.data() + (l * heads + h) * slice, slice);
          absl::StrAppend(&out, TopAttendedLines(*block.rows, *block.columns, weights, top));
        }
      }
    }
  }
  return out;
}

absl::StatusOr<std::string> AttributionText(const v1::AttributeResponse& response) {
  struct Method {
    const char* name;
    const google::protobuf::RepeatedField<float>* tokens;
    // The word sum, when the word has one.
    std::optional<float> (*word)(const v1::WordAttribution&);
  };
  // In the order of the sort key: integrated gradients first, the method of record.
  const std::vector<Method> all = {
      {"integrated_gradients", &response.integrated_gradients(),
       [](const v1::WordAttribution& w) {
         return w.has_integrated_gradients() ? std::optional<float>(w.integrated_gradients())
                                             : std::nullopt;
       }},
      {"occlusion", &response.occlusion(),
       [](const v1::WordAttribution& w) {
         return w.has_occlusion() ? std::optional<float>(w.occlusion()) : std::nullopt;
       }},
      {"gradient_x_input", &response.gradient_x_input(),
       [](const v1::WordAttribution& w) {
         return w.has_gradient_x_input() ? std::optional<float>(w.gradient_x_input())
                                         : std::nullopt;
       }},
  };
  const int tokens = response.tokens().tokens_size();
  std::vector<Method> methods;
  for (const Method& method : all) {
    if (method.tokens->empty()) continue;
    if (method.tokens->size() != tokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribution text: expected ", tokens, " values of ", method.name,
                       ", one per token, got ", method.tokens->size()));
    }
    methods.push_back(method);
  }
  // Rows of labels and values (nullopt: no value) under a header, labels padded to one width and
  // each method's column as wide as its name.
  using Rows = std::vector<std::pair<std::string, std::vector<std::optional<float>>>>;
  auto table = [&methods](const std::string& label_header, const Rows& rows) {
    int width = DisplayWidth(label_header);
    for (const auto& row : rows) width = std::max(width, DisplayWidth(row.first));
    auto pad = [width](const std::string& label) {
      return label + std::string(width - DisplayWidth(label), ' ');
    };
    auto column = [](const Method& method) {
      return std::max<int>(10, static_cast<int>(std::strlen(method.name)));
    };
    std::string out = absl::StrCat("  ", pad(label_header));
    for (const Method& method : methods) {
      absl::StrAppend(&out, absl::StrFormat("  %*s", column(method), method.name));
    }
    out += "\n";
    for (const auto& [label, values] : rows) {
      absl::StrAppend(&out, "  ", pad(label));
      for (size_t m = 0; m < methods.size(); ++m) {
        absl::StrAppend(&out, "  ",
                        values[m].has_value()
                            ? absl::StrFormat("%*.4f", column(methods[m]), *values[m])
                            : absl::StrFormat("%*s", column(methods[m]), "-"));
      }
      out += "\n";
    }
    return out;
  };

  std::string out = absl::StrFormat("score %.4f (model %s, target %d", response.score(),
                                    response.model(), response.target());
  if (!response.target_label().empty()) {
    absl::StrAppend(&out, " \"", response.target_label(), "\"");
  }
  out += ")\n";
  if (response.has_convergence_delta()) {
    const double difference = response.score() - response.baseline_score();
    absl::StrAppend(
        &out, absl::StrFormat("baseline score %.4f (score - baseline score %+.4f); integrated "
                              "gradients over %d steps, convergence delta %+.2g",
                              response.baseline_score(), difference,
                              response.integrated_gradients_steps(), response.convergence_delta()));
    if (difference != 0) {
      absl::StrAppend(
          &out,
          absl::StrFormat(" (%.2f%%)", 100 * std::abs(response.convergence_delta() / difference)));
    }
    out += "\n";
  }
  if (methods.empty()) return out;
  for (const int sequence : {1, 0}) {
    std::vector<const v1::WordAttribution*> words;
    for (const v1::WordAttribution& word : response.words()) {
      if (word.sequence_id() == sequence) words.push_back(&word);
    }
    if (words.empty()) continue;
    const Method& key = methods.front();
    std::stable_sort(words.begin(), words.end(),
                     [&key](const v1::WordAttribution* a, const v1::WordAttribution* b) {
                       return key.word(*a).value_or(0) > key.word(*b).value_or(0);
                     });
    Rows rows;
    for (const v1::WordAttribution* word : words) {
      auto& row = rows.emplace_back(word->text(), std::vector<std::optional<float>>());
      for (const Method& method : methods) row.second.push_back(method.word(*word));
    }
    absl::StrAppend(&out, "\nwords of ", sequence == 1 ? "text_pair" : "text", ", highest ",
                    key.name, " first:\n", table("word", rows));
  }
  Rows rows;
  for (int i = 0; i < tokens; ++i) {
    auto& row =
        rows.emplace_back(TokenLabel(response.tokens(), i), std::vector<std::optional<float>>());
    for (const Method& method : methods) row.second.push_back(method.tokens->Get(i));
  }
  absl::StrAppend(&out, "\ntokens in order:\n", table("token", rows));
  return out;
}

}  // namespace attnscope

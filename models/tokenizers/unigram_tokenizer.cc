#include "models/tokenizers/unigram_tokenizer.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "models/tokenizers/tokenizer_json.h"
#include "models/tokenizers/unicode.h"

namespace attnscope {
namespace {

using json = nlohmann::json;
using tokenizer_json::FieldError;
using tokenizer_json::GetBool;
using tokenizer_json::Unsupported;
using tokenizer_json::UnsupportedValue;

// The library's penalty of an unknown character below the lowest piece score.
constexpr double kUnkPenalty = 10.0;

}  // namespace

absl::StatusOr<std::unique_ptr<UnigramTokenizer>> UnigramTokenizer::FromTokenizerJson(
    const json& root, const std::string& path, int64_t model_max_length,
    const std::string& pad_token) {
  const json model = root.value("model", json());
  const json type = model.is_object() ? model.value("type", json()) : model;
  if (type != "Unigram") {
    return Unsupported(path, "model", type,
                       "Unigram (here), WordPiece, BPE, WordLevel (LoadTokenizer)");
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(const bool byte_fallback,
                             GetBool(model, "byte_fallback", false, path, "model.byte_fallback"));
  const json& vocab = model.value("vocab", json());
  if (!vocab.is_array() || vocab.empty()) {
    return FieldError(path, "model.vocab", "a non-empty array of [piece, score]", vocab);
  }
  const json unk = model.value("unk_id", json());
  if (unk.is_null()) {
    return UnsupportedValue(path, "model.unk_id", unk,
                            "an id of model.vocab (without one the library cannot encode a "
                            "character no piece covers)");
  }
  if (!unk.is_number_integer() || unk.get<int64_t>() < 0 ||
      unk.get<int64_t>() >= static_cast<int64_t>(vocab.size())) {
    return FieldError(path, "model.unk_id", absl::StrCat("an id in [0, ", vocab.size(), ")"), unk);
  }

  std::vector<std::string> id_to_token;
  id_to_token.reserve(vocab.size());
  std::vector<double> scores;
  scores.reserve(vocab.size());
  for (size_t i = 0; i < vocab.size(); ++i) {
    const json& entry = vocab[i];
    if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_number()) {
      return FieldError(path, absl::StrCat("model.vocab[", i, "]"), "[piece, score]", entry);
    }
    id_to_token.push_back(entry[0].get<std::string>());
    scores.push_back(entry[1].get<double>());
  }

  // The trie, built over the pieces in byte order: each node's edges are appended together, so
  // they are contiguous and sorted. Among equal pieces the last id wins, as in the library's map.
  std::vector<uint32_t> order(id_to_token.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return id_to_token[a] < id_to_token[b]; });
  std::vector<TrieNode> nodes(1);
  std::vector<TrieEdge> edges;
  struct Pending {
    uint32_t node;
    size_t begin;
    size_t end;
    size_t depth;
  };
  std::vector<Pending> pending = {{0, 0, order.size(), 0}};
  while (!pending.empty()) {
    const Pending range = pending.back();
    pending.pop_back();
    size_t k = range.begin;
    for (; k < range.end && id_to_token[order[k]].size() == range.depth; ++k) {
      nodes[range.node].id = order[k];
    }
    nodes[range.node].edges_begin = static_cast<uint32_t>(edges.size());
    while (k < range.end) {
      const unsigned char byte = id_to_token[order[k]][range.depth];
      size_t group_end = k;
      while (group_end < range.end &&
             static_cast<unsigned char>(id_to_token[order[group_end]][range.depth]) == byte) {
        ++group_end;
      }
      const auto child = static_cast<uint32_t>(nodes.size());
      nodes.emplace_back();
      edges.push_back({byte, child});
      pending.push_back({child, k, group_end, range.depth + 1});
      k = group_end;
    }
    nodes[range.node].edges_end = static_cast<uint32_t>(edges.size());
  }

  Pipeline pipeline;
  PostProcessorTemplate post_processor;
  const json added_tokens = root.value("added_tokens", json::array());
  const auto id_limit =
      static_cast<int64_t>(vocab.size() + (added_tokens.is_array() ? added_tokens.size() : 0));
  ATTNSCOPE_RETURN_IF_ERROR(
      ReadComponents(root, path, id_limit, &id_to_token, &pipeline, &post_processor));
  const int64_t pad_id = PadId(id_to_token, pad_token);
  return std::unique_ptr<UnigramTokenizer>(
      new UnigramTokenizer(std::move(id_to_token), std::move(scores), std::move(nodes),
                           std::move(edges), unk.get<int64_t>(), byte_fallback, std::move(pipeline),
                           std::move(post_processor), pad_id, model_max_length));
}

UnigramTokenizer::UnigramTokenizer(std::vector<std::string> id_to_token, std::vector<double> scores,
                                   std::vector<TrieNode> nodes, std::vector<TrieEdge> edges,
                                   int64_t unk_id, bool byte_fallback, Pipeline pipeline,
                                   PostProcessorTemplate post_processor, int64_t pad_token_id,
                                   int64_t model_max_length)
    : PipelineTokenizer(std::move(id_to_token), std::move(pipeline), std::move(post_processor),
                        pad_token_id, model_max_length),
      scores_(std::move(scores)),
      nodes_(std::move(nodes)),
      edges_(std::move(edges)),
      unk_id_(unk_id),
      unk_score_(*std::min_element(scores_.begin(), scores_.end()) - kUnkPenalty) {
  byte_ids_.fill(-1);
  if (!byte_fallback) return;
  for (int b = 0; b < 256; ++b) byte_ids_[b] = PieceId(absl::StrFormat("<0x%02X>", b));
}

TokenizerNormalization UnigramTokenizer::normalization() const {
  TokenizerNormalization normalization = NormalizerFlags();
  std::string changes = std::move(normalization.description);
  if (changes.empty()) {
    changes = "text kept as written (case and accents kept)";
  } else if (changes == "Unicode NFKC") {
    changes =
        "SentencePiece's Unicode NFKC ('ﬁ' becomes 'fi', full-width letters half-width), case and "
        "accents kept";
  }
  normalization.description =
      absl::StrCat(changes, "; a space becomes '▁', shown at the start of the word after it");
  return normalization;
}

int64_t UnigramTokenizer::Child(uint32_t node, unsigned char byte) const {
  const auto begin = edges_.begin() + nodes_[node].edges_begin;
  const auto end = edges_.begin() + nodes_[node].edges_end;
  const auto it = std::lower_bound(
      begin, end, byte, [](const TrieEdge& edge, unsigned char b) { return edge.byte < b; });
  if (it == end || it->byte != byte) return -1;
  return it->child;
}

int64_t UnigramTokenizer::PieceId(std::string_view text) const {
  int64_t node = 0;
  for (const char c : text) {
    node = Child(static_cast<uint32_t>(node), static_cast<unsigned char>(c));
    if (node < 0) return -1;
  }
  return nodes_[node].id;
}

void UnigramTokenizer::TokenizeWord(const std::vector<NormChar>& chars, int64_t word_index,
                                    TokenizedText* out,
                                    std::vector<std::pair<int32_t, int32_t>>* edges) const {
  std::string sentence;
  // The character each byte belongs to.
  std::vector<int64_t> char_of_byte;
  for (size_t k = 0; k < chars.size(); ++k) {
    unicode::AppendUtf8(chars[k].c, &sentence);
    char_of_byte.resize(sentence.size(), static_cast<int64_t>(k));
  }
  const size_t size = sentence.size();
  if (size == 0) return;

  // The best path ending at each byte position: its score, where its last token starts (-1: none
  // yet) and that token's id.
  struct Best {
    double score = 0.0;
    int64_t start = -1;
    int64_t id = 0;
  };
  std::vector<Best> best(size + 1);
  const auto offer = [&](size_t end, size_t start, double score, int64_t id) {
    Best& target = best[end];
    // Strictly better only: the path found first keeps a tie.
    if (target.start < 0 || score > target.score) target = {score, static_cast<int64_t>(start), id};
  };
  for (size_t start = 0; start < size;) {
    const double score_here = best[start].score;
    size_t char_bytes = 1;
    while (start + char_bytes < size && char_of_byte[start + char_bytes] == char_of_byte[start]) {
      ++char_bytes;
    }
    bool has_single_char_piece = false;
    int64_t node = 0;
    for (size_t end = start; end < size;) {
      node = Child(static_cast<uint32_t>(node), static_cast<unsigned char>(sentence[end]));
      if (node < 0) break;
      ++end;
      const int64_t id = nodes_[node].id;
      if (id < 0) continue;
      offer(end, start, scores_[id] + score_here, id);
      if (end - start == char_bytes) has_single_char_piece = true;
    }
    if (!has_single_char_piece) offer(start + char_bytes, start, unk_score_ + score_here, unk_id_);
    start += char_bytes;
  }

  // Back from the end; consecutive unk tokens are fused into one.
  std::vector<std::pair<size_t, size_t>> spans;  // [start, end) in bytes, last token first
  bool previous_unk = false;
  for (size_t end = size; end > 0;) {
    const Best& node = best[end];
    const auto start = static_cast<size_t>(node.start);
    const bool is_unk = node.id == unk_id_;
    if (is_unk && previous_unk) {
      spans.back().first = start;
    } else {
      spans.push_back({start, end});
    }
    previous_unk = is_unk;
    end = start;
  }
  for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
    const auto [start, end] = *it;
    std::string token = sentence.substr(start, end - start);
    const int64_t id = PieceId(token);
    const int64_t first = chars[char_of_byte[start]].start;
    const int64_t last = chars[char_of_byte[end - 1]].end;
    if (id < 0 && std::all_of(token.begin(), token.end(), [&](char byte) {
          return byte_ids_[static_cast<unsigned char>(byte)] >= 0;
        })) {
      for (unsigned char byte : token) {
        const int64_t byte_id = byte_ids_[byte];
        Emit(byte_id, id_to_token()[byte_id], first, last, word_index, out, edges);
      }
      continue;
    }
    Emit(id >= 0 ? id : unk_id_, std::move(token), first, last, word_index, out, edges);
  }
}

}  // namespace attnscope

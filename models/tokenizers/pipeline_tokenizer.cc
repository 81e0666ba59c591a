#include "models/tokenizers/pipeline_tokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "common/status_macros.h"
#include "models/tokenizers/pipeline_chars.h"

namespace attnscope {
namespace {

constexpr char32_t kSpaceChar = 0x120;  // "Ġ", the table's character for ' '.

// Leading and trailing characters byte_level.rs process_offsets trims: "Ġ" or whitespace.
std::pair<int32_t, int32_t> EdgeSpaces(const std::string& token) {
  absl::StatusOr<unicode::DecodedText> decoded = unicode::DecodeUtf8(token);
  if (!decoded.ok()) return {0, 0};
  const auto is_space = [](char32_t c) { return c == kSpaceChar || unicode::IsWhiteSpace(c); };
  const std::vector<char32_t>& cps = decoded->code_points;
  const int32_t leading =
      static_cast<int32_t>(std::find_if_not(cps.begin(), cps.end(), is_space) - cps.begin());
  const int32_t trailing =
      static_cast<int32_t>(std::find_if_not(cps.rbegin(), cps.rend(), is_space) - cps.rbegin());
  return {leading, trailing};
}

}  // namespace

const std::array<char32_t, 256>& PipelineTokenizer::ByteChars() {
  return pipeline_chars::ByteLevelChars();
}

int64_t PipelineTokenizer::PadId(const std::vector<std::string>& id_to_token,
                                 const std::string& pad_token) {
  if (pad_token.empty()) return 0;
  const auto it = std::find(id_to_token.begin(), id_to_token.end(), pad_token);
  return it != id_to_token.end() ? it - id_to_token.begin() : 0;
}

PipelineTokenizer::PipelineTokenizer(std::vector<std::string> id_to_token, Pipeline pipeline,
                                     PostProcessorTemplate post_processor, int64_t pad_token_id,
                                     int64_t model_max_length)
    : Tokenizer(std::move(post_processor), pad_token_id, model_max_length),
      id_to_token_(std::move(id_to_token)),
      pipeline_(std::move(pipeline)),
      is_special_id_(id_to_token_.size(), false) {
  for (std::vector<std::vector<int32_t>>& table : added_by_first_byte_) table.resize(256);
  for (size_t k = 0; k < pipeline_.added_tokens.size(); ++k) {
    const AddedToken& added = pipeline_.added_tokens[k];
    if (added.special) is_special_id_[added.id] = true;
    if (added.content.empty()) continue;
    if (added.normalized) has_normalized_added_ = true;
    added_by_first_byte_[added.normalized ? 1 : 0][static_cast<unsigned char>(added.content[0])]
        .push_back(static_cast<int32_t>(k));
  }
  for (std::vector<std::vector<int32_t>>& table : added_by_first_byte_) {
    for (std::vector<int32_t>& candidates : table) {
      std::stable_sort(candidates.begin(), candidates.end(), [&](int32_t a, int32_t b) {
        return pipeline_.added_tokens[a].content.size() > pipeline_.added_tokens[b].content.size();
      });
    }
  }
  edge_spaces_.reserve(id_to_token_.size());
  for (const std::string& token : id_to_token_) edge_spaces_.push_back(EdgeSpaces(token));
}

std::string PipelineTokenizer::IdToToken(int64_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return id_to_token_[id];
}

absl::StatusOr<TokenizedText> PipelineTokenizer::Tokenize(std::string_view text) const {
  ATTNSCOPE_ASSIGN_OR_RETURN(unicode::DecodedText decoded, unicode::DecodeUtf8(text));
  TokenizedText out;
  std::vector<std::pair<int32_t, int32_t>> edges;
  int64_t word_index = 0;
  for (const Segment& segment : FindAddedTokens(text, decoded, /*normalized=*/false)) {
    if (segment.added < 0) {
      ATTNSCOPE_RETURN_IF_ERROR(
          TokenizeStretch(decoded, segment.begin, segment.end, &word_index, &out, &edges));
      continue;
    }
    // The token is the text matched, stripped whitespace included (`tokenizers` shows " <mask>"),
    // and trim_offsets cuts that whitespace from its offsets.
    std::string matched(
        text.substr(decoded.ByteOffset(segment.begin),
                    decoded.ByteOffset(segment.end) - decoded.ByteOffset(segment.begin)));
    edges.push_back(EdgeSpaces(matched));
    out.ids.push_back(pipeline_.added_tokens[segment.added].id);
    out.tokens.push_back(std::move(matched));
    out.offsets.push_back({segment.begin, segment.end});
    out.word_ids.push_back(word_index++);
  }
  FinishOffsets(decoded, edges, &out);
  return out;
}

absl::Status PipelineTokenizer::TokenizeStretch(
    const unicode::DecodedText& decoded, int64_t begin, int64_t end, int64_t* word_index,
    TokenizedText* out, std::vector<std::pair<int32_t, int32_t>>* edges) const {
  std::vector<NormChar> chars;
  chars.reserve(end - begin);
  for (int64_t k = begin; k < end; ++k) chars.push_back({decoded.code_points[k], k, k + 1});
  ATTNSCOPE_ASSIGN_OR_RETURN(chars, Normalize(pipeline_.normalizer, std::move(chars)));
  if (chars.empty()) return absl::OkStatus();

  // Each stretch to pre-tokenize, and whether it starts the text (Metaspace's prepend_scheme
  // "first" asks the library's split for its original offset 0).
  std::vector<std::pair<std::vector<NormChar>, bool>> stretches;
  const auto flush = [&]() -> absl::Status {
    for (auto& [stretch, starts_text] : stretches) {
      ATTNSCOPE_ASSIGN_OR_RETURN(const std::vector<std::vector<NormChar>> pieces,
                                 PreTokenize(std::move(stretch), starts_text));
      for (const std::vector<NormChar>& piece : pieces) {
        TokenizeWord(piece, (*word_index)++, out, edges);
      }
    }
    stretches.clear();
    return absl::OkStatus();
  };
  if (!has_normalized_added_) {
    stretches.push_back({std::move(chars), begin == 0});
    return flush();
  }
  std::string normalized;
  for (const NormChar& c : chars) unicode::AppendUtf8(c.c, &normalized);
  absl::StatusOr<unicode::DecodedText> normalized_decoded = unicode::DecodeUtf8(normalized);
  for (const Segment& segment :
       FindAddedTokens(normalized, *normalized_decoded, /*normalized=*/true)) {
    if (segment.added < 0) {
      stretches.push_back(
          {std::vector<NormChar>(chars.begin() + segment.begin, chars.begin() + segment.end),
           begin == 0 && segment.begin == 0});
      continue;
    }
    // The stretches before it, then the token itself.
    ATTNSCOPE_RETURN_IF_ERROR(flush());
    int64_t start = chars[segment.begin].start;
    int64_t stop = chars[segment.begin].end;
    for (int64_t k = segment.begin; k < segment.end; ++k) {
      start = std::min(start, chars[k].start);
      stop = std::max(stop, chars[k].end);
    }
    std::string matched = normalized.substr(normalized_decoded->ByteOffset(segment.begin),
                                            normalized_decoded->ByteOffset(segment.end) -
                                                normalized_decoded->ByteOffset(segment.begin));
    edges->push_back(EdgeSpaces(matched));
    out->ids.push_back(pipeline_.added_tokens[segment.added].id);
    out->tokens.push_back(std::move(matched));
    out->offsets.push_back({start, stop});
    out->word_ids.push_back((*word_index)++);
  }
  return flush();
}

void PipelineTokenizer::Emit(int64_t id, std::string token, int64_t start, int64_t end,
                             int64_t word_index, TokenizedText* out,
                             std::vector<std::pair<int32_t, int32_t>>* edges) const {
  // A token is its id's but for Unigram's fused unknown characters, which are shown as written.
  edges->push_back(token == id_to_token_[id] ? edge_spaces_[id] : EdgeSpaces(token));
  out->ids.push_back(id);
  out->tokens.push_back(std::move(token));
  out->offsets.push_back({start, end});
  out->word_ids.push_back(word_index);
}

void PipelineTokenizer::FinishOffsets(const unicode::DecodedText& decoded,
                                      const std::vector<std::pair<int32_t, int32_t>>& edges,
                                      TokenizedText* out) const {
  for (size_t k = 0; k < out->offsets.size(); ++k) {
    Offset& offset = out->offsets[k];
    if (pipeline_.trim_offsets) {
      // byte_level.rs process_offsets.
      auto [leading, trailing] = edges[k];
      const bool is_first = k == 0 || offset.start == 0;
      if (is_first && pipeline_.trim_add_prefix_space && leading == 1) leading = 0;
      if (leading > 0) offset.start = std::min(offset.start + leading, offset.end);
      if (trailing > 0 && offset.end >= trailing) {
        offset.end = std::max(offset.end - trailing, offset.start);
      }
    }
    out->byte_offsets.push_back({decoded.ByteOffset(offset.start), decoded.ByteOffset(offset.end)});
  }
}

}  // namespace attnscope

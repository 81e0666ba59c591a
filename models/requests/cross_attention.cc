// CrossAttention: a query against documents through a cross-encoder: relevance scores and the
// query/document attention of each pair.

#include "models/requests/cross_attention.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/requests/checks.h"
#include "models/requests/requests.h"

namespace attnscope {

using requests_internal::CheckHasTokens;
using requests_internal::CheckInputCount;
using requests_internal::CheckScoredWithSpecialTokens;
using requests_internal::CheckText;
using requests_internal::HeadsOut;
using requests_internal::OriginalTexts;
using requests_internal::PassGroups;
using requests_internal::SecondsSince;
using requests_internal::TooLarge;
using requests_internal::ToTextOptions;
using Clock = requests_internal::Clock;

absl::StatusOr<CrossAttentionAnswer> RequestRunner::RunCrossAttention(
    const CrossAttentionQuery& query, const CallCheck& check, absl::string_view client) const {
  CrossAttentionAnswer answer;
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.model, FindModel(query.model));
  const LoadedModel& model = *answer.model;
  const ModelConfig& config = model.config();
  // Decoder-only models see the document first so that the query, last, can attend to it.
  const bool causal = IsDecoderOnly(config.architecture);
  ATTNSCOPE_RETURN_IF_ERROR(CheckText(query.query, "query"));
  if (query.documents.empty()) {
    return absl::InvalidArgumentError(
        "documents: expected at least one document, got none; add `documents`");
  }
  ATTNSCOPE_RETURN_IF_ERROR(
      CheckInputCount(query.documents.size(), "documents", options_.max_inputs_per_request));
  if (causal && query.include_document_to_query) {
    return absl::InvalidArgumentError(absl::StrCat(
        "include_document_to_query: model '", model.name(),
        "' is causal, so the document (first) never attends to the query (after it); leave "
        "`include_document_to_query` false or use an encoder model"));
  }
  ATTNSCOPE_RETURN_IF_ERROR(CheckScoredWithSpecialTokens(model, query.tokenization));
  answer.dtype = query.dtype;
  ATTNSCOPE_ASSIGN_OR_RETURN(
      answer.layers, ResolveIndices(query.layers, config.num_hidden_layers, "layer", "layers"));
  ATTNSCOPE_ASSIGN_OR_RETURN(
      answer.heads, ResolveIndices(query.heads, config.num_attention_heads, "head", "heads"));

  const int64_t query_sequence = causal ? 1 : 0;
  // The query is tokenized once and paired with each document.
  ATTNSCOPE_ASSIGN_OR_RETURN(const TextOptions options,
                             ToTextOptions(query.tokenization, Truncation::kLongestFirst));
  ATTNSCOPE_ASSIGN_OR_RETURN(const TokenizedText query_tokens, model.Tokenize(query.query));
  ATTNSCOPE_RETURN_IF_ERROR(CheckHasTokens(query_tokens, "query"));
  std::vector<Encoding> encodings;
  int64_t cells = 0;
  for (size_t i = 0; i < query.documents.size(); ++i) {
    const std::string& document = query.documents[i];
    const std::string field = absl::StrCat("documents[", i, "]");
    ATTNSCOPE_RETURN_IF_ERROR(CheckText(document, field));
    const Clock::time_point start = Clock::now();
    ATTNSCOPE_ASSIGN_OR_RETURN(TokenizedText document_tokens, model.Tokenize(document));
    ATTNSCOPE_RETURN_IF_ERROR(CheckHasTokens(document_tokens, field));
    // A prefix (Tokenize stopped early on a text over the limit) is cut whatever Assemble keeps.
    const size_t document_token_count =
        document_tokens.is_prefix ? SIZE_MAX : document_tokens.ids.size();
    ATTNSCOPE_ASSIGN_OR_RETURN(
        Encoding encoding, causal
                               ? model.Assemble(std::move(document_tokens), query_tokens, options)
                               : model.Assemble(query_tokens, std::move(document_tokens), options));
    if (observer_ != nullptr) {
      observer_->OnTokenized(SecondsSince(start), static_cast<int64_t>(encoding.size()));
    }
    EncodedText tokens;
    tokens.original_texts = causal ? OriginalTexts(encoding, document, query.query)
                                   : OriginalTexts(encoding, query.query, document);
    tokens.encoding = std::move(encoding);
    DocumentAnswer& result = answer.documents.emplace_back();
    result.query_positions = PositionsOfSequence(tokens.encoding.sequence_ids, query_sequence);
    result.document_positions =
        PositionsOfSequence(tokens.encoding.sequence_ids, 1 - query_sequence);
    if (result.query_positions.empty() || result.document_positions.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": expected query and document tokens after truncation, got ",
          result.query_positions.size(), " query and ", result.document_positions.size(),
          " document tokens; raise `tokenization.max_length` or shorten the query"));
    }
    result.query_truncated =
        query_tokens.is_prefix || result.query_positions.size() < query_tokens.ids.size();
    result.document_truncated = result.document_positions.size() < document_token_count;
    cells += static_cast<int64_t>(result.query_positions.size() * result.document_positions.size());
    encodings.push_back(tokens.encoding);
    result.tokens = std::move(tokens);
  }
  int64_t token_passes = 0;
  for (const Encoding& encoding : encodings) token_passes += static_cast<int64_t>(encoding.size());
  ATTNSCOPE_RETURN_IF_ERROR(CheckWork("CrossAttention", token_passes,
                                      absl::StrCat(encodings.size(), " documents, one pass each"),
                                      "send fewer or shorter documents per call"));
  // Refuse before the forward pass: the blocks' size is known from the token counts.
  const int64_t blocks = static_cast<int64_t>(answer.layers.size()) *
                         HeadsOut(query.head_aggregation, answer.heads.size()) *
                         (query.include_document_to_query ? 2 : 1);
  const int64_t bytes = blocks * cells * BytesPerElement(answer.dtype);
  if (bytes > options_.max_response_bytes) {
    // Float16 is advised only to a call that does not use it already.
    return TooLarge("CrossAttention", bytes, options_.max_response_bytes,
                    answer.dtype == OutputDType::kFloat32
                        ? kCrossAttentionFixes
                        : "send fewer documents per call, request fewer layers or heads, or use "
                          "head_aggregation");
  }

  ForwardOptions forward;
  forward.output_logits = model.model().has_classifier();
  const int64_t map_bytes_per_square_token =
      config.num_hidden_layers * config.num_attention_heads * static_cast<int64_t>(sizeof(float));
  size_t first = 0;
  for (const size_t end : PassGroups(encodings, [&](int64_t documents, int64_t longest) {
         return documents * longest * longest * map_bytes_per_square_token <=
                options_.max_pass_attention_bytes;
       })) {
    std::vector<Encoding> group(std::make_move_iterator(encodings.begin() + first),
                                std::make_move_iterator(encodings.begin() + end));
    ATTNSCOPE_ASSIGN_OR_RETURN(BatchOutput batch,
                               batcher_.Run(model, std::move(group), forward, check, client));
    for (size_t b = first; b < end; ++b) {
      const int64_t row = static_cast<int64_t>(b - first);
      DocumentAnswer& result = answer.documents[b];
      const int64_t length = static_cast<int64_t>(result.tokens.encoding.size());
      for (const int64_t layer : answer.layers) {
        const torch::Tensor full = StripPadding(batch.forward.attentions[layer], row, length);
        ATTNSCOPE_ASSIGN_OR_RETURN(torch::Tensor block, AttentionBlock(full, result.query_positions,
                                                                       result.document_positions));
        ATTNSCOPE_ASSIGN_OR_RETURN(block,
                                   SelectHeads(block, answer.heads, query.head_aggregation, {}));
        // AttentionBlock copies, so the group's maps are freed with the batch.
        result.query_to_document.push_back(std::move(block));
        if (query.include_document_to_query) {
          ATTNSCOPE_ASSIGN_OR_RETURN(
              torch::Tensor reverse,
              AttentionBlock(full, result.document_positions, result.query_positions));
          ATTNSCOPE_ASSIGN_OR_RETURN(
              reverse, SelectHeads(reverse, answer.heads, query.head_aggregation, {}));
          result.document_to_query.push_back(std::move(reverse));
        }
      }
      if (batch.forward.logits.defined()) {
        const torch::Tensor logits = batch.forward.logits[row].contiguous();
        const float* values = logits.data_ptr<float>();
        result.logits.assign(values, values + logits.numel());
        if (!result.logits.empty()) result.relevance_score = result.logits.back();
      }
    }
    first = end;
  }
  return answer;
}

}  // namespace attnscope

// CrossAttention: the query and answer (RequestRunner::RunCrossAttention).
#ifndef ATTNSCOPE_MODELS_REQUESTS_CROSS_ATTENTION_H_
#define ATTNSCOPE_MODELS_REQUESTS_CROSS_ATTENTION_H_

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "models/attention_ops.h"
#include "models/requests/types.h"

namespace attnscope {

struct CrossAttentionQuery {
  std::string model;
  std::string query;
  std::vector<std::string> documents;
  // Truncation defaults to longest_first.
  TokenizationQuery tokenization;
  std::vector<int32_t> layers;
  std::vector<int32_t> heads;
  HeadAggregation head_aggregation = HeadAggregation::kNone;
  // Also the document-to-query block (encoders only).
  bool include_document_to_query = false;
  OutputDType dtype = OutputDType::kFloat32;
};

struct DocumentAnswer {
  // The joint input: [CLS] query [SEP] document [SEP] for encoders, <s> document <s> query for
  // decoder-only models.
  EncodedText tokens;
  // Positions of the query's and the document's text tokens in `tokens`.
  std::vector<int64_t> query_positions;
  std::vector<int64_t> document_positions;
  // One per selected layer: [head, query_token, document_token].
  std::vector<torch::Tensor> query_to_document;
  // One per selected layer: [head, document_token, query_token], when include_document_to_query.
  std::vector<torch::Tensor> document_to_query;
  // The classifier's logits [num_labels]; empty without a classifier head.
  std::vector<float> logits;
  // The single logit of a one-label classifier, or the last label's logit.
  std::optional<float> relevance_score;
  // Whether truncation cut the query's or the document's text tokens (the model read only the
  // first ones).
  bool query_truncated = false;
  bool document_truncated = false;
};

struct CrossAttentionAnswer {
  const LoadedModel* model = nullptr;
  std::vector<int64_t> layers;
  std::vector<int64_t> heads;
  OutputDType dtype = OutputDType::kFloat32;
  // One per document, in query order.
  std::vector<DocumentAnswer> documents;
};

// What shrinks an over-cap CrossAttention answer.
inline constexpr absl::string_view kCrossAttentionFixes =
    "send fewer documents per call, request fewer layers or heads, use head_aggregation, or dtype "
    "DTYPE_FLOAT16";

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_REQUESTS_CROSS_ATTENTION_H_

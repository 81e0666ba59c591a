#include "fuzz/request_checks.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_util.h"
#include "server/query_convert.h"

namespace attnscope::fuzz {
namespace {

// The contract's values of each enum that ToQuery must accept; everything else it must refuse.
bool ValidDtype(int value) { return value >= v1::DTYPE_UNSPECIFIED && value <= v1::DTYPE_BFLOAT16; }
bool ValidTruncation(const v1::TokenizationOptions& options) {
  return options.truncation() >= v1::TRUNCATION_UNSPECIFIED &&
         options.truncation() <= v1::TRUNCATION_ONLY_SECOND;
}
bool ValidAggregation(int value) {
  return value >= v1::HEAD_AGGREGATION_UNSPECIFIED && value <= v1::HEAD_AGGREGATION_MAX;
}
bool ValidPooling(int value) {
  return value >= v1::POOLING_UNSPECIFIED && value <= v1::POOLING_MEAN;
}
// Unspecified is not a method; the other two enums default to it.
bool ValidMethods(const google::protobuf::RepeatedField<int>& methods) {
  for (const int value : methods) {
    if (value < v1::ATTRIBUTION_METHOD_OCCLUSION ||
        value > v1::ATTRIBUTION_METHOD_INTEGRATED_GRADIENTS) {
      return false;
    }
  }
  return true;
}
bool ValidOcclusionToken(int value) {
  return value >= v1::OCCLUSION_TOKEN_UNSPECIFIED && value <= v1::OCCLUSION_TOKEN_UNK;
}
bool ValidDecodingMethod(int value) {
  return value >= v1::DECODING_METHOD_UNSPECIFIED && value <= v1::DECODING_METHOD_SAMPLING;
}
bool ValidBaseline(int value) {
  return value >= v1::ATTRIBUTION_BASELINE_UNSPECIFIED && value <= v1::ATTRIBUTION_BASELINE_ZERO;
}

// Whether a Generate request has a count of beams (not negative) and sets only options of the
// method it runs (an unspecified method runs beam search with more than one beam, else greedy
// search): ToQuery refuses the others.
bool OptionsFitTheMethod(const v1::GenerateRequest& request) {
  if (request.num_beams() < 0) return false;
  int method = request.method();
  if (method == v1::DECODING_METHOD_UNSPECIFIED) {
    method = request.num_beams() > 1 ? v1::DECODING_METHOD_BEAM_SEARCH : v1::DECODING_METHOD_GREEDY;
  }
  const bool beam_options = request.num_beams() > 1 || request.has_length_penalty();
  const bool sampling_options = request.has_temperature() || request.top_k() != 0 ||
                                request.has_top_p() || request.seed() != 0;
  return (!beam_options || method == v1::DECODING_METHOD_BEAM_SEARCH) &&
         (!sampling_options || method == v1::DECODING_METHOD_SAMPLING);
}

// Whether ToQuery accepted exactly the requests it should, and refused the others with
// InvalidArgument.
template <typename Query>
bool Accepted(const absl::StatusOr<Query>& query, bool valid, const char* type) {
  ATTNSCOPE_FUZZ_CHECK(query.ok() == valid,
                       absl::StrCat(type, ": ToQuery answered ", query.status().ToString(),
                                    valid ? " for a request inside the contract"
                                          : " for a request outside the contract"));
  ATTNSCOPE_FUZZ_CHECK(
      valid || query.status().code() == absl::StatusCode::kInvalidArgument,
      absl::StrCat(type, ": expected InvalidArgument, got ", query.status().ToString()));
  return query.ok();
}

template <typename Request>
void CheckText(const TextInput& input, const Request& request, const char* type) {
  ATTNSCOPE_FUZZ_CHECK(input.text == request.text(),
                       absl::StrCat(type, ": text changed on the way"));
  ATTNSCOPE_FUZZ_CHECK(input.text_pair.has_value() == request.has_text_pair() &&
                           input.text_pair.value_or("") == request.text_pair(),
                       absl::StrCat(type, ": text_pair changed on the way"));
}

void CheckTokenization(const TokenizationQuery& query, const v1::TokenizationOptions& options,
                       const char* type) {
  ATTNSCOPE_FUZZ_CHECK(
      query.max_length == options.max_length() &&
          query.skip_special_tokens == options.skip_special_tokens() &&
          query.truncation.has_value() == (options.truncation() != v1::TRUNCATION_UNSPECIFIED),
      absl::StrCat(type, ": tokenization options changed on the way"));
}

template <typename Indices>
bool SameIndices(const std::vector<int32_t>& query, const Indices& request) {
  return std::vector<int32_t>(request.begin(), request.end()) == query;
}

}  // namespace

void CheckToQuery(const v1::TokenizeRequest& request) {
  const auto query = server::ToQuery(request);
  if (!Accepted(query, ValidTruncation(request.tokenization()), "TokenizeRequest")) return;
  ATTNSCOPE_FUZZ_CHECK(query->model == request.model(),
                       "TokenizeRequest: model changed on the way");
  CheckText(query->input, request, "TokenizeRequest");
  CheckTokenization(query->tokenization, request.tokenization(), "TokenizeRequest");
}

void CheckToQuery(const v1::GetAttentionRequest& request) {
  const auto query = server::ToQuery(request);
  // A decoder_window windows the decoder, which runs only on a decoder_text.
  const bool valid = ValidTruncation(request.tokenization()) && ValidDtype(request.dtype()) &&
                     ValidAggregation(request.head_aggregation()) &&
                     (!request.has_decoder_window() || request.has_decoder_text());
  if (!Accepted(query, valid, "GetAttentionRequest")) return;
  ATTNSCOPE_FUZZ_CHECK(query->model == request.model(),
                       "GetAttentionRequest: model changed on the way");
  CheckText(query->input, request, "GetAttentionRequest");
  CheckTokenization(query->tokenization, request.tokenization(), "GetAttentionRequest");
  ATTNSCOPE_FUZZ_CHECK(
      SameIndices(query->layers, request.layers()) && SameIndices(query->heads, request.heads()),
      "GetAttentionRequest: layers or heads changed on the way");
  const v1::Window& window = request.window();
  ATTNSCOPE_FUZZ_CHECK(query->top_k == request.top_k() && query->rollout == request.rollout() &&
                           query->include_scores == request.include_scores() &&
                           query->aggregate_words == request.aggregate_words() &&
                           query->window.query_start == window.query_start() &&
                           query->window.query_end == window.query_end() &&
                           query->window.key_start == window.key_start() &&
                           query->window.key_end == window.key_end(),
                       "GetAttentionRequest: options changed on the way");
}

void CheckToQuery(const v1::EncodeRequest& request) {
  const auto query = server::ToQuery(request);
  const bool valid = ValidTruncation(request.tokenization()) && ValidDtype(request.dtype()) &&
                     ValidPooling(request.pooling());
  if (!Accepted(query, valid, "EncodeRequest")) return;
  ATTNSCOPE_FUZZ_CHECK(query->model == request.model(), "EncodeRequest: model changed on the way");
  ATTNSCOPE_FUZZ_CHECK(query->inputs.size() == static_cast<size_t>(request.inputs_size()),
                       "EncodeRequest: inputs lost or added on the way");
  for (int i = 0; i < request.inputs_size(); ++i) {
    CheckText(query->inputs[i], request.inputs(i), "EncodeRequest.inputs");
  }
  CheckTokenization(query->tokenization, request.tokenization(), "EncodeRequest");
  ATTNSCOPE_FUZZ_CHECK(query->normalize == request.normalize() &&
                           query->output_hidden_states == request.output_hidden_states(),
                       "EncodeRequest: options changed on the way");
}

void CheckToQuery(const v1::CrossAttentionRequest& request) {
  const auto query = server::ToQuery(request);
  const bool valid = ValidTruncation(request.tokenization()) && ValidDtype(request.dtype()) &&
                     ValidAggregation(request.head_aggregation());
  if (!Accepted(query, valid, "CrossAttentionRequest")) return;
  ATTNSCOPE_FUZZ_CHECK(query->model == request.model() && query->query == request.query(),
                       "CrossAttentionRequest: model or query changed on the way");
  ATTNSCOPE_FUZZ_CHECK(std::vector<std::string>(request.documents().begin(),
                                                request.documents().end()) == query->documents,
                       "CrossAttentionRequest: documents changed on the way");
  CheckTokenization(query->tokenization, request.tokenization(), "CrossAttentionRequest");
  ATTNSCOPE_FUZZ_CHECK(SameIndices(query->layers, request.layers()) &&
                           SameIndices(query->heads, request.heads()) &&
                           query->include_document_to_query == request.include_document_to_query(),
                       "CrossAttentionRequest: options changed on the way");
}

void CheckToQuery(const v1::GetParameterRequest& request) {
  const auto query = server::ToQuery(request);
  if (!Accepted(query, ValidDtype(request.dtype()), "GetParameterRequest")) return;
  ATTNSCOPE_FUZZ_CHECK(query->model == request.model() && query->name == request.name() &&
                           query->row_start == request.row_start() &&
                           query->row_end == request.row_end(),
                       "GetParameterRequest: fields changed on the way");
}

void CheckToQuery(const v1::AttributeRequest& request) {
  const auto query = server::ToQuery(request);
  const bool valid = ValidTruncation(request.tokenization()) && ValidMethods(request.methods()) &&
                     ValidOcclusionToken(request.occlusion_token()) &&
                     ValidBaseline(request.baseline());
  if (!Accepted(query, valid, "AttributeRequest")) return;
  ATTNSCOPE_FUZZ_CHECK(query->model == request.model(),
                       "AttributeRequest: model changed on the way");
  CheckText(query->input, request, "AttributeRequest");
  CheckTokenization(query->tokenization, request.tokenization(), "AttributeRequest");
  ATTNSCOPE_FUZZ_CHECK(
      query->target == request.target() &&
          query->integrated_gradients_steps == request.integrated_gradients_steps() &&
          query->methods.size() == static_cast<size_t>(request.methods_size()),
      "AttributeRequest: options changed on the way");
}

void CheckToQuery(const v1::GenerateRequest& request) {
  const auto query = server::ToQuery(request);
  const bool valid = ValidDecodingMethod(request.method()) && OptionsFitTheMethod(request) &&
                     ValidAggregation(request.head_aggregation()) && ValidDtype(request.dtype());
  if (!Accepted(query, valid, "GenerateRequest")) return;
  // 0 asks for the defaults; anything else passes through for RunGenerate to check.
  ATTNSCOPE_FUZZ_CHECK(
      query->model == request.model() && query->prompt == request.prompt() &&
          query->generation.max_new_tokens ==
              (request.max_new_tokens() == 0 ? kDefaultMaxNewTokens : request.max_new_tokens()) &&
          query->generation.num_beams ==
              (request.num_beams() == 0 ? kDefaultNumBeams : request.num_beams()) &&
          query->generation.top_k == request.top_k() && query->generation.seed == request.seed() &&
          query->output_attentions == request.output_attentions() &&
          SameIndices(query->layers, request.layers()) &&
          SameIndices(query->heads, request.heads()),
      "GenerateRequest: fields changed on the way");
}

}  // namespace attnscope::fuzz

#include "server/query_convert.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace attnscope::server {
namespace {

absl::StatusOr<OutputDType> ToOutputDType(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_UNSPECIFIED:
    case v1::DTYPE_FLOAT32:
      return OutputDType::kFloat32;
    case v1::DTYPE_FLOAT16:
      return OutputDType::kFloat16;
    case v1::DTYPE_BFLOAT16:
      return OutputDType::kBFloat16;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ",
                       v1::DType_Name(dtype).empty() ? absl::StrCat(static_cast<int>(dtype))
                                                     : v1::DType_Name(dtype),
                       ": expected DTYPE_FLOAT32, DTYPE_FLOAT16 or DTYPE_BFLOAT16; fix `dtype`"));
  }
}

absl::StatusOr<HeadAggregation> ToAggregation(v1::HeadAggregation aggregation) {
  switch (aggregation) {
    case v1::HEAD_AGGREGATION_UNSPECIFIED:
    case v1::HEAD_AGGREGATION_NONE:
      return HeadAggregation::kNone;
    case v1::HEAD_AGGREGATION_MEAN:
      return HeadAggregation::kMean;
    case v1::HEAD_AGGREGATION_MAX:
      return HeadAggregation::kMax;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "head_aggregation ", static_cast<int>(aggregation),
          ": expected HEAD_AGGREGATION_NONE, HEAD_AGGREGATION_MEAN or HEAD_AGGREGATION_MAX; fix "
          "`head_aggregation`"));
  }
}

absl::StatusOr<TokenizationQuery> ToTokenization(const v1::TokenizationOptions& options) {
  TokenizationQuery query;
  switch (options.truncation()) {
    case v1::TRUNCATION_UNSPECIFIED:
      break;
    case v1::TRUNCATION_NONE:
      query.truncation = Truncation::kNone;
      break;
    case v1::TRUNCATION_LONGEST_FIRST:
      query.truncation = Truncation::kLongestFirst;
      break;
    case v1::TRUNCATION_ONLY_FIRST:
      query.truncation = Truncation::kOnlyFirst;
      break;
    case v1::TRUNCATION_ONLY_SECOND:
      query.truncation = Truncation::kOnlySecond;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenization.truncation ", static_cast<int>(options.truncation()),
          ": expected one of TRUNCATION_NONE, TRUNCATION_LONGEST_FIRST, TRUNCATION_ONLY_FIRST, "
          "TRUNCATION_ONLY_SECOND"));
  }
  query.max_length = options.max_length();
  query.skip_special_tokens = options.skip_special_tokens();
  return query;
}

template <typename Request>
TextInput ToTextInput(const Request& request) {
  TextInput input;
  input.text = request.text();
  if (request.has_text_pair()) input.text_pair = request.text_pair();
  return input;
}

std::vector<int32_t> ToVector(const google::protobuf::RepeatedField<int32_t>& values) {
  return {values.begin(), values.end()};
}

}  // namespace

absl::StatusOr<TokenizeQuery> ToQuery(const v1::TokenizeRequest& request) {
  TokenizeQuery query;
  query.model = request.model();
  query.input = ToTextInput(request);
  ATTNSCOPE_ASSIGN_OR_RETURN(query.tokenization, ToTokenization(request.tokenization()));
  return query;
}

absl::StatusOr<AttentionQuery> ToQuery(const v1::GetAttentionRequest& request) {
  AttentionQuery query;
  query.model = request.model();
  query.input = ToTextInput(request);
  ATTNSCOPE_ASSIGN_OR_RETURN(query.tokenization, ToTokenization(request.tokenization()));
  query.layers = ToVector(request.layers());
  query.heads = ToVector(request.heads());
  ATTNSCOPE_ASSIGN_OR_RETURN(query.head_aggregation, ToAggregation(request.head_aggregation()));
  query.rollout = request.rollout();
  query.include_scores = request.include_scores();
  ATTNSCOPE_ASSIGN_OR_RETURN(query.dtype, ToOutputDType(request.dtype()));
  query.top_k = request.top_k();
  const v1::Window& window = request.window();
  query.window = {window.query_start(), window.query_end(), window.key_start(), window.key_end()};
  query.aggregate_words = request.aggregate_words();
  if (request.has_decoder_text()) query.decoder_text = request.decoder_text();
  if (request.has_decoder_window() && !request.has_decoder_text()) {
    // It would go unused: the decoder runs only on a decoder_text.
    return absl::InvalidArgumentError(
        "decoder_window: expected only with decoder_text (it windows the decoder's positions), "
        "got no decoder_text; set decoder_text or leave decoder_window unset");
  }
  const v1::Window& decoder_window = request.decoder_window();
  query.decoder_window = {decoder_window.query_start(), decoder_window.query_end(),
                          decoder_window.key_start(), decoder_window.key_end()};
  return query;
}

absl::StatusOr<EncodeQuery> ToQuery(const v1::EncodeRequest& request) {
  EncodeQuery query;
  query.model = request.model();
  for (const v1::EncodeInput& input : request.inputs()) {
    query.inputs.push_back(ToTextInput(input));
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(query.tokenization, ToTokenization(request.tokenization()));
  query.output_hidden_states = request.output_hidden_states();
  switch (request.pooling()) {
    case v1::POOLING_UNSPECIFIED:
    case v1::POOLING_NONE:
      break;
    case v1::POOLING_CLS:
      query.pooling = Pooling::kCls;
      break;
    case v1::POOLING_MEAN:
      query.pooling = Pooling::kMean;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("pooling ", static_cast<int>(request.pooling()),
                       ": expected POOLING_NONE, POOLING_CLS or POOLING_MEAN"));
  }
  query.normalize = request.normalize();
  ATTNSCOPE_ASSIGN_OR_RETURN(query.dtype, ToOutputDType(request.dtype()));
  return query;
}

absl::StatusOr<CrossAttentionQuery> ToQuery(const v1::CrossAttentionRequest& request) {
  CrossAttentionQuery query;
  query.model = request.model();
  query.query = request.query();
  query.documents = {request.documents().begin(), request.documents().end()};
  ATTNSCOPE_ASSIGN_OR_RETURN(query.tokenization, ToTokenization(request.tokenization()));
  query.layers = ToVector(request.layers());
  query.heads = ToVector(request.heads());
  ATTNSCOPE_ASSIGN_OR_RETURN(query.head_aggregation, ToAggregation(request.head_aggregation()));
  query.include_document_to_query = request.include_document_to_query();
  ATTNSCOPE_ASSIGN_OR_RETURN(query.dtype, ToOutputDType(request.dtype()));
  return query;
}

absl::StatusOr<ParameterQuery> ToQuery(const v1::GetParameterRequest& request) {
  ParameterQuery query;
  query.model = request.model();
  query.name = request.name();
  ATTNSCOPE_ASSIGN_OR_RETURN(query.dtype, ToOutputDType(request.dtype()));
  query.row_start = request.row_start();
  query.row_end = request.row_end();
  return query;
}

absl::StatusOr<AttributeQuery> ToQuery(const v1::AttributeRequest& request) {
  AttributeQuery query;
  query.model = request.model();
  query.input = ToTextInput(request);
  ATTNSCOPE_ASSIGN_OR_RETURN(query.tokenization, ToTokenization(request.tokenization()));
  query.target = request.target();
  for (int i = 0; i < request.methods_size(); ++i) {
    switch (request.methods(i)) {
      case v1::ATTRIBUTION_METHOD_OCCLUSION:
        query.methods.push_back(AttributionMethod::kOcclusion);
        break;
      case v1::ATTRIBUTION_METHOD_GRADIENT_X_INPUT:
        query.methods.push_back(AttributionMethod::kGradientXInput);
        break;
      case v1::ATTRIBUTION_METHOD_INTEGRATED_GRADIENTS:
        query.methods.push_back(AttributionMethod::kIntegratedGradients);
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "methods[", i, "] ", static_cast<int>(request.methods(i)),
            ": expected ATTRIBUTION_METHOD_OCCLUSION, ATTRIBUTION_METHOD_GRADIENT_X_INPUT or "
            "ATTRIBUTION_METHOD_INTEGRATED_GRADIENTS; fix `methods` (empty = all three)"));
    }
  }
  switch (request.occlusion_token()) {
    case v1::OCCLUSION_TOKEN_UNSPECIFIED:
    case v1::OCCLUSION_TOKEN_MASK:
      query.occlusion_token = OcclusionToken::kMask;
      break;
    case v1::OCCLUSION_TOKEN_UNK:
      query.occlusion_token = OcclusionToken::kUnk;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("occlusion_token ", static_cast<int>(request.occlusion_token()),
                       ": expected OCCLUSION_TOKEN_MASK or OCCLUSION_TOKEN_UNK"));
  }
  switch (request.baseline()) {
    case v1::ATTRIBUTION_BASELINE_UNSPECIFIED:
    case v1::ATTRIBUTION_BASELINE_PAD:
      query.baseline = AttributionBaseline::kTokenEmbedding;
      break;
    case v1::ATTRIBUTION_BASELINE_ZERO:
      query.baseline = AttributionBaseline::kZero;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("baseline ", static_cast<int>(request.baseline()),
                       ": expected ATTRIBUTION_BASELINE_PAD or ATTRIBUTION_BASELINE_ZERO"));
  }
  query.integrated_gradients_steps = request.integrated_gradients_steps();
  return query;
}

absl::StatusOr<GenerateQuery> ToQuery(const v1::GenerateRequest& request) {
  GenerateQuery query;
  query.model = request.model();
  query.prompt = request.prompt();
  GenerationOptions& generation = query.generation;
  // An unspecified method is greedy search, or beam search with more than one beam, as
  // transformers' generate() decides it (num_beams > 1 without do_sample): a client sending only
  // num_beams got greedy search before, without a word.
  if (request.num_beams() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_beams ", request.num_beams(),
                     ": expected a count of beams, at least 1 (0 or unset: 1), got ",
                     request.num_beams(), "; set num_beams to 1 or more, or leave it unset"));
  }
  v1::DecodingMethod method = request.method();
  if (method == v1::DECODING_METHOD_UNSPECIFIED) {
    method = request.num_beams() > 1 ? v1::DECODING_METHOD_BEAM_SEARCH : v1::DECODING_METHOD_GREEDY;
  }
  switch (method) {
    case v1::DECODING_METHOD_GREEDY:
      generation.method = DecodingMethod::kGreedy;
      break;
    case v1::DECODING_METHOD_BEAM_SEARCH:
      generation.method = DecodingMethod::kBeamSearch;
      break;
    case v1::DECODING_METHOD_SAMPLING:
      generation.method = DecodingMethod::kSampling;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("method ", static_cast<int>(request.method()),
                       ": expected DECODING_METHOD_GREEDY, DECODING_METHOD_BEAM_SEARCH or "
                       "DECODING_METHOD_SAMPLING"));
  }
  // An option of another method than the one run would be silently unused: refused, naming the
  // method it belongs to. num_beams 1 is greedy search's own.
  struct MethodOption {
    bool set;
    const char* name;
    std::string value;
    v1::DecodingMethod method;
  };
  const MethodOption method_options[] = {
      {request.num_beams() > 1, "num_beams", absl::StrCat(request.num_beams()),
       v1::DECODING_METHOD_BEAM_SEARCH},
      {request.has_length_penalty(), "length_penalty", absl::StrCat(request.length_penalty()),
       v1::DECODING_METHOD_BEAM_SEARCH},
      {request.has_temperature(), "temperature", absl::StrCat(request.temperature()),
       v1::DECODING_METHOD_SAMPLING},
      {request.top_k() != 0, "top_k", absl::StrCat(request.top_k()), v1::DECODING_METHOD_SAMPLING},
      {request.has_top_p(), "top_p", absl::StrCat(request.top_p()), v1::DECODING_METHOD_SAMPLING},
      {request.seed() != 0, "seed", absl::StrCat(request.seed()), v1::DECODING_METHOD_SAMPLING},
  };
  for (const MethodOption& option : method_options) {
    if (option.set && option.method != method) {
      const std::string& wanted = v1::DecodingMethod_Name(option.method);
      return absl::InvalidArgumentError(
          absl::StrCat(option.name, " ", option.value, ": expected only with method ", wanted,
                       ", got method ", v1::DecodingMethod_Name(method), "; set method ", wanted,
                       " or leave ", option.name, " unset"));
    }
  }
  generation.max_new_tokens =
      request.max_new_tokens() == 0 ? kDefaultMaxNewTokens : request.max_new_tokens();
  generation.num_beams = request.num_beams() == 0 ? kDefaultNumBeams : request.num_beams();
  if (request.has_length_penalty()) generation.length_penalty = request.length_penalty();
  if (request.has_temperature()) generation.temperature = request.temperature();
  generation.top_k = request.top_k();
  if (request.has_top_p()) generation.top_p = request.top_p();
  generation.seed = request.seed();
  query.ignore_eos = request.ignore_eos();
  query.output_attentions = request.output_attentions();
  query.layers.assign(request.layers().begin(), request.layers().end());
  query.heads.assign(request.heads().begin(), request.heads().end());
  ATTNSCOPE_ASSIGN_OR_RETURN(query.head_aggregation, ToAggregation(request.head_aggregation()));
  ATTNSCOPE_ASSIGN_OR_RETURN(query.dtype, ToOutputDType(request.dtype()));
  return query;
}

}  // namespace attnscope::server

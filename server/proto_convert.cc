#include "server/proto_convert.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/tensor_codec.h"

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

v1::DType ToWire(OutputDType dtype) {
  switch (dtype) {
    case OutputDType::kFloat16:
      return v1::DTYPE_FLOAT16;
    case OutputDType::kBFloat16:
      return v1::DTYPE_BFLOAT16;
    case OutputDType::kFloat32:
      break;
  }
  return v1::DTYPE_FLOAT32;
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
          ": expected HEAD_AGGREGATION_NONE, HEAD_AGGREGATION_MEAN or HEAD_AGGREGATION_MAX"));
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

template <typename Message>
void AddIndices(const std::vector<int64_t>& layers, const std::vector<int64_t>& heads,
                Message* message) {
  for (const int64_t layer : layers) message->add_layers(static_cast<int32_t>(layer));
  for (const int64_t head : heads) message->add_heads(static_cast<int32_t>(head));
}

template <typename Message>
void FillAttentionHeader(const AttentionAnswer& answer, Message* message) {
  message->set_model(answer.model->name());
  ToProto(answer.tokens, message->mutable_tokens());
  AddIndices(answer.layers, answer.heads, message);
  message->set_query_start(static_cast<int32_t>(answer.window.query_start));
  message->set_key_start(static_cast<int32_t>(answer.window.key_start));
  for (const Word& word : answer.words) {
    v1::Word* out = message->add_words();
    out->set_text(word.text);
    out->set_token_start(static_cast<int32_t>(word.tokens.token_start));
    out->set_token_end(static_cast<int32_t>(word.tokens.token_end));
    out->set_sequence_id(static_cast<int32_t>(word.sequence_id));
    out->mutable_offsets()->set_start(word.offsets.start);
    out->mutable_offsets()->set_end(word.offsets.end);
    out->mutable_byte_offsets()->set_start(word.byte_offsets.start);
    out->mutable_byte_offsets()->set_end(word.byte_offsets.end);
  }
}

// Dimension names of the answer's scores (dense, token axes), top-k indices and rollout.
std::vector<std::string> ScoreDims(const AttentionAnswer& answer) {
  std::vector<std::string> dims = answer.dim_names();
  dims.back() = answer.words.empty() ? "key_token" : "key_word";
  return dims;
}

std::vector<std::string> RolloutDims(const AttentionAnswer& answer) {
  const std::vector<std::string> dims = ScoreDims(answer);
  return {dims[2], dims[3]};
}

// The dimension names of one layer's slice: `dims` without "layer".
std::vector<std::string> WithoutLayer(const std::vector<std::string>& dims) {
  return {dims.begin() + 1, dims.end()};
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

void ToProto(const LoadedModel& model, v1::ModelInfo* info) {
  const ModelConfig& config = model.config();
  info->set_name(model.name());
  info->set_architecture(std::string(ArchitectureName(config.architecture)));
  for (const std::string& name : config.architectures) info->add_architectures(name);
  info->set_num_hidden_layers(static_cast<int32_t>(config.num_hidden_layers));
  info->set_num_attention_heads(static_cast<int32_t>(config.num_attention_heads));
  info->set_num_key_value_heads(static_cast<int32_t>(config.num_key_value_heads));
  info->set_hidden_size(static_cast<int32_t>(config.hidden_size));
  info->set_head_dim(static_cast<int32_t>(config.head_dim));
  info->set_vocab_size(static_cast<int32_t>(config.vocab_size));
  info->set_max_position_embeddings(static_cast<int32_t>(config.max_position_embeddings));
  info->set_tokenizer_kind(model.tokenizer().kind() == TokenizerKind::kWordPiece ? "wordpiece"
                                                                                 : "sentencepiece");
  info->set_has_classifier(model.model().has_classifier());
  if (model.model().has_classifier()) {
    for (const auto& [index, label] : config.id2label) info->add_labels(label);
  }
  info->set_weights_checksum(model.weights_checksum());
  info->set_is_causal(config.architecture == Architecture::kLlama);
  const TokenizerNormalization normalization = model.tokenizer().normalization();
  v1::TokenizerNormalization* out = info->mutable_normalization();
  out->set_lowercase(normalization.lowercase);
  out->set_strip_accents(normalization.strip_accents);
  out->set_unicode_form(normalization.unicode_form);
  out->set_description(normalization.description);
}

void ToProto(const EncodedText& tokens, v1::Tokens* out) {
  const Encoding& encoding = tokens.encoding;
  for (size_t i = 0; i < encoding.size(); ++i) {
    out->add_tokens(encoding.tokens[i]);
    out->add_input_ids(encoding.input_ids[i]);
    out->add_token_type_ids(encoding.token_type_ids[i]);
    out->add_special_tokens_mask(static_cast<int32_t>(encoding.special_tokens_mask[i]));
    v1::Offset* offset = out->add_offsets();
    offset->set_start(encoding.offsets[i].start);
    offset->set_end(encoding.offsets[i].end);
    v1::Offset* byte_offset = out->add_byte_offsets();
    byte_offset->set_start(encoding.byte_offsets[i].start);
    byte_offset->set_end(encoding.byte_offsets[i].end);
    out->add_word_ids(encoding.word_ids[i]);
    out->add_sequence_ids(static_cast<int32_t>(encoding.sequence_ids[i]));
    out->add_original_texts(tokens.original_texts[i]);
  }
}

absl::Status ToProto(const AttentionAnswer& answer, v1::GetAttentionResponse* response) {
  FillAttentionHeader(answer, response);
  const v1::DType dtype = ToWire(answer.dtype);
  ATTNSCOPE_RETURN_IF_ERROR(
      EncodeStacked(answer.attentions, answer.dim_names(), dtype, response->mutable_attentions()));
  if (!answer.scores.empty()) {
    ATTNSCOPE_RETURN_IF_ERROR(
        EncodeStacked(answer.scores, ScoreDims(answer), dtype, response->mutable_scores()));
  }
  if (answer.top_k) {
    ATTNSCOPE_RETURN_IF_ERROR(EncodeStacked(answer.top_k_indices, answer.dim_names(),
                                            v1::DTYPE_INT32, response->mutable_top_k_indices()));
  }
  if (answer.rollout.defined()) {
    ATTNSCOPE_RETURN_IF_ERROR(
        EncodeTensor(answer.rollout, RolloutDims(answer), dtype, response->mutable_rollout()));
  }
  return absl::OkStatus();
}

absl::Status WriteStream(
    const AttentionAnswer& answer,
    const std::function<absl::Status(const v1::StreamAttentionResponse&)>& write) {
  const v1::DType dtype = ToWire(answer.dtype);
  v1::StreamAttentionResponse message;
  v1::StreamAttentionHeader* header = message.mutable_header();
  FillAttentionHeader(answer, header);
  for (const int64_t dim : answer.shape()) header->add_attentions_shape(dim);
  for (const std::string& name : answer.dim_names()) header->add_dim_names(name);
  header->set_dtype(dtype);
  ATTNSCOPE_RETURN_IF_ERROR(write(message));
  for (size_t i = 0; i < answer.layers.size(); ++i) {
    message.Clear();
    v1::StreamAttentionLayer* layer = message.mutable_layer();
    layer->set_layer(static_cast<int32_t>(answer.layers[i]));
    ATTNSCOPE_RETURN_IF_ERROR(EncodeTensor(answer.attentions[i], WithoutLayer(answer.dim_names()),
                                           dtype, layer->mutable_attentions()));
    if (!answer.scores.empty()) {
      ATTNSCOPE_RETURN_IF_ERROR(EncodeTensor(answer.scores[i], WithoutLayer(ScoreDims(answer)),
                                             dtype, layer->mutable_scores()));
    }
    if (answer.top_k) {
      ATTNSCOPE_RETURN_IF_ERROR(EncodeTensor(answer.top_k_indices[i],
                                             WithoutLayer(answer.dim_names()), v1::DTYPE_INT32,
                                             layer->mutable_top_k_indices()));
    }
    ATTNSCOPE_RETURN_IF_ERROR(write(message));
  }
  if (answer.rollout.defined()) {
    message.Clear();
    ATTNSCOPE_RETURN_IF_ERROR(
        EncodeTensor(answer.rollout, RolloutDims(answer), dtype, message.mutable_rollout()));
    ATTNSCOPE_RETURN_IF_ERROR(write(message));
  }
  return absl::OkStatus();
}

absl::Status ToProto(const EncodeAnswer& answer, v1::EncodeResponse* response) {
  const v1::DType dtype = ToWire(answer.dtype);
  response->set_model(answer.model->name());
  for (const EncodedInput& input : answer.results) {
    v1::EncodeResult* result = response->add_results();
    ToProto(input.tokens, result->mutable_tokens());
    ATTNSCOPE_RETURN_IF_ERROR(EncodeTensor(input.last_hidden_state, {"token", "hidden"}, dtype,
                                           result->mutable_last_hidden_state()));
    if (!input.hidden_states.empty()) {
      ATTNSCOPE_RETURN_IF_ERROR(EncodeStacked(input.hidden_states, {"layer", "token", "hidden"},
                                              dtype, result->mutable_hidden_states()));
    }
    if (input.pooled.defined()) {
      ATTNSCOPE_RETURN_IF_ERROR(
          EncodeTensor(input.pooled, {"hidden"}, dtype, result->mutable_pooled()));
    }
  }
  return absl::OkStatus();
}

absl::Status ToProto(const CrossAttentionAnswer& answer, v1::CrossAttentionResponse* response) {
  const v1::DType dtype = ToWire(answer.dtype);
  response->set_model(answer.model->name());
  AddIndices(answer.layers, answer.heads, response);
  for (const DocumentAnswer& document : answer.documents) {
    v1::DocumentAttention* result = response->add_documents();
    ToProto(document.tokens, result->mutable_tokens());
    for (const int64_t p : document.query_positions) {
      result->add_query_positions(static_cast<int32_t>(p));
    }
    for (const int64_t p : document.document_positions) {
      result->add_document_positions(static_cast<int32_t>(p));
    }
    ATTNSCOPE_RETURN_IF_ERROR(EncodeStacked(document.query_to_document,
                                            {"layer", "head", "query_token", "document_token"},
                                            dtype, result->mutable_query_to_document()));
    if (!document.document_to_query.empty()) {
      ATTNSCOPE_RETURN_IF_ERROR(EncodeStacked(document.document_to_query,
                                              {"layer", "head", "document_token", "query_token"},
                                              dtype, result->mutable_document_to_query()));
    }
    for (const float logit : document.logits) result->add_logits(logit);
    if (document.relevance_score.has_value()) {
      result->set_relevance_score(*document.relevance_score);
    }
  }
  return absl::OkStatus();
}

void ToProto(const ParameterListAnswer& answer, v1::ListParametersResponse* response) {
  response->set_model(answer.model->name());
  for (const ParameterInfo& parameter : answer.parameters) {
    v1::ParameterInfo* info = response->add_parameters();
    info->set_name(parameter.name);
    for (const int64_t dim : parameter.shape) info->add_shape(dim);
  }
}

absl::Status ToProto(const ParameterAnswer& answer, v1::GetParameterResponse* response) {
  response->set_model(answer.model->name());
  response->set_name(answer.name);
  response->set_row_start(answer.row_start);
  std::vector<std::string> dims;
  if (answer.tensor.dim() == 1) dims = {"index"};
  if (answer.tensor.dim() == 2) dims = {"row", "column"};
  for (int64_t i = static_cast<int64_t>(dims.size()); i < answer.tensor.dim(); ++i) {
    dims.push_back(absl::StrCat("dim", i));
  }
  return EncodeTensor(answer.tensor, dims, ToWire(answer.dtype), response->mutable_tensor());
}

void ToProto(const TrainingRecordAnswer& answer, v1::TrainingRecord* record) {
  record->set_model(answer.model->name());
  for (const TrainingPoint& point : answer.points) {
    v1::TrainingPoint* out = record->add_points();
    out->set_step(point.step);
    for (const auto& [name, value] : point.values) (*out->mutable_values())[name] = value;
  }
  record->set_record_json(answer.record_json);
}

}  // namespace attnscope::server

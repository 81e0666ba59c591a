#include "server/proto_convert.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/tensor_codec.h"

namespace attnscope::server {
namespace {

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
  if (!answer.decoder_tokens.has_value()) return;
  ToProto(*answer.decoder_tokens, message->mutable_decoder_tokens());
  ToProto(*answer.decoder_labels, message->mutable_decoder_labels());
  for (const int64_t layer : answer.decoder_layers) {
    message->add_decoder_layers(static_cast<int32_t>(layer));
  }
  for (const int64_t head : answer.decoder_heads) {
    message->add_decoder_heads(static_cast<int32_t>(head));
  }
  message->set_decoder_query_start(static_cast<int32_t>(answer.decoder_window.query_start));
  message->set_decoder_key_start(static_cast<int32_t>(answer.decoder_window.key_start));
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

std::vector<StreamPiece> PlanStreamPieces(int64_t heads, int64_t rows, int64_t row_bytes,
                                          int64_t max_bytes) {
  std::vector<StreamPiece> pieces;
  const int64_t head_bytes = rows * row_bytes;
  if (head_bytes <= max_bytes) {
    // Whole heads: as many as fit, at least one.
    const int64_t per_piece = std::max<int64_t>(1, max_bytes / std::max<int64_t>(1, head_bytes));
    for (int64_t head = 0; head < heads; head += per_piece) {
      pieces.push_back({head, std::min(per_piece, heads - head), 0, rows});
    }
    return pieces;
  }
  // A head over the bound is cut into runs of query rows, one row at least.
  const int64_t per_piece = std::max<int64_t>(1, max_bytes / std::max<int64_t>(1, row_bytes));
  for (int64_t head = 0; head < heads; ++head) {
    for (int64_t row = 0; row < rows; row += per_piece) {
      pieces.push_back({head, 1, row, std::min(per_piece, rows - row)});
    }
  }
  return pieces;
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
  info->set_max_position_embeddings(static_cast<int32_t>(model.model().max_positions()));
  info->set_tokenizer_kind(std::string(TokenizerKindName(model.tokenizer().kind())));
  info->set_has_classifier(model.model().has_classifier());
  if (model.model().has_classifier()) {
    for (const auto& [index, label] : config.id2label) info->add_labels(label);
  }
  info->set_weights_checksum(model.weights_checksum());
  info->set_is_causal(IsDecoderOnly(config.architecture));
  info->set_is_encoder_decoder(config.is_encoder_decoder);
  info->set_decoder_layers(static_cast<int32_t>(config.decoder_layers));
  info->set_decoder_attention_heads(static_cast<int32_t>(config.decoder_attention_heads));
  if (std::any_of(config.layer_sliding_windows.begin(), config.layer_sliding_windows.end(),
                  [](int64_t window) { return window > 0; })) {
    for (const int64_t window : config.layer_sliding_windows) {
      info->add_layer_sliding_windows(static_cast<int32_t>(window));
    }
  }
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
  ATTNSCOPE_RETURN_IF_ERROR(SerializeStacked(answer.attentions, answer.dim_names(), dtype,
                                             response->mutable_attentions()));
  if (!answer.scores.empty()) {
    ATTNSCOPE_RETURN_IF_ERROR(
        SerializeStacked(answer.scores, ScoreDims(answer), dtype, response->mutable_scores()));
  }
  if (answer.top_k) {
    ATTNSCOPE_RETURN_IF_ERROR(SerializeStacked(answer.top_k_indices, answer.dim_names(),
                                               v1::DTYPE_INT32, response->mutable_top_k_indices()));
  }
  if (answer.rollout.defined()) {
    ATTNSCOPE_RETURN_IF_ERROR(
        SerializeTensor(answer.rollout, RolloutDims(answer), dtype, response->mutable_rollout()));
  }
  if (answer.decoder_tokens.has_value()) {
    ATTNSCOPE_RETURN_IF_ERROR(SerializeStacked(answer.decoder_attentions,
                                               answer.decoder_dim_names(), dtype,
                                               response->mutable_decoder_attentions()));
    ATTNSCOPE_RETURN_IF_ERROR(SerializeStacked(answer.cross_attentions, answer.cross_dim_names(),
                                               dtype, response->mutable_cross_attentions()));
    if (answer.top_k) {
      ATTNSCOPE_RETURN_IF_ERROR(SerializeStacked(answer.decoder_top_k_indices,
                                                 answer.decoder_dim_names(), v1::DTYPE_INT32,
                                                 response->mutable_decoder_top_k_indices()));
      ATTNSCOPE_RETURN_IF_ERROR(SerializeStacked(answer.cross_top_k_indices,
                                                 answer.cross_dim_names(), v1::DTYPE_INT32,
                                                 response->mutable_cross_top_k_indices()));
    }
  }
  return absl::OkStatus();
}

absl::Status WriteStream(
    const AttentionAnswer& answer, int64_t max_message_bytes,
    const std::function<absl::Status(const v1::StreamAttentionResponse&)>& write) {
  const v1::DType dtype = ToWire(answer.dtype);
  v1::StreamAttentionResponse message;
  v1::StreamAttentionHeader* header = message.mutable_header();
  FillAttentionHeader(answer, header);
  for (const int64_t dim : answer.shape()) header->add_attentions_shape(dim);
  for (const std::string& name : answer.dim_names()) header->add_dim_names(name);
  header->set_dtype(dtype);
  for (const int64_t dim : answer.decoder_shape()) header->add_decoder_attentions_shape(dim);
  for (const int64_t dim : answer.cross_shape()) header->add_cross_attentions_shape(dim);
  if (answer.decoder_tokens.has_value()) {
    for (const std::string& name : answer.decoder_dim_names()) header->add_decoder_dim_names(name);
    for (const std::string& name : answer.cross_dim_names()) header->add_cross_dim_names(name);
  }
  ATTNSCOPE_RETURN_IF_ERROR(write(message));
  // Sends one block's layers in pieces; `scores` may be empty, `top_k_indices` is empty without
  // top_k.
  const auto write_block =
      [&](v1::AttentionBlock block, const std::vector<int64_t>& layers,
          const std::vector<torch::Tensor>& attentions, const std::vector<torch::Tensor>& scores,
          const std::vector<torch::Tensor>& top_k_indices, const std::vector<std::string>& dims,
          const std::vector<std::string>& score_dims) -> absl::Status {
    for (size_t i = 0; i < layers.size(); ++i) {
      const int64_t heads = attentions[i].size(0);
      const int64_t rows = attentions[i].size(1);
      // Bytes of one query row of every tensor the pieces carry.
      int64_t row_bytes = attentions[i].size(2) * BytesPerElement(dtype);
      if (!scores.empty()) row_bytes += scores[i].size(2) * BytesPerElement(dtype);
      if (!top_k_indices.empty()) {
        row_bytes += top_k_indices[i].size(2) * BytesPerElement(v1::DTYPE_INT32);
      }
      for (const StreamPiece& piece : PlanStreamPieces(heads, rows, row_bytes, max_message_bytes)) {
        const auto cut = [&piece](const torch::Tensor& tensor) {
          return tensor.narrow(0, piece.head_offset, piece.heads)
              .narrow(1, piece.query_offset, piece.rows);
        };
        message.Clear();
        v1::StreamAttentionLayer* layer = message.mutable_layer();
        layer->set_layer(static_cast<int32_t>(layers[i]));
        layer->set_block(block);
        layer->set_head_offset(static_cast<int32_t>(piece.head_offset));
        layer->set_query_offset(static_cast<int32_t>(piece.query_offset));
        ATTNSCOPE_RETURN_IF_ERROR(
            SerializeTensor(cut(attentions[i]), dims, dtype, layer->mutable_attentions()));
        if (!scores.empty()) {
          ATTNSCOPE_RETURN_IF_ERROR(
              SerializeTensor(cut(scores[i]), score_dims, dtype, layer->mutable_scores()));
        }
        if (!top_k_indices.empty()) {
          ATTNSCOPE_RETURN_IF_ERROR(SerializeTensor(cut(top_k_indices[i]), dims, v1::DTYPE_INT32,
                                                    layer->mutable_top_k_indices()));
        }
        ATTNSCOPE_RETURN_IF_ERROR(write(message));
      }
    }
    return absl::OkStatus();
  };
  ATTNSCOPE_RETURN_IF_ERROR(write_block(
      v1::ATTENTION_BLOCK_SELF, answer.layers, answer.attentions, answer.scores,
      answer.top_k_indices, WithoutLayer(answer.dim_names()), WithoutLayer(ScoreDims(answer))));
  if (answer.decoder_tokens.has_value()) {
    ATTNSCOPE_RETURN_IF_ERROR(write_block(
        v1::ATTENTION_BLOCK_DECODER_SELF, answer.decoder_layers, answer.decoder_attentions, {},
        answer.decoder_top_k_indices, WithoutLayer(answer.decoder_dim_names()), {}));
    ATTNSCOPE_RETURN_IF_ERROR(write_block(v1::ATTENTION_BLOCK_CROSS, answer.decoder_layers,
                                          answer.cross_attentions, {}, answer.cross_top_k_indices,
                                          WithoutLayer(answer.cross_dim_names()), {}));
  }
  if (answer.rollout.defined()) {
    const int64_t row_bytes = answer.rollout.size(1) * BytesPerElement(dtype);
    for (const StreamPiece& piece :
         PlanStreamPieces(/*heads=*/1, answer.rollout.size(0), row_bytes, max_message_bytes)) {
      message.Clear();
      v1::StreamAttentionRollout* rollout = message.mutable_rollout();
      rollout->set_query_offset(static_cast<int32_t>(piece.query_offset));
      ATTNSCOPE_RETURN_IF_ERROR(
          SerializeTensor(answer.rollout.narrow(0, piece.query_offset, piece.rows),
                          RolloutDims(answer), dtype, rollout->mutable_rollout()));
      ATTNSCOPE_RETURN_IF_ERROR(write(message));
    }
  }
  return absl::OkStatus();
}

absl::Status ToProto(const EncodeAnswer& answer, v1::EncodeResponse* response) {
  const v1::DType dtype = ToWire(answer.dtype);
  response->set_model(answer.model->name());
  for (const EncodedInput& input : answer.results) {
    v1::EncodeResult* result = response->add_results();
    ToProto(input.tokens, result->mutable_tokens());
    ATTNSCOPE_RETURN_IF_ERROR(SerializeTensor(input.last_hidden_state, {"token", "hidden"}, dtype,
                                              result->mutable_last_hidden_state()));
    if (!input.hidden_states.empty()) {
      ATTNSCOPE_RETURN_IF_ERROR(SerializeStacked(input.hidden_states, {"layer", "token", "hidden"},
                                                 dtype, result->mutable_hidden_states()));
    }
    if (input.pooled.defined()) {
      ATTNSCOPE_RETURN_IF_ERROR(
          SerializeTensor(input.pooled, {"hidden"}, dtype, result->mutable_pooled()));
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
    ATTNSCOPE_RETURN_IF_ERROR(SerializeStacked(document.query_to_document,
                                               {"layer", "head", "query_token", "document_token"},
                                               dtype, result->mutable_query_to_document()));
    if (!document.document_to_query.empty()) {
      ATTNSCOPE_RETURN_IF_ERROR(SerializeStacked(document.document_to_query,
                                                 {"layer", "head", "document_token", "query_token"},
                                                 dtype, result->mutable_document_to_query()));
    }
    for (const float logit : document.logits) result->add_logits(logit);
    if (document.relevance_score.has_value()) {
      result->set_relevance_score(*document.relevance_score);
    }
    result->set_query_truncated(document.query_truncated);
    result->set_document_truncated(document.document_truncated);
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
  return SerializeTensor(answer.tensor, dims, ToWire(answer.dtype), response->mutable_tensor());
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

void ToProto(const AttributeAnswer& answer, v1::AttributeResponse* response) {
  response->set_model(answer.model->name());
  ToProto(answer.tokens, response->mutable_tokens());
  response->set_target(static_cast<int32_t>(answer.target));
  response->set_target_label(answer.target_label);
  response->set_score(answer.score);
  response->set_baseline_score(answer.baseline_score);
  response->mutable_occlusion()->Add(answer.occlusion.begin(), answer.occlusion.end());
  response->mutable_gradient_x_input()->Add(answer.gradient_x_input.begin(),
                                            answer.gradient_x_input.end());
  response->mutable_integrated_gradients()->Add(answer.integrated_gradients.begin(),
                                                answer.integrated_gradients.end());
  response->set_integrated_gradients_steps(static_cast<int32_t>(answer.integrated_gradients_steps));
  if (answer.convergence_delta.has_value()) {
    response->set_convergence_delta(*answer.convergence_delta);
  }
  for (const AttributedWord& word : answer.words) {
    v1::WordAttribution* out = response->add_words();
    out->set_text(word.word.text);
    out->set_sequence_id(static_cast<int32_t>(word.word.sequence_id));
    out->set_word_id(static_cast<int32_t>(word.word_id));
    out->set_token_start(static_cast<int32_t>(word.word.tokens.token_start));
    out->set_token_end(static_cast<int32_t>(word.word.tokens.token_end));
    out->mutable_offsets()->set_start(word.word.offsets.start);
    out->mutable_offsets()->set_end(word.word.offsets.end);
    out->mutable_byte_offsets()->set_start(word.word.byte_offsets.start);
    out->mutable_byte_offsets()->set_end(word.word.byte_offsets.end);
    if (word.occlusion.has_value()) out->set_occlusion(static_cast<float>(*word.occlusion));
    if (word.gradient_x_input.has_value()) {
      out->set_gradient_x_input(static_cast<float>(*word.gradient_x_input));
    }
    if (word.integrated_gradients.has_value()) {
      out->set_integrated_gradients(static_cast<float>(*word.integrated_gradients));
    }
  }
}

namespace {

v1::DecodingMethod ToWire(DecodingMethod method) {
  switch (method) {
    case DecodingMethod::kBeamSearch:
      return v1::DECODING_METHOD_BEAM_SEARCH;
    case DecodingMethod::kSampling:
      return v1::DECODING_METHOD_SAMPLING;
    case DecodingMethod::kGreedy:
      break;
  }
  return v1::DECODING_METHOD_GREEDY;
}

}  // namespace

void ToProto(const GenerateHeader& header, v1::GenerateHeader* out) {
  out->set_model(header.model->name());
  ToProto(header.prompt_tokens, out->mutable_prompt_tokens());
  out->set_method(ToWire(header.method));
  AddIndices(header.layers, header.heads, out);
  out->set_encoder_decoder(header.model->config().is_encoder_decoder);
}

absl::Status ToProto(const GenerateStep& step, OutputDType dtype, v1::GeneratedToken* out) {
  out->set_index(static_cast<int32_t>(step.index));
  out->set_position(static_cast<int32_t>(step.position));
  out->set_id(static_cast<int32_t>(step.id));
  out->set_token(step.token);
  out->set_text(step.text);
  out->set_logprob(step.logprob);
  if (step.attention.defined()) {
    ATTNSCOPE_RETURN_IF_ERROR(SerializeTensor(step.attention, {"layer", "head", "key_token"},
                                              ToWire(dtype), out->mutable_attention()));
  }
  return absl::OkStatus();
}

void ToProto(const GenerateSummary& summary, v1::GenerateDone* out) {
  out->set_finish_reason(summary.finish_reason == FinishReason::kEos ? v1::FINISH_REASON_EOS
                                                                     : v1::FINISH_REASON_LENGTH);
  for (const int64_t id : summary.ids) out->add_ids(static_cast<int32_t>(id));
  out->set_text(summary.text);
  out->set_score(summary.score);
}

}  // namespace attnscope::server

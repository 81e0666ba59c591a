#include "client/stream_assembler.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace attnscope {
namespace {

absl::Status StreamError(absl::string_view what) {
  return absl::InternalError(absl::StrCat("StreamAttention: the server's stream ", what));
}

}  // namespace

absl::Status StreamAssembler::Add(v1::StreamAttentionResponse& message) {
  switch (message.message_case()) {
    case v1::StreamAttentionResponse::kHeader:
      return AddHeader(*message.mutable_header());
    case v1::StreamAttentionResponse::kLayer:
      return AddLayer(message.layer());
    case v1::StreamAttentionResponse::kRollout:
      return AddRollout(message.rollout());
    default:
      return StreamError("sent an empty message");
  }
}

absl::StatusOr<AttentionResult> StreamAssembler::Finish() {
  if (!have_header_) return StreamError("ended without a header");
  for (const Block& block : blocks_) {
    if (block.layers == nullptr) continue;
    if (block.next_layer != block.layers->size() || block.layer_filled != 0) {
      return StreamError(absl::StrCat("ended after ", block.next_layer, " of ",
                                      block.layers->size(), " layers of ", block.name));
    }
  }
  if (result_.rollout.has_value() &&
      rollout_rows_ != static_cast<size_t>(result_.rollout->shape[0])) {
    return StreamError(absl::StrCat("ended after ", rollout_rows_, " of ",
                                    result_.rollout->shape[0], " rollout rows"));
  }
  return std::move(result_);
}

absl::Status StreamAssembler::StartBlock(
    const google::protobuf::RepeatedField<int64_t>& shape,
    const google::protobuf::RepeatedPtrField<std::string>& dim_names, v1::DType dtype,
    Block& block) {
  DecodedTensor& attentions = *block.attentions;
  attentions.shape.assign(shape.begin(), shape.end());
  attentions.dim_names.assign(dim_names.begin(), dim_names.end());
  attentions.wire_dtype = dtype;
  if (attentions.shape.size() != 4 ||
      attentions.shape[0] != static_cast<int64_t>(block.layers->size())) {
    return StreamError(absl::StrCat("header has ", block.name, " shape [",
                                    absl::StrJoin(attentions.shape, ", "), "] for ",
                                    block.layers->size(), " layers"));
  }
  block.slice_elements = 1;
  for (size_t i = 1; i < attentions.shape.size(); ++i) {
    if (attentions.shape[i] < 0) return StreamError("header has a negative dimension");
    block.slice_elements *= attentions.shape[i];
  }
  attentions.values.resize(block.slice_elements * attentions.shape[0]);
  return absl::OkStatus();
}

absl::Status StreamAssembler::AddHeader(v1::StreamAttentionHeader& header) {
  if (have_header_) return StreamError("sent two headers");
  have_header_ = true;
  result_.model = header.model();
  result_.tokens = std::move(*header.mutable_tokens());
  result_.layers.assign(header.layers().begin(), header.layers().end());
  result_.heads.assign(header.heads().begin(), header.heads().end());
  result_.query_start = header.query_start();
  result_.key_start = header.key_start();
  result_.words.assign(header.words().begin(), header.words().end());
  blocks_[v1::ATTENTION_BLOCK_SELF] = {"attentions", &result_.layers, &result_.attentions,
                                       &result_.scores, &result_.top_k_indices};
  ATTNSCOPE_RETURN_IF_ERROR(StartBlock(header.attentions_shape(), header.dim_names(),
                                       header.dtype(), blocks_[v1::ATTENTION_BLOCK_SELF]));
  if (!header.has_decoder_tokens()) return absl::OkStatus();
  AttentionResult::Decoder& decoder = result_.decoder.emplace();
  decoder.tokens = std::move(*header.mutable_decoder_tokens());
  decoder.labels = std::move(*header.mutable_decoder_labels());
  decoder.layers.assign(header.decoder_layers().begin(), header.decoder_layers().end());
  decoder.heads.assign(header.decoder_heads().begin(), header.decoder_heads().end());
  decoder.query_start = header.decoder_query_start();
  decoder.key_start = header.decoder_key_start();
  blocks_[v1::ATTENTION_BLOCK_DECODER_SELF] = {
      "decoder_attentions", &decoder.layers, &decoder.attentions, nullptr, &decoder.top_k_indices};
  blocks_[v1::ATTENTION_BLOCK_CROSS] = {"cross_attentions", &decoder.layers,
                                        &decoder.cross_attentions, nullptr,
                                        &decoder.cross_top_k_indices};
  ATTNSCOPE_RETURN_IF_ERROR(StartBlock(header.decoder_attentions_shape(),
                                       header.decoder_dim_names(), header.dtype(),
                                       blocks_[v1::ATTENTION_BLOCK_DECODER_SELF]));
  return StartBlock(header.cross_attentions_shape(), header.cross_dim_names(), header.dtype(),
                    blocks_[v1::ATTENTION_BLOCK_CROSS]);
}

absl::Status StreamAssembler::AddPiece(const Block& block, const v1::Tensor& tensor,
                                       const char* name, int64_t head_offset, int64_t query_offset,
                                       DecodedTensor& target) {
  const DecodedTensor& full = *block.attentions;
  const int64_t heads = full.shape[1];
  const int64_t rows = full.shape[2];
  const int64_t keys = full.shape[3];
  const bool fits = tensor.shape_size() == 3 && tensor.shape(0) >= 1 && tensor.shape(1) >= 1 &&
                    tensor.shape(2) == keys && head_offset + tensor.shape(0) <= heads &&
                    query_offset + tensor.shape(1) <= rows &&
                    (tensor.shape(1) == rows || tensor.shape(0) == 1);
  const int64_t start = (head_offset * rows + query_offset) * keys;
  const int32_t layer = (*block.layers)[block.next_layer];
  if (!fits || start != block.layer_filled) {
    return StreamError(
        absl::StrCat("sent a piece of layer ", layer, " ", name, " of shape [",
                     absl::StrJoin(tensor.shape(), ", "), "] at head ", head_offset, ", query row ",
                     query_offset, "; expected whole heads or rows of one head of [", heads, ", ",
                     rows, ", ", keys, "], continuing at element ", block.layer_filled));
  }
  if (target.shape.empty()) {
    target.shape = full.shape;
    target.dim_names = full.dim_names;
    target.wire_dtype = tensor.dtype();
    if (tensor.dtype() == v1::DTYPE_INT32) {
      target.int_values.resize(full.values.size());
    } else {
      target.values.resize(full.values.size());
    }
  } else if (target.wire_dtype != tensor.dtype()) {
    return StreamError(absl::StrCat("sent layer ", layer, " ", name, " as ",
                                    DTypeName(tensor.dtype()), ", expected ",
                                    DTypeName(target.wire_dtype)));
  }
  const int64_t offset = static_cast<int64_t>(block.next_layer) * block.slice_elements + start;
  const int64_t count = tensor.shape(0) * tensor.shape(1) * keys;
  return DecodeTensorDataInto(tensor, count,
                              target.is_int() ? nullptr : target.values.data() + offset,
                              target.is_int() ? target.int_values.data() + offset : nullptr);
}

absl::Status StreamAssembler::AddLayer(const v1::StreamAttentionLayer& layer) {
  if (!have_header_) return StreamError("sent a layer before the header");
  const int kind = layer.block();
  if (kind < 0 || kind >= static_cast<int>(blocks_.size()) || blocks_[kind].layers == nullptr) {
    return StreamError(
        absl::StrCat("sent a layer of block ", kind, ", which its header does not announce"));
  }
  // Blocks come in order, each complete before the next starts.
  for (int earlier = 0; earlier < kind; ++earlier) {
    const Block& block = blocks_[earlier];
    if (block.layers != nullptr && block.next_layer != block.layers->size()) {
      return StreamError(
          absl::StrCat("sent ", blocks_[kind].name, " before the end of ", block.name));
    }
  }
  Block& block = blocks_[kind];
  if (block.next_layer >= block.layers->size()) {
    return StreamError(absl::StrCat("sent more than the ", block.layers->size(), " layers of ",
                                    block.name, " its header announced"));
  }
  if (layer.layer() != (*block.layers)[block.next_layer]) {
    return StreamError(absl::StrCat("sent ", block.name, " layer ", layer.layer(),
                                    " where the header announced ",
                                    (*block.layers)[block.next_layer]));
  }
  const int64_t head_offset = layer.head_offset();
  const int64_t query_offset = layer.query_offset();
  ATTNSCOPE_RETURN_IF_ERROR(AddPiece(block, layer.attentions(), block.name, head_offset,
                                     query_offset, *block.attentions));
  if (layer.has_scores()) {
    if (block.scores == nullptr) return StreamError("sent scores of a decoder block");
    if (!block.scores->has_value()) block.scores->emplace();
    ATTNSCOPE_RETURN_IF_ERROR(
        AddPiece(block, layer.scores(), "scores", head_offset, query_offset, **block.scores));
  }
  if (layer.has_top_k_indices()) {
    if (!block.top_k_indices->has_value()) block.top_k_indices->emplace();
    ATTNSCOPE_RETURN_IF_ERROR(AddPiece(block, layer.top_k_indices(), "top_k_indices", head_offset,
                                       query_offset, **block.top_k_indices));
  }
  block.layer_filled +=
      layer.attentions().shape(0) * layer.attentions().shape(1) * block.attentions->shape[3];
  if (block.layer_filled == block.slice_elements) {
    block.layer_filled = 0;
    ++block.next_layer;
  }
  return absl::OkStatus();
}

absl::Status StreamAssembler::AddRollout(const v1::StreamAttentionRollout& piece) {
  if (!have_header_) return StreamError("sent the rollout before the header");
  const v1::Tensor& tensor = piece.rollout();
  const int64_t rows = result_.attentions.shape[2];
  if (!result_.rollout.has_value() && tensor.shape_size() == 2) {
    DecodedTensor& rollout = result_.rollout.emplace();
    rollout.shape = {rows, tensor.shape(1)};
    rollout.dim_names.assign(tensor.dim_names().begin(), tensor.dim_names().end());
    rollout.wire_dtype = tensor.dtype();
    rollout.values.resize(rows * tensor.shape(1));
  }
  if (tensor.shape_size() != 2 || !result_.rollout.has_value() ||
      tensor.shape(1) != result_.rollout->shape[1] ||
      piece.query_offset() != static_cast<int64_t>(rollout_rows_) ||
      piece.query_offset() + tensor.shape(0) > rows) {
    return StreamError(absl::StrCat(
        "sent rollout rows of shape [", absl::StrJoin(tensor.shape(), ", "), "] at row ",
        piece.query_offset(), "; expected rows from ", rollout_rows_, " of ", rows));
  }
  const int64_t offset = piece.query_offset() * tensor.shape(1);
  ATTNSCOPE_RETURN_IF_ERROR(DecodeTensorDataInto(tensor, tensor.shape(0) * tensor.shape(1),
                                                 result_.rollout->values.data() + offset,
                                                 /*int_out=*/nullptr));
  rollout_rows_ += tensor.shape(0);
  return absl::OkStatus();
}

}  // namespace attnscope

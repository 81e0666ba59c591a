#include "client/cli/answer_json.h"

#include <cstdint>
#include <filesystem>
#include <utility>
#include <vector>

#include "client/npy.h"
#include "common/status_macros.h"

namespace attnscope::cli {
namespace {

using json = nlohmann::json;

json OffsetsToJson(const google::protobuf::RepeatedPtrField<v1::Offset>& offsets) {
  json out = json::array();
  for (const v1::Offset& offset : offsets) out.push_back({offset.start(), offset.end()});
  return out;
}

// Values of dimension `dim` onwards starting at flat index `offset`, as nested arrays.
template <typename T>
json Nest(const std::vector<T>& values, const std::vector<int64_t>& shape, size_t dim,
          int64_t offset) {
  if (dim == shape.size()) return values[offset];
  int64_t stride = 1;
  for (size_t i = dim + 1; i < shape.size(); ++i) stride *= shape[i];
  json out = json::array();
  for (int64_t i = 0; i < shape[dim]; ++i)
    out.push_back(Nest(values, shape, dim + 1, offset + i * stride));
  return out;
}

}  // namespace

json TokensToJson(const v1::Tokens& tokens) {
  return {
      {"tokens", std::vector<std::string>(tokens.tokens().begin(), tokens.tokens().end())},
      {"input_ids", std::vector<int64_t>(tokens.input_ids().begin(), tokens.input_ids().end())},
      {"token_type_ids",
       std::vector<int64_t>(tokens.token_type_ids().begin(), tokens.token_type_ids().end())},
      {"special_tokens_mask", std::vector<int32_t>(tokens.special_tokens_mask().begin(),
                                                   tokens.special_tokens_mask().end())},
      {"offsets", OffsetsToJson(tokens.offsets())},
      {"byte_offsets", OffsetsToJson(tokens.byte_offsets())},
      {"word_ids", std::vector<int64_t>(tokens.word_ids().begin(), tokens.word_ids().end())},
      {"sequence_ids",
       std::vector<int32_t>(tokens.sequence_ids().begin(), tokens.sequence_ids().end())},
  };
}

json ModelInfoToJson(const v1::ModelInfo& info) {
  return {
      {"name", info.name()},
      {"architecture", info.architecture()},
      {"architectures",
       std::vector<std::string>(info.architectures().begin(), info.architectures().end())},
      {"num_hidden_layers", info.num_hidden_layers()},
      {"num_attention_heads", info.num_attention_heads()},
      {"num_key_value_heads", info.num_key_value_heads()},
      {"hidden_size", info.hidden_size()},
      {"head_dim", info.head_dim()},
      {"vocab_size", info.vocab_size()},
      {"max_position_embeddings", info.max_position_embeddings()},
      {"tokenizer_kind", info.tokenizer_kind()},
      {"has_classifier", info.has_classifier()},
      {"labels", std::vector<std::string>(info.labels().begin(), info.labels().end())},
      {"weights_checksum", info.weights_checksum()},
      {"is_causal", info.is_causal()},
      {"is_encoder_decoder", info.is_encoder_decoder()},
      {"decoder_layers", info.decoder_layers()},
      {"decoder_attention_heads", info.decoder_attention_heads()},
      {"layer_sliding_windows", std::vector<int32_t>(info.layer_sliding_windows().begin(),
                                                     info.layer_sliding_windows().end())},
      {"normalization",
       {{"lowercase", info.normalization().lowercase()},
        {"strip_accents", info.normalization().strip_accents()},
        {"unicode_form", info.normalization().unicode_form()},
        {"description", info.normalization().description()}}},
  };
}

absl::Status TensorWriter::AddTo(json& object, const std::string& key, const DecodedTensor& tensor,
                                 const std::string& file_prefix) const {
  ATTNSCOPE_ASSIGN_OR_RETURN(object[key], Render(tensor, file_prefix + key));
  return absl::OkStatus();
}

absl::Status TensorWriter::AddTo(json& object, const std::string& key,
                                 const std::optional<DecodedTensor>& tensor,
                                 const std::string& file_prefix) const {
  return tensor.has_value() ? AddTo(object, key, *tensor, file_prefix) : absl::OkStatus();
}

absl::StatusOr<json> TensorWriter::Render(const DecodedTensor& tensor,
                                          const std::string& name) const {
  json out = {{"shape", tensor.shape},
              {"dim_names", tensor.dim_names},
              {"dtype", DTypeName(tensor.wire_dtype)}};
  if (npy_dir_.empty()) {
    out["values"] = tensor.is_int() ? Nest(tensor.int_values, tensor.shape, 0, 0)
                                    : Nest(tensor.values, tensor.shape, 0, 0);
    return out;
  }
  const std::string path = (std::filesystem::path(npy_dir_) / (name + ".npy")).string();
  ATTNSCOPE_RETURN_IF_ERROR(WriteNpy(tensor, path));
  out["npy"] = path;
  return out;
}

absl::StatusOr<json> AttentionToJson(const AttentionResult& result, const TensorWriter& writer) {
  json out = {{"model", result.model},
              {"tokens", TokensToJson(result.tokens)},
              {"layers", result.layers},
              {"heads", result.heads},
              {"query_start", result.query_start},
              {"key_start", result.key_start}};
  ATTNSCOPE_RETURN_IF_ERROR(writer.AddTo(out, "attentions", result.attentions));
  ATTNSCOPE_RETURN_IF_ERROR(writer.AddTo(out, "scores", result.scores));
  ATTNSCOPE_RETURN_IF_ERROR(writer.AddTo(out, "top_k_indices", result.top_k_indices));
  ATTNSCOPE_RETURN_IF_ERROR(writer.AddTo(out, "rollout", result.rollout));
  if (!result.decoder.has_value()) return out;
  const AttentionResult::Decoder& decoder = *result.decoder;
  out["decoder_tokens"] = TokensToJson(decoder.tokens);
  out["decoder_labels"] = TokensToJson(decoder.labels);
  out["decoder_layers"] = decoder.layers;
  out["decoder_heads"] = decoder.heads;
  out["decoder_query_start"] = decoder.query_start;
  out["decoder_key_start"] = decoder.key_start;
  ATTNSCOPE_RETURN_IF_ERROR(writer.AddTo(out, "decoder_attentions", decoder.attentions));
  ATTNSCOPE_RETURN_IF_ERROR(writer.AddTo(out, "decoder_top_k_indices", decoder.top_k_indices));
  ATTNSCOPE_RETURN_IF_ERROR(writer.AddTo(out, "cross_attentions", decoder.cross_attentions));
  ATTNSCOPE_RETURN_IF_ERROR(writer.AddTo(out, "cross_top_k_indices", decoder.cross_top_k_indices));
  return out;
}

}  // namespace attnscope::cli

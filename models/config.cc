#include "models/config.h"

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/file_util.h"
#include "models/json_util.h"
#include "nlohmann/json.hpp"

namespace attnscope {
namespace {

using Json = nlohmann::json;

// Reads config.json fields with one error style: "config 'file': field 'x': expected Y, got Z".
class FieldReader {
 public:
  FieldReader(const Json& json, absl::string_view source) : json_(json), source_(source) {}

  absl::Status Error(absl::string_view field, absl::string_view expected,
                     absl::string_view got) const {
    return absl::InvalidArgumentError(absl::StrCat("config '", source_, "': field '", field,
                                                   "': expected ", expected, ", got ", got));
  }

  // A positive integer that must be present.
  absl::StatusOr<int64_t> RequiredPositive(const char* field) const {
    ATTNSCOPE_ASSIGN_OR_RETURN(std::optional<int64_t> value, OptionalInt(field));
    if (!value.has_value()) return Error(field, "a positive integer", "nothing (field missing)");
    if (*value <= 0) return Error(field, "a positive integer", std::to_string(*value));
    return *value;
  }

  absl::StatusOr<std::optional<int64_t>> OptionalInt(const char* field) const {
    auto it = json_.find(field);
    if (it == json_.end() || it->is_null()) return std::optional<int64_t>();
    if (!it->is_number_integer()) return Error(field, "an integer", it->dump());
    return std::optional<int64_t>(it->get<int64_t>());
  }

  absl::StatusOr<int64_t> IntOr(const char* field, int64_t fallback) const {
    ATTNSCOPE_ASSIGN_OR_RETURN(std::optional<int64_t> value, OptionalInt(field));
    return value.value_or(fallback);
  }

  absl::StatusOr<double> DoubleOr(const char* field, double fallback) const {
    auto it = json_.find(field);
    if (it == json_.end() || it->is_null()) return fallback;
    if (!it->is_number()) return Error(field, "a number", it->dump());
    return it->get<double>();
  }

  absl::StatusOr<bool> BoolOr(const char* field, bool fallback) const {
    auto it = json_.find(field);
    if (it == json_.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) return Error(field, "true or false", it->dump());
    return it->get<bool>();
  }

  absl::StatusOr<std::string> StringOr(const char* field, std::string fallback) const {
    auto it = json_.find(field);
    if (it == json_.end() || it->is_null()) return fallback;
    if (!it->is_string()) return Error(field, "a string", it->dump());
    return it->get<std::string>();
  }

 private:
  const Json& json_;
  absl::string_view source_;
};

// The BART family's config.json (MarianConfig, BartConfig): the encoder's sizes into the common
// fields, the decoder's into decoder_*.
absl::StatusOr<ModelConfig> ParseEncoderDecoder(const FieldReader& reader, ModelConfig config) {
  const bool marian = config.architecture == Architecture::kMarian;
  config.is_encoder_decoder = true;
  ATTNSCOPE_ASSIGN_OR_RETURN(config.vocab_size, reader.RequiredPositive("vocab_size"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_size, reader.RequiredPositive("d_model"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_hidden_layers, reader.RequiredPositive("encoder_layers"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.decoder_layers, reader.RequiredPositive("decoder_layers"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_attention_heads,
                             reader.RequiredPositive("encoder_attention_heads"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.decoder_attention_heads,
                             reader.RequiredPositive("decoder_attention_heads"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.intermediate_size, reader.RequiredPositive("encoder_ffn_dim"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.decoder_ffn_dim, reader.RequiredPositive("decoder_ffn_dim"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.max_position_embeddings,
                             reader.IntOr("max_position_embeddings", marian ? 512 : 1024));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_act,
                             reader.StringOr("activation_function", marian ? "swish" : "gelu"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.scale_embedding, reader.BoolOr("scale_embedding", false));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.tie_word_embeddings,
                             reader.BoolOr("tie_word_embeddings", true));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.pad_token_id, reader.IntOr("pad_token_id", 1));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.bos_token_id, reader.IntOr("bos_token_id", 0));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.eos_token_id, reader.IntOr("eos_token_id", 2));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.decoder_start_token_id,
                             reader.IntOr("decoder_start_token_id", config.pad_token_id));
  config.layer_norm_eps = 1e-5;  // nn.LayerNorm's default, which both classes use
  config.type_vocab_size = 0;
  config.num_key_value_heads = config.num_attention_heads;
  if (config.max_position_embeddings <= 0) {
    return reader.Error("max_position_embeddings", "a positive integer",
                        std::to_string(config.max_position_embeddings));
  }
  for (const auto& [field, heads] :
       {std::pair<const char*, int64_t>{"encoder_attention_heads", config.num_attention_heads},
        std::pair<const char*, int64_t>{"decoder_attention_heads",
                                        config.decoder_attention_heads}}) {
    if (config.hidden_size % heads != 0) {
      return reader.Error(field, absl::StrCat("a divisor of d_model (", config.hidden_size, ")"),
                          std::to_string(heads));
    }
  }
  config.head_dim = config.hidden_size / config.num_attention_heads;
  if (marian && config.hidden_size % 2 != 0) {
    return reader.Error("d_model", "an even number (sinusoidal positions pair sin and cos)",
                        std::to_string(config.hidden_size));
  }
  if (config.hidden_act == "silu") config.hidden_act = "swish";
  if (config.hidden_act != "gelu" && config.hidden_act != "swish" && config.hidden_act != "relu") {
    return reader.Error("activation_function", "\"gelu\", \"swish\" (\"silu\") or \"relu\"",
                        absl::StrCat("\"", config.hidden_act, "\""));
  }
  if (!config.tie_word_embeddings) {
    return reader.Error("tie_word_embeddings", "true (lm_head is the shared embeddings)", "false");
  }
  return config;
}

// T5Config (transformers' configuration_t5.py): its own field names, mapped onto the common ones.
absl::StatusOr<ModelConfig> ParseT5(const FieldReader& reader, ModelConfig config) {
  config.is_encoder_decoder = true;
  ATTNSCOPE_ASSIGN_OR_RETURN(config.vocab_size, reader.RequiredPositive("vocab_size"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_size, reader.RequiredPositive("d_model"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.head_dim, reader.RequiredPositive("d_kv"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.intermediate_size, reader.RequiredPositive("d_ff"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_hidden_layers, reader.RequiredPositive("num_layers"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_attention_heads, reader.RequiredPositive("num_heads"));
  // T5Config: num_decoder_layers defaults to num_layers.
  ATTNSCOPE_ASSIGN_OR_RETURN(config.decoder_layers,
                             reader.IntOr("num_decoder_layers", config.num_hidden_layers));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.relative_attention_num_buckets,
                             reader.IntOr("relative_attention_num_buckets", 32));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.relative_attention_max_distance,
                             reader.IntOr("relative_attention_max_distance", 128));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.rms_norm_eps, reader.DoubleOr("layer_norm_epsilon", 1e-6));
  ATTNSCOPE_ASSIGN_OR_RETURN(const std::string feed_forward_proj,
                             reader.StringOr("feed_forward_proj", "relu"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.tie_word_embeddings,
                             reader.BoolOr("tie_word_embeddings", true));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.pad_token_id, reader.IntOr("pad_token_id", 0));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.eos_token_id, reader.IntOr("eos_token_id", 1));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.bos_token_id, reader.IntOr("bos_token_id", -1));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.decoder_start_token_id,
                             reader.IntOr("decoder_start_token_id", config.pad_token_id));
  // Relative positions need no table, so T5Config has no limit; n_positions (512 in the original
  // checkpoints' config.json) bounds what the service accepts.
  ATTNSCOPE_ASSIGN_OR_RETURN(config.max_position_embeddings, reader.IntOr("n_positions", 512));
  config.decoder_attention_heads = config.num_attention_heads;
  config.num_key_value_heads = config.num_attention_heads;
  config.decoder_ffn_dim = config.intermediate_size;
  config.type_vocab_size = 0;
  for (const auto& [field, value] :
       {std::pair<const char*, int64_t>{"num_decoder_layers", config.decoder_layers},
        std::pair<const char*, int64_t>{"relative_attention_num_buckets",
                                        config.relative_attention_num_buckets},
        std::pair<const char*, int64_t>{"relative_attention_max_distance",
                                        config.relative_attention_max_distance},
        std::pair<const char*, int64_t>{"n_positions", config.max_position_embeddings}}) {
    if (value <= 0) return reader.Error(field, "a positive integer", std::to_string(value));
  }
  // _relative_position_bucket gives half the buckets to each direction in the encoder and half of
  // those to exact distances, and takes log(max_distance / max_exact) beyond them.
  if (config.relative_attention_num_buckets < 4) {
    return reader.Error("relative_attention_num_buckets",
                        "at least 4 (2 directions of exact and logarithmic buckets)",
                        std::to_string(config.relative_attention_num_buckets));
  }
  if (config.relative_attention_max_distance <= config.relative_attention_num_buckets / 2) {
    return reader.Error(
        "relative_attention_max_distance",
        absl::StrCat("more than relative_attention_num_buckets / 2 (",
                     config.relative_attention_num_buckets / 2, ", the exact buckets)"),
        std::to_string(config.relative_attention_max_distance));
  }
  if (config.rms_norm_eps <= 0) {
    return reader.Error("layer_norm_epsilon", "a positive number",
                        std::to_string(config.rms_norm_eps));
  }
  // T5Config's two documented projections: "relu" (T5 v1.0) and "gated-gelu" (T5 v1.1, Flan-T5),
  // whose activation transformers maps to gelu_new.
  if (feed_forward_proj == "relu") {
    config.hidden_act = "relu";
    config.gated_feed_forward = false;
  } else if (feed_forward_proj == "gated-gelu") {
    config.hidden_act = "gelu_new";
    config.gated_feed_forward = true;
  } else {
    return reader.Error("feed_forward_proj", "\"relu\" or \"gated-gelu\"",
                        absl::StrCat("\"", feed_forward_proj, "\""));
  }
  return config;
}

}  // namespace

absl::string_view ArchitectureName(Architecture architecture) {
  switch (architecture) {
    case Architecture::kBert:
      return "bert";
    case Architecture::kLlama:
      return "llama";
    case Architecture::kMarian:
      return "marian";
    case Architecture::kBart:
      return "bart";
    case Architecture::kT5:
      return "t5";
  }
  return "unknown";
}

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text,
                                             absl::string_view source) {
  Json json = Json::parse(json_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config '", source, "': expected a JSON object, got malformed JSON"));
  }
  ATTNSCOPE_RETURN_IF_ERROR(CheckJsonDepth(json, absl::StrCat("config '", source, "'")));
  FieldReader reader(json, source);
  ModelConfig config;
  ATTNSCOPE_ASSIGN_OR_RETURN(config.model_type, reader.StringOr("model_type", ""));
  if (config.model_type == "bert") {
    config.architecture = Architecture::kBert;
  } else if (config.model_type == "llama") {
    config.architecture = Architecture::kLlama;
  } else if (config.model_type == "marian") {
    config.architecture = Architecture::kMarian;
  } else if (config.model_type == "bart") {
    config.architecture = Architecture::kBart;
  } else if (config.model_type == "t5") {
    config.architecture = Architecture::kT5;
  } else {
    return reader.Error(
        "model_type",
        "one of the supported architectures \"bert\", \"llama\", \"marian\", \"bart\", \"t5\"",
        absl::StrCat("\"", config.model_type, "\""));
  }
  if (auto it = json.find("architectures"); it != json.end() && it->is_array()) {
    for (const Json& name : *it) {
      if (name.is_string()) config.architectures.push_back(name.get<std::string>());
    }
  }
  if (config.architecture == Architecture::kMarian || config.architecture == Architecture::kBart) {
    return ParseEncoderDecoder(reader, std::move(config));
  }
  if (config.architecture == Architecture::kT5) return ParseT5(reader, std::move(config));
  const bool is_bert = config.architecture == Architecture::kBert;

  ATTNSCOPE_ASSIGN_OR_RETURN(config.vocab_size, reader.RequiredPositive("vocab_size"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_size, reader.RequiredPositive("hidden_size"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_hidden_layers,
                             reader.RequiredPositive("num_hidden_layers"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_attention_heads,
                             reader.RequiredPositive("num_attention_heads"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.intermediate_size,
                             reader.RequiredPositive("intermediate_size"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.max_position_embeddings,
                             reader.IntOr("max_position_embeddings", is_bert ? 512 : 2048));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_key_value_heads,
                             reader.IntOr("num_key_value_heads", config.num_attention_heads));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.type_vocab_size, reader.IntOr("type_vocab_size", 2));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.layer_norm_eps, reader.DoubleOr("layer_norm_eps", 1e-12));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.rms_norm_eps, reader.DoubleOr("rms_norm_eps", 1e-6));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.rope_theta, reader.DoubleOr("rope_theta", 10000.0));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_act,
                             reader.StringOr("hidden_act", is_bert ? "gelu" : "silu"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.tie_word_embeddings,
                             reader.BoolOr("tie_word_embeddings", /*fallback=*/!is_bert));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.pad_token_id, reader.IntOr("pad_token_id", is_bert ? 0 : -1));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.bos_token_id, reader.IntOr("bos_token_id", -1));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.eos_token_id, reader.IntOr("eos_token_id", -1));

  if (config.max_position_embeddings <= 0) {
    return reader.Error("max_position_embeddings", "a positive integer",
                        std::to_string(config.max_position_embeddings));
  }
  if (config.hidden_size % config.num_attention_heads != 0) {
    return reader.Error(
        "hidden_size",
        absl::StrCat("a multiple of num_attention_heads (", config.num_attention_heads, ")"),
        std::to_string(config.hidden_size));
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(
      config.head_dim, reader.IntOr("head_dim", config.hidden_size / config.num_attention_heads));
  if (config.head_dim <= 0) {
    return reader.Error("head_dim", "a positive integer", std::to_string(config.head_dim));
  }
  if (config.num_key_value_heads <= 0 ||
      config.num_attention_heads % config.num_key_value_heads != 0) {
    return reader.Error("num_key_value_heads",
                        absl::StrCat("a positive divisor of num_attention_heads (",
                                     config.num_attention_heads, ")"),
                        std::to_string(config.num_key_value_heads));
  }
  if (is_bert && config.num_key_value_heads != config.num_attention_heads) {
    return reader.Error(
        "num_key_value_heads",
        absl::StrCat("num_attention_heads (", config.num_attention_heads, ") for bert"),
        std::to_string(config.num_key_value_heads));
  }
  if (is_bert && config.head_dim * config.num_attention_heads != config.hidden_size) {
    return reader.Error("head_dim", "hidden_size / num_attention_heads for bert",
                        std::to_string(config.head_dim));
  }
  if (config.architecture == Architecture::kLlama && config.head_dim % 2 != 0) {
    return reader.Error("head_dim", "an even number (RoPE rotates pairs of dimensions)",
                        std::to_string(config.head_dim));
  }
  if (is_bert ? config.hidden_act != "gelu" : config.hidden_act != "silu") {
    return reader.Error("hidden_act", is_bert ? "\"gelu\"" : "\"silu\"",
                        absl::StrCat("\"", config.hidden_act, "\""));
  }

  if (auto it = json.find("id2label"); it != json.end() && it->is_object()) {
    for (const auto& [key, label] : it->items()) {
      int64_t index = 0;
      if (!absl::SimpleAtoi(key, &index) || index < 0 || !label.is_string()) {
        return reader.Error("id2label", "an object of \"index\": \"label\"",
                            absl::StrCat("\"", key, "\": ", label.dump()));
      }
      config.id2label[index] = label.get<std::string>();
    }
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(
      config.num_labels, reader.IntOr("num_labels", static_cast<int64_t>(config.id2label.size())));
  return config;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  const std::string path = JoinPath(model_dir, "config.json");
  ATTNSCOPE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseModelConfig(text, path);
}

}  // namespace attnscope

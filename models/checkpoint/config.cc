#include "models/checkpoint/config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/json_util.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace attnscope {
namespace {

using Json = nlohmann::json;

// Upper bounds of config.json's sizes, checked before anything is allocated from them. Each is
// far above every published checkpoint (in brackets) and below 2^31, since ModelInfo carries them
// as int32; the weights file then has to agree with the exact values.
constexpr int64_t kMaxVocabSize = 1 << 24;         // [256,000: Gemma; 250,112: mT5]
constexpr int64_t kMaxHiddenSize = 1 << 16;        // [16,384: Llama 3.1 405B]
constexpr int64_t kMaxLayers = 1024;               // [126: Llama 3.1 405B]
constexpr int64_t kMaxHeads = 1024;                // [128]
constexpr int64_t kMaxHeadDim = 4096;              // [256]
constexpr int64_t kMaxIntermediateSize = 1 << 18;  // [65,536: T5 11B]
constexpr int64_t kMaxPositions = 1 << 20;         // [1,010,000: Qwen2.5 1M]
constexpr int64_t kMaxTypeVocabSize = 1024;        // [2: BERT]
constexpr int64_t kMaxRelativeBuckets = 4096;      // [32: T5]

// Reads config.json fields with one error style: "config 'file': field 'x': expected Y, got Z",
// quoting at most a short excerpt of what the file holds.
class FieldReader {
 public:
  FieldReader(const Json& json, absl::string_view source) : json_(json), source_(source) {}

  absl::Status Error(absl::string_view field, absl::string_view expected,
                     absl::string_view got) const {
    return absl::InvalidArgumentError(absl::StrCat("config '", source_, "': field '", field,
                                                   "': expected ", expected, ", got ", got));
  }

  // An integer in [low, high]; `fallback` when config.json omits it (or has null), an error when
  // there is no fallback.
  absl::StatusOr<int64_t> Int(const char* field, int64_t low, int64_t high,
                              std::optional<int64_t> fallback = std::nullopt) const {
    const std::string expected = absl::StrCat(low, " to ", high);
    auto it = json_.find(field);
    if (it == json_.end() || it->is_null()) {
      if (fallback.has_value()) return *fallback;
      return Error(field, expected, "nothing (field missing)");
    }
    if (!it->is_number_integer()) {
      return Error(field, absl::StrCat("an integer, ", expected), Got(*it));
    }
    // Above 2^63 the value wraps when read as int64_t: compare unsigned values as they are.
    if (it->is_number_unsigned() &&
        it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Error(field, expected, Got(*it));
    }
    const int64_t value = it->get<int64_t>();
    if (value < low || value > high) return Error(field, expected, std::to_string(value));
    return value;
  }

  // A size: an integer in [1, high].
  absl::StatusOr<int64_t> Size(const char* field, int64_t high,
                               std::optional<int64_t> fallback = std::nullopt) const {
    return Int(field, 1, high, fallback);
  }

  // A token id: in [0, vocab_size), or -1 (or null) for none when `allow_none`. Newer configs
  // list several end-of-sequence ids; every one must be in range, the first is kept.
  absl::StatusOr<int64_t> TokenId(const char* field, int64_t fallback, int64_t vocab_size,
                                  bool allow_none = true) const {
    const std::string expected = absl::StrCat("an id in [0, ", vocab_size, ") (vocab_size)",
                                              allow_none ? " or -1 for none" : "");
    auto it = json_.find(field);
    if (it == json_.end() || it->is_null()) return fallback;
    std::vector<const Json*> ids;
    if (it->is_array() && !it->empty()) {
      for (const Json& id : *it) ids.push_back(&id);
    } else {
      ids.push_back(&*it);
    }
    for (const Json* id : ids) {
      if (!id->is_number_integer()) return Error(field, expected, Got(*it));
      const bool too_large =
          id->is_number_unsigned() && id->get<uint64_t>() >= static_cast<uint64_t>(vocab_size);
      const int64_t value = id->get<int64_t>();
      if (too_large || value < (allow_none ? -1 : 0) || value >= vocab_size ||
          (value == -1 && ids.size() > 1)) {
        return Error(field, expected, Got(*it));
      }
    }
    return ids.front()->get<int64_t>();
  }

  // Every id of a token id field that may list several, checked as TokenId checks them:
  // {fallback} when absent, none for -1.
  absl::StatusOr<std::vector<int64_t>> TokenIds(const char* field, int64_t fallback,
                                                int64_t vocab_size) const {
    ATTNSCOPE_ASSIGN_OR_RETURN(const int64_t first, TokenId(field, fallback, vocab_size));
    std::vector<int64_t> ids;
    auto it = json_.find(field);
    if (it != json_.end() && it->is_array()) {
      for (const Json& id : *it) ids.push_back(id.get<int64_t>());
    } else if (first >= 0) {
      ids.push_back(first);
    }
    return ids;
  }

  // A finite number > 0, and at least `low` when `low` > 0.
  absl::StatusOr<double> Positive(const char* field, double fallback, double low = 0) const {
    auto it = json_.find(field);
    if (it == json_.end() || it->is_null()) return fallback;
    const std::string expected =
        low > 0 ? absl::StrCat("a finite number of at least ", low) : "a finite number > 0";
    if (!it->is_number()) return Error(field, expected, Got(*it));
    const double value = it->get<double>();
    if (!std::isfinite(value) || value <= 0 || value < low) return Error(field, expected, Got(*it));
    return value;
  }

  absl::StatusOr<bool> BoolOr(const char* field, bool fallback) const {
    auto it = json_.find(field);
    if (it == json_.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) return Error(field, "true or false", Got(*it));
    return it->get<bool>();
  }

  // OK when config.json omits `field` or has null; otherwise an error that expects `expected`.
  absl::Status Absent(const char* field, absl::string_view expected) const {
    auto it = json_.find(field);
    if (it == json_.end() || it->is_null()) return absl::OkStatus();
    return Error(field, expected, Got(*it));
  }

  absl::StatusOr<std::string> StringOr(const char* field, std::string fallback) const {
    auto it = json_.find(field);
    if (it == json_.end() || it->is_null()) return fallback;
    if (!it->is_string()) return Error(field, "a string", Got(*it));
    return it->get<std::string>();
  }

  // What the file holds, as an error message may quote it.
  static std::string Got(const Json& value) { return JsonExcerpt(value); }
  static std::string Quoted(absl::string_view text) {
    return absl::StrCat("\"", Excerpt(text), "\"");
  }

 private:
  const Json& json_;
  absl::string_view source_;
};

// The ids every architecture reads, checked against vocab_size.
absl::Status ReadTokenIds(const FieldReader& reader, int64_t pad, int64_t bos, int64_t eos,
                          ModelConfig& config) {
  ATTNSCOPE_ASSIGN_OR_RETURN(config.pad_token_id,
                             reader.TokenId("pad_token_id", pad, config.vocab_size));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.bos_token_id,
                             reader.TokenId("bos_token_id", bos, config.vocab_size));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.eos_token_ids,
                             reader.TokenIds("eos_token_id", eos, config.vocab_size));
  config.eos_token_id = config.eos_token_ids.empty() ? -1 : config.eos_token_ids.front();
  return absl::OkStatus();
}

// The BART family's config.json (MarianConfig, BartConfig): the encoder's sizes into the common
// fields, the decoder's into decoder_*.
absl::StatusOr<ModelConfig> ParseEncoderDecoder(const FieldReader& reader, ModelConfig config) {
  const bool marian = config.architecture == Architecture::kMarian;
  config.is_encoder_decoder = true;
  ATTNSCOPE_ASSIGN_OR_RETURN(config.vocab_size, reader.Size("vocab_size", kMaxVocabSize));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_size, reader.Size("d_model", kMaxHiddenSize));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_hidden_layers, reader.Size("encoder_layers", kMaxLayers));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.decoder_layers, reader.Size("decoder_layers", kMaxLayers));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_attention_heads,
                             reader.Size("encoder_attention_heads", kMaxHeads));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.decoder_attention_heads,
                             reader.Size("decoder_attention_heads", kMaxHeads));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.intermediate_size,
                             reader.Size("encoder_ffn_dim", kMaxIntermediateSize));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.decoder_ffn_dim,
                             reader.Size("decoder_ffn_dim", kMaxIntermediateSize));
  ATTNSCOPE_ASSIGN_OR_RETURN(
      config.max_position_embeddings,
      reader.Size("max_position_embeddings", kMaxPositions, marian ? 512 : 1024));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_act,
                             reader.StringOr("activation_function", marian ? "swish" : "gelu"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.scale_embedding, reader.BoolOr("scale_embedding", false));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.tie_word_embeddings,
                             reader.BoolOr("tie_word_embeddings", true));
  ATTNSCOPE_RETURN_IF_ERROR(ReadTokenIds(reader, /*pad=*/1, /*bos=*/0, /*eos=*/2, config));
  ATTNSCOPE_ASSIGN_OR_RETURN(
      config.decoder_start_token_id,
      reader.TokenId("decoder_start_token_id", config.pad_token_id, config.vocab_size,
                     /*allow_none=*/false));
  if (config.decoder_start_token_id < 0) {
    return reader.Error("decoder_start_token_id",
                        absl::StrCat("an id in [0, ", config.vocab_size,
                                     ") (the decoder's first token; it defaults to pad_token_id)"),
                        std::to_string(config.decoder_start_token_id));
  }
  config.layer_norm_eps = 1e-5;  // nn.LayerNorm's default, which both classes use
  config.type_vocab_size = 0;
  config.num_key_value_heads = config.num_attention_heads;
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
                        FieldReader::Quoted(config.hidden_act));
  }
  if (!config.tie_word_embeddings) {
    return reader.Error("tie_word_embeddings", "true (lm_head is the shared embeddings)", "false");
  }
  return config;
}

// T5Config (transformers' configuration_t5.py): its own field names, mapped onto the common ones.
absl::StatusOr<ModelConfig> ParseT5(const FieldReader& reader, ModelConfig config) {
  config.is_encoder_decoder = true;
  ATTNSCOPE_ASSIGN_OR_RETURN(config.vocab_size, reader.Size("vocab_size", kMaxVocabSize));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_size, reader.Size("d_model", kMaxHiddenSize));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.head_dim, reader.Size("d_kv", kMaxHeadDim));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.intermediate_size, reader.Size("d_ff", kMaxIntermediateSize));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_hidden_layers, reader.Size("num_layers", kMaxLayers));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_attention_heads, reader.Size("num_heads", kMaxHeads));
  // T5Config: num_decoder_layers defaults to num_layers.
  ATTNSCOPE_ASSIGN_OR_RETURN(config.decoder_layers, reader.Size("num_decoder_layers", kMaxLayers,
                                                                config.num_hidden_layers));
  // _relative_position_bucket gives half the buckets to each direction in the encoder and half of
  // those to exact distances, and takes log(max_distance / max_exact) beyond them.
  ATTNSCOPE_ASSIGN_OR_RETURN(
      config.relative_attention_num_buckets,
      reader.Int("relative_attention_num_buckets", 4, kMaxRelativeBuckets, /*fallback=*/32));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.relative_attention_max_distance,
                             reader.Size("relative_attention_max_distance", kMaxPositions, 128));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.rms_norm_eps, reader.Positive("layer_norm_epsilon", 1e-6));
  ATTNSCOPE_ASSIGN_OR_RETURN(const std::string feed_forward_proj,
                             reader.StringOr("feed_forward_proj", "relu"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.tie_word_embeddings,
                             reader.BoolOr("tie_word_embeddings", true));
  ATTNSCOPE_RETURN_IF_ERROR(ReadTokenIds(reader, /*pad=*/0, /*bos=*/-1, /*eos=*/1, config));
  ATTNSCOPE_ASSIGN_OR_RETURN(
      config.decoder_start_token_id,
      reader.TokenId("decoder_start_token_id", config.pad_token_id, config.vocab_size,
                     /*allow_none=*/false));
  if (config.decoder_start_token_id < 0) {
    return reader.Error("decoder_start_token_id",
                        absl::StrCat("an id in [0, ", config.vocab_size,
                                     ") (the decoder's first token; it defaults to pad_token_id)"),
                        std::to_string(config.decoder_start_token_id));
  }
  // Relative positions need no table, so T5Config has no limit; n_positions (512 in the original
  // checkpoints' config.json) bounds what the service accepts.
  ATTNSCOPE_ASSIGN_OR_RETURN(config.max_position_embeddings,
                             reader.Size("n_positions", kMaxPositions, 512));
  config.decoder_attention_heads = config.num_attention_heads;
  config.num_key_value_heads = config.num_attention_heads;
  config.decoder_ffn_dim = config.intermediate_size;
  config.type_vocab_size = 0;
  if (config.relative_attention_max_distance <= config.relative_attention_num_buckets / 2) {
    return reader.Error(
        "relative_attention_max_distance",
        absl::StrCat("more than relative_attention_num_buckets / 2 (",
                     config.relative_attention_num_buckets / 2, ", the exact buckets)"),
        std::to_string(config.relative_attention_max_distance));
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
                        FieldReader::Quoted(feed_forward_proj));
  }
  return config;
}

// GPT2Config (transformers' configuration_gpt2.py): its own field names, mapped onto the common
// ones.
absl::StatusOr<ModelConfig> ParseGpt2(const FieldReader& reader, ModelConfig config) {
  ATTNSCOPE_ASSIGN_OR_RETURN(config.vocab_size, reader.Size("vocab_size", kMaxVocabSize, 50257));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_size, reader.Size("n_embd", kMaxHiddenSize, 768));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_hidden_layers, reader.Size("n_layer", kMaxLayers, 12));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_attention_heads, reader.Size("n_head", kMaxHeads, 12));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.intermediate_size,
                             reader.Size("n_inner", kMaxIntermediateSize,
                                         std::min(4 * config.hidden_size, kMaxIntermediateSize)));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.max_position_embeddings,
                             reader.Size("n_positions", kMaxPositions, 1024));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.layer_norm_eps, reader.Positive("layer_norm_epsilon", 1e-5));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_act, reader.StringOr("activation_function", "gelu_new"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.tie_word_embeddings,
                             reader.BoolOr("tie_word_embeddings", true));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.scale_attn_weights, reader.BoolOr("scale_attn_weights", true));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.scale_attn_by_inverse_layer_idx,
                             reader.BoolOr("scale_attn_by_inverse_layer_idx", false));
  ATTNSCOPE_RETURN_IF_ERROR(ReadTokenIds(reader, /*pad=*/-1, /*bos=*/-1, /*eos=*/-1, config));
  if (config.hidden_size % config.num_attention_heads != 0) {
    return reader.Error("n_embd",
                        absl::StrCat("a multiple of n_head (", config.num_attention_heads, ")"),
                        std::to_string(config.hidden_size));
  }
  config.head_dim = config.hidden_size / config.num_attention_heads;
  config.num_key_value_heads = config.num_attention_heads;
  config.type_vocab_size = 0;
  // ACT2FN's names for what GPT-2 checkpoints use; "gelu_new" and "gelu_pytorch_tanh" are the
  // same tanh approximation.
  if (config.hidden_act != "gelu_new" && config.hidden_act != "gelu_pytorch_tanh" &&
      config.hidden_act != "gelu" && config.hidden_act != "relu" && config.hidden_act != "silu") {
    return reader.Error("activation_function",
                        "\"gelu_new\", \"gelu_pytorch_tanh\", \"gelu\", \"relu\" or \"silu\"",
                        FieldReader::Quoted(config.hidden_act));
  }
  return config;
}

// A classifier's labels: id2label, and num_labels (its size unless config.json says otherwise).
absl::Status ReadLabels(const FieldReader& reader, const Json& json, ModelConfig& config) {
  if (auto it = json.find("id2label"); it != json.end() && it->is_object()) {
    for (const auto& [key, label] : it->items()) {
      int64_t index = 0;
      // transformers numbers the labels 0..N-1; an index beyond them has no classifier row.
      if (!absl::SimpleAtoi(key, &index) || index < 0 ||
          index >= static_cast<int64_t>(it->size()) || !label.is_string()) {
        return reader.Error(
            "id2label",
            absl::StrCat("an object of \"index\": \"label\" with indices 0 to ", it->size() - 1),
            absl::StrCat(FieldReader::Quoted(key), ": ", FieldReader::Got(label)));
      }
      config.id2label[index] = label.get<std::string>();
    }
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(
      config.num_labels,
      reader.Int("num_labels", 0, kMaxVocabSize, static_cast<int64_t>(config.id2label.size())));
  return absl::OkStatus();
}

// DistilBertConfig (transformers' configuration_distilbert.py): its own field names, mapped onto
// the common ones.
absl::StatusOr<ModelConfig> ParseDistilBert(const FieldReader& reader, ModelConfig config) {
  ATTNSCOPE_ASSIGN_OR_RETURN(config.vocab_size, reader.Size("vocab_size", kMaxVocabSize, 30522));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_size, reader.Size("dim", kMaxHiddenSize, 768));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_hidden_layers, reader.Size("n_layers", kMaxLayers, 6));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_attention_heads, reader.Size("n_heads", kMaxHeads, 12));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.intermediate_size,
                             reader.Size("hidden_dim", kMaxIntermediateSize, 3072));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.max_position_embeddings,
                             reader.Size("max_position_embeddings", kMaxPositions, 512));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_act, reader.StringOr("activation", "gelu"));
  ATTNSCOPE_RETURN_IF_ERROR(ReadTokenIds(reader, /*pad=*/0, /*bos=*/-1, /*eos=*/-1, config));
  if (config.hidden_size % config.num_attention_heads != 0) {
    return reader.Error("dim",
                        absl::StrCat("a multiple of n_heads (", config.num_attention_heads, ")"),
                        std::to_string(config.hidden_size));
  }
  // bert.cc's fused kernels apply the exact erf GELU, DistilBERT's default.
  if (config.hidden_act != "gelu") {
    return reader.Error("activation", "\"gelu\"", FieldReader::Quoted(config.hidden_act));
  }
  config.head_dim = config.hidden_size / config.num_attention_heads;
  config.num_key_value_heads = config.num_attention_heads;
  config.type_vocab_size = 0;
  // TransformerBlock's nn.LayerNorm(dim, eps=1e-12).
  config.layer_norm_eps = 1e-12;
  config.tie_word_embeddings = false;
  return config;
}

// max_position_embeddings when config.json omits it: the configuration classes' defaults.
int64_t DefaultMaxPositions(Architecture architecture) {
  switch (architecture) {
    case Architecture::kBert:
    case Architecture::kRoberta:
      return 512;
    case Architecture::kQwen2:
    case Architecture::kQwen3:
      return 32768;
    case Architecture::kMistral:
      return 4096 * 32;
    case Architecture::kGemma2:
      return 8192;
    case Architecture::kGemma3:
      return 131072;
    case Architecture::kPhi3:
      return 4096;
    default:
      return 2048;
  }
}

// What sets the Llama family's members apart (the ModelConfig fields qkv_bias, o_proj_bias,
// qk_norm and layer_sliding_windows), as LlamaConfig, Qwen2Config, Qwen3Config and MistralConfig
// read config.json.
absl::Status ReadDecoderVariant(const FieldReader& reader, const Json& json, ModelConfig& config) {
  const Architecture architecture = config.architecture;
  // Phi3Config has neither field: its projections never have biases.
  const bool reads_biases = architecture != Architecture::kPhi3;
  ATTNSCOPE_ASSIGN_OR_RETURN(const bool attention_bias, reader.BoolOr("attention_bias", false));
  ATTNSCOPE_ASSIGN_OR_RETURN(const bool mlp_bias, reader.BoolOr("mlp_bias", false));
  if (mlp_bias && reads_biases) {
    return reader.Error("mlp_bias", "false (biases in the MLP are not implemented)", "true");
  }
  // Qwen2Attention always has q/k/v biases and never an o_proj one; MistralAttention has none.
  config.qkv_bias = architecture == Architecture::kQwen2 ||
                    (architecture != Architecture::kMistral && reads_biases && attention_bias);
  config.o_proj_bias = architecture != Architecture::kQwen2 &&
                       architecture != Architecture::kMistral && reads_biases && attention_bias;
  config.qk_norm = architecture == Architecture::kQwen3 || architecture == Architecture::kGemma3;

  int64_t window = 0;
  int64_t first_windowed_layer = 0;
  // Gemma's layers alternate without layer_types: Gemma 2's every other one has the window, Gemma
  // 3's all but every sliding_window_pattern-th (Gemma2Config, Gemma3TextConfig).
  int64_t full_attention_every = 0;
  if (architecture == Architecture::kGemma2 || architecture == Architecture::kGemma3) {
    ATTNSCOPE_ASSIGN_OR_RETURN(window, reader.Int("sliding_window", 1, kMaxPositions, 4096));
    full_attention_every = 2;
    if (architecture == Architecture::kGemma3) {
      ATTNSCOPE_ASSIGN_OR_RETURN(full_attention_every,
                                 reader.Int("sliding_window_pattern", 1, kMaxLayers, 6));
    }
  } else if (architecture == Architecture::kMistral || architecture == Architecture::kPhi3) {
    // Phi3Model masks with the window on every layer when sliding_window is set (Phi-3-mini-4k:
    // 2047).
    ATTNSCOPE_ASSIGN_OR_RETURN(window, reader.Int("sliding_window", 1, kMaxPositions, 0));
  } else if (architecture == Architecture::kQwen2 || architecture == Architecture::kQwen3) {
    // Qwen2Config: sliding_window counts only with use_sliding_window (Qwen2.5 and Qwen3 ship it
    // false), and then on the layers from max_window_layers on.
    ATTNSCOPE_ASSIGN_OR_RETURN(const bool use_sliding_window,
                               reader.BoolOr("use_sliding_window", false));
    if (use_sliding_window) {
      ATTNSCOPE_ASSIGN_OR_RETURN(window, reader.Int("sliding_window", 1, kMaxPositions, 4096));
      ATTNSCOPE_ASSIGN_OR_RETURN(first_windowed_layer,
                                 reader.Int("max_window_layers", 0, kMaxLayers, 28));
    }
  }
  config.layer_sliding_windows.assign(config.num_hidden_layers, 0);
  auto layer_types = json.find("layer_types");
  if (layer_types == json.end() || layer_types->is_null()) {
    for (int64_t i = first_windowed_layer; i < config.num_hidden_layers; ++i) {
      const bool full = full_attention_every > 0 && (i + 1) % full_attention_every == 0;
      config.layer_sliding_windows[i] = full ? 0 : window;
    }
    return absl::OkStatus();
  }
  const std::string expected =
      absl::StrCat("a list of num_hidden_layers (", config.num_hidden_layers,
                   ") entries, each \"full_attention\" or \"sliding_attention\"");
  if (!layer_types->is_array() ||
      static_cast<int64_t>(layer_types->size()) != config.num_hidden_layers) {
    return reader.Error("layer_types", expected, FieldReader::Got(*layer_types));
  }
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const Json& type = (*layer_types)[i];
    if (type == "sliding_attention") {
      config.layer_sliding_windows[i] = window;
    } else if (type != "full_attention") {
      return reader.Error("layer_types", expected, FieldReader::Got(type));
    }
  }
  return absl::OkStatus();
}

// rope_scaling: null, or "linear" scaling's factor (RoPE's other scalings, Llama 3's "llama3",
// "dynamic" and YaRN, change the frequencies otherwise: served with plain RoPE the attentions
// would not be transformers'). 1 for none.
absl::StatusOr<double> ReadLinearRopeScaling(const FieldReader& reader, const Json& json) {
  auto it = json.find("rope_scaling");
  if (it == json.end() || it->is_null()) return 1.0;
  constexpr absl::string_view kExpected =
      "null or {\"rope_type\": \"linear\", \"factor\": a number of at least 1} (the other "
      "RoPE scalings are not implemented; plain RoPE would give other attentions than "
      "transformers does)";
  if (!it->is_object()) return reader.Error("rope_scaling", kExpected, FieldReader::Got(*it));
  // transformers reads "type" where older configs wrote it instead of "rope_type".
  const auto type = it->contains("rope_type") ? it->find("rope_type") : it->find("type");
  const auto factor = it->find("factor");
  if (type == it->end() || *type != "linear" || factor == it->end() || !factor->is_number() ||
      !std::isfinite(factor->get<double>()) || factor->get<double>() < 1.0) {
    return reader.Error("rope_scaling", kExpected, FieldReader::Got(*it));
  }
  return factor->get<double>();
}

// A number config.json may give under either of two names (GPTNeoXConfig's rotary_pct and
// rotary_emb_base, which newer transformers calls partial_rotary_factor and rope_theta). Given
// under both, the values must agree: transformers 4's GPTNeoXConfig overwrites the newer name
// with the older one, and later versions read the newer one.
absl::StatusOr<double> PositiveUnderEither(const FieldReader& reader, const Json& json,
                                           const char* name, const char* old_name, double fallback,
                                           double low = 0) {
  ATTNSCOPE_ASSIGN_OR_RETURN(const double old_value, reader.Positive(old_name, fallback, low));
  auto it = json.find(name);
  if (it == json.end() || it->is_null()) return old_value;
  ATTNSCOPE_ASSIGN_OR_RETURN(const double value, reader.Positive(name, fallback, low));
  auto old_it = json.find(old_name);
  if (old_it != json.end() && !old_it->is_null() && value != old_value) {
    return reader.Error(name,
                        absl::StrCat(old_name, "'s value ", old_value,
                                     " (both are given; transformers versions read different "
                                     "ones), or only one of the two"),
                        absl::StrCat(value));
  }
  return value;
}

// GPTNeoXConfig (transformers' configuration_gpt_neox.py: Pythia, GPT-NeoX-20B).
absl::StatusOr<ModelConfig> ParseGptNeox(const FieldReader& reader, const Json& json,
                                         ModelConfig config) {
  ATTNSCOPE_ASSIGN_OR_RETURN(config.vocab_size, reader.Size("vocab_size", kMaxVocabSize, 50432));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_size, reader.Size("hidden_size", kMaxHiddenSize, 6144));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_hidden_layers,
                             reader.Size("num_hidden_layers", kMaxLayers, 44));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_attention_heads,
                             reader.Size("num_attention_heads", kMaxHeads, 64));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.intermediate_size,
                             reader.Size("intermediate_size", kMaxIntermediateSize, 24576));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.max_position_embeddings,
                             reader.Size("max_position_embeddings", kMaxPositions, 2048));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.layer_norm_eps, reader.Positive("layer_norm_eps", 1e-5));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_act, reader.StringOr("hidden_act", "gelu"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.tie_word_embeddings,
                             reader.BoolOr("tie_word_embeddings", false));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.parallel_residual,
                             reader.BoolOr("use_parallel_residual", true));
  ATTNSCOPE_ASSIGN_OR_RETURN(const bool attention_bias, reader.BoolOr("attention_bias", true));
  config.qkv_bias = attention_bias;
  config.o_proj_bias = attention_bias;
  ATTNSCOPE_ASSIGN_OR_RETURN(
      config.rope_theta,
      PositiveUnderEither(reader, json, "rope_theta", "rotary_emb_base", 10000.0, /*low=*/1.0));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.rope_linear_factor, ReadLinearRopeScaling(reader, json));
  ATTNSCOPE_ASSIGN_OR_RETURN(
      const double rotary_pct,
      PositiveUnderEither(reader, json, "partial_rotary_factor", "rotary_pct", 0.25));
  ATTNSCOPE_RETURN_IF_ERROR(ReadTokenIds(reader, /*pad=*/-1, /*bos=*/0, /*eos=*/2, config));
  if (config.hidden_size % config.num_attention_heads != 0) {
    return reader.Error(
        "hidden_size",
        absl::StrCat("a multiple of num_attention_heads (", config.num_attention_heads, ")"),
        std::to_string(config.hidden_size));
  }
  config.head_dim = config.hidden_size / config.num_attention_heads;
  config.num_key_value_heads = config.num_attention_heads;
  config.type_vocab_size = 0;
  // GPTNeoXAttention's int(head_size * rotary_pct), for a fraction (a larger one would overflow).
  config.rotary_dim = rotary_pct > 1.0
                          ? 0
                          : static_cast<int64_t>(static_cast<double>(config.head_dim) * rotary_pct);
  if (config.rotary_dim < 2 || config.rotary_dim % 2 != 0) {
    return reader.Error(
        json.contains("partial_rotary_factor") ? "partial_rotary_factor" : "rotary_pct",
        absl::StrCat("a fraction of at most 1 that rotates an even number of the ", config.head_dim,
                     " dimensions of a head"),
        absl::StrCat(rotary_pct));
  }
  if (config.hidden_act != "gelu" && config.hidden_act != "gelu_new" &&
      config.hidden_act != "gelu_pytorch_tanh" && config.hidden_act != "relu" &&
      config.hidden_act != "silu") {
    return reader.Error("hidden_act",
                        "\"gelu\", \"gelu_new\", \"gelu_pytorch_tanh\", \"relu\" or \"silu\"",
                        FieldReader::Quoted(config.hidden_act));
  }
  return config;
}

// The smallest LongRoPE factor: below it a frequency 1 / (factor * theta^(2i/d)) times a position
// (up to kMaxPositions) overflows float32's angles, and RoPE's cos and sin become NaN.
constexpr double kMinRopeFactor = 1e-30;

// One of LongRoPE's factor lists: `pairs` finite numbers of at least kMinRopeFactor.
absl::StatusOr<std::vector<double>> ReadRopeFactors(const FieldReader& reader, const Json& scaling,
                                                    const char* name, int64_t pairs) {
  const std::string expected = absl::StrCat(
      "rope_scaling's \"", name, "\" as a list of ", pairs,
      " finite numbers of at least 1e-30 (one per rotated pair: partial_rotary_factor * head_dim / "
      "2; a smaller factor overflows RoPE's angles)");
  auto it = scaling.find(name);
  if (it == scaling.end() || !it->is_array() || static_cast<int64_t>(it->size()) != pairs) {
    return reader.Error("rope_scaling", expected,
                        it == scaling.end() ? "nothing" : FieldReader::Got(*it));
  }
  std::vector<double> factors;
  for (const Json& factor : *it) {
    if (!factor.is_number() || !std::isfinite(factor.get<double>()) ||
        factor.get<double>() < kMinRopeFactor) {
      return reader.Error("rope_scaling", expected, FieldReader::Got(*it));
    }
    factors.push_back(factor.get<double>());
  }
  return factors;
}

// What Phi-3 adds to the Llama family (ModelConfig's Phi-3 fields), as Phi3Config reads
// config.json: the fused projections, partial_rotary_factor and rope_scaling null or "longrope"
// (Phi3Config refuses every other type).
absl::Status ReadPhi3Variant(const FieldReader& reader, const Json& json, ModelConfig& config) {
  config.fused_projections = true;
  ATTNSCOPE_ASSIGN_OR_RETURN(const double partial_rotary_factor,
                             reader.Positive("partial_rotary_factor", 1.0));
  // Phi3Attention's int(head_dim * partial_rotary_factor), for a fraction (a larger one would
  // overflow).
  const int64_t rotary_dim =
      partial_rotary_factor > 1.0
          ? 0
          : static_cast<int64_t>(static_cast<double>(config.head_dim) * partial_rotary_factor);
  if (rotary_dim < 2 || rotary_dim % 2 != 0) {
    return reader.Error(
        "partial_rotary_factor",
        absl::StrCat("a factor of at most 1 that rotates an even number of head_dim's ",
                     config.head_dim, " dimensions"),
        absl::StrCat(partial_rotary_factor));
  }
  config.rotary_dim = rotary_dim;
  ATTNSCOPE_ASSIGN_OR_RETURN(config.rope_original_max_positions,
                             reader.Size("original_max_position_embeddings", kMaxPositions,
                                         config.max_position_embeddings));
  auto it = json.find("rope_scaling");
  if (it == json.end() || it->is_null()) return absl::OkStatus();
  const auto type = it->is_object()
                        ? (it->contains("rope_type") ? it->find("rope_type") : it->find("type"))
                        : it->end();
  if (!it->is_object() || type == it->end() || *type != "longrope") {
    return reader.Error("rope_scaling",
                        "null or {\"type\": \"longrope\", \"short_factor\": [...], "
                        "\"long_factor\": [...]} (Phi3Config's only scaling)",
                        FieldReader::Got(*it));
  }
  if (config.rope_original_max_positions < 2) {
    // The attention factor's ln(original) would divide by zero (transformers raises there).
    return reader.Error("original_max_position_embeddings",
                        "at least 2 with rope_scaling \"longrope\" (its attention factor divides "
                        "by ln(original_max_position_embeddings))",
                        std::to_string(config.rope_original_max_positions));
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(config.rope_short_factors,
                             ReadRopeFactors(reader, *it, "short_factor", rotary_dim / 2));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.rope_long_factors,
                             ReadRopeFactors(reader, *it, "long_factor", rotary_dim / 2));
  const auto attention_factor = it->find("attention_factor");
  if (attention_factor != it->end() && !attention_factor->is_null()) {
    if (!attention_factor->is_number() || !std::isfinite(attention_factor->get<double>()) ||
        attention_factor->get<double>() <= 0) {
      return reader.Error("rope_scaling",
                          "an \"attention_factor\" that is a finite number > 0, or none",
                          FieldReader::Got(*it));
    }
    config.rope_attention_factor = attention_factor->get<double>();
  } else {
    // transformers scales by max_position_embeddings / original_max_position_embeddings here,
    // not by rope_scaling's "factor".
    const double scale = static_cast<double>(config.max_position_embeddings) /
                         static_cast<double>(config.rope_original_max_positions);
    config.rope_attention_factor =
        scale <= 1.0 ? 1.0
                     : std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(
                                                             config.rope_original_max_positions)));
  }
  return absl::OkStatus();
}

// A cap of Gemma's soft-capping: `fallback` when config.json omits it, 0 (none) when null.
absl::StatusOr<double> ReadSoftcap(const FieldReader& reader, const Json& json, const char* field,
                                   double fallback) {
  auto it = json.find(field);
  if (it != json.end() && it->is_null()) return 0.0;
  return reader.Positive(field, fallback);
}

// What Gemma 2 and 3 add to the Llama family (ModelConfig's Gemma fields), as Gemma2Config and
// Gemma3TextConfig read config.json.
absl::Status ReadGemmaVariant(const FieldReader& reader, const Json& json, ModelConfig& config) {
  const bool gemma2 = config.architecture == Architecture::kGemma2;
  config.gemma_norms = true;
  config.sandwich_norms = true;
  ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_act,
                             reader.StringOr("hidden_activation", "gelu_pytorch_tanh"));
  ATTNSCOPE_ASSIGN_OR_RETURN(const double query_pre_attn_scalar,
                             reader.Positive("query_pre_attn_scalar", 256.0));
  config.attention_scale = 1.0 / std::sqrt(query_pre_attn_scalar);
  ATTNSCOPE_ASSIGN_OR_RETURN(
      config.attn_logit_softcapping,
      ReadSoftcap(reader, json, "attn_logit_softcapping", gemma2 ? 50.0 : 0.0));
  ATTNSCOPE_ASSIGN_OR_RETURN(
      config.final_logit_softcapping,
      ReadSoftcap(reader, json, "final_logit_softcapping", gemma2 ? 30.0 : 0.0));
  if (!gemma2) {
    ATTNSCOPE_ASSIGN_OR_RETURN(config.rope_local_theta,
                               reader.Positive("rope_local_base_freq", 10000.0, 1.0));
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view ArchitectureName(Architecture architecture) {
  switch (architecture) {
    case Architecture::kBert:
      return "bert";
    case Architecture::kRoberta:
      return "roberta";
    case Architecture::kLlama:
      return "llama";
    case Architecture::kMarian:
      return "marian";
    case Architecture::kBart:
      return "bart";
    case Architecture::kT5:
      return "t5";
    case Architecture::kQwen2:
      return "qwen2";
    case Architecture::kQwen3:
      return "qwen3";
    case Architecture::kMistral:
      return "mistral";
    case Architecture::kGpt2:
      return "gpt2";
    case Architecture::kDistilBert:
      return "distilbert";
    case Architecture::kGemma2:
      return "gemma2";
    case Architecture::kGemma3:
      return "gemma3_text";
    case Architecture::kPhi3:
      return "phi3";
    case Architecture::kGptNeox:
      return "gpt_neox";
  }
  return "unknown";
}

bool IsBertFamily(Architecture architecture) {
  return architecture == Architecture::kBert || architecture == Architecture::kRoberta ||
         architecture == Architecture::kDistilBert;
}

bool IsDecoderOnly(Architecture architecture) {
  return architecture == Architecture::kLlama || architecture == Architecture::kQwen2 ||
         architecture == Architecture::kQwen3 || architecture == Architecture::kMistral ||
         architecture == Architecture::kGemma2 || architecture == Architecture::kGemma3 ||
         architecture == Architecture::kPhi3 || architecture == Architecture::kGpt2 ||
         architecture == Architecture::kGptNeox;
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
  } else if (config.model_type == "roberta" || config.model_type == "xlm-roberta") {
    // XLMRobertaModel is RobertaModel under another name (its modeling file copies RoBERTa's).
    config.architecture = Architecture::kRoberta;
  } else if (config.model_type == "llama") {
    config.architecture = Architecture::kLlama;
  } else if (config.model_type == "marian") {
    config.architecture = Architecture::kMarian;
  } else if (config.model_type == "bart") {
    config.architecture = Architecture::kBart;
  } else if (config.model_type == "t5") {
    config.architecture = Architecture::kT5;
  } else if (config.model_type == "qwen2") {
    config.architecture = Architecture::kQwen2;
  } else if (config.model_type == "qwen3") {
    config.architecture = Architecture::kQwen3;
  } else if (config.model_type == "mistral") {
    config.architecture = Architecture::kMistral;
  } else if (config.model_type == "gpt2") {
    config.architecture = Architecture::kGpt2;
  } else if (config.model_type == "distilbert") {
    config.architecture = Architecture::kDistilBert;
  } else if (config.model_type == "gemma2") {
    config.architecture = Architecture::kGemma2;
  } else if (config.model_type == "gemma3_text") {
    config.architecture = Architecture::kGemma3;
  } else if (config.model_type == "phi3") {
    config.architecture = Architecture::kPhi3;
  } else if (config.model_type == "gpt_neox") {
    config.architecture = Architecture::kGptNeox;
  } else {
    return reader.Error("model_type",
                        "one of the supported architectures \"bert\", \"roberta\", "
                        "\"xlm-roberta\", \"llama\", \"qwen2\", \"qwen3\", \"mistral\", "
                        "\"gemma2\", \"gemma3_text\" (Gemma 3's text model, not the "
                        "multimodal \"gemma3\"), \"phi3\", \"gpt2\", \"gpt_neox\", "
                        "\"distilbert\", \"marian\", "
                        "\"bart\", \"t5\"",
                        FieldReader::Quoted(config.model_type));
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
  if (config.architecture == Architecture::kGpt2) return ParseGpt2(reader, std::move(config));
  if (config.architecture == Architecture::kGptNeox) {
    return ParseGptNeox(reader, json, std::move(config));
  }
  if (config.architecture == Architecture::kDistilBert) {
    ATTNSCOPE_ASSIGN_OR_RETURN(config, ParseDistilBert(reader, std::move(config)));
    ATTNSCOPE_RETURN_IF_ERROR(ReadLabels(reader, json, config));
    return config;
  }
  const bool is_roberta = config.architecture == Architecture::kRoberta;
  // RoBERTa is a BERT in everything config.json describes but its token ids' defaults.
  const bool is_bert = config.architecture == Architecture::kBert || is_roberta;
  const bool is_gemma =
      config.architecture == Architecture::kGemma2 || config.architecture == Architecture::kGemma3;
  const bool is_phi3 = config.architecture == Architecture::kPhi3;

  ATTNSCOPE_ASSIGN_OR_RETURN(config.vocab_size, reader.Size("vocab_size", kMaxVocabSize));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_size, reader.Size("hidden_size", kMaxHiddenSize));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_hidden_layers,
                             reader.Size("num_hidden_layers", kMaxLayers));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_attention_heads,
                             reader.Size("num_attention_heads", kMaxHeads));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.intermediate_size,
                             reader.Size("intermediate_size", kMaxIntermediateSize));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.max_position_embeddings,
                             reader.Size("max_position_embeddings", kMaxPositions,
                                         DefaultMaxPositions(config.architecture)));
  ATTNSCOPE_ASSIGN_OR_RETURN(
      config.num_key_value_heads,
      reader.Size("num_key_value_heads", kMaxHeads, config.num_attention_heads));
  // BERT always embeds segment ids (0 for a single text), so it needs one row at least.
  ATTNSCOPE_ASSIGN_OR_RETURN(config.type_vocab_size,
                             reader.Int("type_vocab_size", is_bert ? 1 : 0, kMaxTypeVocabSize, 2));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.layer_norm_eps, reader.Positive("layer_norm_eps", 1e-12));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.rms_norm_eps,
                             reader.Positive("rms_norm_eps", is_phi3 ? 1e-5 : 1e-6));
  // Below 1 the RoPE frequencies theta^(-2i/d) exceed one turn per token and, for a theta near 0,
  // overflow float32; every Llama-family base is 10^4 to 10^7.
  ATTNSCOPE_ASSIGN_OR_RETURN(
      config.rope_theta,
      reader.Positive("rope_theta",
                      config.architecture == Architecture::kGemma3 ? 1000000.0 : 10000.0, 1.0));
  if (!is_phi3) {
    ATTNSCOPE_ASSIGN_OR_RETURN(config.rope_linear_factor, ReadLinearRopeScaling(reader, json));
  }
  if (is_gemma) {
    ATTNSCOPE_RETURN_IF_ERROR(ReadGemmaVariant(reader, json, config));
  } else {
    ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_act,
                               reader.StringOr("hidden_act", is_bert ? "gelu" : "silu"));
  }
  // The configuration classes' defaults: Gemma's tie the lm_head, LlamaConfig's, Qwen2Config's,
  // Qwen3Config's, MistralConfig's and Phi3Config's do not.
  ATTNSCOPE_ASSIGN_OR_RETURN(config.tie_word_embeddings,
                             reader.BoolOr("tie_word_embeddings", /*fallback=*/is_gemma));
  if (is_gemma) {
    // Gemma2Config's and Gemma3TextConfig's own defaults.
    ATTNSCOPE_RETURN_IF_ERROR(ReadTokenIds(reader, /*pad=*/0, /*bos=*/2, /*eos=*/1, config));
  } else if (is_phi3) {
    // Phi3Config's own defaults (Phi-3's Llama 2 vocabulary with <|endoftext|> at 32000).
    ATTNSCOPE_RETURN_IF_ERROR(
        ReadTokenIds(reader, /*pad=*/32000, /*bos=*/1, /*eos=*/32000, config));
  } else if (is_roberta) {
    // RobertaConfig's own defaults (BertConfig's otherwise).
    ATTNSCOPE_RETURN_IF_ERROR(ReadTokenIds(reader, /*pad=*/1, /*bos=*/0, /*eos=*/2, config));
  } else {
    ATTNSCOPE_RETURN_IF_ERROR(
        ReadTokenIds(reader, /*pad=*/is_bert ? 0 : -1, /*bos=*/-1, /*eos=*/-1, config));
  }
  if (is_bert) {
    // transformers' relative_key and relative_key_query add learned distance embeddings to the
    // scores; served without them, the attentions would not be transformers'.
    ATTNSCOPE_ASSIGN_OR_RETURN(const std::string position_embedding_type,
                               reader.StringOr("position_embedding_type", "absolute"));
    if (position_embedding_type != "absolute") {
      return reader.Error("position_embedding_type",
                          "\"absolute\" (relative position embeddings are not implemented)",
                          FieldReader::Quoted(position_embedding_type));
    }
  }
  if (is_roberta &&
      (config.pad_token_id < 0 || config.pad_token_id + 1 >= config.max_position_embeddings)) {
    return reader.Error("pad_token_id",
                        absl::StrCat("an id in [0, ", config.max_position_embeddings - 1,
                                     ") (RoBERTa numbers tokens from pad_token_id + 1, below "
                                     "max_position_embeddings ",
                                     config.max_position_embeddings, ")"),
                        std::to_string(config.pad_token_id));
  }

  // Qwen3 and Mistral give head_dim, which need not be hidden_size / num_attention_heads.
  const bool has_head_dim = json.contains("head_dim") && !json["head_dim"].is_null();
  if (!has_head_dim && config.hidden_size % config.num_attention_heads != 0) {
    return reader.Error(
        "hidden_size",
        absl::StrCat("a multiple of num_attention_heads (", config.num_attention_heads, ")"),
        std::to_string(config.hidden_size));
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(
      config.head_dim,
      reader.Size("head_dim", kMaxHeadDim, config.hidden_size / config.num_attention_heads));
  if (config.num_attention_heads % config.num_key_value_heads != 0) {
    return reader.Error("num_key_value_heads",
                        absl::StrCat("a positive divisor of num_attention_heads (",
                                     config.num_attention_heads, ")"),
                        std::to_string(config.num_key_value_heads));
  }
  if (is_bert && config.num_key_value_heads != config.num_attention_heads) {
    return reader.Error("num_key_value_heads",
                        absl::StrCat("num_attention_heads (", config.num_attention_heads, ") for ",
                                     config.model_type),
                        std::to_string(config.num_key_value_heads));
  }
  if (is_bert && config.head_dim * config.num_attention_heads != config.hidden_size) {
    return reader.Error("head_dim",
                        absl::StrCat("hidden_size / num_attention_heads for ", config.model_type),
                        std::to_string(config.head_dim));
  }
  if (IsDecoderOnly(config.architecture)) {
    if (config.head_dim % 2 != 0) {
      return reader.Error("head_dim", "an even number (RoPE rotates pairs of dimensions)",
                          std::to_string(config.head_dim));
    }
    config.rotary_dim = config.head_dim;
    if (is_phi3) ATTNSCOPE_RETURN_IF_ERROR(ReadPhi3Variant(reader, json, config));
    ATTNSCOPE_RETURN_IF_ERROR(ReadDecoderVariant(reader, json, config));
  }
  const std::string activation = is_bert ? "gelu" : is_gemma ? "gelu_pytorch_tanh" : "silu";
  if (config.hidden_act != activation) {
    return reader.Error(is_gemma ? "hidden_activation" : "hidden_act",
                        absl::StrCat("\"", activation, "\""),
                        FieldReader::Quoted(config.hidden_act));
  }

  ATTNSCOPE_RETURN_IF_ERROR(ReadLabels(reader, json, config));
  return config;
}

int64_t ModelConfig::max_input_tokens() const {
  return architecture == Architecture::kRoberta ? max_position_embeddings - pad_token_id - 1
                                                : max_position_embeddings;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  const std::string path = JoinPath(model_dir, "config.json");
  ATTNSCOPE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, kMaxSettingsFileBytes));
  return ParseModelConfig(text, path);
}

}  // namespace attnscope

#include "models/checkpoint/family_configs.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace attnscope::config_internal {
namespace {

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

// A cap of Gemma's soft-capping: `fallback` when config.json omits it, 0 (none) when null.
absl::StatusOr<double> ReadSoftcap(const FieldReader& reader, const Json& json, const char* field,
                                   double fallback) {
  auto it = json.find(field);
  if (it != json.end() && it->is_null()) return 0.0;
  return reader.Positive(field, fallback);
}

// An encoder-decoder's decoder_start_token_id, pad_token_id when config.json has none
// (MarianConfig, BartConfig and T5Config alike); the decoder needs one.
absl::Status ReadDecoderStartTokenId(const FieldReader& reader, ModelConfig& config) {
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
  return absl::OkStatus();
}

}  // namespace

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
  ATTNSCOPE_RETURN_IF_ERROR(ReadDecoderStartTokenId(reader, config));
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
  ATTNSCOPE_RETURN_IF_ERROR(ReadDecoderStartTokenId(reader, config));
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

absl::StatusOr<ModelConfig> ParseOpt(const FieldReader& reader, ModelConfig config) {
  ATTNSCOPE_ASSIGN_OR_RETURN(config.vocab_size, reader.Size("vocab_size", kMaxVocabSize, 50272));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_size, reader.Size("hidden_size", kMaxHiddenSize, 768));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_hidden_layers,
                             reader.Size("num_hidden_layers", kMaxLayers, 12));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_attention_heads,
                             reader.Size("num_attention_heads", kMaxHeads, 12));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.intermediate_size,
                             reader.Size("ffn_dim", kMaxIntermediateSize, 3072));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.max_position_embeddings,
                             reader.Size("max_position_embeddings", kMaxPositions, 2048));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_act, reader.StringOr("activation_function", "relu"));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.tie_word_embeddings,
                             reader.BoolOr("tie_word_embeddings", true));
  ATTNSCOPE_RETURN_IF_ERROR(ReadTokenIds(reader, /*pad=*/1, /*bos=*/2, /*eos=*/2, config));
  // OPT's nn.LayerNorm modules keep PyTorch's default epsilon; OPTConfig has no field for it.
  config.layer_norm_eps = 1e-5;
  ATTNSCOPE_ASSIGN_OR_RETURN(
      const int64_t word_embed_proj_dim,
      reader.Size("word_embed_proj_dim", kMaxHiddenSize, config.hidden_size));
  if (word_embed_proj_dim != config.hidden_size) {
    return reader.Error("word_embed_proj_dim",
                        absl::StrCat("hidden_size (", config.hidden_size,
                                     "; opt-350m's project_in / project_out are not implemented)"),
                        std::to_string(word_embed_proj_dim));
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(const bool layer_norm_before,
                             reader.BoolOr("do_layer_norm_before", true));
  if (!layer_norm_before) {
    return reader.Error("do_layer_norm_before",
                        "true (opt-350m's post-LayerNorm layers are not implemented)", "false");
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(const bool remove_final_layer_norm,
                             reader.BoolOr("_remove_final_layer_norm", false));
  config.final_layer_norm = !remove_final_layer_norm;
  for (const char* field : {"enable_bias", "layer_norm_elementwise_affine"}) {
    ATTNSCOPE_ASSIGN_OR_RETURN(const bool on, reader.BoolOr(field, true));
    if (!on) return reader.Error(field, "true (every OPT checkpoint's setting)", "false");
  }
  if (config.hidden_size % config.num_attention_heads != 0) {
    return reader.Error(
        "hidden_size",
        absl::StrCat("a multiple of num_attention_heads (", config.num_attention_heads, ")"),
        std::to_string(config.hidden_size));
  }
  config.head_dim = config.hidden_size / config.num_attention_heads;
  config.num_key_value_heads = config.num_attention_heads;
  config.type_vocab_size = 0;
  config.qkv_bias = true;
  config.o_proj_bias = true;
  if (config.hidden_act != "relu" && config.hidden_act != "gelu" &&
      config.hidden_act != "gelu_new" && config.hidden_act != "gelu_pytorch_tanh" &&
      config.hidden_act != "silu") {
    return reader.Error("activation_function",
                        "\"relu\", \"gelu\", \"gelu_new\", \"gelu_pytorch_tanh\" or \"silu\"",
                        FieldReader::Quoted(config.hidden_act));
  }
  return config;
}

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

absl::StatusOr<ModelConfig> ParseMpnet(const FieldReader& reader, ModelConfig config) {
  ATTNSCOPE_ASSIGN_OR_RETURN(config.vocab_size, reader.Size("vocab_size", kMaxVocabSize, 30527));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_size, reader.Size("hidden_size", kMaxHiddenSize, 768));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_hidden_layers,
                             reader.Size("num_hidden_layers", kMaxLayers, 12));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.num_attention_heads,
                             reader.Size("num_attention_heads", kMaxHeads, 12));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.intermediate_size,
                             reader.Size("intermediate_size", kMaxIntermediateSize, 3072));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.max_position_embeddings,
                             reader.Size("max_position_embeddings", kMaxPositions, 512));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.layer_norm_eps, reader.Positive("layer_norm_eps", 1e-12));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_act, reader.StringOr("hidden_act", "gelu"));
  // MPNetEncoder.compute_position_bias buckets with its default num_buckets = 32 and max_distance
  // = 128 whatever config.json says; relative_attention_num_buckets only sizes the table, so a
  // smaller one would be indexed past its end.
  ATTNSCOPE_ASSIGN_OR_RETURN(config.relative_attention_num_buckets,
                             reader.Int("relative_attention_num_buckets", 1, kMaxRelativeBuckets,
                                        /*fallback=*/kMpnetPositionBuckets));
  if (config.relative_attention_num_buckets < kMpnetPositionBuckets) {
    return reader.Error(
        "relative_attention_num_buckets",
        absl::StrCat("at least ", kMpnetPositionBuckets, " (MPNet looks up ", kMpnetPositionBuckets,
                     " buckets in relative_attention_bias whatever this says)"),
        std::to_string(config.relative_attention_num_buckets));
  }
  config.relative_attention_max_distance = kMpnetMaxDistance;
  ATTNSCOPE_RETURN_IF_ERROR(ReadTokenIds(reader, /*pad=*/1, /*bos=*/0, /*eos=*/2, config));
  if (config.hidden_size % config.num_attention_heads != 0) {
    return reader.Error(
        "hidden_size",
        absl::StrCat("a multiple of num_attention_heads (", config.num_attention_heads, ")"),
        std::to_string(config.hidden_size));
  }
  // Positions count from pad_token_id + 1, as RoBERTa's (MPNetEmbeddings).
  if (config.pad_token_id < 0 || config.pad_token_id + 1 >= config.max_position_embeddings) {
    return reader.Error("pad_token_id",
                        absl::StrCat("an id in [0, ", config.max_position_embeddings - 1,
                                     ") (MPNet numbers tokens from pad_token_id + 1, below "
                                     "max_position_embeddings ",
                                     config.max_position_embeddings, ")"),
                        std::to_string(config.pad_token_id));
  }
  // bert.cc's fused kernels apply the exact erf GELU, MPNetConfig's default.
  if (config.hidden_act != "gelu") {
    return reader.Error("hidden_act", "\"gelu\"", FieldReader::Quoted(config.hidden_act));
  }
  config.head_dim = config.hidden_size / config.num_attention_heads;
  config.num_key_value_heads = config.num_attention_heads;
  config.type_vocab_size = 0;
  config.tie_word_embeddings = false;
  return config;
}

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

int64_t DefaultMaxPositions(Architecture architecture) {
  switch (architecture) {
    case Architecture::kBert:
    case Architecture::kRoberta:
    case Architecture::kMpnet:
    case Architecture::kElectra:
      return 512;
    case Architecture::kQwen2:
    case Architecture::kQwen3:
      return 32768;
    case Architecture::kMistral:
      return 4096 * 32;
    case Architecture::kGemma:
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
  // An explicit null is no window (the configuration classes keep None, and the attention then
  // masks nothing); only an absent field takes the class's default.
  const bool no_window = json.contains("sliding_window") && json["sliding_window"].is_null();
  const auto read_window = [&](int64_t fallback) -> absl::StatusOr<int64_t> {
    if (no_window) return 0;
    return reader.Int("sliding_window", 1, kMaxPositions, fallback);
  };
  // Gemma's layers alternate without layer_types: Gemma 2's every other one has the window, Gemma
  // 3's all but every sliding_window_pattern-th (Gemma2Config, Gemma3TextConfig).
  int64_t full_attention_every = 0;
  if (architecture == Architecture::kGemma2 || architecture == Architecture::kGemma3) {
    ATTNSCOPE_ASSIGN_OR_RETURN(window, read_window(4096));
    full_attention_every = 2;
    if (architecture == Architecture::kGemma3) {
      ATTNSCOPE_ASSIGN_OR_RETURN(full_attention_every,
                                 reader.Int("sliding_window_pattern", 1, kMaxLayers, 6));
    }
  } else if (architecture == Architecture::kMistral || architecture == Architecture::kPhi3) {
    // Phi3Model masks with the window on every layer when sliding_window is set (Phi-3-mini-4k:
    // 2047).
    ATTNSCOPE_ASSIGN_OR_RETURN(window, read_window(0));
  } else if (architecture == Architecture::kQwen2 || architecture == Architecture::kQwen3) {
    // Qwen2Config: sliding_window counts only with use_sliding_window (Qwen2.5 and Qwen3 ship it
    // false), and then on the layers from max_window_layers on.
    ATTNSCOPE_ASSIGN_OR_RETURN(const bool use_sliding_window,
                               reader.BoolOr("use_sliding_window", false));
    if (use_sliding_window) {
      ATTNSCOPE_ASSIGN_OR_RETURN(window, read_window(4096));
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

absl::Status ReadGemmaVariant(const FieldReader& reader, const Json& json, ModelConfig& config) {
  const bool gemma2 = config.architecture == Architecture::kGemma2;
  config.gemma_norms = true;
  // GemmaMLP reads hidden_activation and takes the tanh GELU when it is absent or null, whatever
  // hidden_act says: Gemma 1's released config.json files have "hidden_act": "gelu" and were
  // trained with the approximation (transformers 4.39's fix of GemmaMLP).
  ATTNSCOPE_ASSIGN_OR_RETURN(config.hidden_act,
                             reader.StringOr("hidden_activation", "gelu_pytorch_tanh"));
  // Gemma 1's layers are Llama's, its scores scaled by head_dim^-1/2 and never soft-capped.
  if (config.architecture == Architecture::kGemma) return absl::OkStatus();
  config.sandwich_norms = true;
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

}  // namespace attnscope::config_internal

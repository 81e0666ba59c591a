// How each family's configuration class reads config.json, where it differs from the BERT and
// Llama fields config.cc reads: the families with field names of their own (BART and Marian, T5,
// GPT-2, DistilBERT, MPNet, GPT-NeoX) and what sets the Llama family's members apart (Qwen,
// Mistral, Gemma, Phi-3). Internal to models/checkpoint; errors in FieldReader's style.
#ifndef ATTNSCOPE_MODELS_CHECKPOINT_FAMILY_CONFIGS_H_
#define ATTNSCOPE_MODELS_CHECKPOINT_FAMILY_CONFIGS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/checkpoint/config.h"
#include "models/checkpoint/config_fields.h"

namespace attnscope::config_internal {

// The BART family's config.json (MarianConfig, BartConfig): the encoder's sizes into the common
// fields, the decoder's into decoder_*.
absl::StatusOr<ModelConfig> ParseEncoderDecoder(const FieldReader& reader, ModelConfig config);

// T5Config (transformers' configuration_t5.py): its own field names, mapped onto the common ones.
absl::StatusOr<ModelConfig> ParseT5(const FieldReader& reader, ModelConfig config);

// GPT2Config (transformers' configuration_gpt2.py): its own field names, mapped onto the common
// ones.
absl::StatusOr<ModelConfig> ParseGpt2(const FieldReader& reader, ModelConfig config);

// OPTConfig (transformers' configuration_opt.py). The layout of opt-350m alone
// (word_embed_proj_dim other than hidden_size, do_layer_norm_before false) is refused.
absl::StatusOr<ModelConfig> ParseOpt(const FieldReader& reader, ModelConfig config);

// DistilBertConfig (transformers' configuration_distilbert.py): its own field names, mapped onto
// the common ones.
absl::StatusOr<ModelConfig> ParseDistilBert(const FieldReader& reader, ModelConfig config);

// MPNetConfig (transformers' configuration_mpnet.py): BERT's field names without type_vocab_size,
// RoBERTa's token ids, and relative_attention_num_buckets for the encoder's position bias table.
absl::StatusOr<ModelConfig> ParseMpnet(const FieldReader& reader, ModelConfig config);

// GPTNeoXConfig (transformers' configuration_gpt_neox.py: Pythia, GPT-NeoX-20B).
absl::StatusOr<ModelConfig> ParseGptNeox(const FieldReader& reader, const Json& json,
                                         ModelConfig config);

// max_position_embeddings when config.json omits it: the configuration classes' defaults.
int64_t DefaultMaxPositions(Architecture architecture);

// What sets the Llama family's members apart (the ModelConfig fields qkv_bias, o_proj_bias,
// qk_norm and layer_sliding_windows), as LlamaConfig, Qwen2Config, Qwen3Config and MistralConfig
// read config.json.
absl::Status ReadDecoderVariant(const FieldReader& reader, const Json& json, ModelConfig& config);

// What Phi-3 adds to the Llama family (ModelConfig's Phi-3 fields), as Phi3Config reads
// config.json: the fused projections, partial_rotary_factor and rope_scaling null or "longrope"
// (Phi3Config refuses every other type).
absl::Status ReadPhi3Variant(const FieldReader& reader, const Json& json, ModelConfig& config);

// What Gemma 1, 2 and 3 add to the Llama family (ModelConfig's Gemma fields), as GemmaConfig,
// Gemma2Config and Gemma3TextConfig read config.json.
absl::Status ReadGemmaVariant(const FieldReader& reader, const Json& json, ModelConfig& config);

}  // namespace attnscope::config_internal

#endif  // ATTNSCOPE_MODELS_CHECKPOINT_FAMILY_CONFIGS_H_

#include "models/checkpoint/config.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/json_util.h"
#include "common/status_macros.h"
#include "models/checkpoint/config_fields.h"
#include "models/checkpoint/family_configs.h"
#include "nlohmann/json.hpp"

namespace attnscope {

using config_internal::DefaultMaxPositions;
using config_internal::FieldReader;
using config_internal::Json;
using config_internal::kMaxHeadDim;
using config_internal::kMaxHeads;
using config_internal::kMaxHiddenSize;
using config_internal::kMaxIntermediateSize;
using config_internal::kMaxLayers;
using config_internal::kMaxPositions;
using config_internal::kMaxTypeVocabSize;
using config_internal::kMaxVocabSize;
using config_internal::ParseDistilBert;
using config_internal::ParseEncoderDecoder;
using config_internal::ParseGpt2;
using config_internal::ParseGptNeox;
using config_internal::ParseMpnet;
using config_internal::ParseOpt;
using config_internal::ParseT5;
using config_internal::ReadDecoderVariant;
using config_internal::ReadGemmaVariant;
using config_internal::ReadLabels;
using config_internal::ReadLinearRopeScaling;
using config_internal::ReadPhi3Variant;
using config_internal::ReadTokenIds;

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
    case Architecture::kGemma:
      return "gemma";
    case Architecture::kGemma2:
      return "gemma2";
    case Architecture::kGemma3:
      return "gemma3_text";
    case Architecture::kPhi3:
      return "phi3";
    case Architecture::kGptNeox:
      return "gpt_neox";
    case Architecture::kOpt:
      return "opt";
    case Architecture::kMpnet:
      return "mpnet";
    case Architecture::kElectra:
      return "electra";
  }
  return "unknown";
}

bool IsBertFamily(Architecture architecture) {
  return architecture == Architecture::kBert || architecture == Architecture::kRoberta ||
         architecture == Architecture::kDistilBert || architecture == Architecture::kMpnet ||
         architecture == Architecture::kElectra;
}

bool IsDecoderOnly(Architecture architecture) {
  return architecture == Architecture::kLlama || architecture == Architecture::kQwen2 ||
         architecture == Architecture::kQwen3 || architecture == Architecture::kMistral ||
         architecture == Architecture::kGemma || architecture == Architecture::kGemma2 ||
         architecture == Architecture::kGemma3 || architecture == Architecture::kPhi3 ||
         architecture == Architecture::kGpt2 || architecture == Architecture::kGptNeox ||
         architecture == Architecture::kOpt;
}

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text,
                                             absl::string_view source) {
  Json json = Json::parse(json_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config '", source, "': expected a JSON object, got ", DescribeJsonText(json_text)));
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
  } else if (config.model_type == "gemma") {
    config.architecture = Architecture::kGemma;
  } else if (config.model_type == "gemma2") {
    config.architecture = Architecture::kGemma2;
  } else if (config.model_type == "gemma3_text") {
    config.architecture = Architecture::kGemma3;
  } else if (config.model_type == "phi3") {
    config.architecture = Architecture::kPhi3;
  } else if (config.model_type == "gpt_neox") {
    config.architecture = Architecture::kGptNeox;
  } else if (config.model_type == "opt") {
    config.architecture = Architecture::kOpt;
  } else if (config.model_type == "mpnet") {
    config.architecture = Architecture::kMpnet;
  } else if (config.model_type == "electra") {
    config.architecture = Architecture::kElectra;
  } else {
    return reader.Error("model_type",
                        "one of the supported architectures \"bert\", \"roberta\", "
                        "\"xlm-roberta\", \"llama\", \"qwen2\", \"qwen3\", \"mistral\", "
                        "\"gemma\", \"gemma2\", \"gemma3_text\" (Gemma 3's text model, not the "
                        "multimodal \"gemma3\"), \"phi3\", \"gpt2\", \"gpt_neox\", \"opt\", "
                        "\"distilbert\", \"mpnet\", \"electra\", \"marian\", "
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
  if (config.architecture == Architecture::kOpt) return ParseOpt(reader, std::move(config));
  if (config.architecture == Architecture::kGptNeox) {
    return ParseGptNeox(reader, json, std::move(config));
  }
  if (config.architecture == Architecture::kMpnet) {
    ATTNSCOPE_ASSIGN_OR_RETURN(config, ParseMpnet(reader, std::move(config)));
    ATTNSCOPE_RETURN_IF_ERROR(ReadLabels(reader, json, config));
    return config;
  }
  if (config.architecture == Architecture::kDistilBert) {
    ATTNSCOPE_ASSIGN_OR_RETURN(config, ParseDistilBert(reader, std::move(config)));
    ATTNSCOPE_RETURN_IF_ERROR(ReadLabels(reader, json, config));
    return config;
  }
  const bool is_roberta = config.architecture == Architecture::kRoberta;
  const bool is_electra = config.architecture == Architecture::kElectra;
  // RoBERTa is a BERT in everything config.json describes but its token ids' defaults; ELECTRA
  // adds embedding_size.
  const bool is_bert = config.architecture == Architecture::kBert || is_roberta || is_electra;
  const bool is_gemma = config.architecture == Architecture::kGemma ||
                        config.architecture == Architecture::kGemma2 ||
                        config.architecture == Architecture::kGemma3;
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
    // GemmaConfig's, Gemma2Config's and Gemma3TextConfig's own defaults.
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

  // Qwen3 and Mistral give head_dim, which need not be hidden_size / num_attention_heads; Gemma's
  // configuration classes default it to 256.
  const bool has_head_dim = json.contains("head_dim") && !json["head_dim"].is_null();
  if (!has_head_dim && !is_gemma && config.hidden_size % config.num_attention_heads != 0) {
    return reader.Error(
        "hidden_size",
        absl::StrCat("a multiple of num_attention_heads (", config.num_attention_heads, ")"),
        std::to_string(config.hidden_size));
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(
      config.head_dim,
      reader.Size("head_dim", kMaxHeadDim,
                  is_gemma ? 256 : config.hidden_size / config.num_attention_heads));
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

  if (is_electra) {
    // ElectraConfig's default; every published checkpoint states it.
    ATTNSCOPE_ASSIGN_OR_RETURN(config.embedding_size,
                               reader.Size("embedding_size", kMaxHiddenSize, 128));
  }

  ATTNSCOPE_RETURN_IF_ERROR(ReadLabels(reader, json, config));
  return config;
}

int64_t ModelConfig::max_input_tokens() const {
  return architecture == Architecture::kRoberta || architecture == Architecture::kMpnet
             ? max_position_embeddings - pad_token_id - 1
             : max_position_embeddings;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  const std::string path = JoinPath(model_dir, "config.json");
  ATTNSCOPE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, kMaxSettingsFileBytes));
  return ParseModelConfig(text, path);
}

}  // namespace attnscope

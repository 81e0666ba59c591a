#include "models/architectures/transformer.h"

#include <torch/utils.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "models/kernels/blas_check.h"
#include "models/kernels/gemm.h"
#include "models/kernels/row_kernel.h"

namespace attnscope {
namespace {

std::string ShapeOf(const torch::Tensor& tensor) {
  return absl::StrCat("[", absl::StrJoin(tensor.sizes(), ", "), "]");
}

absl::Status CheckIds(const torch::Tensor& tensor, const char* name,
                      const std::vector<int64_t>& shape, int64_t limit, const char* limit_name) {
  if (tensor.dim() != 2 || tensor.sizes().vec() != shape || tensor.scalar_type() != torch::kInt64) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": expected int64 [", absl::StrJoin(shape, ", "), "], got ",
                     c10::toString(tensor.scalar_type()), " ", ShapeOf(tensor)));
  }
  if (tensor.numel() == 0) return absl::OkStatus();
  const int64_t low = tensor.min().item<int64_t>();
  const int64_t high = tensor.max().item<int64_t>();
  if (low < 0 || high >= limit) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": expected values in [0, ", limit, ") (",
                                                   limit_name, "), got values in [", low, ", ",
                                                   high, "]"));
  }
  return absl::OkStatus();
}

// Runs `pass` under InferenceMode; no exception leaves it. A LibTorch error or any other exception
// is a bug (Internal), an allocation that failed is ResourceExhausted: either way the caller gets a
// status and the process keeps serving.
template <typename Pass>
auto RunGuarded(Architecture architecture, absl::string_view what, Pass&& pass)
    -> decltype(pass()) {
  const auto failed = [&](absl::string_view why) {
    return absl::StrCat(ArchitectureName(architecture), " ", what, " failed: ", why);
  };
  try {
    torch::InferenceMode guard;
    return pass();
  } catch (const c10::Error& error) {
    return absl::InternalError(failed(error.what_without_backtrace()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        failed("out of memory; send a shorter input or fewer inputs at once"));
  } catch (const std::exception& error) {
    return absl::InternalError(failed(error.what()));
  }
}

// Internal unless `tensors` holds one tensor per layer: an architecture that leaves out an output
// it was asked for is a bug, which must reach the caller as a status, never as an index past the
// end of a vector.
absl::Status CheckLayers(Architecture architecture, absl::string_view name,
                         const std::vector<torch::Tensor>& tensors, int64_t expected) {
  if (static_cast<int64_t>(tensors.size()) == expected) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(ArchitectureName(architecture), " forward: ", name,
                                          ": expected ", expected, " tensors, got ", tensors.size(),
                                          " (a bug in the architecture)"));
}

}  // namespace

absl::StatusOr<ForwardInput> TransformerModel::CheckInput(const ForwardInput& input) const {
  const torch::Tensor& ids = input.input_ids;
  if (!ids.defined() || ids.dim() != 2 || ids.size(0) == 0 || ids.size(1) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("input_ids: expected a non-empty int64 [batch, sequence] tensor, got ",
                     ids.defined() ? ShapeOf(ids) : "nothing"));
  }
  const std::vector<int64_t> shape = ids.sizes().vec();
  if (shape[1] > max_positions()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input_ids: expected at most ", max_positions(), " tokens (max_position_embeddings",
        max_positions() < config_.max_position_embeddings ? " - pad_token_id - 1" : "", "), got ",
        shape[1], "; enable truncation"));
  }
  ForwardInput checked;
  checked.input_ids = ids;
  ATTNSCOPE_RETURN_IF_ERROR(CheckIds(ids, "input_ids", shape, config_.vocab_size, "vocab_size"));
  if (input.attention_mask.defined()) {
    ATTNSCOPE_RETURN_IF_ERROR(CheckIds(input.attention_mask, "attention_mask", shape, 2, "0 or 1"));
    checked.attention_mask = input.attention_mask;
  } else {
    checked.attention_mask = torch::ones_like(ids);
  }
  if (input.token_type_ids.defined()) {
    ATTNSCOPE_RETURN_IF_ERROR(CheckIds(input.token_type_ids, "token_type_ids", shape,
                                       std::max<int64_t>(config_.type_vocab_size, 1),
                                       "type_vocab_size"));
    checked.token_type_ids = input.token_type_ids;
  } else {
    checked.token_type_ids = torch::zeros_like(ids);
  }
  if (input.decoder_input_ids.defined()) {
    const torch::Tensor& decoder_ids = input.decoder_input_ids;
    if (!config_.is_encoder_decoder) {
      return absl::InvalidArgumentError(
          absl::StrCat("decoder_input_ids: expected none for model_type '", config_.model_type,
                       "', which has no decoder of its own; got ", ShapeOf(decoder_ids)));
    }
    if (decoder_ids.dim() != 2 || decoder_ids.size(0) != shape[0] || decoder_ids.size(1) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "decoder_input_ids: expected int64 [", shape[0], ", T > 0], got ", ShapeOf(decoder_ids)));
    }
    if (decoder_ids.size(1) > config_.max_position_embeddings) {
      return absl::InvalidArgumentError(
          absl::StrCat("decoder_input_ids: expected at most ", config_.max_position_embeddings,
                       " tokens (max_position_embeddings), got ", decoder_ids.size(1)));
    }
    const std::vector<int64_t> decoder_shape = decoder_ids.sizes().vec();
    ATTNSCOPE_RETURN_IF_ERROR(CheckIds(decoder_ids, "decoder_input_ids", decoder_shape,
                                       config_.vocab_size, "vocab_size"));
    checked.decoder_input_ids = decoder_ids;
    if (input.decoder_attention_mask.defined()) {
      ATTNSCOPE_RETURN_IF_ERROR(CheckIds(input.decoder_attention_mask, "decoder_attention_mask",
                                         decoder_shape, 2, "0 or 1"));
      checked.decoder_attention_mask = input.decoder_attention_mask;
    } else {
      checked.decoder_attention_mask = torch::ones_like(decoder_ids);
    }
  }
  return checked;
}

absl::StatusOr<ForwardOutput> TransformerModel::Forward(const ForwardInput& input,
                                                        const ForwardOptions& options) const {
  ATTNSCOPE_ASSIGN_OR_RETURN(const ForwardInput checked, CheckInput(input));
  ATTNSCOPE_ASSIGN_OR_RETURN(ForwardOutput output, RunGuarded(config_.architecture, "forward", [&] {
                               return Run(checked, options);
                             }));
  const Architecture arch = config_.architecture;
  const int64_t layers = config_.num_hidden_layers;
  if (options.output_attentions) {
    ATTNSCOPE_RETURN_IF_ERROR(CheckLayers(arch, "attentions", output.attentions, layers));
  }
  if (options.output_attention_scores) {
    ATTNSCOPE_RETURN_IF_ERROR(
        CheckLayers(arch, "attention_scores", output.attention_scores, layers));
  }
  if (options.output_hidden_states) {
    ATTNSCOPE_RETURN_IF_ERROR(CheckLayers(arch, "hidden_states", output.hidden_states, layers + 1));
  }
  if (checked.decoder_input_ids.defined() && options.output_attentions) {
    ATTNSCOPE_RETURN_IF_ERROR(
        CheckLayers(arch, "decoder_attentions", output.decoder_attentions, config_.decoder_layers));
    ATTNSCOPE_RETURN_IF_ERROR(
        CheckLayers(arch, "cross_attentions", output.cross_attentions, config_.decoder_layers));
  }
  return output;
}

void KvCache::SelectRows(const torch::Tensor& rows) {
  const int64_t batch = batch_size();
  if (rows.size(0) == batch && rows.equal(torch::arange(batch, rows.options()))) return;
  for (auto [cached, storage] :
       {std::pair{&keys, &key_storage}, std::pair{&values, &value_storage}}) {
    for (size_t layer = 0; layer < cached->size(); ++layer) {
      const torch::Tensor selected = (*cached)[layer].index_select(0, rows);
      torch::Tensor& room = (*storage)[layer];
      std::vector<int64_t> shape = room.sizes().vec();
      shape[0] = rows.size(0);
      room = torch::empty(shape, room.options());
      (*cached)[layer] = room.narrow(/*dim=*/2, /*start=*/0, selected.size(2)).copy_(selected);
    }
  }
  // One source's keys and values (a prompt's beams) are read by every row alike, broadcast where
  // they are read: copied for each of 64 beams at every step, a 400-token source's took about
  // 400 MB more and a third of the generation's time.
  for (std::vector<torch::Tensor>* tensors : {&cross_keys, &cross_values}) {
    for (torch::Tensor& tensor : *tensors) {
      if (tensor.size(0) != 1) tensor = tensor.index_select(0, rows);
    }
  }
  if (encoder_attention_mask.defined() && encoder_attention_mask.size(0) != 1) {
    encoder_attention_mask = encoder_attention_mask.index_select(0, rows);
  }
}

absl::StatusOr<DecodeOutput> TransformerModel::Decode(const torch::Tensor& input_ids,
                                                      KvCache* cache,
                                                      bool output_attentions) const {
  if (!is_decoder() && !config_.is_encoder_decoder) {
    return absl::UnimplementedError(absl::StrCat(
        "model_type '", config_.model_type,
        "': expected a decoder (llama) or an encoder-decoder (marian, bart, t5) for incremental "
        "decoding, got an encoder-only model"));
  }
  if (config_.is_encoder_decoder && cache->cross_keys.empty()) {
    return absl::InvalidArgumentError(
        "cache: expected the encoder's keys and values of an encoder-decoder, got none; run "
        "Encode first");
  }
  if (!input_ids.defined() || input_ids.dim() != 2 || input_ids.size(0) == 0 ||
      input_ids.size(1) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("input_ids: expected a non-empty int64 [batch, sequence] tensor, got ",
                     input_ids.defined() ? ShapeOf(input_ids) : "nothing"));
  }
  ATTNSCOPE_RETURN_IF_ERROR(
      CheckIds(input_ids, "input_ids", input_ids.sizes().vec(), config_.vocab_size, "vocab_size"));
  if (cache->length() > 0 && cache->batch_size() != input_ids.size(0)) {
    return absl::InvalidArgumentError(absl::StrCat("cache: expected ", input_ids.size(0),
                                                   " sequences (the batch of input_ids), got ",
                                                   cache->batch_size()));
  }
  const int64_t total = cache->length() + input_ids.size(1);
  if (total > config_.max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat("input_ids: expected at most ", config_.max_position_embeddings,
                     " positions in all (max_position_embeddings), got ", cache->length(),
                     " cached + ", input_ids.size(1), " new"));
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(DecodeOutput output, RunGuarded(config_.architecture, "decode", [&] {
                               return RunDecode(input_ids, cache, output_attentions);
                             }));
  if (output_attentions) {
    const int64_t layers =
        config_.is_encoder_decoder ? config_.decoder_layers : config_.num_hidden_layers;
    ATTNSCOPE_RETURN_IF_ERROR(
        CheckLayers(config_.architecture, "attentions", output.attentions, layers));
    if (config_.is_encoder_decoder) {
      ATTNSCOPE_RETURN_IF_ERROR(
          CheckLayers(config_.architecture, "cross_attentions", output.cross_attentions, layers));
    }
  }
  return output;
}

absl::StatusOr<KvCache> TransformerModel::RunEncoder(const ForwardInput& source) const {
  if (!config_.is_encoder_decoder) {
    return absl::UnimplementedError(absl::StrCat("model_type '", config_.model_type,
                                                 "': expected an encoder-decoder (marian, "
                                                 "bart, t5) to encode a source for decoding"));
  }
  ForwardInput encoder_input;
  encoder_input.input_ids = source.input_ids;
  encoder_input.attention_mask = source.attention_mask;
  ATTNSCOPE_ASSIGN_OR_RETURN(const ForwardInput checked, CheckInput(encoder_input));
  return RunGuarded(config_.architecture, "encode", [&] { return RunEncoderImpl(checked); });
}

absl::StatusOr<KvCache> TransformerModel::RunEncoderImpl(const ForwardInput& /*source*/) const {
  return absl::UnimplementedError(
      absl::StrCat(ArchitectureName(config_.architecture), ": no encoder for decoding"));
}

absl::Status TransformerModel::ConvertProjections(torch::ScalarType /*dtype*/) {
  return absl::InvalidArgumentError(absl::StrCat(
      "compute_dtype 'bfloat16': expected one of the BERT family (bert, roberta, xlm-roberta, "
      "distilbert, mpnet, electra) or a decoder-only model (gpt2, gpt_neox, opt, llama, mistral, "
      "qwen2, qwen3, gemma, gemma2, gemma3_text, phi3), got model_type '",
      config_.model_type, "'; serve it with --compute_dtype=float32"));
}

absl::StatusOr<DecodeOutput> TransformerModel::RunDecode(const torch::Tensor& /*input_ids*/,
                                                         KvCache* /*cache*/,
                                                         bool /*output_attentions*/) const {
  return absl::UnimplementedError(
      absl::StrCat(ArchitectureName(config_.architecture), ": no incremental decoding"));
}

absl::StatusOr<std::unique_ptr<TransformerModel>> LoadTransformerModel(
    const ModelOptions& options) {
  // The BLAS check runs first, on LibTorch's own default threads: OpenBLAS's pthreads and OpenMP
  // threads would otherwise compete for the cores during the measurement.
  CheckBlasSpeedOnce();
  ConfigureIntraOpThreads(options.intra_op_threads);
  ATTNSCOPE_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(options.model_dir));
  ATTNSCOPE_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> checkpoint,
                             Checkpoint::Open(options.model_dir));
  absl::StatusOr<std::unique_ptr<TransformerModel>> model =
      absl::InternalError("unhandled architecture");
  switch (config.architecture) {
    case Architecture::kBert:
    case Architecture::kRoberta:
    case Architecture::kDistilBert:
    case Architecture::kMpnet:
    case Architecture::kElectra:
      model = CreateBertModel(std::move(config), *checkpoint);
      break;
    case Architecture::kLlama:
    case Architecture::kQwen2:
    case Architecture::kQwen3:
    case Architecture::kMistral:
    case Architecture::kGemma:
    case Architecture::kGemma2:
    case Architecture::kGemma3:
    case Architecture::kPhi3:
      model = CreateLlamaModel(std::move(config), *checkpoint);
      break;
    case Architecture::kMarian:
    case Architecture::kBart:
      model = CreateEncoderDecoderModel(std::move(config), *checkpoint);
      break;
    case Architecture::kGpt2:
      model = CreateGpt2Model(std::move(config), *checkpoint);
      break;
    case Architecture::kGptNeox:
      model = CreateGptNeoxModel(std::move(config), *checkpoint);
      break;
    case Architecture::kOpt:
      model = CreateOptModel(std::move(config), *checkpoint);
      break;
    case Architecture::kT5:
      model = CreateT5Model(std::move(config), *checkpoint);
      break;
  }
  if (!model.ok()) return model;
  (*model)->checkpoint_ = std::move(checkpoint);
  if (options.compute_dtype == ComputeDtype::kBfloat16) {
    if (!HasAvx512Bf16()) {
      if (__builtin_cpu_supports("avx512bf16")) {
        return absl::InvalidArgumentError(
            "compute_dtype 'bfloat16': expected the AVX-512 kernels, got them switched off by "
            "ATTNSCOPE_DISABLE_AVX512 or ATTNSCOPE_DISABLE_AVX2 in the environment (this CPU has "
            "AVX512_BF16); unset the variable or use --compute_dtype=float32");
      }
      return absl::InvalidArgumentError(
          "compute_dtype 'bfloat16': expected a CPU with AVX512_BF16 (the avx512_bf16 flag of "
          "/proc/cpuinfo), got a CPU without it; use --compute_dtype=float32");
    }
    absl::Status converted = absl::OkStatus();
    try {
      converted = (*model)->ConvertProjections(torch::kBFloat16);
    } catch (const std::bad_alloc&) {
      converted = absl::ResourceExhaustedError(
          "compute_dtype 'bfloat16': out of memory converting the projections' weights");
    } catch (const c10::Error& e) {
      converted = absl::InternalError(
          absl::StrCat("compute_dtype 'bfloat16': converting the projections' weights failed: ",
                       e.what_without_backtrace()));
    }
    ATTNSCOPE_RETURN_IF_ERROR(converted);
  }
  return model;
}

absl::StatusOr<ComputeDtype> ParseComputeDtype(absl::string_view name) {
  if (name == "float32") return ComputeDtype::kFloat32;
  if (name == "bfloat16") return ComputeDtype::kBfloat16;
  return absl::InvalidArgumentError(
      absl::StrCat("flag --compute_dtype: expected float32 or bfloat16, got '", name, "'"));
}

absl::string_view ComputeDtypeName(ComputeDtype dtype) {
  return dtype == ComputeDtype::kBfloat16 ? "bfloat16" : "float32";
}

}  // namespace attnscope

// OPT (Zhang et al. 2022, "OPT: Open Pre-trained Transformer Language Models") as Hugging Face
// transformers' OPTForCausalLM computes it (modeling_opt.py): token embeddings plus learned
// positions, whose table keeps two rows before position 0 (OPTLearnedPositionalEmbedding's offset
// of 2, a fairseq legacy), pre-LayerNorm layers (self_attn_layer_norm before the causal
// self-attention, final_layer_norm before the MLP fc2(relu(fc1 x))), separate q, k, v and out
// projections with biases, queries scaled by head_dim^-1/2, a final_layer_norm after the stack and
// an lm_head tied to the token embeddings. A whole sequence's attention runs on PrefixAttention.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/architectures/model_util.h"
#include "models/architectures/transformer.h"
#include "models/kernels/fused_ops.h"
#include "models/kernels/gemm.h"

namespace attnscope {
namespace {

// OPTLearnedPositionalEmbedding looks position p up at row p + 2.
constexpr int64_t kPositionOffset = 2;

struct OptLayer {
  torch::Tensor attention_norm_weight, attention_norm_bias;  // self_attn_layer_norm
  torch::Tensor q_proj_weight, q_proj_bias;
  torch::Tensor k_proj_weight, k_proj_bias;
  torch::Tensor v_proj_weight, v_proj_bias;
  torch::Tensor out_proj_weight, out_proj_bias;
  torch::Tensor mlp_norm_weight, mlp_norm_bias;  // the layer's final_layer_norm
  torch::Tensor fc1_weight, fc1_bias;
  torch::Tensor fc2_weight, fc2_bias;
};

class OptModel : public DecoderOnlyModel {
 public:
  OptModel(ModelConfig config, const Checkpoint& checkpoint, const std::string& prefix,
           bool separate_lm_head)
      : DecoderOnlyModel(std::move(config)) {
    auto get = [&](const std::string& name) { return checkpoint.Get(prefix + name); };
    embed_tokens_ = get("embed_tokens.weight");
    embed_positions_ = get("embed_positions.weight");
    for (int64_t i = 0; i < this->config().num_hidden_layers; ++i) {
      const std::string layer = absl::StrCat("layers.", i, ".");
      OptLayer loaded;
      loaded.attention_norm_weight = get(layer + "self_attn_layer_norm.weight");
      loaded.attention_norm_bias = get(layer + "self_attn_layer_norm.bias");
      loaded.q_proj_weight = get(layer + "self_attn.q_proj.weight");
      loaded.q_proj_bias = get(layer + "self_attn.q_proj.bias");
      loaded.k_proj_weight = get(layer + "self_attn.k_proj.weight");
      loaded.k_proj_bias = get(layer + "self_attn.k_proj.bias");
      loaded.v_proj_weight = get(layer + "self_attn.v_proj.weight");
      loaded.v_proj_bias = get(layer + "self_attn.v_proj.bias");
      loaded.out_proj_weight = get(layer + "self_attn.out_proj.weight");
      loaded.out_proj_bias = get(layer + "self_attn.out_proj.bias");
      loaded.mlp_norm_weight = get(layer + "final_layer_norm.weight");
      loaded.mlp_norm_bias = get(layer + "final_layer_norm.bias");
      loaded.fc1_weight = get(layer + "fc1.weight");
      loaded.fc1_bias = get(layer + "fc1.bias");
      loaded.fc2_weight = get(layer + "fc2.weight");
      loaded.fc2_bias = get(layer + "fc2.bias");
      layers_.push_back(std::move(loaded));
    }
    if (this->config().final_layer_norm) {
      final_norm_weight_ = get("final_layer_norm.weight");
      final_norm_bias_ = get("final_layer_norm.bias");
    }
    lm_head_ = separate_lm_head ? checkpoint.Get("lm_head.weight") : embed_tokens_;
  }

 protected:
  absl::Status ConvertProjections(torch::ScalarType dtype) override {
    for (OptLayer& layer : layers_) {
      for (torch::Tensor* weight :
           {&layer.q_proj_weight, &layer.k_proj_weight, &layer.v_proj_weight,
            &layer.out_proj_weight, &layer.fc1_weight, &layer.fc2_weight}) {
        *weight = weight->to(dtype);
      }
    }
    return absl::OkStatus();
  }

 private:
  torch::Tensor Norm(const torch::Tensor& x, const torch::Tensor& weight,
                     const torch::Tensor& bias) const {
    return LayerNorm(x, weight, bias, config().layer_norm_eps);
  }

  absl::StatusOr<ForwardOutput> Layers(const torch::Tensor& input_ids, const torch::Tensor& visible,
                                       KvCache* cache,
                                       const ForwardOptions& options) const override {
    const ModelConfig& cfg = config();
    const int64_t batch = input_ids.size(0);
    const int64_t length = input_ids.size(1);
    const int64_t past = cache == nullptr ? 0 : cache->length();
    const torch::Tensor prefixes =
        cache == nullptr ? VisiblePrefixes(visible, batch) : torch::Tensor();
    // OPTDecoder numbers a right-padded sequence's real tokens 0, 1, ... (its positions count the
    // attention mask), the same as their index here; padding rows are never read.
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(cfg.head_dim)));

    ForwardOutput out;
    torch::Tensor hidden = (torch::embedding(embed_tokens_, input_ids) +
                            embed_positions_.narrow(0, past + kPositionOffset, length))
                               .contiguous();
    if (options.output_hidden_states) out.hidden_states.push_back(hidden);
    for (size_t i = 0; i < layers_.size(); ++i) {
      const OptLayer& layer = layers_[i];
      const std::vector<torch::Tensor> qkv =
          LinearGroup(Norm(hidden, layer.attention_norm_weight, layer.attention_norm_bias),
                      {layer.q_proj_weight, layer.k_proj_weight, layer.v_proj_weight},
                      {layer.q_proj_bias, layer.k_proj_bias, layer.v_proj_bias});
      PrefixAttentionOutput attention =
          CausalSelfAttention(qkv[0], qkv[1], qkv[2], cfg.num_attention_heads, cfg.head_dim, scale,
                              prefixes, visible, cache, i, options.output_attention_scores);
      hidden = Linear(attention.context, layer.out_proj_weight, layer.out_proj_bias,
                      /*residual=*/hidden);
      hidden = TwoLayerMlp(Norm(hidden, layer.mlp_norm_weight, layer.mlp_norm_bias), cfg.hidden_act,
                           layer.fc1_weight, layer.fc1_bias, layer.fc2_weight, layer.fc2_bias,
                           /*residual=*/hidden);
      ATTNSCOPE_RETURN_IF_ERROR(AddLayerOutputs(options, i, layers_.size(),
                                                std::move(attention.probs),
                                                std::move(attention.scores), hidden, out));
    }
    // OPTDecoder reports the final_layer_norm's output as the last hidden state.
    out.last_hidden_state =
        cfg.final_layer_norm ? Norm(hidden, final_norm_weight_, final_norm_bias_) : hidden;
    if (options.output_hidden_states) out.hidden_states.push_back(out.last_hidden_state);
    if (options.output_logits) {
      out.logits = Linear(out.last_hidden_state, lm_head_, /*bias=*/torch::Tensor());
    }
    return out;
  }

  torch::Tensor embed_tokens_;
  torch::Tensor embed_positions_;
  std::vector<OptLayer> layers_;
  torch::Tensor final_norm_weight_;
  torch::Tensor final_norm_bias_;
  torch::Tensor lm_head_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TransformerModel>> CreateOptModel(ModelConfig config,
                                                                 Checkpoint& checkpoint) {
  // OPTForCausalLM nests OPTModel under "model."; a saved OPTModel has "decoder." alone.
  const std::string prefix =
      checkpoint.Contains("model.decoder.embed_tokens.weight") ? "model.decoder." : "decoder.";
  ATTNSCOPE_RETURN_IF_ERROR(checkpoint.CheckBlockCount(
      "num_hidden_layers", config.num_hidden_layers, prefix + "layers."));
  ATTNSCOPE_RETURN_IF_ERROR(checkpoint.CheckConfigSize("vocab_size", config.vocab_size,
                                                       prefix + "embed_tokens.weight", 0));
  ATTNSCOPE_RETURN_IF_ERROR(checkpoint.CheckConfigSize("hidden_size", config.hidden_size,
                                                       prefix + "embed_tokens.weight", 1));
  ATTNSCOPE_RETURN_IF_ERROR(checkpoint.CheckConfigSize(
      "max_position_embeddings", config.max_position_embeddings, prefix + "embed_positions.weight",
      /*dim=*/0, /*offset=*/kPositionOffset));
  const int64_t hidden = config.hidden_size;
  const int64_t inner = config.intermediate_size;
  std::vector<TensorSpec> specs;
  specs.push_back({prefix + "embed_tokens.weight", {config.vocab_size, hidden}});
  specs.push_back({prefix + "embed_positions.weight",
                   {config.max_position_embeddings + kPositionOffset, hidden}});
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string layer = absl::StrCat(prefix, "layers.", i, ".");
    for (const char* norm : {"self_attn_layer_norm", "final_layer_norm"}) {
      specs.push_back({absl::StrCat(layer, norm, ".weight"), {hidden}});
      specs.push_back({absl::StrCat(layer, norm, ".bias"), {hidden}});
    }
    for (const char* projection : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      specs.push_back({absl::StrCat(layer, "self_attn.", projection, ".weight"), {hidden, hidden}});
      specs.push_back({absl::StrCat(layer, "self_attn.", projection, ".bias"), {hidden}});
    }
    specs.push_back({layer + "fc1.weight", {inner, hidden}});
    specs.push_back({layer + "fc1.bias", {inner}});
    specs.push_back({layer + "fc2.weight", {hidden, inner}});
    specs.push_back({layer + "fc2.bias", {hidden}});
  }
  if (config.final_layer_norm) {
    specs.push_back({prefix + "final_layer_norm.weight", {hidden}});
    specs.push_back({prefix + "final_layer_norm.bias", {hidden}});
  }
  // OPTForCausalLM ties lm_head to embed_tokens (a stored lm_head.weight is then the same values).
  const bool separate_lm_head = !config.tie_word_embeddings;
  if (checkpoint.Contains("lm_head.weight") || separate_lm_head) {
    specs.push_back({"lm_head.weight", {config.vocab_size, hidden}});
  }
  // With _remove_final_layer_norm, OPTDecoder has no final_layer_norm and transformers leaves the
  // stored one unused.
  std::vector<std::string> ignored;
  if (!config.final_layer_norm) {
    ignored = {prefix + "final_layer_norm.weight", prefix + "final_layer_norm.bias"};
  }
  ATTNSCOPE_RETURN_IF_ERROR(checkpoint.Load(specs, ignored));
  const Architecture architecture = config.architecture;
  return BuildModel(architecture, [&] {
    return new OptModel(std::move(config), checkpoint, prefix, separate_lm_head);
  });
}

}  // namespace attnscope

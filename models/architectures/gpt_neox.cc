// GPT-NeoX (Black et al. 2022, "GPT-NeoX-20B") as Hugging Face transformers' GPTNeoXForCausalLM
// computes it: the architecture of EleutherAI's Pythia suite (Biderman et al. 2023), which
// interpretability work reads across sizes and training steps. Pre-LayerNorm blocks with biases
// as GPT-2's, rotary position embeddings (Su et al. 2021) on the first rotary_pct of each head's
// dimensions (rotate_half layout, base rotary_emb_base), one fused query_key_value projection
// whose rows are grouped by head (head h's query, key and value rows side by side), and, with
// use_parallel_residual (Pythia's default), the attention and the MLP reading the same layer
// input: x + attention(input_layernorm(x)) + mlp(post_attention_layernorm(x)). A final LayerNorm
// and an untied embed_out give the logits. The fused projection runs as one product and its
// heads' queries, keys and values are taken apart after it, so the weights are read in place.
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
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

struct GptNeoxLayer {
  torch::Tensor input_norm_weight, input_norm_bias;
  torch::Tensor qkv_weight, qkv_bias;  // [N * 3 * head_dim, H]: per head, query, key, value rows
  torch::Tensor dense_weight, dense_bias;
  torch::Tensor post_attention_norm_weight, post_attention_norm_bias;
  torch::Tensor fc_in_weight, fc_in_bias, fc_out_weight, fc_out_bias;
};

class GptNeoxModel : public DecoderOnlyModel {
 public:
  GptNeoxModel(ModelConfig config, const Checkpoint& checkpoint, const std::string& prefix,
               bool separate_lm_head)
      : DecoderOnlyModel(std::move(config)) {
    const ModelConfig& cfg = this->config();
    auto get = [&](const std::string& name) { return checkpoint.Get(prefix + name); };
    // Undefined without attention_bias.
    auto bias = [&](const std::string& name) { return cfg.qkv_bias ? get(name) : torch::Tensor(); };
    embed_in_ = get("embed_in.weight");
    for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
      const std::string layer = absl::StrCat("layers.", i, ".");
      GptNeoxLayer loaded;
      loaded.input_norm_weight = get(layer + "input_layernorm.weight");
      loaded.input_norm_bias = get(layer + "input_layernorm.bias");
      loaded.qkv_weight = get(layer + "attention.query_key_value.weight");
      loaded.qkv_bias = bias(layer + "attention.query_key_value.bias");
      loaded.dense_weight = get(layer + "attention.dense.weight");
      loaded.dense_bias = bias(layer + "attention.dense.bias");
      loaded.post_attention_norm_weight = get(layer + "post_attention_layernorm.weight");
      loaded.post_attention_norm_bias = get(layer + "post_attention_layernorm.bias");
      loaded.fc_in_weight = get(layer + "mlp.dense_h_to_4h.weight");
      loaded.fc_in_bias = get(layer + "mlp.dense_h_to_4h.bias");
      loaded.fc_out_weight = get(layer + "mlp.dense_4h_to_h.weight");
      loaded.fc_out_bias = get(layer + "mlp.dense_4h_to_h.bias");
      layers_.push_back(std::move(loaded));
    }
    final_norm_weight_ = get("final_layer_norm.weight");
    final_norm_bias_ = get("final_layer_norm.bias");
    embed_out_ = separate_lm_head ? checkpoint.Get("embed_out.weight") : embed_in_;
    inv_freq_ = RopeInverseFrequencies(cfg.rope_theta, cfg.rotary_dim) / cfg.rope_linear_factor;
  }

 protected:
  absl::Status ConvertProjections(torch::ScalarType dtype) override {
    for (GptNeoxLayer& layer : layers_) {
      for (torch::Tensor* weight :
           {&layer.qkv_weight, &layer.dense_weight, &layer.fc_in_weight, &layer.fc_out_weight}) {
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
    const int64_t heads = cfg.num_attention_heads;
    const int64_t head_dim = cfg.head_dim;
    const int64_t hidden_size = cfg.hidden_size;
    const auto [cos, sin] = RopeTables(inv_freq_, past, length);
    const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
    // A whole sequence (no cache) takes the fast attention; decoding steps over a cache take
    // LibTorch's batched products.
    const torch::Tensor prefixes =
        cache == nullptr ? VisiblePrefixes(visible, batch) : torch::Tensor();

    ForwardOutput out;
    torch::Tensor hidden = torch::embedding(embed_in_, input_ids);
    if (options.output_hidden_states) out.hidden_states.push_back(hidden);
    for (size_t i = 0; i < layers_.size(); ++i) {
      const GptNeoxLayer& layer = layers_[i];
      // [B, T, N, 3, head_dim]: GPTNeoXAttention views the projection as [..., N, 3 * head_dim]
      // and chunks each head's row into query, key and value.
      const torch::Tensor qkv = Linear(Norm(hidden, layer.input_norm_weight, layer.input_norm_bias),
                                       layer.qkv_weight, layer.qkv_bias)
                                    .view({batch, length, heads, 3, head_dim});
      const torch::Tensor query =
          ApplyRotary(qkv.select(3, 0), cos, sin).reshape({batch, length, hidden_size});
      const torch::Tensor key =
          ApplyRotary(qkv.select(3, 1), cos, sin).reshape({batch, length, hidden_size});
      const torch::Tensor value = qkv.select(3, 2).reshape({batch, length, hidden_size});
      PrefixAttentionOutput attention =
          CausalSelfAttention(query, key, value, heads, head_dim, scale, prefixes, visible, cache,
                              i, options.output_attention_scores);
      const torch::Tensor& context = attention.context;
      if (cfg.parallel_residual) {
        // Both branches read the layer's input; the MLP's adds to the attention's sum.
        const torch::Tensor mlp_input =
            Norm(hidden, layer.post_attention_norm_weight, layer.post_attention_norm_bias);
        hidden =
            TwoLayerMlp(mlp_input, cfg.hidden_act, layer.fc_in_weight, layer.fc_in_bias,
                        layer.fc_out_weight, layer.fc_out_bias,
                        /*residual=*/
                        Linear(context, layer.dense_weight, layer.dense_bias, /*residual=*/hidden));
      } else {
        hidden = Linear(context, layer.dense_weight, layer.dense_bias, /*residual=*/hidden);
        hidden = TwoLayerMlp(
            Norm(hidden, layer.post_attention_norm_weight, layer.post_attention_norm_bias),
            cfg.hidden_act, layer.fc_in_weight, layer.fc_in_bias, layer.fc_out_weight,
            layer.fc_out_bias, /*residual=*/hidden);
      }
      ATTNSCOPE_RETURN_IF_ERROR(AddLayerOutputs(options, i, layers_.size(),
                                                std::move(attention.probs),
                                                std::move(attention.scores), hidden, out));
    }
    // transformers' GPTNeoXModel reports final_layer_norm's output as the last hidden state.
    out.last_hidden_state = Norm(hidden, final_norm_weight_, final_norm_bias_);
    if (options.output_hidden_states) out.hidden_states.push_back(out.last_hidden_state);
    if (options.output_logits) {
      out.logits = Linear(out.last_hidden_state, embed_out_, /*bias=*/torch::Tensor());
    }
    return out;
  }

  torch::Tensor embed_in_;
  std::vector<GptNeoxLayer> layers_;
  torch::Tensor final_norm_weight_;
  torch::Tensor final_norm_bias_;
  torch::Tensor embed_out_;
  torch::Tensor inv_freq_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TransformerModel>> CreateGptNeoxModel(ModelConfig config,
                                                                     Checkpoint& checkpoint) {
  // GPTNeoXForCausalLM nests GPTNeoXModel under "gpt_neox."; a saved GPTNeoXModel has no prefix.
  const std::string prefix = checkpoint.Contains("gpt_neox.embed_in.weight") ? "gpt_neox." : "";
  ATTNSCOPE_RETURN_IF_ERROR(checkpoint.CheckBlockCount(
      "num_hidden_layers", config.num_hidden_layers, prefix + "layers."));
  ATTNSCOPE_RETURN_IF_ERROR(
      checkpoint.CheckConfigSize("vocab_size", config.vocab_size, prefix + "embed_in.weight", 0));
  ATTNSCOPE_RETURN_IF_ERROR(
      checkpoint.CheckConfigSize("hidden_size", config.hidden_size, prefix + "embed_in.weight", 1));
  const int64_t hidden = config.hidden_size;
  const int64_t inner = config.intermediate_size;
  std::vector<TensorSpec> specs;
  specs.push_back({prefix + "embed_in.weight", {config.vocab_size, hidden}});
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string layer = absl::StrCat(prefix, "layers.", i, ".");
    for (const char* norm : {"input_layernorm", "post_attention_layernorm"}) {
      specs.push_back({layer + norm + ".weight", {hidden}});
      specs.push_back({layer + norm + ".bias", {hidden}});
    }
    specs.push_back({layer + "attention.query_key_value.weight", {3 * hidden, hidden}});
    specs.push_back({layer + "attention.dense.weight", {hidden, hidden}});
    if (config.qkv_bias) {
      specs.push_back({layer + "attention.query_key_value.bias", {3 * hidden}});
      specs.push_back({layer + "attention.dense.bias", {hidden}});
    }
    specs.push_back({layer + "mlp.dense_h_to_4h.weight", {inner, hidden}});
    specs.push_back({layer + "mlp.dense_h_to_4h.bias", {inner}});
    specs.push_back({layer + "mlp.dense_4h_to_h.weight", {hidden, inner}});
    specs.push_back({layer + "mlp.dense_4h_to_h.bias", {hidden}});
  }
  specs.push_back({prefix + "final_layer_norm.weight", {hidden}});
  specs.push_back({prefix + "final_layer_norm.bias", {hidden}});
  // Pythia's checkpoints keep each layer's causal-mask buffers and rotary frequencies.
  std::vector<std::string> ignored = {".attention.bias", ".attention.masked_bias",
                                      ".rotary_emb.inv_freq"};
  // With tie_word_embeddings transformers ties embed_out to embed_in whatever the file stores.
  const bool separate_lm_head = !config.tie_word_embeddings;
  if (separate_lm_head) {
    if (!checkpoint.Contains("embed_out.weight")) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint '", checkpoint.model_dir(),
                       "': tensor 'embed_out.weight': expected (config.json has "
                       "tie_word_embeddings false, GPTNeoXConfig's default), got nothing"));
    }
    specs.push_back({"embed_out.weight", {config.vocab_size, hidden}});
  } else {
    ignored.push_back("embed_out.weight");
  }
  ATTNSCOPE_RETURN_IF_ERROR(checkpoint.Load(specs, ignored));
  const Architecture architecture = config.architecture;
  return BuildModel(architecture, [&] {
    return new GptNeoxModel(std::move(config), checkpoint, prefix, separate_lm_head);
  });
}

}  // namespace attnscope

// GPT-2 (Radford et al. 2019) as Hugging Face transformers' GPT2LMHeadModel computes it: learned
// absolute positions added to the token embeddings, pre-LayerNorm blocks (ln_1 before the causal
// self-attention, ln_2 before the MLP), one fused query/key/value projection (c_attn), the MLP
// c_proj(act(c_fc x)) with gelu_new (the tanh approximation) by default, a final ln_f and an
// lm_head tied to the token embeddings. Its projections are Conv1D modules, whose weights are
// stored [in, out] (transposed from nn.Linear's [out, in]): they are transposed once at load, so
// that the projections run on models/kernels' Linear (the row kernel reads [out, in] rows), at the
// cost of a copy of the layers' weights. A whole sequence's attention runs on PrefixAttention.
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

struct Gpt2Layer {
  torch::Tensor ln_1_weight, ln_1_bias;
  torch::Tensor c_attn_weight, c_attn_bias;  // [3H, H] after the transpose, [3H]
  torch::Tensor attn_proj_weight, attn_proj_bias;
  torch::Tensor ln_2_weight, ln_2_bias;
  torch::Tensor c_fc_weight, c_fc_bias;
  torch::Tensor mlp_proj_weight, mlp_proj_bias;
};

class Gpt2Model : public DecoderOnlyModel {
 public:
  Gpt2Model(ModelConfig config, const Checkpoint& checkpoint, const std::string& prefix,
            bool separate_lm_head)
      : DecoderOnlyModel(std::move(config)) {
    auto get = [&](const std::string& name) { return checkpoint.Get(prefix + name); };
    // Conv1D computes x W + b with W [in, out]; nn.Linear's layout is W^T, made contiguous once.
    auto conv1d = [&](const std::string& name) {
      return checkpoint.Get(prefix + name).t().contiguous();
    };
    wte_ = get("wte.weight");
    wpe_ = get("wpe.weight");
    for (int64_t i = 0; i < this->config().num_hidden_layers; ++i) {
      const std::string layer = absl::StrCat("h.", i, ".");
      Gpt2Layer loaded;
      loaded.ln_1_weight = get(layer + "ln_1.weight");
      loaded.ln_1_bias = get(layer + "ln_1.bias");
      loaded.c_attn_weight = conv1d(layer + "attn.c_attn.weight");
      loaded.c_attn_bias = get(layer + "attn.c_attn.bias");
      loaded.attn_proj_weight = conv1d(layer + "attn.c_proj.weight");
      loaded.attn_proj_bias = get(layer + "attn.c_proj.bias");
      loaded.ln_2_weight = get(layer + "ln_2.weight");
      loaded.ln_2_bias = get(layer + "ln_2.bias");
      loaded.c_fc_weight = conv1d(layer + "mlp.c_fc.weight");
      loaded.c_fc_bias = get(layer + "mlp.c_fc.bias");
      loaded.mlp_proj_weight = conv1d(layer + "mlp.c_proj.weight");
      loaded.mlp_proj_bias = get(layer + "mlp.c_proj.bias");
      layers_.push_back(std::move(loaded));
    }
    ln_f_weight_ = get("ln_f.weight");
    ln_f_bias_ = get("ln_f.bias");
    lm_head_ = separate_lm_head ? checkpoint.Get("lm_head.weight") : wte_;
  }

 protected:
  absl::Status ConvertProjections(torch::ScalarType dtype) override {
    for (Gpt2Layer& layer : layers_) {
      for (torch::Tensor* weight : {&layer.c_attn_weight, &layer.attn_proj_weight,
                                    &layer.c_fc_weight, &layer.mlp_proj_weight}) {
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

  // c_proj(act(c_fc x)) + residual.
  torch::Tensor Mlp(const Gpt2Layer& layer, const torch::Tensor& x,
                    const torch::Tensor& residual) const {
    return TwoLayerMlp(x, config().hidden_act, layer.c_fc_weight, layer.c_fc_bias,
                       layer.mlp_proj_weight, layer.mlp_proj_bias, residual);
  }

  absl::StatusOr<ForwardOutput> Layers(const torch::Tensor& input_ids, const torch::Tensor& visible,
                                       KvCache* cache,
                                       const ForwardOptions& options) const override {
    const ModelConfig& cfg = config();
    const int64_t batch = input_ids.size(0);
    const int64_t length = input_ids.size(1);
    const int64_t past = cache == nullptr ? 0 : cache->length();
    const int64_t hidden_size = cfg.hidden_size;
    const int64_t heads = cfg.num_attention_heads;
    const int64_t head_dim = cfg.head_dim;
    // A whole sequence (no cache) takes the fast attention; decoding steps over a cache, a few
    // queries against many keys, take LibTorch's batched products.
    const torch::Tensor prefixes =
        cache == nullptr ? VisiblePrefixes(visible, batch) : torch::Tensor();

    ForwardOutput out;
    torch::Tensor hidden =
        (torch::embedding(wte_, input_ids) + wpe_.narrow(0, past, length)).contiguous();
    if (options.output_hidden_states) out.hidden_states.push_back(hidden);
    for (size_t i = 0; i < layers_.size(); ++i) {
      const Gpt2Layer& layer = layers_[i];
      const torch::Tensor qkv = Linear(Norm(hidden, layer.ln_1_weight, layer.ln_1_bias),
                                       layer.c_attn_weight, layer.c_attn_bias);
      const std::vector<torch::Tensor> parts = qkv.split(hidden_size, /*dim=*/-1);
      // GPT2Attention: scale_attn_weights divides by sqrt(head_dim),
      // scale_attn_by_inverse_layer_idx also by the layer's 1-based index.
      double scale = cfg.scale_attn_weights ? 1.0 / std::sqrt(static_cast<double>(head_dim)) : 1.0;
      if (cfg.scale_attn_by_inverse_layer_idx) scale /= static_cast<double>(i + 1);
      PrefixAttentionOutput attention = CausalSelfAttention(
          parts[0], parts[1], parts[2], heads, head_dim, static_cast<float>(scale), prefixes,
          visible, cache, i, options.output_attention_scores);
      hidden = Linear(attention.context, layer.attn_proj_weight, layer.attn_proj_bias,
                      /*residual=*/hidden);
      hidden = Mlp(layer, Norm(hidden, layer.ln_2_weight, layer.ln_2_bias), /*residual=*/hidden);
      ATTNSCOPE_RETURN_IF_ERROR(AddLayerOutputs(options, i, layers_.size(),
                                                std::move(attention.probs),
                                                std::move(attention.scores), hidden, out));
    }
    // transformers' GPT2Model reports ln_f's output as the last hidden state.
    out.last_hidden_state = Norm(hidden, ln_f_weight_, ln_f_bias_);
    if (options.output_hidden_states) out.hidden_states.push_back(out.last_hidden_state);
    // Linear (the row kernel) rather than LibTorch's BLAS, which summed a row's logits in another
    // order at another row count: a sequence's logits then depended on the batch it ran in.
    if (options.output_logits) {
      out.logits = Linear(out.last_hidden_state, lm_head_, /*bias=*/torch::Tensor());
    }
    return out;
  }

  torch::Tensor wte_;
  torch::Tensor wpe_;
  std::vector<Gpt2Layer> layers_;
  torch::Tensor ln_f_weight_;
  torch::Tensor ln_f_bias_;
  torch::Tensor lm_head_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TransformerModel>> CreateGpt2Model(ModelConfig config,
                                                                  Checkpoint& checkpoint) {
  // GPT2LMHeadModel nests GPT2Model under "transformer."; a saved GPT2Model (the original "gpt2"
  // checkpoint) has no prefix.
  const std::string prefix = checkpoint.Contains("transformer.wte.weight") ? "transformer." : "";
  ATTNSCOPE_RETURN_IF_ERROR(
      checkpoint.CheckBlockCount("n_layer", config.num_hidden_layers, prefix + "h."));
  ATTNSCOPE_RETURN_IF_ERROR(
      checkpoint.CheckConfigSize("vocab_size", config.vocab_size, prefix + "wte.weight", 0));
  ATTNSCOPE_RETURN_IF_ERROR(
      checkpoint.CheckConfigSize("n_embd", config.hidden_size, prefix + "wte.weight", 1));
  ATTNSCOPE_RETURN_IF_ERROR(checkpoint.CheckConfigSize(
      "n_positions", config.max_position_embeddings, prefix + "wpe.weight", 0));
  const int64_t hidden = config.hidden_size;
  const int64_t inner = config.intermediate_size;
  std::vector<TensorSpec> specs;
  specs.push_back({prefix + "wte.weight", {config.vocab_size, hidden}});
  specs.push_back({prefix + "wpe.weight", {config.max_position_embeddings, hidden}});
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string layer = absl::StrCat(prefix, "h.", i, ".");
    for (const char* norm : {"ln_1", "ln_2"}) {
      specs.push_back({layer + norm + ".weight", {hidden}});
      specs.push_back({layer + norm + ".bias", {hidden}});
    }
    // Conv1D weights are [in, out].
    specs.push_back({layer + "attn.c_attn.weight", {hidden, 3 * hidden}});
    specs.push_back({layer + "attn.c_attn.bias", {3 * hidden}});
    specs.push_back({layer + "attn.c_proj.weight", {hidden, hidden}});
    specs.push_back({layer + "attn.c_proj.bias", {hidden}});
    specs.push_back({layer + "mlp.c_fc.weight", {hidden, inner}});
    specs.push_back({layer + "mlp.c_fc.bias", {inner}});
    specs.push_back({layer + "mlp.c_proj.weight", {inner, hidden}});
    specs.push_back({layer + "mlp.c_proj.bias", {hidden}});
  }
  specs.push_back({prefix + "ln_f.weight", {hidden}});
  specs.push_back({prefix + "ln_f.bias", {hidden}});
  // GPT2LMHeadModel ties lm_head to wte (a stored lm_head.weight is then the same values);
  // attn.bias and attn.masked_bias are the causal-mask buffers older checkpoints saved.
  const std::vector<std::string> ignored = {".attn.bias", ".attn.masked_bias"};
  const bool separate_lm_head = !config.tie_word_embeddings;
  if (checkpoint.Contains("lm_head.weight") || separate_lm_head) {
    specs.push_back({"lm_head.weight", {config.vocab_size, hidden}});
  }
  ATTNSCOPE_RETURN_IF_ERROR(checkpoint.Load(specs, ignored));
  const Architecture architecture = config.architecture;
  return BuildModel(architecture, [&] {
    return new Gpt2Model(std::move(config), checkpoint, prefix, separate_lm_head);
  });
}

}  // namespace attnscope

// The decoder-only Llama family as Hugging Face transformers computes it. Llama (Touvron et al.
// 2023, LlamaForCausalLM): RMSNorm pre-normalisation, rotary position embeddings in the rotate_half
// layout (Su et al. 2021, RoFormer), grouped-query attention (Ainslie et al. 2023: query head h
// reads key/value head h / (N / N_kv)), a causal mask, a SiLU-gated MLP and an lm_head that may be
// tied to the input embeddings. Its members differ only in what ModelConfig records:
// Qwen2ForCausalLM adds biases to q/k/v, Qwen3ForCausalLM an RMSNorm of each head's queries and
// keys before RoPE (q_norm, k_norm), MistralForCausalLM (Jiang et al. 2023) a sliding window
// (query i sees keys i - W < j <= i), which Qwen2 and Qwen3 may also set per layer.
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/architectures/model_util.h"
#include "models/architectures/transformer.h"
#include "models/kernels/decode_attention.h"
#include "models/kernels/gemm.h"

namespace attnscope {
namespace {

struct LlamaLayer {
  torch::Tensor input_norm, q_proj, k_proj, v_proj, o_proj;
  torch::Tensor post_attention_norm, gate_proj, up_proj, down_proj;
  // Undefined unless the config has them (qkv_bias, o_proj_bias, qk_norm).
  torch::Tensor q_bias, k_bias, v_bias, o_bias, q_norm, k_norm;
  int64_t sliding_window = 0;  // 0: the whole causal prefix
};

class LlamaModel : public DecoderOnlyModel {
 public:
  LlamaModel(ModelConfig config, const Checkpoint& checkpoint, bool separate_lm_head)
      : DecoderOnlyModel(std::move(config)) {
    embed_tokens_ = checkpoint.Get("model.embed_tokens.weight");
    for (int64_t i = 0; i < this->config().num_hidden_layers; ++i) {
      const std::string layer = absl::StrCat("model.layers.", i, ".");
      auto get = [&](const std::string& name) { return checkpoint.Get(layer + name + ".weight"); };
      LlamaLayer loaded;
      loaded.input_norm = get("input_layernorm");
      loaded.q_proj = get("self_attn.q_proj");
      loaded.k_proj = get("self_attn.k_proj");
      loaded.v_proj = get("self_attn.v_proj");
      loaded.o_proj = get("self_attn.o_proj");
      loaded.post_attention_norm = get("post_attention_layernorm");
      loaded.gate_proj = get("mlp.gate_proj");
      loaded.up_proj = get("mlp.up_proj");
      loaded.down_proj = get("mlp.down_proj");
      const ModelConfig& cfg = this->config();
      auto bias = [&](const std::string& name) { return checkpoint.Get(layer + name + ".bias"); };
      if (cfg.qkv_bias) {
        loaded.q_bias = bias("self_attn.q_proj");
        loaded.k_bias = bias("self_attn.k_proj");
        loaded.v_bias = bias("self_attn.v_proj");
      }
      if (cfg.o_proj_bias) loaded.o_bias = bias("self_attn.o_proj");
      if (cfg.qk_norm) {
        loaded.q_norm = get("self_attn.q_norm");
        loaded.k_norm = get("self_attn.k_norm");
      }
      loaded.sliding_window = cfg.layer_sliding_windows[i];
      layers_.push_back(std::move(loaded));
    }
    norm_ = checkpoint.Get("model.norm.weight");
    lm_head_ = separate_lm_head ? checkpoint.Get("lm_head.weight") : embed_tokens_;
    // RoPE inverse frequencies theta^(-2i/d), computed in float32 like transformers'
    // LlamaRotaryEmbedding.
    const int64_t head_dim = this->config().head_dim;
    inv_freq_ = 1.0 / torch::pow(this->config().rope_theta,
                                 torch::arange(0, head_dim, 2, torch::kInt64).to(torch::kFloat32) /
                                     static_cast<double>(head_dim));
  }

 protected:
  absl::Status ConvertProjections(torch::ScalarType dtype) override {
    for (LlamaLayer& layer : layers_) {
      for (torch::Tensor* weight : {&layer.q_proj, &layer.k_proj, &layer.v_proj, &layer.o_proj,
                                    &layer.gate_proj, &layer.up_proj, &layer.down_proj}) {
        *weight = weight->to(dtype);
      }
    }
    return absl::OkStatus();
  }

 private:
  torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight) const {
    const torch::Tensor variance = x.pow(2).mean(-1, /*keepdim=*/true);
    return weight * (x * torch::rsqrt(variance + config().rms_norm_eps));
  }

  // `visible` narrowed to the keys within `window` positions of each query: query t, at position
  // past + t, keeps key j when past + t - window < j (transformers' sliding_window_overlay).
  static torch::Tensor WithinWindow(const torch::Tensor& visible, int64_t past, int64_t window) {
    const int64_t queries = visible.size(2);
    const int64_t keys = visible.size(3);
    const torch::Tensor query_positions =
        torch::arange(past, past + queries, torch::kInt64).unsqueeze(1);
    const torch::Tensor key_positions = torch::arange(keys, torch::kInt64).unsqueeze(0);
    return visible.logical_and(key_positions > query_positions - window);
  }

  static torch::Tensor RotateHalf(const torch::Tensor& x) {
    const int64_t half = x.size(-1) / 2;
    return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  }

  absl::StatusOr<ForwardOutput> Layers(const torch::Tensor& input_ids, const torch::Tensor& visible,
                                       KvCache* cache,
                                       const ForwardOptions& options) const override {
    const ModelConfig& cfg = config();
    const int64_t batch = input_ids.size(0);
    const int64_t length = input_ids.size(1);
    const int64_t past = cache == nullptr ? 0 : cache->length();
    const int64_t heads = cfg.num_attention_heads;
    const int64_t kv_heads = cfg.num_key_value_heads;
    const int64_t head_dim = cfg.head_dim;
    const int64_t queries_per_kv = cfg.num_queries_per_kv();

    const torch::Tensor positions = torch::arange(past, past + length, torch::kFloat32);
    const torch::Tensor freqs = torch::outer(positions, inv_freq_);
    // [T, 1, head_dim]: over the heads of [B, T, N, head_dim].
    const torch::Tensor angles = torch::cat({freqs, freqs}, -1).unsqueeze(1);
    const torch::Tensor cos = angles.cos();
    const torch::Tensor sin = angles.sin();
    auto rotate = [&](const torch::Tensor& x) { return x * cos + RotateHalf(x) * sin; };
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    // A whole sequence (no cache) takes the fast attention in the layers without a window;
    // decoding steps over a cache, and windows, take LibTorch's batched products.
    const torch::Tensor prefixes =
        cache == nullptr ? VisiblePrefixes(visible, batch) : torch::Tensor();

    // One mask per window size: the layers of a model share one or two.
    std::vector<std::pair<int64_t, torch::Tensor>> windowed_masks;
    auto mask_of = [&](int64_t window) -> torch::Tensor {
      if (window == 0) return visible;
      for (const auto& [size, mask] : windowed_masks) {
        if (size == window) return mask;
      }
      windowed_masks.emplace_back(window, WithinWindow(visible, past, window));
      return windowed_masks.back().second;
    };
    // [B, T, count * head_dim] with Qwen3's per-head RMSNorm when it has one and RoPE when
    // `rotary`, contiguous.
    auto heads_of = [&](const torch::Tensor& projected, int64_t count, const torch::Tensor& norm,
                        bool rotary) {
      torch::Tensor split = projected.view({batch, length, count, head_dim});
      if (norm.defined()) split = RmsNorm(split, norm);
      if (rotary) split = rotate(split);
      return split.reshape({batch, length, count * head_dim});
    };
    auto split_heads = [&](const torch::Tensor& x, int64_t count) {
      return x.view({batch, length, count, head_dim}).transpose(1, 2);
    };

    ForwardOutput out;
    torch::Tensor hidden = torch::embedding(embed_tokens_, input_ids);
    if (options.output_hidden_states) out.hidden_states.push_back(hidden);
    for (size_t i = 0; i < layers_.size(); ++i) {
      const LlamaLayer& layer = layers_[i];
      const std::vector<torch::Tensor> projected =
          LinearGroup(RmsNorm(hidden, layer.input_norm), {layer.q_proj, layer.k_proj, layer.v_proj},
                      {layer.q_bias, layer.k_bias, layer.v_bias});
      const torch::Tensor query = heads_of(projected[0], heads, layer.q_norm, /*rotary=*/true);
      const torch::Tensor key = heads_of(projected[1], kv_heads, layer.k_norm, /*rotary=*/true);
      const torch::Tensor& value = projected[2];
      torch::Tensor probs;
      torch::Tensor scores;
      torch::Tensor context;
      if (prefixes.defined() && layer.sliding_window == 0) {
        PrefixAttentionOutput attention =
            PrefixAttention(query, key, value, heads, kv_heads, head_dim, static_cast<float>(scale),
                            prefixes, options.output_attention_scores);
        probs = std::move(attention.probs);
        scores = std::move(attention.scores);
        context = std::move(attention.context);
      } else {
        torch::Tensor all_keys = split_heads(key, kv_heads);
        torch::Tensor all_values = split_heads(value, kv_heads);
        if (cache != nullptr) {
          std::tie(all_keys, all_values) = AppendToCache(cache, i, all_keys, all_values);
        }
        // One new position after the cache, without a window, sees every key: nothing to mask.
        const bool sees_every_key = cache != nullptr && length == 1 && layer.sliding_window == 0;
        if (sees_every_key && !options.output_attention_scores &&
            DecodeAttentionApplies(query, all_keys, all_values)) {
          DecodeAttentionOutput attention =
              DecodeAttention(query, all_keys, all_values, static_cast<float>(scale));
          probs = std::move(attention.probs);
          context = std::move(attention.context);
        } else {
          const int64_t keys = all_keys.size(2);
          // Grouped-query attention with the G = N / K query heads of each key/value head as G * T
          // rows of one product (query head h = k * G + g reads key/value head k), rather than
          // each key/value head repeated G times: that copy would be the whole cache at every
          // step.
          const torch::Tensor grouped_query =
              split_heads(query, heads)
                  .reshape({batch, kv_heads, queries_per_kv * length, head_dim});
          scores = torch::matmul(grouped_query, all_keys.transpose(-1, -2))
                       .mul_(scale)
                       .view({batch, heads, length, keys});
          probs = torch::softmax(
              sees_every_key ? scores
                             : scores.masked_fill(mask_of(layer.sliding_window).logical_not(),
                                                  std::numeric_limits<float>::lowest()),
              -1);
          context = torch::matmul(probs.view({batch, kv_heads, queries_per_kv * length, keys}),
                                  all_values)
                        .view({batch, heads, length, head_dim})
                        .transpose(1, 2)
                        .reshape({batch, length, heads * head_dim});
        }
      }
      hidden = Linear(context, layer.o_proj, layer.o_bias, /*residual=*/hidden);
      const std::vector<torch::Tensor> gate_up =
          LinearGroup(RmsNorm(hidden, layer.post_attention_norm), {layer.gate_proj, layer.up_proj},
                      {torch::Tensor(), torch::Tensor()});
      hidden = Linear(torch::silu(gate_up[0]).mul_(gate_up[1]), layer.down_proj,
                      /*bias=*/torch::Tensor(), /*residual=*/hidden);
      if (options.output_attentions) out.attentions.push_back(std::move(probs));
      if (options.output_attention_scores) out.attention_scores.push_back(std::move(scores));
      if (options.output_hidden_states && i + 1 < layers_.size())
        out.hidden_states.push_back(hidden);
      if (options.on_layer_done) {
        ATTNSCOPE_RETURN_IF_ERROR(options.on_layer_done(static_cast<int64_t>(i)));
      }
    }
    // transformers' LlamaModel reports the final RMSNorm output as the last hidden state.
    out.last_hidden_state = RmsNorm(hidden, norm_);
    if (options.output_hidden_states) out.hidden_states.push_back(out.last_hidden_state);
    // Linear (the row kernel) rather than LibTorch's BLAS, which summed a row's logits in another
    // order at another row count: a sequence's logits then depended on the batch it ran in.
    if (options.output_logits) {
      out.logits = Linear(out.last_hidden_state, lm_head_, /*bias=*/torch::Tensor());
    }
    return out;
  }

  torch::Tensor embed_tokens_;
  std::vector<LlamaLayer> layers_;
  torch::Tensor norm_;
  torch::Tensor lm_head_;
  torch::Tensor inv_freq_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TransformerModel>> CreateLlamaModel(ModelConfig config,
                                                                   Checkpoint& checkpoint) {
  const int64_t hidden = config.hidden_size;
  // config.json against the file's shapes, before any per-layer work.
  ATTNSCOPE_RETURN_IF_ERROR(
      checkpoint.CheckBlockCount("num_hidden_layers", config.num_hidden_layers, "model.layers."));
  ATTNSCOPE_RETURN_IF_ERROR(
      checkpoint.CheckConfigSize("vocab_size", config.vocab_size, "model.embed_tokens.weight", 0));
  ATTNSCOPE_RETURN_IF_ERROR(
      checkpoint.CheckConfigSize("hidden_size", hidden, "model.embed_tokens.weight", 1));
  const int64_t q_size = config.num_attention_heads * config.head_dim;
  const int64_t kv_size = config.num_key_value_heads * config.head_dim;
  const int64_t inner = config.intermediate_size;
  std::vector<TensorSpec> specs;
  specs.push_back({"model.embed_tokens.weight", {config.vocab_size, hidden}});
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string layer = absl::StrCat("model.layers.", i, ".");
    specs.push_back({layer + "input_layernorm.weight", {hidden}});
    specs.push_back({layer + "self_attn.q_proj.weight", {q_size, hidden}});
    specs.push_back({layer + "self_attn.k_proj.weight", {kv_size, hidden}});
    specs.push_back({layer + "self_attn.v_proj.weight", {kv_size, hidden}});
    specs.push_back({layer + "self_attn.o_proj.weight", {hidden, q_size}});
    if (config.qkv_bias) {
      specs.push_back({layer + "self_attn.q_proj.bias", {q_size}});
      specs.push_back({layer + "self_attn.k_proj.bias", {kv_size}});
      specs.push_back({layer + "self_attn.v_proj.bias", {kv_size}});
    }
    if (config.o_proj_bias) specs.push_back({layer + "self_attn.o_proj.bias", {hidden}});
    if (config.qk_norm) {
      specs.push_back({layer + "self_attn.q_norm.weight", {config.head_dim}});
      specs.push_back({layer + "self_attn.k_norm.weight", {config.head_dim}});
    }
    specs.push_back({layer + "post_attention_layernorm.weight", {hidden}});
    specs.push_back({layer + "mlp.gate_proj.weight", {inner, hidden}});
    specs.push_back({layer + "mlp.up_proj.weight", {inner, hidden}});
    specs.push_back({layer + "mlp.down_proj.weight", {hidden, inner}});
  }
  specs.push_back({"model.norm.weight", {hidden}});
  // A tied checkpoint may still store lm_head.weight (stories260K does); use it when present, it
  // equals the embeddings then.
  const bool separate_lm_head = checkpoint.Contains("lm_head.weight");
  if (separate_lm_head) {
    specs.push_back({"lm_head.weight", {config.vocab_size, hidden}});
  } else if (!config.tie_word_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint '", checkpoint.model_dir(),
        "': tensor 'lm_head.weight': expected (config.json has tie_word_embeddings false), got "
        "nothing"));
  }
  ATTNSCOPE_RETURN_IF_ERROR(checkpoint.Load(specs, /*ignored_prefixes=*/{".rotary_emb.inv_freq"}));
  const Architecture architecture = config.architecture;
  return BuildModel(architecture, [&] {
    return new LlamaModel(std::move(config), checkpoint, separate_lm_head);
  });
}

}  // namespace attnscope

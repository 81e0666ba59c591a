// The decoder-only Llama family as Hugging Face transformers computes it. Llama (Touvron et al.
// 2023, LlamaForCausalLM): RMSNorm pre-normalisation, rotary position embeddings in the rotate_half
// layout (Su et al. 2021, RoFormer), grouped-query attention (Ainslie et al. 2023: query head h
// reads key/value head h / (N / N_kv)), a causal mask, a SiLU-gated MLP and an lm_head that may be
// tied to the input embeddings. Its members differ only in what ModelConfig records:
// Qwen2ForCausalLM adds biases to q/k/v, Qwen3ForCausalLM an RMSNorm of each head's queries and
// keys before RoPE (q_norm, k_norm), MistralForCausalLM (Jiang et al. 2023) a sliding window
// (query i sees keys i - W < j <= i), which Qwen2 and Qwen3 may also set per layer.
// GemmaForCausalLM (Gemma Team 2024, "Gemma") is Llama with RMSNorms that scale by (1 + weight),
// embeddings scaled by sqrt(hidden_size) and a GELU-gated MLP.
// Gemma2ForCausalLM ("Gemma 2", 2024) and Gemma3ForCausalLM ("Gemma 3", 2025) keep that
// skeleton with those RMSNorms that scale by (1 + weight), embeddings scaled by sqrt(hidden_size),
// a second RMSNorm after the attention and after the MLP before each joins the residual, a
// GELU-gated MLP, scores scaled by query_pre_attn_scalar^-1/2, layers alternating between a
// sliding window and the whole prefix; Gemma 2 soft-caps scores and logits (cap * tanh(x / cap)),
// Gemma 3 normalises queries and keys as Qwen3 does and gives its windowed layers a RoPE base of
// their own (rope_local_base_freq). Phi3ForCausalLM (Abdin et al. 2024, "Phi-3"; Phi-3.5 and
// Phi-4's text models) is Llama with q, k and v in one fused projection and gate and up in
// another, a sliding window on every layer when config.json sets one, RoPE on the first
// rotary_dim dimensions of each head (partial_rotary_factor), and LongRoPE (Ding et al. 2024):
// per-pair frequency factors, short below original_max_position_embeddings and long past it, with
// cos and sin scaled.
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
#include "models/kernels/decode_attention.h"
#include "models/kernels/gemm.h"

namespace attnscope {
namespace {

struct LlamaLayer {
  torch::Tensor input_norm, q_proj, k_proj, v_proj, o_proj;
  // Before the MLP: Llama's post_attention_layernorm, Gemma's pre_feedforward_layernorm.
  torch::Tensor mlp_norm, gate_proj, up_proj, down_proj;
  // Undefined unless the config has them (qkv_bias, o_proj_bias, qk_norm).
  torch::Tensor q_bias, k_bias, v_bias, o_bias, q_norm, k_norm;
  // Gemma's (sandwich_norms): on the attention's output (its post_attention_layernorm) and on the
  // MLP's (post_feedforward_layernorm), before each joins the residual.
  torch::Tensor attention_output_norm, mlp_output_norm;
  int64_t sliding_window = 0;  // 0: the whole causal prefix
  bool local_rope = false;     // RoPE at rope_local_theta rather than rope_theta
};

class LlamaModel : public DecoderOnlyModel {
 public:
  LlamaModel(ModelConfig config, const Checkpoint& checkpoint, bool separate_lm_head)
      : DecoderOnlyModel(std::move(config)) {
    const ModelConfig& cfg = this->config();
    embed_tokens_ = checkpoint.Get("model.embed_tokens.weight");
    // Gemma's RMSNorm computes (1 + weight) in float32 at every call; once here gives the same
    // bits.
    auto norm = [&](const std::string& name) {
      const torch::Tensor weight = checkpoint.Get(name);
      return cfg.gemma_norms ? weight + 1.0 : weight;
    };
    for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
      const std::string layer = absl::StrCat("model.layers.", i, ".");
      auto get = [&](const std::string& name) { return checkpoint.Get(layer + name + ".weight"); };
      auto get_norm = [&](const std::string& name) { return norm(layer + name + ".weight"); };
      LlamaLayer loaded;
      loaded.input_norm = get_norm("input_layernorm");
      if (cfg.fused_projections) {
        // Row ranges of the fused matrices: contiguous views, read in place like the others.
        const int64_t q_size = cfg.num_attention_heads * cfg.head_dim;
        const int64_t kv_size = cfg.num_key_value_heads * cfg.head_dim;
        const torch::Tensor qkv = get("self_attn.qkv_proj");
        loaded.q_proj = qkv.narrow(0, 0, q_size);
        loaded.k_proj = qkv.narrow(0, q_size, kv_size);
        loaded.v_proj = qkv.narrow(0, q_size + kv_size, kv_size);
        const torch::Tensor gate_up = get("mlp.gate_up_proj");
        loaded.gate_proj = gate_up.narrow(0, 0, cfg.intermediate_size);
        loaded.up_proj = gate_up.narrow(0, cfg.intermediate_size, cfg.intermediate_size);
      } else {
        loaded.q_proj = get("self_attn.q_proj");
        loaded.k_proj = get("self_attn.k_proj");
        loaded.v_proj = get("self_attn.v_proj");
        loaded.gate_proj = get("mlp.gate_proj");
        loaded.up_proj = get("mlp.up_proj");
      }
      loaded.o_proj = get("self_attn.o_proj");
      if (cfg.sandwich_norms) {
        loaded.attention_output_norm = get_norm("post_attention_layernorm");
        loaded.mlp_norm = get_norm("pre_feedforward_layernorm");
        loaded.mlp_output_norm = get_norm("post_feedforward_layernorm");
      } else {
        loaded.mlp_norm = get_norm("post_attention_layernorm");
      }
      loaded.down_proj = get("mlp.down_proj");
      auto bias = [&](const std::string& name) { return checkpoint.Get(layer + name + ".bias"); };
      if (cfg.qkv_bias) {
        loaded.q_bias = bias("self_attn.q_proj");
        loaded.k_bias = bias("self_attn.k_proj");
        loaded.v_bias = bias("self_attn.v_proj");
      }
      if (cfg.o_proj_bias) loaded.o_bias = bias("self_attn.o_proj");
      if (cfg.qk_norm) {
        loaded.q_norm = get_norm("self_attn.q_norm");
        loaded.k_norm = get_norm("self_attn.k_norm");
      }
      loaded.sliding_window = cfg.layer_sliding_windows[i];
      loaded.local_rope = loaded.sliding_window > 0 && cfg.rope_local_theta > 0;
      layers_.push_back(std::move(loaded));
    }
    norm_ = norm("model.norm.weight");
    lm_head_ = separate_lm_head ? checkpoint.Get("lm_head.weight") : embed_tokens_;
    if (cfg.rope_short_factors.empty()) {
      inv_freq_ = RopeInverseFrequencies(cfg.rope_theta, cfg.rotary_dim) / cfg.rope_linear_factor;
    } else {
      inv_freq_ = RopeInverseFrequencies(cfg.rope_theta, cfg.rotary_dim, cfg.rope_short_factors);
      long_inv_freq_ =
          RopeInverseFrequencies(cfg.rope_theta, cfg.rotary_dim, cfg.rope_long_factors);
    }
    if (cfg.rope_local_theta > 0)
      local_inv_freq_ = RopeInverseFrequencies(cfg.rope_local_theta, cfg.rotary_dim);
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
  // cap * tanh(x / cap), in place (Gemma 2's soft-capping).
  static torch::Tensor SoftCap(torch::Tensor x, double cap) {
    return x.div_(cap).tanh_().mul_(cap);
  }

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

    // [T, 1, rotary_dim] cos and sin: over the heads of [B, T, N, head_dim].
    auto rope_of = [&](const torch::Tensor& inv_freq) {
      if (!inv_freq.defined()) return std::pair<torch::Tensor, torch::Tensor>();
      return RopeTables(inv_freq, past, length, cfg.rope_attention_factor);
    };
    auto [cos, sin] = rope_of(inv_freq_);
    if (long_inv_freq_.defined()) {
      // LongRoPE's long factors where a sequence is longer than original_max_position_embeddings.
      // transformers decides by the longest position of the call (a right-padded batch's length);
      // here each sequence by its own, as transformers decides for it alone, so that a text's
      // attention does not depend on the batch it runs in. Query T - 1 sees every real key of its
      // sequence, past and padding excepted: their count is its length.
      const torch::Tensor is_long =
          visible.select(2, length - 1).sum(-1).gt(cfg.rope_original_max_positions).view({-1});
      const int64_t long_count = is_long.sum().item<int64_t>();
      if (long_count > 0) {
        auto [long_cos, long_sin] = rope_of(long_inv_freq_);
        if (long_count == is_long.size(0)) {
          cos = std::move(long_cos);
          sin = std::move(long_sin);
        } else {
          // [B, T, 1, rotary_dim]: each sequence's own table.
          const torch::Tensor pick = is_long.view({-1, 1, 1, 1});
          cos = torch::where(pick, long_cos.unsqueeze(0), cos.unsqueeze(0));
          sin = torch::where(pick, long_sin.unsqueeze(0), sin.unsqueeze(0));
        }
      }
    }
    const auto [local_cos, local_sin] = rope_of(local_inv_freq_);
    auto rotate = [&](const torch::Tensor& x, bool local) {
      return local ? ApplyRotary(x, local_cos, local_sin) : ApplyRotary(x, cos, sin);
    };
    const double scale = cfg.attention_scale > 0 ? cfg.attention_scale
                                                 : 1.0 / std::sqrt(static_cast<double>(head_dim));
    const double softcap = cfg.attn_logit_softcapping;
    const bool gelu_gate = cfg.hidden_act == "gelu_pytorch_tanh";
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
    // [B, T, count * head_dim] with Qwen3's per-head RMSNorm when it has one and RoPE (the local
    // base's when `local_rope`), contiguous.
    auto heads_of = [&](const torch::Tensor& projected, int64_t count, const torch::Tensor& norm,
                        bool local_rope) {
      torch::Tensor split = projected.view({batch, length, count, head_dim});
      if (norm.defined()) split = RmsNorm(split, norm);
      split = rotate(split, local_rope);
      return split.reshape({batch, length, count * head_dim});
    };
    auto split_heads = [&](const torch::Tensor& x, int64_t count) {
      return x.view({batch, length, count, head_dim}).transpose(1, 2);
    };

    ForwardOutput out;
    torch::Tensor hidden = torch::embedding(embed_tokens_, input_ids);
    if (cfg.gemma_norms) {
      // Gemma's normalizer: sqrt(hidden_size) as a tensor of the embeddings' dtype.
      hidden.mul_(static_cast<float>(std::sqrt(static_cast<double>(cfg.hidden_size))));
    }
    if (options.output_hidden_states) out.hidden_states.push_back(hidden);
    for (size_t i = 0; i < layers_.size(); ++i) {
      const LlamaLayer& layer = layers_[i];
      const std::vector<torch::Tensor> projected =
          LinearGroup(RmsNorm(hidden, layer.input_norm), {layer.q_proj, layer.k_proj, layer.v_proj},
                      {layer.q_bias, layer.k_bias, layer.v_bias});
      const torch::Tensor query = heads_of(projected[0], heads, layer.q_norm, layer.local_rope);
      const torch::Tensor key = heads_of(projected[1], kv_heads, layer.k_norm, layer.local_rope);
      const torch::Tensor& value = projected[2];
      torch::Tensor probs;
      torch::Tensor scores;
      torch::Tensor context;
      // A window at least as long as the sequence so far hides no key (query i sees keys past
      // i - W): the layer runs as one without a window (Phi-3-mini's 2047 over a shorter text).
      const int64_t window =
          layer.sliding_window < past + length ? layer.sliding_window : int64_t{0};
      // The fast attention kernels have no soft-capping: Gemma 2's layers take LibTorch's.
      if (prefixes.defined() && window == 0 && softcap == 0) {
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
        const bool sees_every_key = cache != nullptr && length == 1 && window == 0;
        if (sees_every_key && !options.output_attention_scores && softcap == 0 &&
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
          if (softcap > 0) scores = SoftCap(std::move(scores), softcap);
          probs = torch::softmax(sees_every_key
                                     ? scores
                                     : scores.masked_fill(mask_of(window).logical_not(),
                                                          std::numeric_limits<float>::lowest()),
                                 -1);
          context = torch::matmul(probs.view({batch, kv_heads, queries_per_kv * length, keys}),
                                  all_values)
                        .view({batch, heads, length, head_dim})
                        .transpose(1, 2)
                        .reshape({batch, length, heads * head_dim});
        }
      }
      if (cfg.sandwich_norms) {
        hidden = hidden +
                 RmsNorm(Linear(context, layer.o_proj, layer.o_bias), layer.attention_output_norm);
      } else {
        hidden = Linear(context, layer.o_proj, layer.o_bias, /*residual=*/hidden);
      }
      const std::vector<torch::Tensor> gate_up =
          LinearGroup(RmsNorm(hidden, layer.mlp_norm), {layer.gate_proj, layer.up_proj},
                      {torch::Tensor(), torch::Tensor()});
      const torch::Tensor gated =
          (gelu_gate ? torch::gelu(gate_up[0], "tanh") : torch::silu(gate_up[0])).mul_(gate_up[1]);
      if (cfg.sandwich_norms) {
        hidden = hidden + RmsNorm(Linear(gated, layer.down_proj, /*bias=*/torch::Tensor()),
                                  layer.mlp_output_norm);
      } else {
        hidden = Linear(gated, layer.down_proj, /*bias=*/torch::Tensor(), /*residual=*/hidden);
      }
      ATTNSCOPE_RETURN_IF_ERROR(AddLayerOutputs(options, i, layers_.size(), std::move(probs),
                                                std::move(scores), hidden, out));
    }
    // transformers' LlamaModel reports the final RMSNorm output as the last hidden state.
    out.last_hidden_state = RmsNorm(hidden, norm_);
    if (options.output_hidden_states) out.hidden_states.push_back(out.last_hidden_state);
    // Linear (the row kernel) rather than LibTorch's BLAS, which summed a row's logits in another
    // order at another row count: a sequence's logits then depended on the batch it ran in.
    if (options.output_logits) {
      out.logits = Linear(out.last_hidden_state, lm_head_, /*bias=*/torch::Tensor());
      if (cfg.final_logit_softcapping > 0) {
        out.logits = SoftCap(std::move(out.logits), cfg.final_logit_softcapping);
      }
    }
    return out;
  }

  torch::Tensor embed_tokens_;
  std::vector<LlamaLayer> layers_;
  torch::Tensor norm_;
  torch::Tensor lm_head_;
  torch::Tensor inv_freq_;        // LongRoPE's short factors' with them
  torch::Tensor long_inv_freq_;   // LongRoPE's long factors'; undefined without LongRoPE
  torch::Tensor local_inv_freq_;  // undefined without rope_local_theta
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
    if (config.fused_projections) {
      specs.push_back({layer + "self_attn.qkv_proj.weight", {q_size + 2 * kv_size, hidden}});
      specs.push_back({layer + "mlp.gate_up_proj.weight", {2 * inner, hidden}});
    } else {
      specs.push_back({layer + "self_attn.q_proj.weight", {q_size, hidden}});
      specs.push_back({layer + "self_attn.k_proj.weight", {kv_size, hidden}});
      specs.push_back({layer + "self_attn.v_proj.weight", {kv_size, hidden}});
      specs.push_back({layer + "mlp.gate_proj.weight", {inner, hidden}});
      specs.push_back({layer + "mlp.up_proj.weight", {inner, hidden}});
    }
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
    if (config.sandwich_norms) {
      specs.push_back({layer + "pre_feedforward_layernorm.weight", {hidden}});
      specs.push_back({layer + "post_feedforward_layernorm.weight", {hidden}});
    }
    specs.push_back({layer + "mlp.down_proj.weight", {hidden, inner}});
  }
  specs.push_back({"model.norm.weight", {hidden}});
  // A tied checkpoint may still store lm_head.weight (stories260K does, equal to the
  // embeddings): transformers ties it to the embeddings all the same, and so does this.
  const bool separate_lm_head = !config.tie_word_embeddings;
  std::vector<std::string> ignored = {".rotary_emb.inv_freq"};
  if (separate_lm_head) {
    if (!checkpoint.Contains("lm_head.weight")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint '", checkpoint.model_dir(),
          "': tensor 'lm_head.weight': expected (config.json has tie_word_embeddings false, or "
          "omits it and ",
          config.model_type, "'s default is false), got nothing"));
    }
    specs.push_back({"lm_head.weight", {config.vocab_size, hidden}});
  } else {
    ignored.push_back("lm_head.weight");
  }
  ATTNSCOPE_RETURN_IF_ERROR(checkpoint.Load(specs, ignored));
  const Architecture architecture = config.architecture;
  return BuildModel(architecture, [&] {
    return new LlamaModel(std::move(config), checkpoint, separate_lm_head);
  });
}

}  // namespace attnscope

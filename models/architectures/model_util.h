// Pieces the transformer implementations (bert.cc, gpt2.cc, gpt_neox.cc, llama.cc,
// encoder_decoder.cc, t5.cc) share: the boolean attention masks their softmax reads (true = the key
// is visible; a hidden key's score is set to the lowest float, so its probability is exactly 0),
// rotary position embeddings, T5's relative position buckets, the two-layer MLP, the KV cache's
// growth, and the guard around building a model.
#ifndef ATTNSCOPE_MODELS_MODEL_UTIL_H_
#define ATTNSCOPE_MODELS_MODEL_UTIL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/architectures/transformer.h"

namespace attnscope {

// [B, 1, 1, S] bool from attention_mask [B, S] int64: every query sees the real (1) keys of its
// sequence, not the padding.
torch::Tensor PaddingMask(const torch::Tensor& attention_mask);

// [B, 1, S, S] bool from attention_mask [B, S] int64: query i sees the real keys at positions
// 0..i (causal self-attention over right-padded sequences).
torch::Tensor CausalMask(const torch::Tensor& attention_mask);

// [1, 1, T, past + T] bool: new query i, at position past + i, sees every key up to its own.
torch::Tensor CachedCausalMask(int64_t past, int64_t length);

// [B, T] int64: how many keys query t of sequence b sees, when `visible` ([B or 1, 1, T, K] bool,
// as CausalMask and CachedCausalMask make) shows every query a non-empty prefix of the keys;
// undefined otherwise (then PrefixAttention does not apply).
torch::Tensor VisiblePrefixes(const torch::Tensor& visible, int64_t batch);

struct PrefixAttentionOutput {
  torch::Tensor probs;    // [B, N, T, T]: softmax over each query's prefix; later keys exactly 0
  torch::Tensor scores;   // [B, N, T, T]: scale * Q K^T before the mask, when asked for
  torch::Tensor context;  // [B, T, N * head_dim], contiguous: probs V, heads side by side
};

// Causal self-attention on the fast path: each head's scores (oneDNN reading the heads in place in
// the projections, no split-heads copies), softmax over the first prefixes[b, t] keys
// (models/kernels' SoftmaxRows) and context, while the head's [T, T] block is in cache, in one
// parallel region; the same values as torch.softmax of the masked scores (transformers' eager
// attention), where a masked key's probability is exactly 0. query [B, T, N * head_dim], key and
// value [B, T, K * head_dim] float32 with unit stride in the last dimension (views into one fused
// projection are fine); query head h reads key/value head h / (N / K) (grouped-query attention,
// K divides N). `prefixes` as VisiblePrefixes gives it.
PrefixAttentionOutput PrefixAttention(const torch::Tensor& query, const torch::Tensor& key,
                                      const torch::Tensor& value, int64_t heads, int64_t kv_heads,
                                      int64_t head_dim, float scale, const torch::Tensor& prefixes,
                                      bool keep_scores);

// torch::matmul(a, b) for a [B, N, T, X] and b [B or 1, N, X, Y]: [B, N, T, Y]. With b of batch 1
// (one source's cross-attention keys or values, read by every beam) the B sequences' rows are
// taken as rows of one product per head instead, so that b is not copied B times (as matmul's
// broadcast does); the result is then a permuted view.
torch::Tensor BatchMatmul(const torch::Tensor& a, const torch::Tensor& b);

// T5Attention._relative_position_bucket (Raffel et al. 2020) on `relative` = key position - query
// position (int64, any shape): half the buckets (per direction when bidirectional, keys after the
// query in the upper half) for exact distances, the rest for logarithmically growing ones up to
// max_distance, the last bucket for everything beyond. The logarithm runs in float32 like
// transformers' code, so that the same distances land in the same buckets. MPNet's
// relative_position_bucket (modeling_mpnet.py) is the bidirectional case. int64 buckets in
// [0, num_buckets), the shape of `relative`.
torch::Tensor RelativePositionBucket(torch::Tensor relative, bool bidirectional,
                                     int64_t num_buckets, int64_t max_distance);

// RoPE's inverse frequencies [rotary_dim / 2] float32, theta^(-2i/d) over the d = rotary_dim
// rotated dimensions, computed in float32 as transformers' LlamaRotaryEmbedding and
// GPTNeoXRotaryEmbedding compute them; with `factors` (one of LongRoPE's lists, one per pair)
// 1 / (factor_i * theta^(2i/d)) as its _compute_longrope_parameters computes them.
torch::Tensor RopeInverseFrequencies(double theta, int64_t rotary_dim,
                                     const std::vector<double>& factors = {});

// RoPE's [T, 1, rotary_dim] cos and sin tables (Su et al. 2021, RoFormer) for positions past ..
// past + length - 1 and inverse frequencies `inv_freq` [rotary_dim / 2] float32, each angle
// repeated in both halves (transformers' rotate_half layout) and computed in float32 as
// transformers' rotary embeddings compute them; both multiplied by `attention_factor` unless it is
// 1 (LongRoPE's scaling).
std::pair<torch::Tensor, torch::Tensor> RopeTables(const torch::Tensor& inv_freq, int64_t past,
                                                   int64_t length, double attention_factor = 1.0);

// x [..., head_dim] with RoPE applied to its first rotary_dim = cos.size(-1) dimensions, x * cos +
// rotate_half(x) * sin where rotate_half(x1, x2) = (-x2, x1); the dimensions past rotary_dim pass
// through (partial rotary: GPT-NeoX's rotary_pct, Phi-3's partial_rotary_factor). cos and sin
// broadcast against x's leading dimensions.
torch::Tensor ApplyRotary(const torch::Tensor& x, const torch::Tensor& cos,
                          const torch::Tensor& sin);

// The two-layer MLP of GPT-2 and GPT-NeoX, fc_out(act(fc_in x)) + residual (residual may be
// undefined), `act` one of ACT2FN's "gelu" (erf), "gelu_new" / "gelu_pytorch_tanh" (tanh
// approximation), "relu" or "silu"; the GELUs fused into fc_in's product where the kernels have
// them.
torch::Tensor TwoLayerMlp(const torch::Tensor& x, const std::string& act,
                          const torch::Tensor& fc_in_weight, const torch::Tensor& fc_in_bias,
                          const torch::Tensor& fc_out_weight, const torch::Tensor& fc_out_bias,
                          const torch::Tensor& residual);

// Causal self-attention without extras (GPT-2's and GPT-NeoX's: every head its own keys, no window,
// no bias on the scores). Over a whole sequence (`prefixes` defined, as VisiblePrefixes gives it)
// PrefixAttention; otherwise the new keys and values are appended to layer `layer` of `cache` (when
// there is one) and LibTorch's batched products run over every position so far, a key hidden by
// `visible` ([B or 1, 1, T, past + T] bool) at probability exactly 0, as transformers' eager
// attention. query, key and value [B, T, heads * head_dim] with unit stride in the last dimension;
// scores there whether or not `keep_scores` asks for them.
PrefixAttentionOutput CausalSelfAttention(const torch::Tensor& query, const torch::Tensor& key,
                                          const torch::Tensor& value, int64_t heads,
                                          int64_t head_dim, float scale,
                                          const torch::Tensor& prefixes,
                                          const torch::Tensor& visible, KvCache* cache,
                                          size_t layer, bool keep_scores);

// Adds the new positions' keys and values [B, N, T, head_dim] of layer `layer` to `cache` (a
// layer seen the first time, in order, gets its entry) and returns that layer's keys and values
// of every position so far, [B, N, past + T, head_dim].
std::pair<torch::Tensor, torch::Tensor> AppendToCache(KvCache* cache, size_t layer,
                                                      torch::Tensor key, torch::Tensor value);

// The decoder-only architectures (gpt2.cc, llama.cc): a causal stack that Forward runs over the
// whole right-padded sequence and Decode over new positions after a KV cache. Each family gives
// its Layers.
class DecoderOnlyModel : public TransformerModel {
 public:
  bool is_decoder() const override { return true; }

 protected:
  using TransformerModel::TransformerModel;

  // The decoder stack over `input_ids` [B, T] at positions P..P+T-1, P = the cache's length (0
  // without a cache): query i sees key j where visible[b, 0, i, j] ([B or 1, 1, T, P + T] bool).
  // With a cache, each layer's keys and values follow the cached ones and are appended to them.
  virtual absl::StatusOr<ForwardOutput> Layers(const torch::Tensor& input_ids,
                                               const torch::Tensor& visible, KvCache* cache,
                                               const ForwardOptions& options) const = 0;

  // Adds layer `layer`'s outputs to `out` as `options` asks (its attention probabilities and
  // scores; its output `hidden` unless it is the last of `layers`, whose hidden state is the final
  // norm's, which Layers adds after the stack), then calls options.on_layer_done.
  static absl::Status AddLayerOutputs(const ForwardOptions& options, size_t layer, size_t layers,
                                      torch::Tensor probs, torch::Tensor scores,
                                      const torch::Tensor& hidden, ForwardOutput& out);

 private:
  absl::StatusOr<ForwardOutput> Run(const ForwardInput& input,
                                    const ForwardOptions& options) const override;
  absl::StatusOr<DecodeOutput> RunDecode(const torch::Tensor& input_ids, KvCache* cache,
                                         bool output_attentions) const override;
};

// Runs `make` (an architecture's constructor, which calls LibTorch on checked weights) and owns
// what it returns; no exception leaves it. ResourceExhausted when an allocation fails, Internal for
// any other LibTorch error (a bug: the checks before it should have refused the checkpoint).
absl::StatusOr<std::unique_ptr<TransformerModel>> BuildModel(
    Architecture architecture, const std::function<TransformerModel*()>& make);

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_MODEL_UTIL_H_

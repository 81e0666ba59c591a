// T5 (Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
// Transformer") as Hugging Face transformers' T5ForConditionalGeneration (modeling_t5.py) computes
// it:
//
// - pre-norm blocks: x = x + Attention(T5LayerNorm(x)), then x = x + FFN(T5LayerNorm(x)); the
//   decoder has cross-attention over the encoder output between the two. T5LayerNorm is an RMS
//   norm without mean subtraction and without bias, its variance taken in float32.
// - projections without biases, and attention WITHOUT the 1/sqrt(d) scaling (T5 folds it into the
//   initialisation); num_heads * d_kv may differ from d_model.
// - no absolute positions: block 0 of each stack owns relative_attention_bias [num_buckets,
//   num_heads], and the bias of each (query, key) distance bucket is added to the scores of every
//   layer of that stack: bidirectional buckets in the encoder, unidirectional (past only) in the
//   decoder's self-attention, none in cross-attention.
// - a final_layer_norm on both stacks; logits = shared(decoder_out * d_model^-1/2) when the
//   embeddings are tied (the default), else lm_head(decoder_out).
// - the feed-forward wo(relu(wi x)) ("relu", T5 v1.0) or wo(gelu_new(wi_0 x) * wi_1 x)
//   ("gated-gelu", T5 v1.1 / Flan-T5; gelu_new is the tanh approximation).
//
// Runs through LibTorch's own operations (the portable path). Attention probabilities come out as
// for the BART family (encoder_decoder.cc): [B, heads, Tq, Tk] per layer, masked keys exactly 0.
#include <cmath>
#include <limits>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/architectures/model_util.h"
#include "models/architectures/transformer.h"

namespace attnscope {
namespace {

struct Attention {
  torch::Tensor q, k, v, o;  // [inner, d_model] x3, [d_model, inner]; no biases
};

struct FeedForward {
  torch::Tensor wi, wi_0, wi_1, wo;  // wi for "relu", wi_0 / wi_1 for "gated-gelu"
};

struct EncoderBlock {
  Attention self_attn;
  torch::Tensor self_attn_norm;
  FeedForward ff;
  torch::Tensor ff_norm;
};

struct DecoderBlock {
  Attention self_attn;
  torch::Tensor self_attn_norm;
  Attention cross_attn;
  torch::Tensor cross_attn_norm;
  FeedForward ff;
  torch::Tensor ff_norm;
};

class T5Model : public TransformerModel {
 public:
  T5Model(ModelConfig config, const Checkpoint& checkpoint) : TransformerModel(std::move(config)) {
    const ModelConfig& cfg = this->config();
    auto get = [&](const std::string& name) { return checkpoint.Get(name); };
    auto attention = [&](const std::string& prefix) {
      return Attention{get(prefix + ".q.weight"), get(prefix + ".k.weight"),
                       get(prefix + ".v.weight"), get(prefix + ".o.weight")};
    };
    auto feed_forward = [&](const std::string& prefix) {
      const std::string p = prefix + ".DenseReluDense.";
      FeedForward ff;
      if (cfg.gated_feed_forward) {
        ff.wi_0 = get(p + "wi_0.weight");
        ff.wi_1 = get(p + "wi_1.weight");
      } else {
        ff.wi = get(p + "wi.weight");
      }
      ff.wo = get(p + "wo.weight");
      return ff;
    };
    shared_ = get("shared.weight");
    lm_head_ = cfg.tie_word_embeddings ? shared_ : get("lm_head.weight");
    encoder_bias_ = get("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
    decoder_bias_ = get("decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight");
    encoder_final_norm_ = get("encoder.final_layer_norm.weight");
    decoder_final_norm_ = get("decoder.final_layer_norm.weight");
    for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
      const std::string p = absl::StrCat("encoder.block.", i, ".layer.");
      encoder_blocks_.push_back(EncoderBlock{attention(p + "0.SelfAttention"),
                                             get(p + "0.layer_norm.weight"), feed_forward(p + "1"),
                                             get(p + "1.layer_norm.weight")});
    }
    for (int64_t i = 0; i < cfg.decoder_layers; ++i) {
      const std::string p = absl::StrCat("decoder.block.", i, ".layer.");
      decoder_blocks_.push_back(
          DecoderBlock{attention(p + "0.SelfAttention"), get(p + "0.layer_norm.weight"),
                       attention(p + "1.EncDecAttention"), get(p + "1.layer_norm.weight"),
                       feed_forward(p + "2"), get(p + "2.layer_norm.weight")});
    }
  }

 private:
  // T5LayerNorm: x / sqrt(mean(x^2) + eps) * weight, no mean subtraction, no bias.
  torch::Tensor Norm(const torch::Tensor& x, const torch::Tensor& weight) const {
    const torch::Tensor variance = x.to(torch::kFloat32).pow(2).mean(-1, /*keepdim=*/true);
    return weight * (x * torch::rsqrt(variance + config().rms_norm_eps));
  }

  torch::Tensor FeedForwardOf(const FeedForward& ff, const torch::Tensor& x) const {
    if (config().gated_feed_forward) {
      // NewGELUActivation: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
      const torch::Tensor gate = torch::gelu(torch::linear(x, ff.wi_0), "tanh");
      return torch::linear(gate * torch::linear(x, ff.wi_1), ff.wo);
    }
    return torch::linear(torch::relu(torch::linear(x, ff.wi)), ff.wo);
  }

  // [B, L, heads * d_kv] -> [B, heads, L, d_kv].
  torch::Tensor SplitHeads(const torch::Tensor& t) const {
    return t.view({t.size(0), t.size(1), config().num_attention_heads, config().head_dim})
        .transpose(1, 2);
  }

  // The relative position bias [1, heads, Tq, Tk] of queries at positions first..first+Tq-1 over
  // keys 0..Tk-1 (T5Attention.compute_bias; with a cache transformers computes it for every
  // position and keeps the last Tq rows, which is the same).
  torch::Tensor PositionBias(const torch::Tensor& table, int64_t first, int64_t queries,
                             int64_t keys, bool bidirectional) const {
    const torch::Tensor context = torch::arange(first, first + queries, torch::kInt64).unsqueeze(1);
    const torch::Tensor memory = torch::arange(keys, torch::kInt64).unsqueeze(0);
    const torch::Tensor buckets = RelativePositionBucket(memory - context, bidirectional,
                                                         config().relative_attention_num_buckets,
                                                         config().relative_attention_max_distance);
    return torch::embedding(table, buckets).permute({2, 0, 1}).unsqueeze(0);
  }

  // Attention of `query` [B, N, Tq, D] over `key` and `value` [B, N, Tk, D] with scores
  // q.k + bias (no scaling); query i sees key j where visible[b, 0, i, j]. Returns the output
  // [B, Tq, d_model] and the probabilities [B, N, Tq, Tk]; `scores`, when not null, receives
  // q.k + bias before the mask, [B, N, Tq, Tk].
  std::pair<torch::Tensor, torch::Tensor> AttendTo(const Attention& w, const torch::Tensor& query,
                                                   const torch::Tensor& key,
                                                   const torch::Tensor& value,
                                                   const std::optional<torch::Tensor>& bias,
                                                   const torch::Tensor& visible,
                                                   torch::Tensor* scores = nullptr) const {
    torch::Tensor raw = BatchMatmul(query, key.transpose(-1, -2));
    if (bias.has_value()) raw = raw + *bias;
    torch::Tensor probs = torch::softmax(
        raw.masked_fill(visible.logical_not(), std::numeric_limits<float>::lowest()), -1);
    if (scores != nullptr) *scores = raw;
    const torch::Tensor context = BatchMatmul(probs, value).transpose(1, 2).flatten(2);
    return {torch::linear(context, w.o), std::move(probs)};
  }

  std::pair<torch::Tensor, torch::Tensor> Attend(const Attention& w, const torch::Tensor& x,
                                                 const torch::Tensor& memory,
                                                 const std::optional<torch::Tensor>& bias,
                                                 const torch::Tensor& visible,
                                                 torch::Tensor* scores = nullptr) const {
    return AttendTo(w, SplitHeads(torch::linear(x, w.q)), SplitHeads(torch::linear(memory, w.k)),
                    SplitHeads(torch::linear(memory, w.v)), bias, visible, scores);
  }

  // The decoder output [B, T, d_model] (after final_layer_norm) as logits.
  torch::Tensor Logits(const torch::Tensor& y) const {
    if (config().tie_word_embeddings) {
      return torch::linear(y * std::pow(static_cast<double>(config().hidden_size), -0.5), lm_head_);
    }
    return torch::linear(y, lm_head_);
  }

  // The encoder over checked input: attentions, hidden states and last_hidden_state of `out`.
  // hidden_states as transformers' T5Stack: each block's input, then the final_layer_norm output.
  absl::Status ForwardEncoder(const ForwardInput& input, const ForwardOptions& options,
                              ForwardOutput* out) const {
    const int64_t length = input.input_ids.size(1);
    const torch::Tensor visible = PaddingMask(input.attention_mask);
    const torch::Tensor bias = PositionBias(encoder_bias_, 0, length, length, true);
    torch::Tensor hidden = torch::embedding(shared_, input.input_ids);
    for (size_t i = 0; i < encoder_blocks_.size(); ++i) {
      if (options.output_hidden_states) out->hidden_states.push_back(hidden);
      const EncoderBlock& block = encoder_blocks_[i];
      const torch::Tensor normed = Norm(hidden, block.self_attn_norm);
      torch::Tensor scores;
      auto [attended, probs] = Attend(block.self_attn, normed, normed, bias, visible,
                                      options.output_attention_scores ? &scores : nullptr);
      hidden = hidden + attended;
      hidden = hidden + FeedForwardOf(block.ff, Norm(hidden, block.ff_norm));
      if (options.output_attentions) out->attentions.push_back(std::move(probs));
      if (options.output_attention_scores) out->attention_scores.push_back(std::move(scores));
      if (options.on_layer_done) {
        ATTNSCOPE_RETURN_IF_ERROR(options.on_layer_done(static_cast<int64_t>(i)));
      }
    }
    hidden = Norm(hidden, encoder_final_norm_);
    if (options.output_hidden_states) out->hidden_states.push_back(hidden);
    out->last_hidden_state = hidden;
    return absl::OkStatus();
  }

  absl::StatusOr<ForwardOutput> Run(const ForwardInput& input,
                                    const ForwardOptions& options) const override {
    const torch::Tensor source_visible = PaddingMask(input.attention_mask);
    ForwardOutput out;
    ATTNSCOPE_RETURN_IF_ERROR(ForwardEncoder(input, options, &out));
    if (!input.decoder_input_ids.defined()) return out;
    const torch::Tensor memory = out.last_hidden_state;
    out.encoder_last_hidden_state = memory;
    const int64_t target = input.decoder_input_ids.size(1);
    const torch::Tensor target_visible = CausalMask(input.decoder_attention_mask);
    const torch::Tensor self_bias = PositionBias(decoder_bias_, 0, target, target, false);
    torch::Tensor y = torch::embedding(shared_, input.decoder_input_ids);
    for (size_t i = 0; i < decoder_blocks_.size(); ++i) {
      const DecoderBlock& block = decoder_blocks_[i];
      const torch::Tensor normed = Norm(y, block.self_attn_norm);
      auto [attended, self_probs] =
          Attend(block.self_attn, normed, normed, self_bias, target_visible);
      y = y + attended;
      auto [crossed, cross_probs] = Attend(block.cross_attn, Norm(y, block.cross_attn_norm), memory,
                                           std::nullopt, source_visible);
      y = y + crossed;
      y = y + FeedForwardOf(block.ff, Norm(y, block.ff_norm));
      if (options.output_attentions) {
        out.decoder_attentions.push_back(std::move(self_probs));
        out.cross_attentions.push_back(std::move(cross_probs));
      }
      if (options.on_layer_done) {
        ATTNSCOPE_RETURN_IF_ERROR(
            options.on_layer_done(static_cast<int64_t>(encoder_blocks_.size() + i)));
      }
    }
    y = Norm(y, decoder_final_norm_);
    out.last_hidden_state = y;
    if (options.output_logits) out.logits = Logits(y);
    return out;
  }

  absl::StatusOr<KvCache> RunEncoderImpl(const ForwardInput& source) const override {
    ForwardOptions options;
    options.output_attentions = false;
    ForwardOutput encoded;
    ATTNSCOPE_RETURN_IF_ERROR(ForwardEncoder(source, options, &encoded));
    KvCache cache;
    for (const DecoderBlock& block : decoder_blocks_) {
      cache.cross_keys.push_back(
          SplitHeads(torch::linear(encoded.last_hidden_state, block.cross_attn.k)));
      cache.cross_values.push_back(
          SplitHeads(torch::linear(encoded.last_hidden_state, block.cross_attn.v)));
    }
    cache.encoder_attention_mask = source.attention_mask;
    return cache;
  }

  // The decoder over new positions past..past+T-1: self-attention over the cached and new
  // positions with the bias of those query positions, cross-attention over the cached encoder
  // keys and values.
  absl::StatusOr<DecodeOutput> RunDecode(const torch::Tensor& input_ids, KvCache* cache,
                                         bool output_attentions) const override {
    const int64_t past = cache->length();
    const int64_t length = input_ids.size(1);
    const torch::Tensor self_visible = CachedCausalMask(past, length);
    const torch::Tensor self_bias = PositionBias(decoder_bias_, past, length, past + length, false);
    const torch::Tensor source_visible = PaddingMask(cache->encoder_attention_mask);
    DecodeOutput out;
    torch::Tensor y = torch::embedding(shared_, input_ids);
    for (size_t i = 0; i < decoder_blocks_.size(); ++i) {
      const DecoderBlock& block = decoder_blocks_[i];
      const torch::Tensor normed = Norm(y, block.self_attn_norm);
      const auto [key, value] =
          AppendToCache(cache, i, SplitHeads(torch::linear(normed, block.self_attn.k)),
                        SplitHeads(torch::linear(normed, block.self_attn.v)));
      auto [attended, self_probs] =
          AttendTo(block.self_attn, SplitHeads(torch::linear(normed, block.self_attn.q)), key,
                   value, self_bias, self_visible);
      y = y + attended;
      auto [crossed, cross_probs] =
          AttendTo(block.cross_attn,
                   SplitHeads(torch::linear(Norm(y, block.cross_attn_norm), block.cross_attn.q)),
                   cache->cross_keys[i], cache->cross_values[i], std::nullopt, source_visible);
      y = y + crossed;
      y = y + FeedForwardOf(block.ff, Norm(y, block.ff_norm));
      if (output_attentions) {
        out.attentions.push_back(std::move(self_probs));
        out.cross_attentions.push_back(std::move(cross_probs));
      }
    }
    out.logits = Logits(Norm(y, decoder_final_norm_));
    return out;
  }

  torch::Tensor shared_, lm_head_;
  torch::Tensor encoder_bias_, decoder_bias_;  // [num_buckets, heads]
  torch::Tensor encoder_final_norm_, decoder_final_norm_;
  std::vector<EncoderBlock> encoder_blocks_;
  std::vector<DecoderBlock> decoder_blocks_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TransformerModel>> CreateT5Model(ModelConfig config,
                                                                Checkpoint& checkpoint) {
  const int64_t hidden = config.hidden_size;
  // config.json against the file's shapes, before any per-layer work.
  ATTNSCOPE_RETURN_IF_ERROR(
      checkpoint.CheckBlockCount("num_layers", config.num_hidden_layers, "encoder.block."));
  ATTNSCOPE_RETURN_IF_ERROR(
      checkpoint.CheckBlockCount("num_decoder_layers", config.decoder_layers, "decoder.block."));
  ATTNSCOPE_RETURN_IF_ERROR(
      checkpoint.CheckConfigSize("vocab_size", config.vocab_size, "shared.weight", 0));
  ATTNSCOPE_RETURN_IF_ERROR(checkpoint.CheckConfigSize("d_model", hidden, "shared.weight", 1));
  const int64_t inner = config.num_attention_heads * config.head_dim;
  const int64_t ff = config.intermediate_size;
  std::vector<TensorSpec> specs;
  auto attention = [&](const std::string& prefix) {
    for (const char* projection : {".q", ".k", ".v"}) {
      specs.push_back({prefix + projection + ".weight", {inner, hidden}});
    }
    specs.push_back({prefix + ".o.weight", {hidden, inner}});
  };
  auto norm = [&](const std::string& prefix) {
    specs.push_back({prefix + ".layer_norm.weight", {hidden}});
  };
  auto feed_forward = [&](const std::string& prefix) {
    const std::string p = prefix + ".DenseReluDense.";
    if (config.gated_feed_forward) {
      specs.push_back({p + "wi_0.weight", {ff, hidden}});
      specs.push_back({p + "wi_1.weight", {ff, hidden}});
    } else {
      specs.push_back({p + "wi.weight", {ff, hidden}});
    }
    specs.push_back({p + "wo.weight", {hidden, ff}});
    norm(prefix);
  };
  specs.push_back({"shared.weight", {config.vocab_size, hidden}});
  if (!config.tie_word_embeddings) specs.push_back({"lm_head.weight", {config.vocab_size, hidden}});
  for (const char* side : {"encoder", "decoder"}) {
    specs.push_back(
        {absl::StrCat(side, ".block.0.layer.0.SelfAttention.relative_attention_bias.weight"),
         {config.relative_attention_num_buckets, config.num_attention_heads}});
    specs.push_back({absl::StrCat(side, ".final_layer_norm.weight"), {hidden}});
  }
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = absl::StrCat("encoder.block.", i, ".layer.");
    attention(p + "0.SelfAttention");
    norm(p + "0");
    feed_forward(p + "1");
  }
  for (int64_t i = 0; i < config.decoder_layers; ++i) {
    const std::string p = absl::StrCat("decoder.block.", i, ".layer.");
    attention(p + "0.SelfAttention");
    norm(p + "0");
    attention(p + "1.EncDecAttention");
    norm(p + "1");
    feed_forward(p + "2");
  }
  // Copies of the shared embeddings (tied), lm_head when it is tied to them, and the unused
  // cross-attention bias that the original checkpoints carry (transformers ignores it on load).
  std::vector<std::string> ignored = {
      "encoder.embed_tokens.", "decoder.embed_tokens.",
      "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias."};
  if (config.tie_word_embeddings) ignored.push_back("lm_head.");
  ATTNSCOPE_RETURN_IF_ERROR(checkpoint.Load(specs, ignored));
  const Architecture architecture = config.architecture;
  return BuildModel(architecture, [&] { return new T5Model(std::move(config), checkpoint); });
}

}  // namespace attnscope

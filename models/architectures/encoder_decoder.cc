// The BART family of encoder-decoders as Hugging Face transformers' MarianMTModel and
// BartForConditionalGeneration compute them (Lewis et al. 2020; Junczys-Dowmunt et al. 2018):
// post-LayerNorm layers (x = LayerNorm(x + Attention(x)), then x = LayerNorm(x + FFN(x))), the
// decoder's causal self-attention followed by cross-attention over the encoder output, biased
// projections with the query scaled by head_dim^-1/2, and an lm_head tied to the shared embeddings
// plus final_logits_bias. Marian: static sinusoidal positions (sin for the first half of the
// dimensions, cos for the second), embeddings scaled by sqrt(d_model) when scale_embedding is set,
// SiLU. BART: learned positions read at offset 2, a LayerNorm on the embeddings, GELU.
//
// Runs through LibTorch's own operations (the portable path).
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/architectures/model_util.h"
#include "models/architectures/transformer.h"

namespace attnscope {
namespace {

// transformers' BartLearnedPositionalEmbedding reads row position + 2 (fairseq's padding offset).
constexpr int64_t kBartPositionOffset = 2;

struct Linear {
  torch::Tensor weight, bias;
  torch::Tensor operator()(const torch::Tensor& x) const { return torch::linear(x, weight, bias); }
};

struct Norm {
  torch::Tensor weight, bias;
};

struct AttentionWeights {
  Linear q, k, v, out;
};

struct EncoderLayer {
  AttentionWeights self_attn;
  Norm self_attn_norm;
  Linear fc1, fc2;
  Norm final_norm;
};

struct DecoderLayer {
  AttentionWeights self_attn;
  Norm self_attn_norm;
  AttentionWeights cross_attn;
  Norm cross_attn_norm;
  Linear fc1, fc2;
  Norm final_norm;
};

// Rows first..first+count-1 of the sinusoidal table of MarianSinusoidalPositionalEmbedding,
// [count, dim]: column i < dim/2 is sin(p / 10000^(2i/dim)), column dim/2 + i the cos of the same
// angle. Computed in double and stored as float32, as transformers does. Only the rows a pass reads
// are made: a table of max_position_embeddings rows is what a config.json claiming 10^8 positions
// turned into 12.8 GB.
torch::Tensor SinusoidalPositions(int64_t first, int64_t count, int64_t dim) {
  const torch::Tensor exponents =
      torch::arange(dim / 2, torch::kFloat64).mul(2.0 / static_cast<double>(dim));
  const torch::Tensor angles = torch::arange(first, first + count, torch::kFloat64).unsqueeze(1) /
                               torch::pow(10000.0, exponents).unsqueeze(0);
  return torch::cat({angles.sin(), angles.cos()}, 1).to(torch::kFloat32);
}

class EncoderDecoderModel : public TransformerModel {
 public:
  EncoderDecoderModel(ModelConfig config, const Checkpoint& checkpoint)
      : TransformerModel(std::move(config)) {
    const ModelConfig& cfg = this->config();
    bart_ = cfg.architecture == Architecture::kBart;
    auto get = [&](const std::string& name) { return checkpoint.Get(name); };
    auto linear = [&](const std::string& prefix) {
      return Linear{get(prefix + ".weight"), get(prefix + ".bias")};
    };
    auto norm = [&](const std::string& prefix) {
      return Norm{get(prefix + ".weight"), get(prefix + ".bias")};
    };
    auto attention = [&](const std::string& prefix) {
      return AttentionWeights{linear(prefix + ".q_proj"), linear(prefix + ".k_proj"),
                              linear(prefix + ".v_proj"), linear(prefix + ".out_proj")};
    };
    shared_ = get("model.shared.weight");
    final_logits_bias_ = get("final_logits_bias").view({-1});
    if (bart_) {
      encoder_positions_ = get("model.encoder.embed_positions.weight");
      decoder_positions_ = get("model.decoder.embed_positions.weight");
      encoder_embedding_norm_ = norm("model.encoder.layernorm_embedding");
      decoder_embedding_norm_ = norm("model.decoder.layernorm_embedding");
    }
    for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
      const std::string p = absl::StrCat("model.encoder.layers.", i, ".");
      encoder_layers_.push_back(EncoderLayer{attention(p + "self_attn"),
                                             norm(p + "self_attn_layer_norm"), linear(p + "fc1"),
                                             linear(p + "fc2"), norm(p + "final_layer_norm")});
    }
    for (int64_t i = 0; i < cfg.decoder_layers; ++i) {
      const std::string p = absl::StrCat("model.decoder.layers.", i, ".");
      decoder_layers_.push_back(
          DecoderLayer{attention(p + "self_attn"), norm(p + "self_attn_layer_norm"),
                       attention(p + "encoder_attn"), norm(p + "encoder_attn_layer_norm"),
                       linear(p + "fc1"), linear(p + "fc2"), norm(p + "final_layer_norm")});
    }
  }

 private:
  torch::Tensor LayerNorm(const torch::Tensor& x, const Norm& norm) const {
    return torch::layer_norm(x, {x.size(-1)}, norm.weight, norm.bias, config().layer_norm_eps);
  }

  torch::Tensor Activation(const torch::Tensor& x) const {
    const std::string& act = config().hidden_act;
    if (act == "swish") return torch::silu(x);
    if (act == "relu") return torch::relu(x);
    return torch::gelu(x);
  }

  // Token embeddings (scaled with scale_embedding) plus positions past.., then BART's LayerNorm.
  // `positions` is BART's learned table; Marian's sinusoidal rows are computed.
  torch::Tensor Embed(const torch::Tensor& ids, const torch::Tensor& positions,
                      const Norm& embedding_norm, int64_t past = 0) const {
    const double scale =
        config().scale_embedding ? std::sqrt(static_cast<double>(config().hidden_size)) : 1.0;
    const int64_t length = ids.size(1);
    const torch::Tensor rows = bart_ ? positions.narrow(0, kBartPositionOffset + past, length)
                                     : SinusoidalPositions(past, length, config().hidden_size);
    const torch::Tensor embedded = torch::embedding(shared_, ids).mul(scale) + rows.unsqueeze(0);
    return bart_ ? LayerNorm(embedded, embedding_norm) : embedded;
  }

  // [B, L, H] -> [B, N, L, head_dim].
  torch::Tensor SplitHeads(const torch::Tensor& t, int64_t heads) const {
    return t.view({t.size(0), t.size(1), heads, config().hidden_size / heads}).transpose(1, 2);
  }

  // The scaled query heads of `x` [B, Tq, H]: [B, N, Tq, head_dim].
  torch::Tensor Query(const AttentionWeights& w, const torch::Tensor& x, int64_t heads) const {
    const double head_dim = static_cast<double>(config().hidden_size / heads);
    return SplitHeads(w.q(x).mul(1.0 / std::sqrt(head_dim)), heads);
  }

  // Attention of `query` [B, N, Tq, D] over `key` and `value` [B, N, Tk, D]; query i sees key j
  // where visible[b, 0, i, j] ([B or 1, 1, Tq or 1, Tk] bool). Returns the output [B, Tq, H]
  // and the probabilities [B, N, Tq, Tk]; `scores`, when not null, receives the scores QK^T /
  // sqrt(head_dim) before the mask, [B, N, Tq, Tk].
  std::pair<torch::Tensor, torch::Tensor> AttendTo(const Linear& out, const torch::Tensor& query,
                                                   const torch::Tensor& key,
                                                   const torch::Tensor& value,
                                                   const torch::Tensor& visible,
                                                   torch::Tensor* scores = nullptr) const {
    const torch::Tensor raw = BatchMatmul(query, key.transpose(-1, -2));
    torch::Tensor probs = torch::softmax(
        raw.masked_fill(visible.logical_not(), std::numeric_limits<float>::lowest()), -1);
    if (scores != nullptr) *scores = raw;
    const torch::Tensor context = BatchMatmul(probs, value).transpose(1, 2).flatten(2);
    return {out(context), std::move(probs)};
  }

  // Multi-head attention of `x` [B, Tq, H] over `memory` [B, Tk, H].
  std::pair<torch::Tensor, torch::Tensor> Attend(const AttentionWeights& w, const torch::Tensor& x,
                                                 const torch::Tensor& memory,
                                                 const torch::Tensor& visible, int64_t heads,
                                                 torch::Tensor* scores = nullptr) const {
    return AttendTo(w.out, Query(w, x, heads), SplitHeads(w.k(memory), heads),
                    SplitHeads(w.v(memory), heads), visible, scores);
  }

  torch::Tensor FeedForward(const torch::Tensor& x, const Linear& fc1, const Linear& fc2,
                            const Norm& norm) const {
    return LayerNorm(x + fc2(Activation(fc1(x))), norm);
  }

  // The encoder over checked input: attentions, hidden states and last_hidden_state of `out`.
  absl::Status ForwardEncoder(const ForwardInput& input, const ForwardOptions& options,
                              ForwardOutput* out) const {
    const torch::Tensor source_visible = PaddingMask(input.attention_mask);
    torch::Tensor hidden = Embed(input.input_ids, encoder_positions_, encoder_embedding_norm_);
    if (options.output_hidden_states) out->hidden_states.push_back(hidden);
    for (size_t i = 0; i < encoder_layers_.size(); ++i) {
      const EncoderLayer& layer = encoder_layers_[i];
      torch::Tensor scores;
      auto [attended, probs] =
          Attend(layer.self_attn, hidden, hidden, source_visible, config().num_attention_heads,
                 options.output_attention_scores ? &scores : nullptr);
      hidden = LayerNorm(hidden + attended, layer.self_attn_norm);
      hidden = FeedForward(hidden, layer.fc1, layer.fc2, layer.final_norm);
      if (options.output_attentions) out->attentions.push_back(std::move(probs));
      if (options.output_attention_scores) out->attention_scores.push_back(std::move(scores));
      if (options.output_hidden_states) out->hidden_states.push_back(hidden);
      if (options.on_layer_done) {
        ATTNSCOPE_RETURN_IF_ERROR(options.on_layer_done(static_cast<int64_t>(i)));
      }
    }
    out->last_hidden_state = hidden;
    return absl::OkStatus();
  }

  absl::StatusOr<ForwardOutput> Run(const ForwardInput& input,
                                    const ForwardOptions& options) const override {
    const ModelConfig& cfg = config();
    const torch::Tensor source_visible = PaddingMask(input.attention_mask);
    ForwardOutput out;
    ATTNSCOPE_RETURN_IF_ERROR(ForwardEncoder(input, options, &out));
    if (!input.decoder_input_ids.defined()) return out;
    const torch::Tensor memory = out.last_hidden_state;
    out.encoder_last_hidden_state = memory;
    const torch::Tensor target_visible = CausalMask(input.decoder_attention_mask);
    torch::Tensor y = Embed(input.decoder_input_ids, decoder_positions_, decoder_embedding_norm_);
    for (size_t i = 0; i < decoder_layers_.size(); ++i) {
      const DecoderLayer& layer = decoder_layers_[i];
      auto [attended, self_probs] =
          Attend(layer.self_attn, y, y, target_visible, cfg.decoder_attention_heads);
      y = LayerNorm(y + attended, layer.self_attn_norm);
      auto [crossed, cross_probs] =
          Attend(layer.cross_attn, y, memory, source_visible, cfg.decoder_attention_heads);
      y = LayerNorm(y + crossed, layer.cross_attn_norm);
      y = FeedForward(y, layer.fc1, layer.fc2, layer.final_norm);
      if (options.output_attentions) {
        out.decoder_attentions.push_back(std::move(self_probs));
        out.cross_attentions.push_back(std::move(cross_probs));
      }
      if (options.on_layer_done) {
        ATTNSCOPE_RETURN_IF_ERROR(
            options.on_layer_done(static_cast<int64_t>(encoder_layers_.size() + i)));
      }
    }
    out.last_hidden_state = y;
    if (options.output_logits) out.logits = torch::linear(y, shared_) + final_logits_bias_;
    return out;
  }

  absl::StatusOr<KvCache> RunEncoderImpl(const ForwardInput& source) const override {
    ForwardOptions options;
    options.output_attentions = false;
    ForwardOutput encoded;
    ATTNSCOPE_RETURN_IF_ERROR(ForwardEncoder(source, options, &encoded));
    KvCache cache;
    for (const DecoderLayer& layer : decoder_layers_) {
      const int64_t heads = config().decoder_attention_heads;
      cache.cross_keys.push_back(SplitHeads(layer.cross_attn.k(encoded.last_hidden_state), heads));
      cache.cross_values.push_back(
          SplitHeads(layer.cross_attn.v(encoded.last_hidden_state), heads));
    }
    cache.encoder_attention_mask = source.attention_mask;
    return cache;
  }

  // The decoder over new positions past..past+T-1 of the cache: self-attention over the cached
  // and new positions, cross-attention over the cached encoder keys and values.
  absl::StatusOr<DecodeOutput> RunDecode(const torch::Tensor& input_ids, KvCache* cache,
                                         bool output_attentions) const override {
    const int64_t heads = config().decoder_attention_heads;
    const int64_t past = cache->length();
    const int64_t length = input_ids.size(1);
    const torch::Tensor self_visible = CachedCausalMask(past, length);
    const torch::Tensor source_visible = PaddingMask(cache->encoder_attention_mask);
    DecodeOutput out;
    torch::Tensor y = Embed(input_ids, decoder_positions_, decoder_embedding_norm_, past);
    for (size_t i = 0; i < decoder_layers_.size(); ++i) {
      const DecoderLayer& layer = decoder_layers_[i];
      const auto [key, value] = AppendToCache(cache, i, SplitHeads(layer.self_attn.k(y), heads),
                                              SplitHeads(layer.self_attn.v(y), heads));
      auto [attended, self_probs] =
          AttendTo(layer.self_attn.out, Query(layer.self_attn, y, heads), key, value, self_visible);
      y = LayerNorm(y + attended, layer.self_attn_norm);
      auto [crossed, cross_probs] =
          AttendTo(layer.cross_attn.out, Query(layer.cross_attn, y, heads), cache->cross_keys[i],
                   cache->cross_values[i], source_visible);
      y = LayerNorm(y + crossed, layer.cross_attn_norm);
      y = FeedForward(y, layer.fc1, layer.fc2, layer.final_norm);
      if (output_attentions) {
        out.attentions.push_back(std::move(self_probs));
        out.cross_attentions.push_back(std::move(cross_probs));
      }
    }
    out.logits = torch::linear(y, shared_) + final_logits_bias_;
    return out;
  }

  bool bart_ = false;
  torch::Tensor shared_;
  torch::Tensor final_logits_bias_;
  torch::Tensor encoder_positions_, decoder_positions_;  // BART's learned tables
  Norm encoder_embedding_norm_, decoder_embedding_norm_;
  std::vector<EncoderLayer> encoder_layers_;
  std::vector<DecoderLayer> decoder_layers_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TransformerModel>> CreateEncoderDecoderModel(
    ModelConfig config, Checkpoint& checkpoint) {
  const int64_t hidden = config.hidden_size;
  const bool bart = config.architecture == Architecture::kBart;
  // config.json against the file's shapes, before any per-layer work.
  ATTNSCOPE_RETURN_IF_ERROR(checkpoint.CheckBlockCount("encoder_layers", config.num_hidden_layers,
                                                       "model.encoder.layers."));
  ATTNSCOPE_RETURN_IF_ERROR(
      checkpoint.CheckBlockCount("decoder_layers", config.decoder_layers, "model.decoder.layers."));
  ATTNSCOPE_RETURN_IF_ERROR(
      checkpoint.CheckConfigSize("vocab_size", config.vocab_size, "model.shared.weight", 0));
  ATTNSCOPE_RETURN_IF_ERROR(
      checkpoint.CheckConfigSize("d_model", hidden, "model.shared.weight", 1));
  if (bart) {
    ATTNSCOPE_RETURN_IF_ERROR(checkpoint.CheckConfigSize(
        "max_position_embeddings", config.max_position_embeddings,
        "model.encoder.embed_positions.weight", 0, /*offset=*/kBartPositionOffset));
  }
  std::vector<TensorSpec> specs;
  auto linear = [&](const std::string& prefix, int64_t out, int64_t in) {
    specs.push_back({prefix + ".weight", {out, in}});
    specs.push_back({prefix + ".bias", {out}});
  };
  auto norm = [&](const std::string& prefix) {
    specs.push_back({prefix + ".weight", {hidden}});
    specs.push_back({prefix + ".bias", {hidden}});
  };
  auto attention = [&](const std::string& prefix) {
    for (const char* projection : {".q_proj", ".k_proj", ".v_proj", ".out_proj"}) {
      linear(prefix + projection, hidden, hidden);
    }
  };
  specs.push_back({"model.shared.weight", {config.vocab_size, hidden}});
  specs.push_back({"final_logits_bias", {1, config.vocab_size}});
  if (bart) {
    for (const char* side : {"encoder", "decoder"}) {
      specs.push_back({absl::StrCat("model.", side, ".embed_positions.weight"),
                       {config.max_position_embeddings + kBartPositionOffset, hidden}});
      norm(absl::StrCat("model.", side, ".layernorm_embedding"));
    }
  }
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = absl::StrCat("model.encoder.layers.", i, ".");
    attention(p + "self_attn");
    norm(p + "self_attn_layer_norm");
    linear(p + "fc1", config.intermediate_size, hidden);
    linear(p + "fc2", hidden, config.intermediate_size);
    norm(p + "final_layer_norm");
  }
  for (int64_t i = 0; i < config.decoder_layers; ++i) {
    const std::string p = absl::StrCat("model.decoder.layers.", i, ".");
    attention(p + "self_attn");
    norm(p + "self_attn_layer_norm");
    attention(p + "encoder_attn");
    norm(p + "encoder_attn_layer_norm");
    linear(p + "fc1", config.decoder_ffn_dim, hidden);
    linear(p + "fc2", hidden, config.decoder_ffn_dim);
    norm(p + "final_layer_norm");
  }
  // Copies of the shared embeddings (tied), and Marian's sinusoidal tables, which some
  // checkpoints store: computed here instead.
  std::vector<std::string> ignored = {"model.encoder.embed_tokens.", "model.decoder.embed_tokens.",
                                      "lm_head."};
  if (!bart) {
    ignored.push_back("model.encoder.embed_positions.");
    ignored.push_back("model.decoder.embed_positions.");
  }
  ATTNSCOPE_RETURN_IF_ERROR(checkpoint.Load(specs, ignored));
  const Architecture architecture = config.architecture;
  return BuildModel(architecture,
                    [&] { return new EncoderDecoderModel(std::move(config), checkpoint); });
}

}  // namespace attnscope

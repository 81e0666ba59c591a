#include "tools/train/marian_trainer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "tools/train/safetensors_writer.h"

namespace attnscope::train {
namespace {

using json = nlohmann::json;

// transformers' Marian layers are nn.LayerNorm with its default eps.
constexpr double kLayerNormEps = 1e-5;
// Labels of the padding positions, which are not predicted.
constexpr int64_t kIgnore = -100;
// What config.json records as init_std; the initialisation itself is below.
constexpr double kInitStd = 0.02;
constexpr const char* kTokenizerFiles[] = {"source.spm", "target.spm", "vocab.json",
                                           "tokenizer_config.json"};

torch::nn::LayerNorm MakeLayerNorm(int64_t size) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({size}).eps(kLayerNormEps));
}

// MarianSinusoidalPositionalEmbedding, [positions, dim]: column i < dim/2 is
// sin(p / 10000^(2i/dim)), column dim/2 + i the cos of the same angle; computed in double and
// stored as float32, as transformers and the engine do.
torch::Tensor SinusoidalPositions(int64_t positions, int64_t dim) {
  const torch::Tensor exponents =
      torch::arange(dim / 2, torch::kFloat64).mul(2.0 / static_cast<double>(dim));
  const torch::Tensor angles = torch::arange(positions, torch::kFloat64).unsqueeze(1) /
                               torch::pow(10000.0, exponents).unsqueeze(0);
  return torch::cat({angles.sin(), angles.cos()}, 1).to(torch::kFloat32);
}

// MarianAttention: biased projections, the query scaled by head_dim^-1/2 after its projection.
struct AttentionImpl : torch::nn::Module {
  AttentionImpl(int64_t d_model, int64_t heads)
      : heads(heads),
        q_proj(register_module("q_proj", torch::nn::Linear(d_model, d_model))),
        k_proj(register_module("k_proj", torch::nn::Linear(d_model, d_model))),
        v_proj(register_module("v_proj", torch::nn::Linear(d_model, d_model))),
        out_proj(register_module("out_proj", torch::nn::Linear(d_model, d_model))) {}

  // [B, L, H] -> [B, N, L, head_dim].
  torch::Tensor Split(const torch::Tensor& t) const {
    return t.view({t.size(0), t.size(1), heads, t.size(2) / heads}).transpose(1, 2);
  }

  // `x` [B, Tq, H] attends over `memory` [B, Tk, H] where visible ([B or 1, 1, Tq or 1, Tk]
  // bool) is true.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& memory,
                        const torch::Tensor& visible) {
    const double head_dim = static_cast<double>(x.size(2) / heads);
    const torch::Tensor q = Split(q_proj(x).mul(1.0 / std::sqrt(head_dim)));
    // As the engine: float32's lowest value on hidden keys, so that they get exactly 0.
    const torch::Tensor probs = torch::softmax(
        torch::matmul(q, Split(k_proj(memory)).transpose(-1, -2))
            .masked_fill(visible.logical_not(), std::numeric_limits<float>::lowest()),
        -1);
    return out_proj(torch::matmul(probs, Split(v_proj(memory))).transpose(1, 2).flatten(2));
  }

  int64_t heads;
  torch::nn::Linear q_proj, k_proj, v_proj, out_proj;
};
TORCH_MODULE(Attention);

struct EncoderLayerImpl : torch::nn::Module {
  explicit EncoderLayerImpl(const MarianConfig& c)
      : self_attn(register_module("self_attn", Attention(c.d_model, c.attention_heads))),
        self_attn_layer_norm(register_module("self_attn_layer_norm", MakeLayerNorm(c.d_model))),
        fc1(register_module("fc1", torch::nn::Linear(c.d_model, c.ffn_dim))),
        fc2(register_module("fc2", torch::nn::Linear(c.ffn_dim, c.d_model))),
        final_layer_norm(register_module("final_layer_norm", MakeLayerNorm(c.d_model))),
        dropout(register_module("dropout", torch::nn::Dropout(c.dropout))) {}

  torch::Tensor forward(torch::Tensor x, const torch::Tensor& visible) {
    x = self_attn_layer_norm(x + dropout(self_attn(x, x, visible)));
    return final_layer_norm(x + dropout(fc2(torch::silu(fc1(x)))));
  }

  Attention self_attn;
  torch::nn::LayerNorm self_attn_layer_norm;
  torch::nn::Linear fc1, fc2;
  torch::nn::LayerNorm final_layer_norm;
  torch::nn::Dropout dropout;
};
TORCH_MODULE(EncoderLayer);

struct DecoderLayerImpl : torch::nn::Module {
  explicit DecoderLayerImpl(const MarianConfig& c)
      : self_attn(register_module("self_attn", Attention(c.d_model, c.attention_heads))),
        self_attn_layer_norm(register_module("self_attn_layer_norm", MakeLayerNorm(c.d_model))),
        encoder_attn(register_module("encoder_attn", Attention(c.d_model, c.attention_heads))),
        encoder_attn_layer_norm(
            register_module("encoder_attn_layer_norm", MakeLayerNorm(c.d_model))),
        fc1(register_module("fc1", torch::nn::Linear(c.d_model, c.ffn_dim))),
        fc2(register_module("fc2", torch::nn::Linear(c.ffn_dim, c.d_model))),
        final_layer_norm(register_module("final_layer_norm", MakeLayerNorm(c.d_model))),
        dropout(register_module("dropout", torch::nn::Dropout(c.dropout))) {}

  torch::Tensor forward(torch::Tensor y, const torch::Tensor& self_visible,
                        const torch::Tensor& memory, const torch::Tensor& source_visible) {
    y = self_attn_layer_norm(y + dropout(self_attn(y, y, self_visible)));
    y = encoder_attn_layer_norm(y + dropout(encoder_attn(y, memory, source_visible)));
    return final_layer_norm(y + dropout(fc2(torch::silu(fc1(y)))));
  }

  Attention self_attn;
  torch::nn::LayerNorm self_attn_layer_norm;
  Attention encoder_attn;
  torch::nn::LayerNorm encoder_attn_layer_norm;
  torch::nn::Linear fc1, fc2;
  torch::nn::LayerNorm final_layer_norm;
  torch::nn::Dropout dropout;
};
TORCH_MODULE(DecoderLayer);

void AppendModule(const std::string& prefix, const torch::nn::Module& module,
                  std::vector<std::pair<std::string, torch::Tensor>>* out) {
  for (const auto& item : module.named_parameters()) {
    out->emplace_back(absl::StrCat(prefix, ".", item.key()), item.value());
  }
}

template <typename T>
absl::Status ReadField(const json& object, const char* name, T* out) {
  if (!object.contains(name)) {
    return absl::InvalidArgumentError(absl::StrCat("training config: missing field '", name, "'"));
  }
  try {
    *out = object.at(name).get<T>();
  } catch (const json::exception& error) {
    return absl::InvalidArgumentError(
        absl::StrCat("training config: field '", name, "': ", error.what()));
  }
  return absl::OkStatus();
}

int64_t FindToken(const Tokenizer& tokenizer, const std::string& token) {
  for (int64_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.IdToToken(id) == token) return id;
  }
  return -1;
}

}  // namespace

// The differentiable model; NamedTensors() gives the Hugging Face checkpoint's names.
struct MarianTrainer::Model : torch::nn::Module {
  explicit Model(const MarianConfig& c)
      : shared(register_module(
            "shared",
            torch::nn::Embedding(
                torch::nn::EmbeddingOptions(c.vocab_size, c.d_model).padding_idx(c.pad_token_id)))),
        final_logits_bias(register_parameter("final_logits_bias", torch::zeros({1, c.vocab_size}))),
        positions(register_buffer("positions",
                                  SinusoidalPositions(c.max_position_embeddings, c.d_model))),
        embed_scale(std::sqrt(static_cast<double>(c.d_model))),
        dropout(register_module("dropout", torch::nn::Dropout(c.dropout))) {
    for (int64_t i = 0; i < c.encoder_layers; ++i) {
      encoder.push_back(register_module(absl::StrCat("encoder", i), EncoderLayer(c)));
    }
    for (int64_t i = 0; i < c.decoder_layers; ++i) {
      decoder.push_back(register_module(absl::StrCat("decoder", i), DecoderLayer(c)));
    }
    // Glorot-uniform projections and N(0, d_model^-1/2) embeddings, the transformer
    // initialisation of fairseq and Marian: scaled by sqrt(d_model) the embeddings start at unit
    // variance, the scale of the positions, and as the tied output matrix they give logits of
    // unit scale. The parameter order is fixed, so the seeded draws are too.
    torch::NoGradGuard no_grad;
    for (auto& item : named_parameters()) {
      torch::Tensor& parameter = item.value();
      if (item.key() == "shared.weight") {
        parameter.normal_(0.0, 1.0 / embed_scale);
        parameter[c.pad_token_id].zero_();
      } else if (parameter.dim() == 2 && item.key() != "final_logits_bias") {
        torch::nn::init::xavier_uniform_(parameter);
      } else if (item.key().size() >= 4 &&
                 item.key().compare(item.key().size() - 4, 4, "bias") == 0) {
        parameter.zero_();
      }
    }
  }

  torch::Tensor Embed(const torch::Tensor& ids) {
    return dropout(shared(ids).mul(embed_scale) + positions.narrow(0, 0, ids.size(1)).unsqueeze(0));
  }

  // The encoder output [B, S, H]; source_mask [B, S], 1 = real token.
  torch::Tensor Encode(const torch::Tensor& source_ids, const torch::Tensor& source_mask) {
    const torch::Tensor visible =
        source_mask.to(torch::kBool).view({source_ids.size(0), 1, 1, source_ids.size(1)});
    torch::Tensor x = Embed(source_ids);
    for (EncoderLayer& layer : encoder) x = layer->forward(x, visible);
    return x;
  }

  // The decoder output [B, T, H] at the positions of decoder_ids [B, T].
  torch::Tensor Decode(const torch::Tensor& decoder_ids, const torch::Tensor& decoder_mask,
                       const torch::Tensor& memory, const torch::Tensor& source_mask) {
    const int64_t batch = decoder_ids.size(0);
    const int64_t length = decoder_ids.size(1);
    const torch::Tensor self_visible =
        torch::ones({length, length}, torch::kBool)
            .tril()
            .view({1, 1, length, length})
            .logical_and(decoder_mask.to(torch::kBool).view({batch, 1, 1, length}));
    const torch::Tensor source_visible =
        source_mask.to(torch::kBool).view({batch, 1, 1, source_mask.size(1)});
    torch::Tensor y = Embed(decoder_ids);
    for (DecoderLayer& layer : decoder) y = layer->forward(y, self_visible, memory, source_visible);
    return y;
  }

  // The lm_head: logits [..., vocab] of decoder outputs [..., H].
  torch::Tensor Project(const torch::Tensor& y) {
    return torch::linear(y, shared->weight) + final_logits_bias.view({-1});
  }

  std::vector<std::pair<std::string, torch::Tensor>> NamedTensors() const {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    out.emplace_back("model.shared.weight", shared->weight);
    out.emplace_back("final_logits_bias", final_logits_bias);
    for (size_t i = 0; i < encoder.size(); ++i) {
      AppendModule(absl::StrCat("model.encoder.layers.", i), *encoder[i], &out);
    }
    for (size_t i = 0; i < decoder.size(); ++i) {
      AppendModule(absl::StrCat("model.decoder.layers.", i), *decoder[i], &out);
    }
    return out;
  }

  torch::nn::Embedding shared;
  torch::Tensor final_logits_bias;
  torch::Tensor positions;
  double embed_scale;
  torch::nn::Dropout dropout;
  std::vector<EncoderLayer> encoder;
  std::vector<DecoderLayer> decoder;
};

json MarianConfig::ToJson() const {
  return json{{"vocab_size", vocab_size},
              {"pad_token_id", pad_token_id},
              {"eos_token_id", eos_token_id},
              {"d_model", d_model},
              {"encoder_layers", encoder_layers},
              {"decoder_layers", decoder_layers},
              {"attention_heads", attention_heads},
              {"ffn_dim", ffn_dim},
              {"max_position_embeddings", max_position_embeddings},
              {"max_length", max_length},
              {"dropout", dropout},
              {"label_smoothing", label_smoothing},
              {"batch_size", batch_size},
              {"steps", steps},
              {"peak_lr", peak_lr},
              {"warmup_steps", warmup_steps},
              {"adam_beta1", adam_beta1},
              {"adam_beta2", adam_beta2},
              {"adam_eps", adam_eps},
              {"clip_grad_norm", clip_grad_norm},
              {"length_bucket_batches", length_bucket_batches},
              {"seed", seed},
              {"threads", threads}};
}

absl::StatusOr<MarianConfig> MarianConfig::FromJson(const json& object) {
  MarianConfig c;
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "vocab_size", &c.vocab_size));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "pad_token_id", &c.pad_token_id));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "eos_token_id", &c.eos_token_id));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "d_model", &c.d_model));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "encoder_layers", &c.encoder_layers));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "decoder_layers", &c.decoder_layers));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "attention_heads", &c.attention_heads));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "ffn_dim", &c.ffn_dim));
  ATTNSCOPE_RETURN_IF_ERROR(
      ReadField(object, "max_position_embeddings", &c.max_position_embeddings));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "max_length", &c.max_length));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "dropout", &c.dropout));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "label_smoothing", &c.label_smoothing));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "batch_size", &c.batch_size));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "steps", &c.steps));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "peak_lr", &c.peak_lr));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "warmup_steps", &c.warmup_steps));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "adam_beta1", &c.adam_beta1));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "adam_beta2", &c.adam_beta2));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "adam_eps", &c.adam_eps));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "clip_grad_norm", &c.clip_grad_norm));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "length_bucket_batches", &c.length_bucket_batches));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "seed", &c.seed));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "threads", &c.threads));
  return c;
}

absl::StatusOr<std::string> LanguageToken(std::string_view lang) {
  if (lang == "vi") return std::string(">>vie<<");
  if (lang == "ko") return std::string(">>kor<<");
  return absl::InvalidArgumentError(
      absl::StrCat("language: expected \"vi\" or \"ko\", got \"", std::string(lang), "\""));
}

absl::StatusOr<std::string> PrefixedSource(const TranslationExample& example) {
  ATTNSCOPE_ASSIGN_OR_RETURN(std::string token, LanguageToken(example.lang));
  return absl::StrCat(token, " ", example.source);
}

absl::StatusOr<std::vector<TranslationExample>> ReadTranslationExamples(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::vector<TranslationExample> examples;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    TranslationExample example;
    try {
      const json object = json::parse(line);
      example = {object.at("lang").get<std::string>(), object.at("source").get<std::string>(),
                 object.at("target").get<std::string>()};
    } catch (const json::exception& error) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", path, "' line ", number, ": ", error.what()));
    }
    if (absl::Status known = LanguageToken(example.lang).status(); !known.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", path, "' line ", number, ": ", known.message()));
    }
    examples.push_back(std::move(example));
  }
  return examples;
}

absl::StatusOr<std::unique_ptr<MarianTrainer>> MarianTrainer::Create(
    MarianConfig config, const Tokenizer& tokenizer, std::vector<TranslationExample> examples,
    std::string tokenizer_dir) {
  if (config.d_model % config.attention_heads != 0 || config.d_model % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("d_model: expected an even multiple of attention_heads (",
                     config.attention_heads, "), got ", config.d_model));
  }
  config.vocab_size = tokenizer.vocab_size();
  config.pad_token_id = tokenizer.pad_token_id();
  config.eos_token_id = FindToken(tokenizer, "</s>");
  if (config.pad_token_id < 0 || config.eos_token_id < 0) {
    return absl::InvalidArgumentError(
        "tokenizer: expected a Marian vocabulary with \"<pad>\" and \"</s>\", got one without");
  }
  config.max_length = std::min(config.max_length, config.max_position_embeddings);
  EncodeOptions options;
  std::vector<Tokenized> tokenized;
  tokenized.reserve(examples.size());
  int64_t too_long = 0;
  for (const TranslationExample& example : examples) {
    ATTNSCOPE_ASSIGN_OR_RETURN(std::string source, PrefixedSource(example));
    absl::StatusOr<Encoding> encoded_source = tokenizer.Encode(source, options);
    absl::StatusOr<Encoding> encoded_target = tokenizer.EncodeTarget(example.target, options);
    for (const absl::StatusOr<Encoding>* encoding : {&encoded_source, &encoded_target}) {
      if (!encoding->ok()) {
        return absl::InvalidArgumentError(absl::StrCat("example '", example.source.substr(0, 80),
                                                       "': ", encoding->status().message()));
      }
    }
    if (static_cast<int64_t>(encoded_source->size()) > config.max_length ||
        static_cast<int64_t>(encoded_target->size()) > config.max_length) {
      ++too_long;
      continue;
    }
    tokenized.push_back({encoded_source->input_ids, encoded_target->input_ids});
  }
  if (tokenized.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training pairs: expected at least one of at most max_length (", config.max_length,
        ") tokens a side, got none of ", examples.size(), " (raise --max_length)"));
  }
  return std::unique_ptr<MarianTrainer>(new MarianTrainer(std::move(config), std::move(tokenized),
                                                          too_long, std::move(tokenizer_dir)));
}

MarianTrainer::MarianTrainer(MarianConfig config, std::vector<Tokenized> tokenized,
                             int64_t too_long, std::string tokenizer_dir)
    : config_(std::move(config)),
      tokenized_(std::move(tokenized)),
      too_long_(too_long),
      tokenizer_dir_(std::move(tokenizer_dir)),
      rng_(config_.seed),
      order_rng_(config_.seed + 2) {
  torch::set_num_threads(config_.threads);
  torch::manual_seed(config_.seed);
  order_.resize(tokenized_.size());
  for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
  model_ = std::make_unique<Model>(config_);
  optimizer_ = std::make_unique<torch::optim::Adam>(
      model_->parameters(), torch::optim::AdamOptions(config_.peak_lr)
                                .betas({config_.adam_beta1, config_.adam_beta2})
                                .eps(config_.adam_eps));
}

MarianTrainer::~MarianTrainer() = default;

void MarianTrainer::BucketRemainingByLength() {
  const auto batch_size = static_cast<size_t>(config_.batch_size);
  const size_t window =
      batch_size * static_cast<size_t>(std::max<int64_t>(1, config_.length_bucket_batches));
  if (window <= batch_size) return;
  const auto begin = order_.begin() + static_cast<std::ptrdiff_t>(next_);
  std::shuffle(begin, order_.end(), order_rng_);
  std::vector<std::vector<size_t>> batches;
  for (size_t start = next_; start < order_.size(); start += window) {
    const auto first = order_.begin() + static_cast<std::ptrdiff_t>(start);
    const auto last =
        order_.begin() + static_cast<std::ptrdiff_t>(std::min(order_.size(), start + window));
    // By source length, then target length: the two are close, and padding costs on both sides.
    std::stable_sort(first, last, [&](size_t x, size_t y) {
      const Tokenized& a = tokenized_[x];
      const Tokenized& b = tokenized_[y];
      return std::make_pair(a.source.size(), a.labels.size()) <
             std::make_pair(b.source.size(), b.labels.size());
    });
    for (auto b = first; b < last;) {
      const auto e =
          b + std::min<std::ptrdiff_t>(static_cast<std::ptrdiff_t>(batch_size), last - b);
      batches.emplace_back(b, e);
      b = e;
    }
  }
  std::shuffle(batches.begin(), batches.end(), order_rng_);
  size_t out = next_;
  for (const std::vector<size_t>& batch : batches) {
    for (size_t index : batch) order_[out++] = index;
  }
}

TranslationStepStats MarianTrainer::Step() {
  ++step_;
  std::vector<const Tokenized*> batch;
  while (static_cast<int64_t>(batch.size()) < config_.batch_size) {
    if (next_ == order_.size()) {
      std::shuffle(order_.begin(), order_.end(), rng_);
      next_ = 0;
      BucketRemainingByLength();
    }
    batch.push_back(&tokenized_[order_[next_++]]);
  }
  size_t source_length = 0, target_length = 0;
  for (const Tokenized* t : batch) {
    source_length = std::max(source_length, t->source.size());
    target_length = std::max(target_length, t->labels.size());
  }
  const auto rows = static_cast<int64_t>(batch.size());
  const auto pad = config_.pad_token_id;
  torch::Tensor source_ids =
      torch::full({rows, static_cast<int64_t>(source_length)}, pad, torch::kLong);
  torch::Tensor source_mask =
      torch::zeros({rows, static_cast<int64_t>(source_length)}, torch::kLong);
  torch::Tensor decoder_ids =
      torch::full({rows, static_cast<int64_t>(target_length)}, pad, torch::kLong);
  torch::Tensor decoder_mask =
      torch::zeros({rows, static_cast<int64_t>(target_length)}, torch::kLong);
  torch::Tensor labels =
      torch::full({rows, static_cast<int64_t>(target_length)}, kIgnore, torch::kLong);
  auto source_a = source_ids.accessor<int64_t, 2>();
  auto source_mask_a = source_mask.accessor<int64_t, 2>();
  auto decoder_a = decoder_ids.accessor<int64_t, 2>();
  auto decoder_mask_a = decoder_mask.accessor<int64_t, 2>();
  auto labels_a = labels.accessor<int64_t, 2>();
  TranslationStepStats stats;
  for (int64_t r = 0; r < rows; ++r) {
    const Tokenized& t = *batch[r];
    for (size_t c = 0; c < t.source.size(); ++c) {
      source_a[r][c] = t.source[c];
      source_mask_a[r][c] = 1;
    }
    // Teacher forcing: the decoder reads the start token (pad, as Marian) and the labels shifted
    // right by one, and predicts each label.
    for (size_t c = 0; c < t.labels.size(); ++c) {
      decoder_a[r][c] = c == 0 ? pad : t.labels[c - 1];
      decoder_mask_a[r][c] = 1;
      labels_a[r][c] = t.labels[c];
    }
    stats.source_tokens += static_cast<int64_t>(t.source.size());
    stats.target_tokens += static_cast<int64_t>(t.labels.size());
  }

  model_->train();
  const torch::Tensor memory = model_->Encode(source_ids, source_mask);
  const torch::Tensor hidden = model_->Decode(decoder_ids, decoder_mask, memory, source_mask);
  // Only the real target positions go through the lm_head: the logits over the vocabulary are the
  // largest tensors of a step, and padding would only be thrown away.
  const torch::Tensor real = labels.ne(kIgnore);
  const torch::Tensor log_probs = torch::log_softmax(model_->Project(hidden.index({real})), -1);
  const torch::Tensor nll = -log_probs.gather(1, labels.index({real}).unsqueeze(1)).mean();
  // PyTorch's cross_entropy(label_smoothing=s) from the one log_softmax: the reference token
  // weighted 1 - s, every token s / vocab_size.
  const double s = config_.label_smoothing;
  const torch::Tensor loss = (1.0 - s) * nll - s * log_probs.mean(1).mean();

  const double step = static_cast<double>(step_);
  const double warmup = static_cast<double>(config_.warmup_steps);
  const double decay =
      std::max(0.0, (static_cast<double>(config_.steps) - step) /
                        std::max(1.0, static_cast<double>(config_.steps) - warmup));
  stats.lr = config_.peak_lr * std::min(warmup > 0 ? step / warmup : 1.0, decay);
  for (torch::optim::OptimizerParamGroup& group : optimizer_->param_groups()) {
    static_cast<torch::optim::AdamOptions&>(group.options()).lr(stats.lr);
  }
  optimizer_->zero_grad();
  loss.backward();
  torch::nn::utils::clip_grad_norm_(model_->parameters(), config_.clip_grad_norm);
  optimizer_->step();

  stats.step = step_;
  stats.loss = loss.item<double>();
  stats.nll = nll.item<double>();
  return stats;
}

torch::Tensor MarianTrainer::Logits(const torch::Tensor& source_ids,
                                    const torch::Tensor& source_mask,
                                    const torch::Tensor& decoder_ids,
                                    const torch::Tensor& decoder_mask) {
  torch::NoGradGuard no_grad;
  model_->eval();
  const torch::Tensor memory = model_->Encode(source_ids, source_mask);
  return model_->Project(model_->Decode(decoder_ids, decoder_mask, memory, source_mask));
}

absl::Status MarianTrainer::Save(const std::string& dir) const {
  const MarianConfig& c = config_;
  const json config = {{"architectures", {"MarianMTModel"}},
                       {"model_type", "marian"},
                       {"is_encoder_decoder", true},
                       {"vocab_size", c.vocab_size},
                       {"decoder_vocab_size", c.vocab_size},
                       {"d_model", c.d_model},
                       {"encoder_layers", c.encoder_layers},
                       {"decoder_layers", c.decoder_layers},
                       {"encoder_attention_heads", c.attention_heads},
                       {"decoder_attention_heads", c.attention_heads},
                       {"encoder_ffn_dim", c.ffn_dim},
                       {"decoder_ffn_dim", c.ffn_dim},
                       {"activation_function", "swish"},
                       {"max_position_embeddings", c.max_position_embeddings},
                       {"scale_embedding", true},
                       {"share_encoder_decoder_embeddings", true},
                       {"tie_word_embeddings", true},
                       {"dropout", c.dropout},
                       {"attention_dropout", 0.0},
                       {"activation_dropout", 0.0},
                       {"init_std", kInitStd},
                       {"pad_token_id", c.pad_token_id},
                       {"eos_token_id", c.eos_token_id},
                       {"forced_eos_token_id", c.eos_token_id},
                       {"decoder_start_token_id", c.pad_token_id},
                       // What transformers' generate() reads for a Marian model: never the pad
                       // token, which the decoder only ever reads as its start.
                       {"bad_words_ids", {{c.pad_token_id}}},
                       {"max_length", c.max_position_embeddings},
                       {"num_beams", 1},
                       {"torch_dtype", "float32"}};
  ATTNSCOPE_RETURN_IF_ERROR(WriteFile(JoinPath(dir, "config.json"), config.dump(2) + "\n"));
  ATTNSCOPE_RETURN_IF_ERROR(
      WriteSafetensors(model_->NamedTensors(), JoinPath(dir, "model.safetensors")));
  if (tokenizer_dir_.empty()) return absl::OkStatus();
  std::error_code error;
  if (std::filesystem::equivalent(tokenizer_dir_, dir, error)) return absl::OkStatus();
  for (const char* name : kTokenizerFiles) {
    std::filesystem::copy_file(JoinPath(tokenizer_dir_, name), JoinPath(dir, name),
                               std::filesystem::copy_options::overwrite_existing, error);
    if (error) {
      return absl::InternalError(absl::StrCat("cannot copy '", JoinPath(tokenizer_dir_, name),
                                              "' to '", dir, "': ", error.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace attnscope::train

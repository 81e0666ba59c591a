#include "tools/train/bert_trainer.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "models/checkpoint/safetensors.h"
#include "tools/train/safetensors_writer.h"

namespace attnscope::train {
namespace {

using json = nlohmann::json;

constexpr double kLayerNormEps = 1e-12;
constexpr double kInitStd = 0.02;
// Masked-LM labels of positions that are not predicted (PyTorch cross_entropy's ignore_index).
constexpr int64_t kIgnore = -100;
// [PAD] [UNK] [CLS] [SEP] [MASK] lead the vocabulary (see vocab_builder.h).
constexpr int64_t kNumSpecialTokens = 5;

torch::nn::LayerNorm MakeLayerNorm(int64_t size) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({size}).eps(kLayerNormEps));
}

// One post-LayerNorm encoder block, computed as Hugging Face's BertLayer (and attnscope's engine).
struct EncoderLayerImpl : torch::nn::Module {
  EncoderLayerImpl(const TrainConfig& c)
      : heads(c.num_heads),
        query(register_module("query", torch::nn::Linear(c.hidden_size, c.hidden_size))),
        key(register_module("key", torch::nn::Linear(c.hidden_size, c.hidden_size))),
        value(register_module("value", torch::nn::Linear(c.hidden_size, c.hidden_size))),
        attention_output(
            register_module("attention_output", torch::nn::Linear(c.hidden_size, c.hidden_size))),
        attention_norm(register_module("attention_norm", MakeLayerNorm(c.hidden_size))),
        intermediate(
            register_module("intermediate", torch::nn::Linear(c.hidden_size, c.intermediate_size))),
        output(register_module("output", torch::nn::Linear(c.intermediate_size, c.hidden_size))),
        output_norm(register_module("output_norm", MakeLayerNorm(c.hidden_size))),
        dropout(register_module("dropout", torch::nn::Dropout(c.dropout))) {}

  // x [B, S, H]; additive_mask [B, 1, 1, S].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& additive_mask) {
    const int64_t batch = x.size(0);
    const int64_t length = x.size(1);
    const int64_t hidden = x.size(2);
    const int64_t head_dim = hidden / heads;
    auto split = [&](const torch::Tensor& t) {
      return t.view({batch, length, heads, head_dim}).transpose(1, 2);
    };
    const torch::Tensor q = split(query(x));
    const torch::Tensor k = split(key(x));
    const torch::Tensor v = split(value(x));
    const torch::Tensor scores =
        torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim)) +
        additive_mask;
    const torch::Tensor probs = dropout(torch::softmax(scores, -1));
    const torch::Tensor context =
        torch::matmul(probs, v).transpose(1, 2).reshape({batch, length, hidden});
    const torch::Tensor attended = attention_norm(dropout(attention_output(context)) + x);
    return output_norm(dropout(output(torch::gelu(intermediate(attended)))) + attended);
  }

  int64_t heads;
  torch::nn::Linear query, key, value, attention_output;
  torch::nn::LayerNorm attention_norm;
  torch::nn::Linear intermediate, output;
  torch::nn::LayerNorm output_norm;
  torch::nn::Dropout dropout;
};
TORCH_MODULE(EncoderLayer);

void AppendLinear(const std::string& name, const torch::nn::Linear& linear,
                  std::vector<std::pair<std::string, torch::Tensor>>* out) {
  out->emplace_back(name + ".weight", linear->weight);
  out->emplace_back(name + ".bias", linear->bias);
}

void AppendNorm(const std::string& name, const torch::nn::LayerNorm& norm,
                std::vector<std::pair<std::string, torch::Tensor>>* out) {
  out->emplace_back(name + ".weight", norm->weight);
  out->emplace_back(name + ".bias", norm->bias);
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

}  // namespace

// The differentiable model; tensor names in NamedTensors() are the Hugging Face checkpoint's.
struct BertTrainer::Model : torch::nn::Module {
  explicit Model(const TrainConfig& c)
      : word(register_module("word", torch::nn::Embedding(c.vocab_size, c.hidden_size))),
        position(register_module("position", torch::nn::Embedding(c.max_positions, c.hidden_size))),
        token_type(register_module("token_type", torch::nn::Embedding(2, c.hidden_size))),
        embedding_norm(register_module("embedding_norm", MakeLayerNorm(c.hidden_size))),
        pooler(register_module("pooler", torch::nn::Linear(c.hidden_size, c.hidden_size))),
        classifier(register_module("classifier", torch::nn::Linear(c.hidden_size, 1))),
        mlm_dense(register_module("mlm_dense", torch::nn::Linear(c.hidden_size, c.hidden_size))),
        mlm_norm(register_module("mlm_norm", MakeLayerNorm(c.hidden_size))),
        mlm_bias(register_parameter("mlm_bias", torch::zeros({c.vocab_size}))),
        dropout(register_module("dropout", torch::nn::Dropout(c.dropout))) {
    for (int64_t i = 0; i < c.num_layers; ++i) {
      layers.push_back(register_module(absl::StrCat("layer", i), EncoderLayer(c)));
    }
    // BERT's initialisation; the parameter order is fixed, so the seeded draws are too.
    torch::NoGradGuard no_grad;
    for (auto& item : named_parameters()) {
      const std::string& name = item.key();
      torch::Tensor& parameter = item.value();
      if (parameter.dim() == 2) {
        parameter.normal_(0.0, kInitStd);
      } else if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) {
        parameter.zero_();
      }
    }
    if (c.tied_query_key_init > 0) {
      for (EncoderLayer& layer : layers) {
        layer->key->weight.mul_(c.tied_query_key_init);
        layer->query->weight.copy_(layer->key->weight);
      }
    }
  }

  // [B, S, H] last hidden state. mask: [B, S] 1 = real token.
  torch::Tensor Encode(const torch::Tensor& ids, const torch::Tensor& type_ids,
                       const torch::Tensor& mask) {
    const int64_t length = ids.size(1);
    torch::Tensor hidden = word(ids) + position(torch::arange(length, torch::kLong)).unsqueeze(0) +
                           token_type(type_ids);
    hidden = dropout(embedding_norm(hidden));
    // As the engine: float32's lowest value on padded keys, so that they get exactly 0.
    const torch::Tensor additive_mask = (1.0 - mask.to(torch::kFloat32))
                                            .mul(std::numeric_limits<float>::lowest())
                                            .view({ids.size(0), 1, 1, length});
    for (EncoderLayer& layer : layers) hidden = layer->forward(hidden, additive_mask);
    return hidden;
  }

  std::vector<std::pair<std::string, torch::Tensor>> NamedTensors() const {
    std::vector<std::pair<std::string, torch::Tensor>> out;
    out.emplace_back("bert.embeddings.word_embeddings.weight", word->weight);
    out.emplace_back("bert.embeddings.position_embeddings.weight", position->weight);
    out.emplace_back("bert.embeddings.token_type_embeddings.weight", token_type->weight);
    AppendNorm("bert.embeddings.LayerNorm", embedding_norm, &out);
    for (size_t i = 0; i < layers.size(); ++i) {
      const std::string prefix = absl::StrCat("bert.encoder.layer.", i, ".");
      const EncoderLayer& layer = layers[i];
      AppendLinear(prefix + "attention.self.query", layer->query, &out);
      AppendLinear(prefix + "attention.self.key", layer->key, &out);
      AppendLinear(prefix + "attention.self.value", layer->value, &out);
      AppendLinear(prefix + "attention.output.dense", layer->attention_output, &out);
      AppendNorm(prefix + "attention.output.LayerNorm", layer->attention_norm, &out);
      AppendLinear(prefix + "intermediate.dense", layer->intermediate, &out);
      AppendLinear(prefix + "output.dense", layer->output, &out);
      AppendNorm(prefix + "output.LayerNorm", layer->output_norm, &out);
    }
    AppendLinear("bert.pooler.dense", pooler, &out);
    AppendLinear("classifier", classifier, &out);
    // BertForPreTraining's masked-LM head; its decoder is the word embedding matrix (tied).
    AppendLinear("cls.predictions.transform.dense", mlm_dense, &out);
    AppendNorm("cls.predictions.transform.LayerNorm", mlm_norm, &out);
    out.emplace_back("cls.predictions.bias", mlm_bias);
    return out;
  }

  torch::nn::Embedding word, position, token_type;
  torch::nn::LayerNorm embedding_norm;
  std::vector<EncoderLayer> layers;
  torch::nn::Linear pooler, classifier, mlm_dense;
  torch::nn::LayerNorm mlm_norm;
  torch::Tensor mlm_bias;
  torch::nn::Dropout dropout;
};

json TrainConfig::ToJson() const {
  return json{{"vocab_size", vocab_size},
              {"hidden_size", hidden_size},
              {"num_layers", num_layers},
              {"num_heads", num_heads},
              {"intermediate_size", intermediate_size},
              {"max_positions", max_positions},
              {"dropout", dropout},
              {"batch_size", batch_size},
              {"steps", steps},
              {"peak_lr", peak_lr},
              {"warmup_steps", warmup_steps},
              {"linear_decay", linear_decay},
              {"adam_beta1", adam_beta1},
              {"adam_beta2", adam_beta2},
              {"adam_eps", adam_eps},
              {"clip_grad_norm", clip_grad_norm},
              {"mask_prob", mask_prob},
              {"label_smoothing", label_smoothing},
              {"relevance_weight", relevance_weight},
              {"length_bucket_batches", length_bucket_batches},
              {"tied_query_key_init", tied_query_key_init},
              {"query_mask_prob", query_mask_prob},
              {"seed", seed},
              {"threads", threads}};
}

absl::StatusOr<TrainConfig> TrainConfig::FromJson(const json& object) {
  TrainConfig c;
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "vocab_size", &c.vocab_size));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "hidden_size", &c.hidden_size));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "num_layers", &c.num_layers));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "num_heads", &c.num_heads));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "intermediate_size", &c.intermediate_size));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "max_positions", &c.max_positions));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "dropout", &c.dropout));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "batch_size", &c.batch_size));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "steps", &c.steps));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "peak_lr", &c.peak_lr));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "warmup_steps", &c.warmup_steps));
  // Records written before linear_decay existed used the inverse square root.
  if (object.contains("linear_decay")) {
    ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "linear_decay", &c.linear_decay));
  }
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "adam_beta1", &c.adam_beta1));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "adam_beta2", &c.adam_beta2));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "adam_eps", &c.adam_eps));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "clip_grad_norm", &c.clip_grad_norm));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "mask_prob", &c.mask_prob));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "label_smoothing", &c.label_smoothing));
  // Records written before relevance_weight existed trained with weight 1.
  if (object.contains("relevance_weight")) {
    ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "relevance_weight", &c.relevance_weight));
  }
  if (object.contains("length_bucket_batches")) {
    ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "length_bucket_batches", &c.length_bucket_batches));
  }
  if (object.contains("query_mask_prob")) {
    ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "query_mask_prob", &c.query_mask_prob));
  }
  if (object.contains("tied_query_key_init")) {
    ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "tied_query_key_init", &c.tied_query_key_init));
  }
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "seed", &c.seed));
  ATTNSCOPE_RETURN_IF_ERROR(ReadField(object, "threads", &c.threads));
  return c;
}

absl::StatusOr<std::vector<Example>> ReadExamples(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  std::vector<Example> examples;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    try {
      const json object = json::parse(line);
      examples.push_back({object.at("a").get<std::string>(), object.value("b", ""),
                          object.at("label").get<int>()});
    } catch (const json::exception& error) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", path, "' line ", number, ": ", error.what()));
    }
  }
  return examples;
}

absl::Status WriteExamples(const std::vector<Example>& examples, const std::string& path) {
  std::string text;
  for (const Example& example : examples) {
    json object = {{"a", example.a}, {"label", example.label}};
    if (!example.b.empty()) object["b"] = example.b;
    text += object.dump() + "\n";
  }
  return WriteFile(path, text);
}

absl::StatusOr<std::unique_ptr<BertTrainer>> BertTrainer::Create(TrainConfig config,
                                                                 const Tokenizer& tokenizer,
                                                                 std::vector<Example> examples) {
  if (examples.empty()) return absl::InvalidArgumentError("no training examples");
  if (config.hidden_size % config.num_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hidden_size ", config.hidden_size, " is not a multiple of num_heads ", config.num_heads));
  }
  config.vocab_size = tokenizer.vocab_size();
  const int64_t mask_id = [&] {
    for (int64_t id = 0; id < tokenizer.vocab_size(); ++id) {
      if (tokenizer.IdToToken(id) == "[MASK]") return id;
    }
    return int64_t{-1};
  }();
  if (mask_id < 0) return absl::InvalidArgumentError("the vocabulary has no [MASK] token");
  EncodeOptions options;
  options.truncation = Truncation::kLongestFirst;
  options.max_length = config.max_positions;
  std::vector<Tokenized> tokenized;
  tokenized.reserve(examples.size());
  for (const Example& example : examples) {
    absl::StatusOr<Encoding> encoding = example.b.empty()
                                            ? tokenizer.Encode(example.a, options)
                                            : tokenizer.EncodePair(example.a, example.b, options);
    if (!encoding.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("example '", example.a.substr(0, 80), "': ", encoding.status().message()));
    }
    Tokenized t{encoding->input_ids, encoding->token_type_ids, {}, example.label};
    for (int64_t special : encoding->special_tokens_mask) t.maskable.push_back(special == 0);
    tokenized.push_back(std::move(t));
  }
  return std::unique_ptr<BertTrainer>(
      new BertTrainer(std::move(config), std::move(examples), std::move(tokenized), mask_id));
}

BertTrainer::BertTrainer(TrainConfig config, std::vector<Example> examples,
                         std::vector<Tokenized> tokenized, int64_t mask_id)
    : config_(std::move(config)),
      examples_(std::move(examples)),
      tokenized_(std::move(tokenized)),
      mask_id_(mask_id),
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

BertTrainer::~BertTrainer() = default;

std::vector<Example> BertTrainer::UpcomingExamples(int64_t steps) const {
  std::vector<Example> out;
  const size_t count =
      std::min(order_.size() - next_, static_cast<size_t>(steps * config_.batch_size));
  for (size_t i = 0; i < count; ++i) out.push_back(examples_[order_[next_ + i]]);
  return out;
}

void BertTrainer::BucketRemainingByLength() {
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
    std::stable_sort(first, last, [&](size_t x, size_t y) {
      return tokenized_[x].ids.size() < tokenized_[y].ids.size();
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

StepStats BertTrainer::Step() {
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
  size_t length = 0;
  for (const Tokenized* t : batch) length = std::max(length, t->ids.size());
  const auto rows = static_cast<int64_t>(batch.size());
  const auto cols = static_cast<int64_t>(length);
  torch::Tensor ids = torch::zeros({rows, cols}, torch::kLong);
  torch::Tensor type_ids = torch::zeros({rows, cols}, torch::kLong);
  torch::Tensor mask = torch::zeros({rows, cols}, torch::kLong);
  torch::Tensor mlm_labels = torch::full({rows, cols}, kIgnore, torch::kLong);
  torch::Tensor relevance = torch::full({rows}, -1.0f);
  auto ids_a = ids.accessor<int64_t, 2>();
  auto type_a = type_ids.accessor<int64_t, 2>();
  auto mask_a = mask.accessor<int64_t, 2>();
  auto label_a = mlm_labels.accessor<int64_t, 2>();
  auto relevance_a = relevance.accessor<float, 1>();
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  // Random replacements come from the non-special tokens.
  std::uniform_int_distribution<int64_t> random_token(kNumSpecialTokens, config_.vocab_size - 1);
  StepStats stats;
  for (int64_t r = 0; r < rows; ++r) {
    const Tokenized& t = *batch[r];
    relevance_a[r] = static_cast<float>(t.label);
    for (size_t c = 0; c < t.ids.size(); ++c) {
      int64_t id = t.ids[c];
      mask_a[r][c] = 1;
      type_a[r][c] = t.type_ids[c];
      ++stats.tokens;
      const bool query_token = t.label >= 0 && t.type_ids[c] == 0;
      const double rate =
          query_token && config_.query_mask_prob > 0 ? config_.query_mask_prob : config_.mask_prob;
      if (t.maskable[c] && uniform(rng_) < rate) {
        label_a[r][c] = id;
        const double action = uniform(rng_);
        if (action < 0.8) {
          id = mask_id_;
        } else if (action < 0.9) {
          id = random_token(rng_);
        }
      }
      ids_a[r][c] = id;
    }
  }

  model_->train();
  const torch::Tensor hidden = model_->Encode(ids, type_ids, mask);
  const torch::Tensor predicted = mlm_labels.ne(kIgnore);
  torch::Tensor mlm_loss = torch::zeros({});
  if (predicted.any().item<bool>()) {
    const torch::Tensor states =
        model_->mlm_norm(torch::gelu(model_->mlm_dense(hidden.index({predicted}))));
    const torch::Tensor logits = torch::matmul(states, model_->word->weight.t()) + model_->mlm_bias;
    mlm_loss = torch::cross_entropy_loss(logits, mlm_labels.index({predicted}));
  }
  const torch::Tensor pooled = torch::tanh(model_->pooler(hidden.select(1, 0)));
  const torch::Tensor scores = model_->classifier(model_->dropout(pooled)).squeeze(-1);
  const torch::Tensor labeled = relevance.ge(0);
  torch::Tensor relevance_loss = torch::zeros({});
  if (labeled.any().item<bool>()) {
    const double s = config_.label_smoothing;
    const torch::Tensor targets = relevance.index({labeled}) * (1.0 - s) + s / 2.0;
    relevance_loss = torch::binary_cross_entropy_with_logits(scores.index({labeled}), targets);
  }
  const torch::Tensor loss = mlm_loss + config_.relevance_weight * relevance_loss;

  const double step = static_cast<double>(step_);
  const double warmup = static_cast<double>(config_.warmup_steps);
  const double decay =
      config_.linear_decay
          ? std::max(0.0, (static_cast<double>(config_.steps) - step) /
                              std::max(1.0, static_cast<double>(config_.steps) - warmup))
          : std::sqrt(warmup / step);
  stats.lr = config_.peak_lr * std::min(step / warmup, decay);
  for (torch::optim::OptimizerParamGroup& group : optimizer_->param_groups()) {
    static_cast<torch::optim::AdamOptions&>(group.options()).lr(stats.lr);
  }
  optimizer_->zero_grad();
  loss.backward();
  torch::nn::utils::clip_grad_norm_(model_->parameters(), config_.clip_grad_norm);
  optimizer_->step();

  stats.step = step_;
  stats.loss = loss.item<double>();
  stats.mlm_loss = mlm_loss.item<double>();
  stats.relevance_loss = relevance_loss.item<double>();
  return stats;
}

torch::Tensor BertTrainer::RelevanceLogits(const torch::Tensor& ids, const torch::Tensor& type_ids,
                                           const torch::Tensor& mask) {
  torch::NoGradGuard no_grad;
  model_->eval();
  const torch::Tensor hidden = model_->Encode(ids, type_ids, mask);
  const torch::Tensor pooled = torch::tanh(model_->pooler(hidden.select(1, 0)));
  return model_->classifier(pooled).squeeze(-1);
}

absl::Status BertTrainer::LoadWeights(const std::string& dir) {
  ATTNSCOPE_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                             SafetensorsFile::Open(JoinPath(dir, "model.safetensors")));
  torch::NoGradGuard no_grad;
  for (auto& [name, parameter] : model_->NamedTensors()) {
    ATTNSCOPE_ASSIGN_OR_RETURN(torch::Tensor loaded, file->LoadFloat(name));
    if (loaded.sizes() != parameter.sizes()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' in '", file->path(),
                                                     "' has the wrong shape for this model"));
    }
    parameter.copy_(loaded);
  }
  return absl::OkStatus();
}

absl::Status BertTrainer::Save(const std::string& dir) const {
  const json config = {{"architectures", {"BertForSequenceClassification"}},
                       {"model_type", "bert"},
                       {"vocab_size", config_.vocab_size},
                       {"hidden_size", config_.hidden_size},
                       {"num_hidden_layers", config_.num_layers},
                       {"num_attention_heads", config_.num_heads},
                       {"intermediate_size", config_.intermediate_size},
                       {"hidden_act", "gelu"},
                       {"hidden_dropout_prob", config_.dropout},
                       {"attention_probs_dropout_prob", config_.dropout},
                       {"max_position_embeddings", config_.max_positions},
                       {"type_vocab_size", 2},
                       {"initializer_range", kInitStd},
                       {"layer_norm_eps", kLayerNormEps},
                       {"pad_token_id", 0},
                       {"id2label", {{"0", "relevant"}}},
                       {"label2id", {{"relevant", 0}}},
                       {"torch_dtype", "float32"}};
  ATTNSCOPE_RETURN_IF_ERROR(WriteFile(JoinPath(dir, "config.json"), config.dump(2) + "\n"));
  return WriteSafetensors(model_->NamedTensors(), JoinPath(dir, "model.safetensors"));
}

}  // namespace attnscope::train

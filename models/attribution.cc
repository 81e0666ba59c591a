#include "models/attribution.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "models/architectures/bert.h"
#include "models/architectures/model_util.h"

namespace attnscope {
namespace {

struct Dense {
  torch::Tensor weight;  // [out, in]
  torch::Tensor bias;    // [out]
  torch::Tensor operator()(const torch::Tensor& x) const { return torch::linear(x, weight, bias); }
};

struct Norm {
  torch::Tensor weight;
  torch::Tensor bias;
};

struct Layer {
  Dense query, key, value, attention_output, intermediate, output;
  Norm attention_norm, output_norm;
};

// The target logit of a BERT-family cross-encoder (BertForSequenceClassification,
// XLMRobertaForSequenceClassification, MPNetForSequenceClassification, ...) as a differentiable
// function of the word embeddings of
// one input, in LibTorch's own operations. Holds the input's position and token type embeddings and
// attention mask, which every pass shares (RoBERTa's positions, which follow the ids, are made
// again for the ids of an occlusion pass).
class BertScore {
 public:
  BertScore(const ModelConfig& config, const Checkpoint& checkpoint, const ForwardInput& input,
            int64_t target)
      : hidden_size_(config.hidden_size),
        heads_(config.num_attention_heads),
        head_dim_(config.head_dim),
        eps_(config.layer_norm_eps),
        target_(target),
        layout_(BertLayoutOf(config, checkpoint)) {
    const std::string& prefix = layout_.prefix;
    // Detached: a checkpoint tensor that someone marked requires_grad would otherwise join every
    // graph, and concurrent backward passes would race on its shared .grad.
    auto get = [&](const std::string& name) { return checkpoint.Get(name).detach(); };
    auto dense = [&](const std::string& name) {
      return Dense{get(name + ".weight"), get(name + ".bias")};
    };
    auto norm = [&](const std::string& name) {
      return Norm{get(name + ".weight"), get(name + ".bias")};
    };
    const BertLayout& l = layout_;
    word_embeddings_ = get(prefix + l.word_embeddings + ".weight");
    const int64_t length = input.input_ids.size(1);
    position_table_ = get(prefix + l.position_embeddings + ".weight");
    // DistilBERT and MPNet have no token type embeddings: zeros stand for them. ELECTRA's
    // embeddings are embedding_size wide.
    const int64_t embedding_size =
        config.embedding_size > 0 ? config.embedding_size : config.hidden_size;
    token_type_embeddings_ =
        l.token_type_embeddings.empty()
            ? torch::zeros({1, length, embedding_size}, torch::kFloat32)
            : torch::embedding(get(prefix + l.token_type_embeddings + ".weight"),
                               input.token_type_ids);
    other_embeddings_ =
        BertPositionEmbeddings(layout_, position_table_, input.input_ids) + token_type_embeddings_;
    embedding_norm_ = norm(prefix + l.embedding_norm);
    if (!l.embeddings_project.empty()) embeddings_project_ = dense(prefix + l.embeddings_project);
    // MPNet's bias on every layer's scores, as bert.cc computes it.
    if (!l.relative_attention_bias.empty()) {
      const torch::Tensor positions = torch::arange(length, torch::kInt64);
      position_bias_ =
          torch::embedding(get(prefix + l.relative_attention_bias + ".weight"),
                           RelativePositionBucket(positions.unsqueeze(0) - positions.unsqueeze(1),
                                                  /*bidirectional=*/true, kMpnetPositionBuckets,
                                                  kMpnetMaxDistance))
              .permute({2, 0, 1})
              .unsqueeze(0);
    }
    for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
      auto at = [&](const std::string& name) { return l.LayerTensor(i, name); };
      layers_.push_back(Layer{dense(at(l.query)), dense(at(l.key)), dense(at(l.value)),
                              dense(at(l.attention_output)), dense(at(l.intermediate)),
                              dense(at(l.output)), norm(at(l.attention_norm)),
                              norm(at(l.output_norm))});
    }
    classifier_dense_ = dense(layout_.classifier_dense);
    classifier_ = dense(layout_.classifier_output);
    // float32's lowest value on padded keys, as TransformerModel::Forward (and transformers' BERT):
    // their probabilities, and so the gradients through them, are exactly 0.
    if (!input.attention_mask.all().item<bool>()) {
      additive_mask_ = (1.0 - input.attention_mask.to(torch::kFloat32))
                           .mul_(std::numeric_limits<float>::lowest())
                           .view({1, 1, 1, length});
    }
  }

  // [1, S] int64 ids -> [1, S, H] float32.
  torch::Tensor WordEmbeddings(const torch::Tensor& ids) const {
    return torch::embedding(word_embeddings_, ids);
  }

  // [B, S, H] word embeddings -> [B] target logits. `ids` [B, S]: the ids the embeddings are of,
  // when they are not the input's (occlusion); undefined = the input's.
  torch::Tensor operator()(const torch::Tensor& word_embeddings,
                           const torch::Tensor& ids = torch::Tensor()) const {
    const int64_t batch = word_embeddings.size(0);
    const int64_t length = word_embeddings.size(1);
    // Only RoBERTa's positions depend on the ids: replacing a pad id among the real tokens (a typed
    // <pad>) renumbers the tokens after it.
    const torch::Tensor other_embeddings =
        ids.defined() && layout_.padding_idx >= 0
            ? BertPositionEmbeddings(layout_, position_table_, ids) + token_type_embeddings_
            : other_embeddings_;
    torch::Tensor hidden = Normalize(embedding_norm_, word_embeddings + other_embeddings);
    if (embeddings_project_.weight.defined()) hidden = embeddings_project_(hidden);
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
    for (const Layer& layer : layers_) {
      // [B, S, H] -> [B, heads, S, head_dim].
      auto split_heads = [&](const Dense& projection) {
        return projection(hidden).view({batch, length, heads_, head_dim_}).transpose(1, 2);
      };
      torch::Tensor scores =
          torch::matmul(split_heads(layer.query), split_heads(layer.key).transpose(-1, -2)) * scale;
      if (position_bias_.defined()) scores = scores + position_bias_;
      if (additive_mask_.defined()) scores = scores + additive_mask_;
      const torch::Tensor context =
          torch::matmul(torch::softmax(scores, /*dim=*/-1), split_heads(layer.value))
              .transpose(1, 2)
              .reshape({batch, length, hidden_size_});
      const torch::Tensor attended =
          Normalize(layer.attention_norm, layer.attention_output(context) + hidden);
      // torch::gelu's default is the exact erf form, BERT's "gelu".
      hidden = Normalize(layer.output_norm,
                         layer.output(torch::gelu(layer.intermediate(attended))) + attended);
    }
    // BERT's pooler, RoBERTa's, MPNet's and ELECTRA's classifier.dense or DistilBERT's
    // pre_classifier, then the output layer.
    const torch::Tensor dense = classifier_dense_(hidden.select(/*dim=*/1, /*index=*/0));
    const torch::Tensor features = layout_.classifier_relu   ? torch::relu(dense)
                                   : layout_.classifier_gelu ? torch::gelu(dense)
                                                             : torch::tanh(dense);
    return classifier_(features).select(/*dim=*/1, target_);
  }

 private:
  torch::Tensor Normalize(const Norm& norm, const torch::Tensor& x) const {
    return torch::layer_norm(x, {norm.weight.size(0)}, norm.weight, norm.bias, eps_);
  }

  int64_t hidden_size_;
  int64_t heads_;
  int64_t head_dim_;
  double eps_;
  int64_t target_;
  BertLayout layout_;
  torch::Tensor word_embeddings_;
  torch::Tensor position_table_;         // [max_position_embeddings, H]
  torch::Tensor token_type_embeddings_;  // [1, S, H]: the input's token types
  torch::Tensor other_embeddings_;       // [1, S, H]: position + token type of the input
  Norm embedding_norm_;
  Dense embeddings_project_;     // ELECTRA's, when embedding_size != hidden_size
  torch::Tensor position_bias_;  // MPNet's [1, heads, S, S]
  std::vector<Layer> layers_;
  Dense classifier_dense_;
  Dense classifier_;
  torch::Tensor additive_mask_;  // [1, 1, 1, S]; undefined when nothing is padded
};

// d score / d word embeddings at `points` [B, S, H], summed over the batch: [S, H].
torch::Tensor GradientSum(const BertScore& score, const torch::Tensor& points) {
  const torch::Tensor leaf = points.detach().requires_grad_(true);
  return torch::autograd::grad({score(leaf).sum()}, {leaf})[0].sum(/*dim=*/0);
}

absl::Status CheckTokenId(int64_t id, const char* name, int64_t vocab_size, const char* what) {
  if (id < 0 || id >= vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("option '", name, "': expected ", what,
                                                   " in [0, ", vocab_size, "), got ", id));
  }
  return absl::OkStatus();
}

absl::Status Done(const AttributionOptions& options) {
  return options.on_batch_done ? options.on_batch_done() : absl::OkStatus();
}

absl::StatusOr<Attributions> Run(const BertScore& score, const ForwardInput& input,
                                 const torch::Tensor& special, int64_t baseline_token_id,
                                 const AttributionOptions& options) {
  const int64_t length = input.input_ids.size(1);
  const torch::Tensor real = input.attention_mask[0].to(torch::kBool);     // [S]
  const torch::Tensor embeddings = score.WordEmbeddings(input.input_ids);  // [1, S, H]
  const int64_t hidden = embeddings.size(2);
  const int64_t per_batch = std::max<int64_t>(1, options.max_batch_tokens / length);
  auto at_real_tokens = [&](const torch::Tensor& values) {
    return torch::where(real, values, torch::zeros_like(values));
  };

  Attributions out;
  {
    torch::NoGradGuard no_grad;
    out.score = score(embeddings).item<double>();
  }

  if (options.occlusion) {
    torch::NoGradGuard no_grad;
    const torch::Tensor positions = real.nonzero().view(-1);
    const int64_t count = positions.size(0);
    const torch::Tensor replacement =
        score.WordEmbeddings(torch::tensor({options.occlusion_token_id}, torch::kInt64))[0];
    torch::Tensor occlusion = torch::zeros({length}, torch::kFloat32);
    for (int64_t begin = 0; begin < count; begin += per_batch) {
      const int64_t n = std::min(per_batch, count - begin);
      const torch::Tensor occluded_positions = positions.narrow(0, begin, n);
      // Pass j replaces the token at occluded_positions[j].
      torch::Tensor batch = embeddings.expand({n, length, hidden}).clone();
      batch.index_put_({torch::arange(n), occluded_positions}, replacement);
      torch::Tensor ids = input.input_ids.expand({n, length}).clone();
      ids.index_put_({torch::arange(n), occluded_positions}, options.occlusion_token_id);
      occlusion.index_put_({occluded_positions}, out.score - score(batch, ids));
      ATTNSCOPE_RETURN_IF_ERROR(Done(options));
    }
    out.occlusion = occlusion;
  }

  if (options.gradient_x_input) {
    out.gradient_x_input = at_real_tokens((GradientSum(score, embeddings) * embeddings[0]).sum(-1));
  }

  if (options.integrated_gradients) {
    const torch::Tensor replacement =
        options.baseline == AttributionBaseline::kZero
            ? torch::zeros({hidden}, torch::kFloat32)
            : score.WordEmbeddings(torch::tensor({baseline_token_id}, torch::kInt64))[0];
    // Special tokens and padding keep their own embeddings: the baseline is the same template
    // with the text taken out, and the difference e - b is 0 there.
    const torch::Tensor replaced = real.logical_and(special.logical_not()).view({1, length, 1});
    const torch::Tensor baseline = torch::where(replaced, replacement, embeddings);
    const torch::Tensor difference = embeddings - baseline;
    {
      torch::NoGradGuard no_grad;
      out.baseline_score = score(baseline).item<double>();
    }
    const int64_t steps = options.integrated_gradients_steps;
    torch::Tensor gradient_sum = torch::zeros({length, hidden}, torch::kFloat32);
    for (int64_t begin = 0; begin < steps; begin += per_batch) {
      const int64_t n = std::min(per_batch, steps - begin);
      // The Riemann midpoint rule: alpha_k = (k + 1/2) / steps.
      const torch::Tensor alphas =
          ((torch::arange(begin, begin + n, torch::kFloat64) + 0.5) / static_cast<double>(steps))
              .to(torch::kFloat32)
              .view({n, 1, 1});
      gradient_sum += GradientSum(score, baseline + alphas * difference);
      ATTNSCOPE_RETURN_IF_ERROR(Done(options));
    }
    out.integrated_gradients =
        at_real_tokens((difference[0] * gradient_sum).sum(-1) / static_cast<double>(steps));
  }
  return out;
}

}  // namespace

absl::StatusOr<Attributions> Attribute(const TransformerModel& model, const AttributionInput& input,
                                       const AttributionOptions& options) {
  const ModelConfig& config = model.config();
  if (!IsBertFamily(config.architecture)) {
    return absl::UnimplementedError(absl::StrCat(
        "model '", config.model_type,
        "': token attributions support BERT, RoBERTa, DistilBERT, MPNet and ELECTRA "
        "cross-encoders (BertForSequenceClassification, XLMRobertaForSequenceClassification, ...) "
        "only for now, got "
        "architecture ",
        ArchitectureName(config.architecture)));
  }
  if (!model.has_classifier() || model.checkpoint() == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", config.model_type,
        "': expected a BERT or RoBERTa cross-encoder loaded by LoadTransformerModel, with a "
        "classifier head (classifier.weight, or classifier.out_proj.weight), got ",
        model.has_classifier() ? "a model without its checkpoint" : "no classifier head"));
  }
  if (options.target < 0 || options.target >= config.num_labels) {
    return absl::InvalidArgumentError(
        absl::StrCat("option 'target': expected a classifier label index in [0, ",
                     config.num_labels, "), got ", options.target));
  }
  if (options.integrated_gradients_steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("option 'integrated_gradients_steps': expected at least 1, got ",
                     options.integrated_gradients_steps));
  }
  if (options.max_batch_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "option 'max_batch_tokens': expected at least 1, got ", options.max_batch_tokens));
  }
  if (options.occlusion) {
    ATTNSCOPE_RETURN_IF_ERROR(CheckTokenId(options.occlusion_token_id, "occlusion_token_id",
                                           config.vocab_size,
                                           "the tokenizer's [MASK] or [UNK] id"));
  }
  const int64_t baseline_token_id =
      options.baseline_token_id >= 0 ? options.baseline_token_id : config.pad_token_id;
  if (options.integrated_gradients && options.baseline == AttributionBaseline::kTokenEmbedding) {
    ATTNSCOPE_RETURN_IF_ERROR(
        CheckTokenId(baseline_token_id, "baseline_token_id", config.vocab_size,
                     "a token id (-1: config.json's pad_token_id, which is unset)"));
  }
  ForwardInput forward_input;
  forward_input.input_ids = input.input_ids;
  forward_input.attention_mask = input.attention_mask;
  forward_input.token_type_ids = input.token_type_ids;
  ATTNSCOPE_ASSIGN_OR_RETURN(const ForwardInput checked, model.CheckInput(forward_input));
  const torch::IntArrayRef shape = checked.input_ids.sizes();
  if (shape[0] != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 'input_ids': expected batch size 1 ([1, sequence]), got [",
                     absl::StrJoin(shape, ", "), "]"));
  }
  const torch::Tensor& special = input.special_tokens_mask;
  if (special.defined() && (special.sizes() != shape || special.scalar_type() != torch::kInt64 ||
                            special.lt(0).any().item<bool>() || special.gt(1).any().item<bool>())) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 'special_tokens_mask': expected int64 [", absl::StrJoin(shape, ", "),
                     "] of 0 and 1, got ", c10::toString(special.scalar_type()), " [",
                     absl::StrJoin(special.sizes(), ", "), "]",
                     special.sizes() == shape ? " with other values" : ""));
  }
  try {
    // Autograd on and inference mode off for this call on this thread only: callers may run under
    // torch::InferenceMode, whose tensors record no graph.
    torch::InferenceMode autograd(/*enabled=*/false);
    const BertScore score(config, *model.checkpoint(), checked, options.target);
    const torch::Tensor special_row =
        special.defined() ? special[0].to(torch::kBool) : torch::zeros({shape[1]}, torch::kBool);
    return Run(score, checked, special_row, baseline_token_id, options);
  } catch (const c10::Error& error) {
    return absl::InternalError(
        absl::StrCat("token attribution failed: ", error.what_without_backtrace()));
  }
}

absl::StatusOr<std::vector<WordValue>> WordSums(const torch::Tensor& token_values,
                                                absl::Span<const int64_t> word_ids,
                                                absl::Span<const int64_t> sequence_ids) {
  if (!token_values.defined() || token_values.dim() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "argument 'token_values': expected a [sequence] tensor, got ",
        token_values.defined() ? absl::StrCat("[", absl::StrJoin(token_values.sizes(), ", "), "]")
                               : "none"));
  }
  const int64_t length = token_values.size(0);
  if (static_cast<int64_t>(word_ids.size()) != length) {
    return absl::InvalidArgumentError(absl::StrCat("argument 'word_ids': expected ", length,
                                                   " entries (one per token), got ",
                                                   word_ids.size()));
  }
  if (!sequence_ids.empty() && static_cast<int64_t>(sequence_ids.size()) != length) {
    return absl::InvalidArgumentError(absl::StrCat("argument 'sequence_ids': expected ", length,
                                                   " entries (one per token) or none, got ",
                                                   sequence_ids.size()));
  }
  const torch::Tensor values = token_values.to(torch::kFloat64).contiguous();
  const double* data = values.data_ptr<double>();
  std::vector<WordValue> words;
  std::map<std::pair<int64_t, int64_t>, size_t> index;  // (sequence id, word id) -> words[i]
  for (int64_t i = 0; i < length; ++i) {
    if (word_ids[i] < 0) continue;
    const int64_t sequence_id = sequence_ids.empty() ? 0 : sequence_ids[i];
    const auto [it, inserted] =
        index.emplace(std::make_pair(sequence_id, word_ids[i]), words.size());
    if (inserted) words.push_back(WordValue{sequence_id, word_ids[i], 0.0});
    words[it->second].value += data[i];
  }
  return words;
}

}  // namespace attnscope

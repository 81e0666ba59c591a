// BERT (Devlin et al. 2019) as Hugging Face transformers' BertModel / BertForSequenceClassification
// compute it in eval mode: embeddings (word + position + token type) -> LayerNorm, then
// post-LayerNorm encoder blocks with exact-erf GELU, an additive attention mask of float32's lowest
// value on padded keys, the tanh pooler on [CLS] and a linear classifier. RoBERTa and XLM-R
// (RobertaModel, XLMRobertaModel and their *ForSequenceClassification) are the same network with
// positions counted from pad_token_id + 1 and a classifier head of its own; DistilBERT
// (DistilBertModel, DistilBertForSequenceClassification; Sanh et al. 2019) the same again with
// other tensor names, no token types and no pooler, its head pre_classifier -> ReLU -> classifier
// (bert.h); MPNet (MPNetModel, MPNetForSequenceClassification; Song et al. 2020) RoBERTa's
// positions and head without token types, plus one relative position bias [heads, S, S] from T5's
// bidirectional buckets added to every layer's scaled scores before the mask (modeling_mpnet's
// MPNetEncoder.compute_position_bias); ELECTRA (ElectraModel, ElectraForSequenceClassification;
// Clark et al. 2020) BERT's embeddings embedding_size wide, then embeddings_project to hidden_size,
// BERT's layers, no pooler, its head out_proj(GELU(dense(h_[CLS]))): one model class serves all
// five, on one attention loop.
#include "models/architectures/bert.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "models/architectures/model_util.h"
#include "models/architectures/transformer.h"
#include "models/kernels/fused_ops.h"
#include "models/kernels/gemm.h"
#include "models/kernels/parallel.h"
#include "models/kernels/row_kernel.h"

namespace attnscope {
namespace {

struct Dense {
  torch::Tensor weight;  // [out, in]
  torch::Tensor bias;    // [out]
  torch::Tensor operator()(const torch::Tensor& x, const torch::Tensor& residual = torch::Tensor(),
                           Activation activation = Activation::kNone) const {
    return attnscope::Linear(x, weight, bias, residual, activation);
  }
};

struct Norm {
  torch::Tensor weight;
  torch::Tensor bias;
  torch::Tensor operator()(const torch::Tensor& x, double eps) const {
    return LayerNorm(x, weight, bias, eps);
  }
};

struct BertLayer {
  Dense query, key, value, attention_output, intermediate, output;
  Norm attention_norm, output_norm;
};

class BertModel : public TransformerModel {
 public:
  BertModel(ModelConfig config, const Checkpoint& checkpoint, BertLayout layout)
      : TransformerModel(std::move(config)), layout_(std::move(layout)) {
    const std::string& prefix = layout_.prefix;
    auto get = [&](const std::string& name) { return checkpoint.Get(name); };
    auto linear = [&](const std::string& name) {
      return Dense{get(name + ".weight"), get(name + ".bias")};
    };
    auto norm = [&](const std::string& name) {
      return Norm{get(name + ".weight"), get(name + ".bias")};
    };
    const BertLayout& l = layout_;
    word_embeddings_ = get(prefix + l.word_embeddings + ".weight");
    position_embeddings_ = get(prefix + l.position_embeddings + ".weight");
    if (!l.token_type_embeddings.empty()) {
      token_type_embeddings_ = get(prefix + l.token_type_embeddings + ".weight");
    }
    embedding_norm_ = norm(prefix + l.embedding_norm);
    if (!l.embeddings_project.empty()) embeddings_project_ = linear(prefix + l.embeddings_project);
    if (!l.relative_attention_bias.empty()) {
      relative_attention_bias_ = get(prefix + l.relative_attention_bias + ".weight");
    }
    for (int64_t i = 0; i < this->config().num_hidden_layers; ++i) {
      auto at = [&](const std::string& name) { return l.LayerTensor(i, name); };
      layers_.push_back(BertLayer{linear(at(l.query)), linear(at(l.key)), linear(at(l.value)),
                                  linear(at(l.attention_output)), linear(at(l.intermediate)),
                                  linear(at(l.output)), norm(at(l.attention_norm)),
                                  norm(at(l.output_norm))});
    }
    if (!layout_.pooler.empty()) pooler_ = linear(layout_.pooler);
    if (layout_.has_classifier()) {
      classifier_dense_ = linear(layout_.classifier_dense);
      classifier_ = linear(layout_.classifier_output);
    }
  }

  bool has_classifier() const override { return layout_.has_classifier(); }

 protected:
  absl::Status ConvertProjections(torch::ScalarType dtype) override {
    auto convert = [dtype](Dense& dense) {
      if (dense.weight.defined()) dense.weight = dense.weight.to(dtype);
    };
    for (BertLayer& layer : layers_) {
      for (Dense* dense : {&layer.query, &layer.key, &layer.value, &layer.attention_output,
                           &layer.intermediate, &layer.output}) {
        convert(*dense);
      }
    }
    convert(embeddings_project_);
    convert(pooler_);
    convert(classifier_dense_);
    convert(classifier_);
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<ForwardOutput> Run(const ForwardInput& input,
                                    const ForwardOptions& options) const override {
    const ModelConfig& cfg = config();
    const int64_t batch = input.input_ids.size(0);
    const int64_t length = input.input_ids.size(1);
    const int64_t heads = cfg.num_attention_heads;
    const int64_t head_dim = cfg.head_dim;
    const double eps = cfg.layer_norm_eps;

    ForwardOutput out;
    torch::Tensor hidden =
        torch::embedding(word_embeddings_, input.input_ids)
            .add_(BertPositionEmbeddings(layout_, position_embeddings_, input.input_ids));
    if (token_type_embeddings_.defined()) {
      hidden.add_(torch::embedding(token_type_embeddings_, input.token_type_ids));
    }
    hidden = embedding_norm_(hidden, eps);
    // ELECTRA's encoder starts from the projection, which transformers' hidden_states[0] is too.
    if (embeddings_project_.weight.defined()) hidden = embeddings_project_(hidden);
    if (options.output_hidden_states) out.hidden_states.push_back(hidden);

    // [B, 1, 1, S]: 0 for real keys, float32's lowest value for padding, as transformers'
    // get_extended_attention_mask; exp() of it after the row maximum is subtracted is exactly 0.
    const torch::Tensor additive_mask = (1.0 - input.attention_mask.to(torch::kFloat32))
                                            .mul_(std::numeric_limits<float>::lowest())
                                            .view({batch, 1, 1, length});
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
    // Adding the mask's zeros changes nothing: skip the pass over the scores when nothing is
    // padded.
    const bool has_padding = !input.attention_mask.all().item<bool>();
    // MPNet's [heads, S, S] bias, the same for every sequence and layer: from positions 0 .. S - 1,
    // not the padding-aware positions of the embeddings, as MPNetEncoder computes it.
    torch::Tensor position_bias;
    if (relative_attention_bias_.defined()) {
      const torch::Tensor positions = torch::arange(length, torch::kInt64);
      const torch::Tensor buckets =
          RelativePositionBucket(positions.unsqueeze(0) - positions.unsqueeze(1),
                                 /*bidirectional=*/true, kMpnetPositionBuckets, kMpnetMaxDistance);
      position_bias = torch::embedding(relative_attention_bias_, buckets)
                          .permute({2, 0, 1})
                          .to(torch::kFloat32)
                          .contiguous();
    }
    const float* bias = position_bias.defined() ? position_bias.data_ptr<float>() : nullptr;

    for (size_t i = 0; i < layers_.size(); ++i) {
      const BertLayer& layer = layers_[i];
      const std::vector<torch::Tensor> projections =
          LinearGroup(hidden, {layer.query.weight, layer.key.weight, layer.value.weight},
                      {layer.query.bias, layer.key.bias, layer.value.bias});
      const torch::Tensor& query = projections[0];
      const torch::Tensor& key = projections[1];
      const torch::Tensor& value = projections[2];
      // The pre-softmax scores are kept only when asked for. Otherwise each head's live in a
      // per-thread scratch block that stays in cache: writing every layer's to a fresh tensor made
      // the attention about a third slower (its stores missed the cache).
      const bool keep_scores = options.output_attention_scores;
      torch::Tensor scores = keep_scores
                                 ? torch::empty({batch, heads, length, length}, hidden.options())
                                 : torch::Tensor();
      torch::Tensor probs = torch::empty({batch, heads, length, length}, hidden.options());
      torch::Tensor context = torch::empty_like(hidden);
      const float* q = query.data_ptr<float>();
      const float* k = key.data_ptr<float>();
      const float* v = value.data_ptr<float>();
      float* s = keep_scores ? scores.data_ptr<float>() : nullptr;
      float* c = context.data_ptr<float>();
      const int64_t hidden_size = cfg.hidden_size;
      // Head h of sequence b reads columns [h * head_dim, (h + 1) * head_dim) of the [token,
      // hidden] projections in place (leading dimension hidden_size): no split-heads copies.
      auto head_offset = [&](int64_t bh) {
        return (bh / heads) * length * hidden_size + (bh % heads) * head_dim;
      };
      float* p = probs.data_ptr<float>();
      const float* mask = has_padding ? additive_mask.data_ptr<float>() : nullptr;
      // Each head's scores, softmax and context in turn, while its [length, length] block is in
      // cache, in one parallel region per layer. On the row kernel where it runs (its products
      // need no packing of the queries or values, and skip oneDNN's per-call set-up, a quarter
      // of the attention's time at 128 tokens), on oneDNN otherwise.
      const bool row_kernel = RowKernelAttentionApplies(head_dim);
      // The row kernel writes score rows in whole vectors of 16.
      const int64_t scores_stride = row_kernel ? (length + 15) / 16 * 16 : length;
      ParallelClaims(batch * heads, /*grain=*/1, [&](BlockClaims& claims) {
        std::vector<float> scratch(
            keep_scores && !row_kernel ? 0 : static_cast<size_t>(length * scores_stride));
        std::vector<float> head_probs(static_cast<size_t>(length * length));
        int64_t bh = 0;
        int64_t end = 0;
        while (claims.Next(&bh, &end)) {
          const int64_t block = bh * length * length;
          const float* key_mask = mask == nullptr ? nullptr : mask + (bh / heads) * length;
          const float* head_bias =
              bias == nullptr ? nullptr : bias + (bh % heads) * length * length;
          // Adds query t's bias row to its scores, which the kept scores include: they are the
          // softmax's input before the mask.
          auto add_bias = [&](float* row, int64_t t) {
            if (head_bias == nullptr) return;
            const float* bias_row = head_bias + t * length;
            for (int64_t j = 0; j < length; ++j) row[j] += bias_row[j];
          };
          if (row_kernel) {
            RowKernelScores(q + head_offset(bh), hidden_size, k + head_offset(bh), hidden_size,
                            /*queries=*/length, /*keys=*/length, head_dim, scale, scratch.data(),
                            scores_stride);
            for (int64_t t = 0; t < length; ++t) {
              float* row = scratch.data() + t * scores_stride;
              add_bias(row, t);
              if (keep_scores) std::copy(row, row + length, s + block + t * length);
              SoftmaxRows(row, key_mask, /*rows=*/1, /*columns=*/length,
                          head_probs.data() + t * length);
            }
            RowKernelContext(head_probs.data(), length, v + head_offset(bh), hidden_size,
                             /*queries=*/length, /*keys=*/length, head_dim, c + head_offset(bh),
                             hidden_size);
          } else {
            float* head_scores = keep_scores ? s + block : scratch.data();
            Sgemm(/*transpose_a=*/false, /*transpose_b=*/true, length, length, head_dim, scale,
                  q + head_offset(bh), hidden_size, k + head_offset(bh), hidden_size,
                  /*beta=*/0.0f, head_scores, length);
            for (int64_t t = 0; t < length; ++t) add_bias(head_scores + t * length, t);
            SoftmaxRows(head_scores, key_mask, /*rows=*/length, /*columns=*/length,
                        head_probs.data());
            Sgemm(/*transpose_a=*/false, /*transpose_b=*/false, length, head_dim, length, 1.0f,
                  head_probs.data(), length, v + head_offset(bh), hidden_size, /*beta=*/0.0f,
                  c + head_offset(bh), hidden_size);
          }
          CopyToOutput(head_probs.data(), length * length, p + block);
        }
      });
      const torch::Tensor attended =
          layer.attention_norm(layer.attention_output(context, /*residual=*/hidden), eps);
      hidden = layer.output_norm(
          FeedForward(attended, layer.intermediate.weight, layer.intermediate.bias,
                      Activation::kGelu, layer.output.weight, layer.output.bias,
                      /*residual=*/attended),
          eps);
      if (options.output_attentions) out.attentions.push_back(std::move(probs));
      if (keep_scores) out.attention_scores.push_back(std::move(scores));
      if (options.output_hidden_states) out.hidden_states.push_back(hidden);
      if (options.on_layer_done) {
        ATTNSCOPE_RETURN_IF_ERROR(options.on_layer_done(static_cast<int64_t>(i)));
      }
    }
    out.last_hidden_state = hidden;
    const torch::Tensor first = hidden.select(/*dim=*/1, /*index=*/0).contiguous();
    if (!layout_.pooler.empty()) out.pooler_output = torch::tanh(pooler_(first));
    if (layout_.has_classifier() && options.output_logits) {
      // BERT's classifier reads the pooler output; RoBERTa's, MPNet's, ELECTRA's and DistilBERT's
      // heads have a dense layer of their own.
      torch::Tensor features;
      if (layout_.classifier_dense == layout_.pooler) {
        features = out.pooler_output;
      } else if (layout_.classifier_relu) {
        features = torch::relu(classifier_dense_(first));
      } else if (layout_.classifier_gelu) {
        features = torch::gelu(classifier_dense_(first));
      } else {
        features = torch::tanh(classifier_dense_(first));
      }
      out.logits = classifier_(features);
    }
    return out;
  }

  BertLayout layout_;
  torch::Tensor word_embeddings_;
  torch::Tensor position_embeddings_;
  torch::Tensor token_type_embeddings_;
  Norm embedding_norm_;
  Dense embeddings_project_;               // ELECTRA's, when embedding_size != hidden_size
  torch::Tensor relative_attention_bias_;  // MPNet's [num_buckets, heads]
  std::vector<BertLayer> layers_;
  Dense pooler_;
  Dense classifier_dense_;
  Dense classifier_;
};

void AddLinear(std::vector<TensorSpec>& specs, const std::string& name, int64_t out, int64_t in) {
  specs.push_back({name + ".weight", {out, in}});
  specs.push_back({name + ".bias", {out}});
}

void AddNorm(std::vector<TensorSpec>& specs, const std::string& name, int64_t size) {
  specs.push_back({name + ".weight", {size}});
  specs.push_back({name + ".bias", {size}});
}

}  // namespace

std::string BertLayout::LayerTensor(int64_t layer, const std::string& name) const {
  return absl::StrCat(prefix, layers, layer, ".", name);
}

BertLayout BertLayoutOf(const ModelConfig& config, const Checkpoint& checkpoint) {
  BertLayout layout;
  if (config.architecture == Architecture::kDistilBert) {
    layout.prefix =
        checkpoint.Contains("distilbert.embeddings.word_embeddings.weight") ? "distilbert." : "";
    layout.token_type_embeddings.clear();
    layout.layers = "transformer.layer.";
    layout.query = "attention.q_lin";
    layout.key = "attention.k_lin";
    layout.value = "attention.v_lin";
    layout.attention_output = "attention.out_lin";
    layout.attention_norm = "sa_layer_norm";
    layout.intermediate = "ffn.lin1";
    layout.output = "ffn.lin2";
    layout.output_norm = "output_layer_norm";
    // Either tensor of the head makes it a classifier, so that a head missing a part is refused
    // naming that part.
    if (checkpoint.Contains("classifier.weight") || checkpoint.Contains("pre_classifier.weight")) {
      layout.classifier_dense = "pre_classifier";
      layout.classifier_output = "classifier";
      layout.classifier_relu = true;
    }
    layout.ignored_prefixes = {layout.prefix + "embeddings.position_ids", "vocab_transform.",
                               "vocab_layer_norm.", "vocab_projector."};
    return layout;
  }
  if (config.architecture == Architecture::kMpnet) {
    layout.prefix = checkpoint.Contains("mpnet.embeddings.word_embeddings.weight") ? "mpnet." : "";
    layout.token_type_embeddings.clear();
    layout.query = "attention.attn.q";
    layout.key = "attention.attn.k";
    layout.value = "attention.attn.v";
    layout.attention_output = "attention.attn.o";
    layout.attention_norm = "attention.LayerNorm";
    layout.relative_attention_bias = "encoder.relative_attention_bias";
    layout.padding_idx = config.pad_token_id;
    if (checkpoint.Contains(layout.prefix + "pooler.dense.weight")) {
      layout.pooler = layout.prefix + "pooler.dense";
    }
    if (checkpoint.Contains("classifier.out_proj.weight") ||
        checkpoint.Contains("classifier.dense.weight")) {
      layout.classifier_dense = "classifier.dense";
      layout.classifier_output = "classifier.out_proj";
    }
    layout.ignored_prefixes = {layout.prefix + "embeddings.position_ids", "lm_head."};
    return layout;
  }
  if (config.architecture == Architecture::kElectra) {
    layout.prefix =
        checkpoint.Contains("electra.embeddings.word_embeddings.weight") ? "electra." : "";
    // ElectraModel has the projection exactly when the sizes differ.
    if (config.embedding_size != config.hidden_size)
      layout.embeddings_project = "embeddings_project";
    if (checkpoint.Contains("classifier.out_proj.weight") ||
        checkpoint.Contains("classifier.dense.weight")) {
      layout.classifier_dense = "classifier.dense";
      layout.classifier_output = "classifier.out_proj";
      layout.classifier_gelu = true;
    }
    layout.ignored_prefixes = {layout.prefix + "embeddings.position_ids",
                               "discriminator_predictions.", "generator_predictions.",
                               "generator_lm_head."};
    return layout;
  }
  if (config.architecture == Architecture::kRoberta) {
    layout.prefix =
        checkpoint.Contains("roberta.embeddings.word_embeddings.weight") ? "roberta." : "";
    layout.padding_idx = config.pad_token_id;
    if (checkpoint.Contains(layout.prefix + "pooler.dense.weight")) {
      layout.pooler = layout.prefix + "pooler.dense";
    }
    // Either tensor of the head makes it a classifier, so that a head missing a part is refused
    // naming that part rather than served without it.
    if (checkpoint.Contains("classifier.out_proj.weight") ||
        checkpoint.Contains("classifier.dense.weight")) {
      layout.classifier_dense = "classifier.dense";
      layout.classifier_output = "classifier.out_proj";
    }
    layout.ignored_prefixes = {layout.prefix + "embeddings.position_ids", "lm_head."};
    return layout;
  }
  layout.prefix = checkpoint.Contains("bert.embeddings.word_embeddings.weight") ? "bert." : "";
  const bool has_classifier = checkpoint.Contains("classifier.weight");
  // The classifier reads the pooler: a classifier without one is refused for the missing pooler.
  if (checkpoint.Contains(layout.prefix + "pooler.dense.weight") || has_classifier) {
    layout.pooler = layout.prefix + "pooler.dense";
  }
  if (has_classifier) {
    layout.classifier_dense = layout.pooler;
    layout.classifier_output = "classifier";
  }
  layout.ignored_prefixes = {layout.prefix + "embeddings.position_ids", "cls."};
  return layout;
}

torch::Tensor BertPositionEmbeddings(const BertLayout& layout, const torch::Tensor& table,
                                     const torch::Tensor& input_ids) {
  if (layout.padding_idx < 0) return table.narrow(0, 0, input_ids.size(1));
  // Each token that is not padding_idx counts itself; a padding_idx token, wherever it is, takes
  // position padding_idx and is not counted.
  const torch::Tensor counted = input_ids.ne(layout.padding_idx).to(torch::kInt64);
  return torch::embedding(table, counted.cumsum(/*dim=*/1).mul_(counted).add_(layout.padding_idx));
}

absl::StatusOr<std::unique_ptr<TransformerModel>> CreateBertModel(ModelConfig config,
                                                                  Checkpoint& checkpoint) {
  BertLayout layout = BertLayoutOf(config, checkpoint);
  const std::string& prefix = layout.prefix;
  const int64_t hidden = config.hidden_size;
  const int64_t embedding_size = config.embedding_size > 0 ? config.embedding_size : hidden;
  // config.json against the file's shapes, before any per-layer work.
  const std::string embeddings = prefix + layout.word_embeddings + ".weight";
  ATTNSCOPE_RETURN_IF_ERROR(checkpoint.CheckBlockCount(
      "num_hidden_layers", config.num_hidden_layers, prefix + layout.layers));
  ATTNSCOPE_RETURN_IF_ERROR(
      checkpoint.CheckConfigSize("vocab_size", config.vocab_size, embeddings, 0));
  ATTNSCOPE_RETURN_IF_ERROR(checkpoint.CheckConfigSize(
      config.embedding_size > 0 ? "embedding_size" : "hidden_size", embedding_size, embeddings, 1));
  ATTNSCOPE_RETURN_IF_ERROR(
      checkpoint.CheckConfigSize("max_position_embeddings", config.max_position_embeddings,
                                 prefix + layout.position_embeddings + ".weight", 0));
  int64_t num_labels = 0;
  if (layout.has_classifier()) {
    const std::string output = layout.classifier_output + ".weight";
    const std::optional<std::vector<int64_t>> shape = checkpoint.Shape(output);
    if (shape.has_value()) {
      num_labels = shape->size() == 2 ? (*shape)[0] : 0;
      if (num_labels <= 0 || (config.num_labels > 0 && config.num_labels != num_labels)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", output, "' in '", checkpoint.FileOf(output),
            "': expected shape [num_labels, ", hidden, "] with num_labels = ", config.num_labels,
            " (config.json id2label), got [", absl::StrJoin(*shape, ", "), "]"));
      }
    } else {
      // Load below names the missing tensor, with whatever else does not fit.
      num_labels = std::max<int64_t>(config.num_labels, 1);
    }
    config.num_labels = num_labels;
  } else {
    config.num_labels = 0;
  }

  std::vector<TensorSpec> specs;
  specs.push_back({embeddings, {config.vocab_size, embedding_size}});
  specs.push_back({prefix + layout.position_embeddings + ".weight",
                   {config.max_position_embeddings, embedding_size}});
  if (!layout.token_type_embeddings.empty()) {
    specs.push_back({prefix + layout.token_type_embeddings + ".weight",
                     {config.type_vocab_size, embedding_size}});
  }
  AddNorm(specs, prefix + layout.embedding_norm, embedding_size);
  if (!layout.embeddings_project.empty()) {
    AddLinear(specs, prefix + layout.embeddings_project, hidden, embedding_size);
  }
  if (!layout.relative_attention_bias.empty()) {
    specs.push_back({prefix + layout.relative_attention_bias + ".weight",
                     {config.relative_attention_num_buckets, config.num_attention_heads}});
  }
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    auto at = [&](const std::string& name) { return layout.LayerTensor(i, name); };
    AddLinear(specs, at(layout.query), hidden, hidden);
    AddLinear(specs, at(layout.key), hidden, hidden);
    AddLinear(specs, at(layout.value), hidden, hidden);
    AddLinear(specs, at(layout.attention_output), hidden, hidden);
    AddNorm(specs, at(layout.attention_norm), hidden);
    AddLinear(specs, at(layout.intermediate), config.intermediate_size, hidden);
    AddLinear(specs, at(layout.output), hidden, config.intermediate_size);
    AddNorm(specs, at(layout.output_norm), hidden);
  }
  if (!layout.pooler.empty()) AddLinear(specs, layout.pooler, hidden, hidden);
  if (layout.has_classifier()) {
    if (layout.classifier_dense != layout.pooler) {
      AddLinear(specs, layout.classifier_dense, hidden, hidden);
    }
    AddLinear(specs, layout.classifier_output, num_labels, hidden);
  }
  ATTNSCOPE_RETURN_IF_ERROR(checkpoint.Load(specs, layout.ignored_prefixes));
  const Architecture architecture = config.architecture;
  return BuildModel(architecture, [&] {
    return new BertModel(std::move(config), checkpoint, std::move(layout));
  });
}

}  // namespace attnscope

// The checkpoint layouts of the BERT family (Architecture::kBert, kRoberta, kDistilBert, kMpnet
// and kElectra), shared by the inference model (bert.cc) and the autograd passes of attribution.h,
// which must read the same tensors and number positions the same way.
#ifndef ATTNSCOPE_MODELS_ARCHITECTURES_BERT_H_
#define ATTNSCOPE_MODELS_ARCHITECTURES_BERT_H_

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "models/checkpoint/checkpoint.h"
#include "models/checkpoint/config.h"

namespace attnscope {

// Where a BERT, RoBERTa, DistilBERT, MPNet or ELECTRA checkpoint keeps its tensors and how it
// numbers positions. The five are one network (post-LayerNorm blocks with GELU) under different
// names; MPNet adds a relative position bias to every layer's scores, ELECTRA a projection of
// narrower embeddings. The heads of all five are a dense layer on the first token's final hidden
// state ([CLS], <s>) and a linear classifier on that: BERT's dense layer is its pooler (tanh),
// RoBERTa's and MPNet's their classifier's own (tanh), ELECTRA's its own (GELU), DistilBERT's
// pre_classifier (ReLU).
struct BertLayout {
  // The encoder's tensors' prefix: "bert.", "roberta.", "distilbert.", "mpnet." or "electra."
  // (the *For* heads nest the encoder under it), "" for a saved BertModel, RobertaModel,
  // DistilBertModel, MPNetModel or ElectraModel.
  std::string prefix;
  // The names of the encoder's tensors after `prefix`, without ".weight" / ".bias": BERT's and
  // RoBERTa's by default. token_type_embeddings is empty for DistilBERT and MPNet, which have none.
  std::string word_embeddings = "embeddings.word_embeddings";
  std::string position_embeddings = "embeddings.position_embeddings";
  std::string token_type_embeddings = "embeddings.token_type_embeddings";
  std::string embedding_norm = "embeddings.LayerNorm";
  // ELECTRA's "embeddings_project", Linear(embedding_size, hidden_size) after the embeddings'
  // LayerNorm, when the two sizes differ; empty otherwise.
  std::string embeddings_project;
  // Layer i's tensors are prefix + layers + i + "." + one of the names below.
  std::string layers = "encoder.layer.";
  std::string query = "attention.self.query";
  std::string key = "attention.self.key";
  std::string value = "attention.self.value";
  std::string attention_output = "attention.output.dense";
  std::string attention_norm = "attention.output.LayerNorm";
  std::string intermediate = "intermediate.dense";
  std::string output = "output.dense";
  std::string output_norm = "output.LayerNorm";
  // MPNet's "encoder.relative_attention_bias" [relative_attention_num_buckets, heads]
  // (MPNetEncoder's), whose rows for the bucketed key - query distances (RelativePositionBucket,
  // bidirectional, kMpnetPositionBuckets, kMpnetMaxDistance) are added to every layer's scaled
  // scores; empty for the others.
  std::string relative_attention_bias;
  // RoBERTa and MPNet: the pad_token_id that transformers' create_position_ids_from_input_ids
  // numbers positions from (real tokens pad_token_id + 1, + 2, ..., tokens with the pad id
  // pad_token_id); -1 for BERT's 0, 1, 2, ...
  int64_t padding_idx = -1;
  // prefix + "pooler.dense" (BertModel, BertForSequenceClassification, a RobertaModel saved with
  // its pooler); empty when the model has no pooler.
  std::string pooler;
  // The classifier head's dense layer and output layer: prefix + "pooler.dense" and "classifier"
  // (BertForSequenceClassification), "classifier.dense" and "classifier.out_proj"
  // (RobertaForSequenceClassification, XLMRobertaForSequenceClassification,
  // MPNetForSequenceClassification). Both empty without a classifier head.
  std::string classifier_dense;
  std::string classifier_output;
  // DistilBERT's head applies ReLU after its dense layer, ELECTRA's exact (erf) GELU
  // (ElectraClassificationHead); BERT's, RoBERTa's and MPNet's tanh.
  bool classifier_relu = false;
  bool classifier_gelu = false;
  // Tensors the model does not use, by prefix: the position_ids buffer some checkpoints store and
  // the pre-training heads (BERT's "cls.", RoBERTa's and MPNet's masked-LM "lm_head.",
  // DistilBERT's "vocab_" tensors, ELECTRA's "discriminator_predictions." and "generator_"
  // ones), which attnscope does not serve.
  std::vector<std::string> ignored_prefixes;

  bool has_classifier() const { return !classifier_output.empty(); }
  // prefix + layers + i + "." + name.
  std::string LayerTensor(int64_t layer, const std::string& name) const;
};

// The layout of `checkpoint` for `config` (architecture kBert, kRoberta, kDistilBert, kMpnet or
// kElectra), told from the tensor names the checkpoint holds; Checkpoint::Load against the layout's
// tensors then refuses what does not fit it.
BertLayout BertLayoutOf(const ModelConfig& config, const Checkpoint& checkpoint);

// The position embeddings of `input_ids` [B, S] int64, rows of `table` [max_position_embeddings,
// H]: rows 0 .. S - 1 for BERT, as [S, H] (it broadcasts over the batch); for RoBERTa and MPNet
// [B, S, H], the rows transformers' create_position_ids_from_input_ids gives: padding_idx + 1,
// + 2, ... for the tokens that are not padding_idx, padding_idx for those that are. The caller has
// checked that S fits the table (ModelConfig::max_input_tokens).
torch::Tensor BertPositionEmbeddings(const BertLayout& layout, const torch::Tensor& table,
                                     const torch::Tensor& input_ids);

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_ARCHITECTURES_BERT_H_

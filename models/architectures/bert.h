// The checkpoint layouts of the BERT family (Architecture::kBert and kRoberta), shared by the
// inference model (bert.cc) and the autograd passes of attribution.h, which must read the same
// tensors and number positions the same way.
#ifndef ATTNSCOPE_MODELS_ARCHITECTURES_BERT_H_
#define ATTNSCOPE_MODELS_ARCHITECTURES_BERT_H_

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "models/checkpoint/checkpoint.h"
#include "models/checkpoint/config.h"

namespace attnscope {

// Where a BERT or RoBERTa checkpoint keeps its tensors and how it numbers positions. The heads of
// both are a dense layer with tanh on the first token's final hidden state ([CLS], <s>) and a
// linear classifier on that; BERT's dense layer is its pooler, RoBERTa's its classifier's own.
struct BertLayout {
  // The encoder's tensors' prefix: "bert." or "roberta." (the *For* heads nest the encoder under
  // it), "" for a saved BertModel or RobertaModel.
  std::string prefix;
  // RoBERTa: the pad_token_id that transformers' create_position_ids_from_input_ids numbers
  // positions from (real tokens pad_token_id + 1, + 2, ..., tokens with the pad id pad_token_id);
  // -1 for BERT's 0, 1, 2, ...
  int64_t padding_idx = -1;
  // prefix + "pooler.dense" (BertModel, BertForSequenceClassification, a RobertaModel saved with
  // its pooler); empty when the model has no pooler.
  std::string pooler;
  // The classifier head's dense layer and output layer: prefix + "pooler.dense" and "classifier"
  // (BertForSequenceClassification), "classifier.dense" and "classifier.out_proj"
  // (RobertaForSequenceClassification, XLMRobertaForSequenceClassification). Both empty without a
  // classifier head.
  std::string classifier_dense;
  std::string classifier_output;
  // Tensors the model does not use, by prefix: the position_ids buffer some checkpoints store and
  // the pre-training heads (BERT's "cls.", RoBERTa's masked-LM "lm_head."), which attnscope does
  // not serve.
  std::vector<std::string> ignored_prefixes;

  bool has_classifier() const { return !classifier_output.empty(); }
};

// The layout of `checkpoint` for `config` (architecture kBert or kRoberta), told from the tensor
// names the checkpoint holds; Checkpoint::Load against the layout's tensors then refuses what does
// not fit it.
BertLayout BertLayoutOf(const ModelConfig& config, const Checkpoint& checkpoint);

// The position embeddings of `input_ids` [B, S] int64, rows of `table` [max_position_embeddings,
// H]: rows 0 .. S - 1 for BERT, as [S, H] (it broadcasts over the batch); for RoBERTa [B, S, H],
// the rows transformers' create_position_ids_from_input_ids gives: padding_idx + 1, + 2, ... for
// the tokens that are not padding_idx, padding_idx for those that are. The caller has checked that
// S fits the table (ModelConfig::max_input_tokens).
torch::Tensor BertPositionEmbeddings(const BertLayout& layout, const torch::Tensor& table,
                                     const torch::Tensor& input_ids);

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_ARCHITECTURES_BERT_H_

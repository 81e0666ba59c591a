// The tokenizer of T5 checkpoints (Hugging Face transformers' T5Tokenizer, tokenization_t5.py):
// one SentencePiece model, spiece.model, whose ids are the model's, plus `extra_ids` sentinel
// tokens "<extra_id_0>" .. "<extra_id_{n-1}>" numbered after the SentencePiece pieces in reverse
// ("<extra_id_0>" is the last id).
#ifndef ATTNSCOPE_MODELS_T5_TOKENIZER_H_
#define ATTNSCOPE_MODELS_T5_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "models/tokenizers/sentencepiece_tokenizer.h"
#include "models/tokenizers/tokenizer.h"

namespace attnscope {

// tokenizer_config.json's settings (T5Tokenizer's defaults).
struct T5TokenizerOptions {
  int64_t extra_ids = 100;
  int64_t model_max_length = kNoMaxLength;
};

class T5Tokenizer : public Tokenizer {
 public:
  // Loads `model_path` (spiece.model). The template is
  // T5Tokenizer.build_inputs_with_special_tokens: single "$A </s>", pair "$A </s> $B </s>", no BOS,
  // every type id 0 (T5 has no segment embeddings). pad, eos and unk are the SentencePiece model's
  // own ids (0, 1 and 2 in T5's). NotFound: no such file. InvalidArgument: not a SentencePiece
  // model, a model without a pad or eos piece, or extra_ids < 0. FailedPrecondition: the
  // SentencePiece module is not installed.
  static absl::StatusOr<std::unique_ptr<T5Tokenizer>> Load(const std::string& model_path,
                                                           const T5TokenizerOptions& options);

  // SentencePiece's pieces of `text` with their offsets, as SentencePieceTokenizer gives them.
  // Like the project's other SentencePiece tokenizers, special tokens written in the text
  // ("</s>", "<extra_id_0>") are tokenized as text, not matched as the special tokens.
  // InvalidArgument: `text` is not valid UTF-8.
  absl::StatusOr<TokenizedText> Tokenize(std::string_view text) const override;
  // T5Tokenizer.decode: with `skip_special_tokens`, <pad>, </s>, <unk> and the sentinels are
  // dropped and SentencePiece decodes the rest; otherwise they are written literally. Out-of-range
  // ids are skipped.
  std::string Decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override;

  TokenizerKind kind() const override { return TokenizerKind::kSentencePiece; }
  TokenizerNormalization normalization() const override { return pieces_->normalization(); }
  // The SentencePiece pieces plus extra_ids.
  int64_t vocab_size() const override { return pieces_->vocab_size() + extra_ids_; }
  std::string IdToToken(int64_t id) const override;

 private:
  T5Tokenizer(std::unique_ptr<SentencePieceTokenizer> pieces, PostProcessorTemplate post_processor,
              int64_t pad_token_id, int64_t extra_ids, int64_t model_max_length);

  // SentencePiece's pieces and ids: only its Tokenize and Decode are used (T5's template, not its
  // own, frames the pieces).
  std::unique_ptr<SentencePieceTokenizer> pieces_;
  int64_t extra_ids_;
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_T5_TOKENIZER_H_

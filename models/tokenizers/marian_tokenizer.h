// The tokenizer of Marian translation checkpoints (Hugging Face transformers' MarianTokenizer):
// two SentencePiece models, source.spm for the encoder's language and target.spm for the decoder's,
// whose pieces are numbered by one shared vocab.json.
#ifndef ATTNSCOPE_MODELS_MARIAN_TOKENIZER_H_
#define ATTNSCOPE_MODELS_MARIAN_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "models/tokenizers/sentencepiece_bridge.h"
#include "models/tokenizers/tokenizer.h"

namespace attnscope {

// tokenizer_config.json's special tokens (MarianTokenizer's defaults).
struct MarianTokenizerOptions {
  std::string eos_token = "</s>";
  std::string unk_token = "<unk>";
  std::string pad_token = "<pad>";
  int64_t model_max_length = 512;
};

class MarianTokenizer : public Tokenizer {
 public:
  // Loads `model_dir`/source.spm, target.spm and vocab.json (a JSON object piece -> id). The
  // template is MarianTokenizer.build_inputs_with_special_tokens: single "$A </s>", pair
  // "$A $B </s>" (all type id 0). NotFound: a file is missing. InvalidArgument: a file that is not
  // a SentencePiece model or not a piece -> id object, ids that are not exactly 0..n-1, or a
  // special token vocab.json lacks (each naming the file). FailedPrecondition: the SentencePiece
  // module is not installed.
  static absl::StatusOr<std::unique_ptr<MarianTokenizer>> Load(
      const std::string& model_dir, const MarianTokenizerOptions& options);

  // MarianTokenizer._tokenize with the source model: a leading target-language code such as
  // ">>vie<<" (the regular expression ">>.+<<", greedy, on the first line) becomes one token and
  // is removed, like every other match of it, from the text SentencePiece encodes; the pieces are
  // then numbered by vocab.json, <unk> for pieces it lacks. Offsets are SentencePiece's spans in
  // the caller's text (Marian's slow tokenizer has no offsets; these are the fast tokenizers'
  // convention). A word starts at each piece beginning with U+2581 and at the language code.
  // Unlike transformers, "</s>" written in the text is tokenized as text, not as the special token.
  // InvalidArgument: `text` is not valid UTF-8.
  absl::StatusOr<TokenizedText> Tokenize(std::string_view text) const override;
  // The same with target.spm (MarianTokenizer(text_target=...)).
  absl::StatusOr<TokenizedText> TokenizeTarget(std::string_view text) const override;
  // MarianTokenizer.decode: target-side pieces joined by target.spm; special tokens (</s>, <unk>,
  // <pad>) are dropped when `skip_special_tokens`, otherwise written literally followed by a
  // space; the result is stripped. Out-of-range ids are skipped.
  std::string Decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override;

  TokenizerKind kind() const override { return TokenizerKind::kSentencePiece; }
  // The source model's normalizer (what happens to the text a caller sends).
  TokenizerNormalization normalization() const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(pieces_.size()); }
  std::string IdToToken(int64_t id) const override;

 private:
  MarianTokenizer(std::unique_ptr<sentencepiece_bridge::Processor> source,
                  std::unique_ptr<sentencepiece_bridge::Processor> target,
                  std::vector<std::string> pieces, absl::flat_hash_map<std::string, int64_t> ids,
                  std::vector<int64_t> special_ids, PostProcessorTemplate post_processor,
                  int64_t pad_token_id, int64_t unk_token_id, int64_t model_max_length);

  absl::StatusOr<TokenizedText> TokenizeWith(const sentencepiece_bridge::Processor& processor,
                                             std::string_view text) const;

  std::unique_ptr<sentencepiece_bridge::Processor> source_;
  std::unique_ptr<sentencepiece_bridge::Processor> target_;
  std::vector<std::string> pieces_;
  absl::flat_hash_map<std::string, int64_t> ids_;
  // eos, unk, pad: MarianTokenizer's all_special_ids.
  std::vector<int64_t> special_ids_;
  int64_t unk_token_id_;
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_MARIAN_TOKENIZER_H_

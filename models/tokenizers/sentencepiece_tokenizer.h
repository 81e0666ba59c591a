// SentencePiece tokenizer (tokenizer.model) through libsentencepiece, with Hugging Face
// LlamaTokenizerFast's special-token template.
#ifndef ATTNSCOPE_MODELS_SENTENCEPIECE_TOKENIZER_H_
#define ATTNSCOPE_MODELS_SENTENCEPIECE_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "models/tokenizers/sentencepiece_bridge.h"
#include "models/tokenizers/tokenizer.h"

namespace attnscope {

// Special-token settings from config.json and tokenizer_config.json. Unset ids fall back to the
// SentencePiece model's own.
struct SentencePieceOptions {
  // tokenizer_config.json add_bos_token / add_eos_token (LlamaTokenizerFast defaults).
  bool add_bos_token = true;
  bool add_eos_token = false;
  // config.json bos_token_id / eos_token_id / pad_token_id.
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> eos_token_id;
  std::optional<int64_t> pad_token_id;
  int64_t model_max_length = kNoMaxLength;
};

// What the SentencePiece normalizer named `name` (a model's normalizer_spec: nmt_nfkc, nfkc,
// nmt_nfkc_cf, nfkc_cf, identity or "") does to text; `model_file` ("" for none) is named in the
// description ("... normalizer 'nmt_nfkc' of source.spm: ...").
TokenizerNormalization SentencePieceNormalization(const std::string& name,
                                                  std::string_view model_file);

class SentencePieceTokenizer : public Tokenizer {
 public:
  // Loads `model_path` (a serialized SentencePiece ModelProto). The template is
  // LlamaTokenizerFast's: single "<s> $A", pair "<s> $A <s>:1 $B:1", each text followed by "</s>"
  // (same type id) when add_eos_token, and without "<s>" when !add_bos_token. The pad id is
  // pad_token_id, else the model's pad id when it has one, else 0 (Llama checkpoints usually define
  // no pad token; padded positions are masked out, so the id only has to be in range).
  // NotFound: no such file. InvalidArgument: not a SentencePiece model, or an id out of range.
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(
      const std::string& model_path, const SentencePieceOptions& options);

  // Pieces as SentencePiece encodes them (normalization, dummy prefix, byte fallback included).
  // Offsets come from SentencePiece's byte spans into `text`; a piece that covers no input (such as
  // the 2nd..nth byte of a byte-fallback character) gets an empty span at its position. A word
  // starts at each piece beginning with U+2581 ("▁").
  // InvalidArgument: `text` is not valid UTF-8.
  absl::StatusOr<TokenizedText> Tokenize(std::string_view text) const override;
  // SentencePiece's decoding of the pieces. Control pieces (<s>, </s>) are dropped when
  // `skip_special_tokens`, otherwise written literally; out-of-range ids are skipped.
  std::string Decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override;

  TokenizerKind kind() const override { return TokenizerKind::kSentencePiece; }
  // From the model file's normalizer_spec name (SentencePiece's normalization rules: nmt_nfkc,
  // nfkc, nmt_nfkc_cf, nfkc_cf, identity).
  TokenizerNormalization normalization() const override;
  int64_t vocab_size() const override;
  std::string IdToToken(int64_t id) const override;

 private:
  SentencePieceTokenizer(std::unique_ptr<sentencepiece_bridge::Processor> processor,
                         PostProcessorTemplate post_processor, int64_t pad_token_id,
                         int64_t model_max_length);

  std::unique_ptr<sentencepiece_bridge::Processor> processor_;
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_SENTENCEPIECE_TOKENIZER_H_

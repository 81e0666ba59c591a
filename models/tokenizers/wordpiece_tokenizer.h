// BERT WordPiece tokenizer, matching Hugging Face BertTokenizerFast (the `tokenizers` crate's
// BertNormalizer, BertPreTokenizer, WordPiece model and decoder) token for token, including
// offsets.
#ifndef ATTNSCOPE_MODELS_WORDPIECE_TOKENIZER_H_
#define ATTNSCOPE_MODELS_WORDPIECE_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "models/tokenizers/tokenizer.h"
#include "models/tokenizers/unicode.h"
#include "nlohmann/json.hpp"

namespace attnscope {

// Settings of the normalizer, model and special tokens (BertTokenizerFast's arguments).
struct WordPieceOptions {
  // BertNormalizer: drop NUL, U+FFFD and control characters, turn whitespace into ' '.
  bool clean_text = true;
  // BertNormalizer: put spaces around CJK ideographs so that each becomes its own word.
  bool handle_chinese_chars = true;
  // Unicode NFC before everything else: tokenizer.json's normalizer Sequence [NFC,
  // BertNormalizer] (`tokenizers` NFC normalizer), for vocabularies of precomposed text.
  bool nfc = false;
  // BertNormalizer: NFD then drop nonspacing marks. Unset: follows `lowercase` (HF's None).
  std::optional<bool> strip_accents;
  bool lowercase = true;

  std::string unk_token = "[UNK]";
  std::string continuing_subword_prefix = "##";
  // Longer words (in code points, after normalization) become a single unk token.
  int64_t max_input_chars_per_word = 100;

  std::string cls_token = "[CLS]";
  std::string sep_token = "[SEP]";
  std::string pad_token = "[PAD]";
  std::string mask_token = "[MASK]";
  // Further special tokens (tokenizer_config.json additional_special_tokens, tokenizer.json
  // added_tokens). Tokens missing from the vocabulary get the next free ids, as HF adds them.
  std::vector<std::string> additional_special_tokens;
  // Special tokens that take the whitespace before them (lstrip) or after them (rstrip) into
  // their match, token and offsets, as `tokenizers` matches added tokens with those flags (MPNet's
  // and RoBERTa's <mask> has lstrip).
  std::vector<std::string> lstrip_tokens;
  std::vector<std::string> rstrip_tokens;

  // Default: the length has no limit (kNoMaxLength).
  int64_t model_max_length = kNoMaxLength;
  // The special-token template; unset: BERT's "[CLS] $A [SEP]" / "[CLS] $A [SEP] $B:1 [SEP]:1".
  std::optional<PostProcessorTemplate> post_processor;
};

class WordPieceTokenizer : public Tokenizer {
 public:
  // `vocab` lists the tokens in id order. Special tokens missing from it are appended with the next
  // ids, as HF's add_special_tokens does. InvalidArgument: an empty unk token; an empty cls or sep
  // token without a post_processor; a post_processor token whose id disagrees with the vocabulary.
  static absl::StatusOr<std::unique_ptr<WordPieceTokenizer>> Create(std::vector<std::string> vocab,
                                                                    WordPieceOptions options);

  // Reads a vocab.txt: one token per line, its id the 0-based line number (HF load_vocab; a
  // trailing "\r" is dropped too). NotFound/InvalidArgument as Create, naming the file; also
  // InvalidArgument for a line that is not UTF-8 and for an unk_token (or, without a
  // post_processor, a cls_token or sep_token) that is not one of the file's lines: appended past
  // the file, it would read an embedding row the model never trained for it.
  static absl::StatusOr<std::unique_ptr<WordPieceTokenizer>> FromVocabFile(
      const std::string& vocab_path, WordPieceOptions options);

  // Reads a tokenizer.json whose model is WordPiece: normalizer BertNormalizer (or null, or a
  // Sequence of NFC and BertNormalizer), pre_tokenizer BertPreTokenizer, added_tokens (special ones
  // only, with lstrip and rstrip), post_processor TemplateProcessing or BertProcessing (or null:
  // BERT's template). As `tokenizers`, only added_tokens are matched in the text: BERT's [CLS],
  // [SEP], [PAD] and [MASK] are special only when listed there (MPNet's vocabulary holds them as
  // plain words; with a null post_processor [CLS] and [SEP] stay, for BERT's template).
  // `model_max_length` is used unless the file's "truncation" sets max_length. The pad token is
  // `pad_token` (tokenizer_config.json's, as transformers pads with it) when it is in the
  // vocabulary, else padding.pad_token, else [PAD] when listed, else id 0. InvalidArgument naming
  // the field for anything else.
  static absl::StatusOr<std::unique_ptr<WordPieceTokenizer>> FromTokenizerJson(
      const std::string& path, int64_t model_max_length, const std::string& pad_token = "");
  // The same, from the parsed file (tokenizer_json::Read); `path` names it in errors.
  static absl::StatusOr<std::unique_ptr<WordPieceTokenizer>> FromTokenizerJson(
      const nlohmann::json& root, const std::string& path, int64_t model_max_length,
      const std::string& pad_token = "");

  absl::StatusOr<TokenizedText> Tokenize(std::string_view text) const override;
  // Joins tokens with spaces, glues "##" pieces to the one before, then applies transformers'
  // clean_up_tokenization (" ." -> ".", " n't" -> "n't", ...). Unknown ids are skipped.
  std::string Decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override;

  TokenizerKind kind() const override { return TokenizerKind::kWordPiece; }
  // BertNormalizer's: lowercase, and strip_accents (NFD, then marks dropped) when it is set or,
  // unset, when lowercasing.
  TokenizerNormalization normalization() const override;
  // Includes special tokens added past the vocabulary file.
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_token_.size()); }
  std::string IdToToken(int64_t id) const override;
  // The id of `token`, or -1 when it is not in the vocabulary.
  int64_t TokenToId(std::string_view token) const;

 private:
  WordPieceTokenizer(std::vector<std::string> id_to_token,
                     absl::flat_hash_map<std::string, int64_t> token_to_id,
                     std::vector<std::string> special_tokens, WordPieceOptions options,
                     PostProcessorTemplate post_processor, int64_t pad_token_id);

  // Normalizes, pre-tokenizes and WordPiece-splits code points [begin, end) of `decoded` (a
  // stretch with no special token), appending to `out`; `word_index` counts words across calls.
  void TokenizeSegment(const unicode::DecodedText& decoded, int64_t begin, int64_t end,
                       int64_t* word_index, TokenizedText* out) const;

  std::vector<std::string> id_to_token_;
  absl::flat_hash_map<std::string, int64_t> token_to_id_;
  // Matched literally in the original text before normalization, longest first at each position.
  std::vector<std::string> special_tokens_;
  std::vector<bool> is_special_id_;
  WordPieceOptions options_;
  int64_t unk_id_;
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_WORDPIECE_TOKENIZER_H_

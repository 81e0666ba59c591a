// Byte-level BPE tokenizer of GPT-2, RoBERTa and BART checkpoints (vocab.json + merges.txt),
// matching Hugging Face BartTokenizerFast / RobertaTokenizerFast (the `tokenizers` crate's
// ByteLevel pre-tokenizer and decoder, BPE model and RobertaProcessing) token for token, including
// offsets.
#ifndef ATTNSCOPE_MODELS_BPE_TOKENIZER_H_
#define ATTNSCOPE_MODELS_BPE_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "models/tokenizers/tokenizer.h"
#include "models/tokenizers/unicode.h"

namespace attnscope {

// BartTokenizerFast's special tokens and offset setting, as tokenizer_config.json gives them.
struct BpeOptions {
  std::string bos_token = "<s>";
  std::string eos_token = "</s>";
  // The template's tokens: RobertaProcessing's cls and sep.
  std::string cls_token = "<s>";
  std::string sep_token = "</s>";
  std::string unk_token = "<unk>";
  // Empty: no pad token, padding uses id 0.
  std::string pad_token = "<pad>";
  // Matched with lstrip, as transformers declares it: the whitespace before "<mask>" belongs to
  // it (its token is " <mask>"), so that "is <mask>." predicts the word with its leading space.
  std::string mask_token = "<mask>";
  // RobertaProcessing trim_offsets: a token's offsets leave out the space it carries.
  bool trim_offsets = true;
  // Default: the length has no limit (kNoMaxLength).
  int64_t model_max_length = kNoMaxLength;
};

class BpeTokenizer : public Tokenizer {
 public:
  // Reads vocab.json (a JSON object token -> id, ids exactly 0..n-1) and merges.txt (a
  // "#version" first line, which is skipped, then one merge "left right" per line, rank by line
  // order; a repeated merge counts once, at its first line, the order BartTokenizerFast's
  // conversion of bpe_ranks keeps). Special tokens missing from vocab.json get the next ids, as
  // transformers' add_special_tokens does. The template is RobertaProcessing's: single
  // "<s> $A </s>", pair "<s> $A </s> </s> $B </s>" (cls and sep), every type id 0.
  // NotFound: a file is missing. InvalidArgument, naming the file (and the line of merges.txt): a
  // vocab.json that is not such an object; a merges line that is not two tokens separated by
  // spaces, or whose tokens or merged token vocab.json lacks (`tokenizers` refuses those too); an
  // empty cls, sep or unk token.
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> FromFiles(const std::string& vocab_path,
                                                                 const std::string& merges_path,
                                                                 BpeOptions options);

  // Special tokens written in the text are matched first (leftmost, then longest), each one word;
  // the mask token takes the whitespace before it (lstrip), and its token is the text matched
  // (" <mask>", as in `tokenizers` Encoding.tokens; its id is "<mask>"'s). The rest is split with
  // GPT-2's pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  // (case sensitive: "I'LL" is "I" "'" "LL"), each match one word, with no prefix space added. A
  // word's UTF-8 bytes become the characters of GPT-2's bytes_to_unicode (space "Ġ", newline "Ċ")
  // and merge by rank (the lowest-ranked pair first, leftmost among equals; `tokenizers` Word::
  // merge_all). A symbol vocab.json lacks becomes the unk token, as transformers' BartTokenizer
  // maps it (BartTokenizerFast drops it; a vocabulary with all 256 byte characters, as every
  // GPT-2-derived one has, never needs either). Offsets: a token spans the characters its bytes
  // came from (a piece of a multi-byte character spans the whole character); with trim_offsets
  // its leading and trailing "Ġ" (and " <mask>"'s whitespace) are left out, so a lone space token
  // gets an empty span.
  // InvalidArgument: `text` is not valid UTF-8.
  absl::StatusOr<TokenizedText> Tokenize(std::string_view text) const override;
  // The ByteLevel decoder: each token's characters mapped back to bytes (a token with a character
  // outside the byte table, such as a special token, contributes its own UTF-8), then the bytes
  // read as UTF-8 with each maximal invalid subsequence replaced by U+FFFD (Rust's
  // String::from_utf8_lossy). Special tokens are dropped when `skip_special_tokens`; unknown ids
  // are skipped. No clean-up of spaces before punctuation (clean_up_tokenization_spaces false).
  std::string Decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override;

  TokenizerKind kind() const override { return TokenizerKind::kByteLevelBpe; }
  // None: text is tokenized as written.
  TokenizerNormalization normalization() const override;
  // Includes special tokens added past vocab.json.
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_token_.size()); }
  std::string IdToToken(int64_t id) const override;

 private:
  struct SpecialToken {
    std::string content;
    int64_t id;
    bool lstrip;
  };
  // The rank of a merge and the id of the token it makes.
  struct Merge {
    int64_t rank;
    int64_t id;
  };

  BpeTokenizer(std::vector<std::string> id_to_token,
               absl::flat_hash_map<std::string, int64_t> token_to_id,
               absl::flat_hash_map<std::pair<int64_t, int64_t>, Merge> merges,
               std::vector<SpecialToken> special_tokens, BpeOptions options,
               PostProcessorTemplate post_processor, int64_t pad_token_id, int64_t unk_id);

  // Splits code points [begin, end) of `text` (`decoded`; a stretch with no special token) into
  // words and BPE tokens, appending to `out`; `word_index` counts words across calls.
  void TokenizeSegment(std::string_view text, const unicode::DecodedText& decoded, int64_t begin,
                       int64_t end, int64_t* word_index, TokenizedText* out) const;
  // Appends the tokens of one pre-tokenized word, code points [begin, end).
  void TokenizeWord(std::string_view text, const unicode::DecodedText& decoded, int64_t begin,
                    int64_t end, int64_t word_index, TokenizedText* out) const;
  // Appends one token spanning code points [start, end), trimmed by `edge_spaces` (its leading and
  // trailing "Ġ" or whitespace characters) when trim_offsets.
  void Emit(const unicode::DecodedText& decoded, int64_t id, std::string token,
            std::pair<int32_t, int32_t> edge_spaces, int64_t start, int64_t end, int64_t word_index,
            TokenizedText* out) const;

  std::vector<std::string> id_to_token_;
  absl::flat_hash_map<std::string, int64_t> token_to_id_;
  absl::flat_hash_map<std::pair<int64_t, int64_t>, Merge> merges_;
  // Matched on the text, longest first at each position.
  std::vector<SpecialToken> special_tokens_;
  std::vector<bool> is_special_id_;
  // The "Ġ" (or whitespace) characters each token starts and ends with, for trim_offsets.
  std::vector<std::pair<int32_t, int32_t>> edge_spaces_;
  // The id of each byte's character, or the unk id.
  std::array<int64_t, 256> byte_ids_;
  BpeOptions options_;
  int64_t unk_id_;
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_BPE_TOKENIZER_H_

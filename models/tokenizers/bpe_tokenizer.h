// BPE tokenizers, matching Hugging Face's `tokenizers` library token for token, offsets
// included: byte-level from vocab.json + merges.txt (GPT-2, RoBERTa and BART checkpoints, as
// BartTokenizerFast / RobertaTokenizerFast build them), and from a tokenizer.json with a BPE model
// (GPT-2, RoBERTa, Llama 3, Qwen3 layouts; Gemma 3's character-level BPE with byte fallback). Both
// are one pipeline, the library's: added tokens matched in the raw text, a normalizer,
// pre-tokenizers, the BPE model over bytes, a post-processor and the ByteLevel decoder; the slow
// files simply fix its components.
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
#include "models/tokenizers/regex.h"
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

  // Reads a Hugging Face tokenizer.json whose model is BPE, over GPT-2's byte alphabet (a
  // ByteLevel pre-tokenizer: GPT-2, RoBERTa, Llama 3, Qwen3) or over characters with byte fallback
  // (SentencePiece-style: Gemma 3), with the components the library has and this reader supports:
  //   model: BPE with vocab, merges as "a b" strings or ["a", "b"] pairs (rank by position; a
  //     repeated pair takes its last rank, as the library's map does), ignore_merges (a pre-token
  //     that is whole in the vocabulary is one token: Llama 3), unk_token and fuse_unk (else a
  //     symbol with no token is dropped), byte_fallback (a character the vocabulary lacks becomes
  //     its bytes' "<0xXX>" tokens); no dropout, continuing_subword_prefix or end_of_word_suffix.
  //   normalizer: null, NFC, Replace (a "String" or "Regex" pattern), or a Sequence of those.
  //   pre_tokenizer: null, ByteLevel (add_prefix_space, use_regex with GPT-2's pattern), Split (a
  //     "Regex" or "String" pattern; behavior Isolated, Removed, MergedWithPrevious,
  //     MergedWithNext or Contiguous; invert), or a Sequence of those.
  //   added_tokens: content, id, special, lstrip, rstrip, single_word, normalized. The
  //     non-normalized ones are matched in the raw text before normalization, the normalized ones
  //     (by their normalized content) in each normalized stretch between them; leftmost, then
  //     longest, as the library's Aho-Corasick does.
  //   post_processor: null, ByteLevel (trim_offsets, add_prefix_space), RobertaProcessing (cls,
  //     sep, trim_offsets, add_prefix_space), TemplateProcessing (single, pair, special_tokens),
  //     or a Sequence of at most one offset trimmer and one template.
  //   decoder: ByteLevel, Replace (a "String" pattern), ByteFallback, Fuse, Strip, a Sequence of
  //     those, or null (tokens joined by spaces).
  //   truncation and padding are not read: the caller's EncodeOptions decide, as transformers'
  //     fast tokenizers set them per call.
  // `model_max_length` comes from tokenizer_config.json (LoadTokenizer); the pad token is the
  // one of `pad_token` when the vocabulary has it, else id 0.
  // NotFound: no file. Unimplemented: a component or setting that is not supported, naming it and
  // what is ("tokenizer.json '<path>': pre_tokenizer type 'Metaspace' is not supported;
  // supported: ..."; a setting: "field 'model.dropout' = 0.1 is not supported; ...").
  // InvalidArgument, naming the field: anything malformed (a merge whose tokens the vocabulary
  // lacks, ids that collide or exceed the file's token count, a regex PCRE2 cannot compile).
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> FromTokenizerJson(
      const std::string& path, int64_t model_max_length, const std::string& pad_token);

  // The library's encode, step by step. Added tokens written in the text are matched first
  // (leftmost, then longest), each one word; one with lstrip/rstrip takes the whitespace
  // before/after it, and its token is the text matched (" <mask>", as in `tokenizers`
  // Encoding.tokens; its id is "<mask>"'s); one with single_word matches only between non-word
  // characters. Each stretch between them is normalized (NFC: a composed character is aligned with
  // the first character it was made of, as the library aligns it, so a token's offsets can leave
  // out a combining mark; Replace: the new characters are aligned with the last one replaced),
  // normalized added tokens are matched in it,
  // and the rest is pre-tokenized: Split patterns on PCRE2, then ByteLevel (a prefix space when
  // asked, the space aligned with the first character; GPT-2's pattern
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ when use_regex,
  // case sensitive: "I'LL" is "I" "'" "LL"). Each piece is one word: its UTF-8 bytes become the
  // characters of GPT-2's bytes_to_unicode (space "Ġ", newline "Ċ"), and with ignore_merges a
  // piece the vocabulary has whole is one token; otherwise they merge by rank (the lowest-ranked
  // pair first, leftmost among equals; `tokenizers` Word::merge_all). Without a ByteLevel
  // pre-tokenizer the symbols are the piece's characters instead, a character the vocabulary
  // lacks becoming its bytes' "<0xXX>" tokens (byte_fallback, each spanning the character) or
  // unk. A byte whose character the
  // vocabulary lacks becomes the unk token (vocab.json + merges.txt, as transformers'
  // BartTokenizer maps it; tokenizer.json with an unk_token) or is dropped (tokenizer.json
  // without); a vocabulary with all 256 byte characters, as every GPT-2-derived one has, never
  // needs either. Offsets: a token spans the characters its bytes came from (a piece of a
  // multi-byte character spans the whole character); with trim_offsets (RobertaProcessing, or a
  // ByteLevel post-processor that asks) its leading and trailing "Ġ" and whitespace are left
  // out, so a lone space token gets an empty span, except one added leading space of a text's
  // first token when the post-processor has add_prefix_space.
  // InvalidArgument: `text` is not valid UTF-8.
  absl::StatusOr<TokenizedText> Tokenize(std::string_view text) const override;
  // The file's decoders in order, each on the list of token strings, then the strings joined;
  // vocab.json + merges.txt and most tokenizer.json files have the ByteLevel decoder alone: each
  // token's characters mapped back to bytes (a token with a character
  // outside the byte table, such as a special token, contributes its own UTF-8), then the bytes
  // read as UTF-8 with each maximal invalid subsequence replaced by U+FFFD (Rust's
  // String::from_utf8_lossy). Gemma's are Replace ("▁" -> " "), ByteFallback (runs of "<0xXX>"
  // tokens read as UTF-8, one U+FFFD per token when they are not) and Fuse. A tokenizer.json
  // without a decoder joins the tokens with spaces, as the library does. Special tokens (added
  // tokens marked special) are dropped when `skip_special_tokens`; unknown ids are skipped. No
  // clean-up of spaces before punctuation (clean_up_tokenization_spaces false).
  std::string Decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override;

  TokenizerKind kind() const override { return TokenizerKind::kByteLevelBpe; }
  // None, or NFC.
  TokenizerNormalization normalization() const override;
  // Includes special tokens added past vocab.json.
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_token_.size()); }
  std::string IdToToken(int64_t id) const override;

 private:
  // A token of tokenizer.json's added_tokens (transformers' special tokens for the slow files).
  struct AddedToken {
    std::string content;
    int64_t id = 0;
    bool special = false;
    bool lstrip = false;
    bool rstrip = false;
    bool single_word = false;
    // Matched in the normalized text rather than the raw one.
    bool normalized = false;
  };
  // How a Split pre-tokenizer keeps its matches (tokenizers' SplitDelimiterBehavior).
  enum class SplitBehavior {
    kIsolated,
    kRemoved,
    kMergedWithPrevious,
    kMergedWithNext,
    kContiguous
  };
  struct PreTokenizerStep {
    enum class Kind { kSplit, kByteLevel };
    Kind kind = Kind::kByteLevel;
    // kSplit.
    std::shared_ptr<const Regex> regex;
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    // kByteLevel.
    bool add_prefix_space = false;
    bool use_regex = true;
  };
  // One normalizer of a (flattened) Sequence.
  struct NormalizerStep {
    enum class Kind { kNfc, kReplace };
    Kind kind = Kind::kNfc;
    // kReplace: every match of `pattern` becomes `content`.
    std::shared_ptr<const Regex> pattern;
    std::string content;
  };
  // One decoder of a (flattened) Sequence, applied to the list of token strings.
  struct DecoderStep {
    enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip };
    Kind kind = Kind::kByteLevel;
    // kReplace: `pattern` (a plain string) becomes `content` in each token.
    std::string pattern;
    std::string content;
    // kStrip: up to `start` / `stop` copies of the character `content` cut from each token's ends.
    int64_t start = 0;
    int64_t stop = 0;
  };
  // Everything between the vocabulary and the template: what the two file formats configure.
  struct Pipeline {
    std::vector<AddedToken> added_tokens;
    std::vector<NormalizerStep> normalizer;
    std::vector<PreTokenizerStep> pre_tokenizer;
    // The model's alphabet: bytes as GPT-2's characters (a ByteLevel pre-tokenizer), or the
    // text's characters (SentencePiece-style BPE: Gemma), where a character the vocabulary lacks
    // becomes its UTF-8 bytes' "<0xXX>" tokens with byte_fallback, else unk.
    bool byte_level = true;
    bool byte_fallback = false;
    // Consecutive unknown characters make one unk token.
    bool fuse_unk = false;
    bool ignore_merges = false;
    // The post-processor's process_offsets: a token's offsets leave out the "Ġ" and whitespace it
    // starts and ends with; with add_prefix_space one leading space of a text's first token stays.
    bool trim_offsets = false;
    bool trim_add_prefix_space = false;
    // Empty: no decoder, the tokens are joined by spaces.
    std::vector<DecoderStep> decoder = {DecoderStep{}};
    // A byte (character) without a token becomes this one; -1: it is dropped (the library's BPE
    // without unk_token).
    int64_t unk_id = -1;
  };
  // The rank of a merge and the id of the token it makes.
  struct Merge {
    int64_t rank;
    int64_t id;
  };
  // A character of the normalized text and the span [start, end) of original code points it is
  // aligned with (tokenizers' NormalizedString alignments, in code points).
  struct NormChar {
    char32_t c;
    int64_t start;
    int64_t end;
  };
  // A stretch of the text between added tokens, or an added token (`added` >= 0, an index into
  // pipeline_.added_tokens) over code points [begin, end).
  struct Segment {
    int64_t added;
    int64_t begin;
    int64_t end;
  };

  BpeTokenizer(std::vector<std::string> id_to_token,
               absl::flat_hash_map<std::string, int64_t> token_to_id,
               absl::flat_hash_map<std::pair<int64_t, int64_t>, Merge> merges, Pipeline pipeline,
               PostProcessorTemplate post_processor, int64_t pad_token_id,
               int64_t model_max_length);

  // The added tokens of the raw (`normalized` false) or normalized set found in `decoded` (the
  // UTF-8 `text`), and the stretches between them: tokenizers' AddedVocabulary::find_matches.
  std::vector<Segment> FindAddedTokens(std::string_view text, const unicode::DecodedText& decoded,
                                       bool normalized) const;
  // Normalizes original code points [begin, end), then splits out the normalized added tokens,
  // pre-tokenizes and tokenizes each piece, appending to `out` (`edges` gets each token's edge
  // spaces); `word_index` counts words across calls.
  void TokenizeStretch(const unicode::DecodedText& decoded, int64_t begin, int64_t end,
                       int64_t* word_index, TokenizedText* out,
                       std::vector<std::pair<int32_t, int32_t>>* edges) const;
  // `chars` through `normalizer`, each character keeping the alignment the library gives it.
  static std::vector<NormChar> Normalize(const std::vector<NormalizerStep>& normalizer,
                                         std::vector<NormChar> chars);
  // The pre-tokenizer's pieces of one normalized stretch, empty ones dropped.
  std::vector<std::vector<NormChar>> PreTokenize(std::vector<NormChar> chars) const;
  // Appends the BPE tokens of one pre-tokenized piece.
  void TokenizeWord(const std::vector<NormChar>& chars, int64_t word_index, TokenizedText* out,
                    std::vector<std::pair<int32_t, int32_t>>* edges) const;
  // Applies the post-processor's offset trimming, then fills byte_offsets.
  void FinishOffsets(const unicode::DecodedText& decoded,
                     const std::vector<std::pair<int32_t, int32_t>>& edges,
                     TokenizedText* out) const;

  std::vector<std::string> id_to_token_;
  // The BPE model's vocabulary (ignore_merges looks only here); from the slow files, with the
  // special tokens vocab.json lacks. Added tokens of a tokenizer.json are in id_to_token_ only.
  absl::flat_hash_map<std::string, int64_t> token_to_id_;
  absl::flat_hash_map<std::pair<int64_t, int64_t>, Merge> merges_;
  Pipeline pipeline_;
  // Indices into pipeline_.added_tokens by first byte of their content, longest first, for the
  // raw (0) and the normalized (1) set.
  std::array<std::vector<std::vector<int32_t>>, 2> added_by_first_byte_;
  bool has_normalized_added_ = false;
  std::vector<bool> is_special_id_;
  // The "Ġ" (or whitespace) characters each token starts and ends with, for trim_offsets.
  std::vector<std::pair<int32_t, int32_t>> edge_spaces_;
  // The id of each byte's character (byte-level), or of its "<0xXX>" token (byte fallback), or -1.
  std::array<int64_t, 256> byte_ids_;
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_BPE_TOKENIZER_H_

// The pipeline of Hugging Face's `tokenizers` library, shared by the tokenizers that match it token
// for token, offsets included, whatever their model: added tokens matched in the raw text, a
// normalizer, pre-tokenizers, the model (BpeTokenizer, UnigramTokenizer), a post-processor's
// template and offset trimming, and the decoders. Each component keeps the alignment of normalized
// characters with the original text as the library's NormalizedString does, so that a token's
// offsets are the library's.
//
// One file per component: pipeline_tokenizer.cc (the encode loop, offsets, the constructor),
// pipeline_added_tokens.cc, pipeline_normalizers.cc, pipeline_pre_tokenizers.cc,
// pipeline_decoders.cc, pipeline_tokenizer_json.cc (reading them all from tokenizer.json), and
// pipeline_chars.h (the character classes and pattern matches they share).
#ifndef ATTNSCOPE_MODELS_TOKENIZERS_PIPELINE_TOKENIZER_H_
#define ATTNSCOPE_MODELS_TOKENIZERS_PIPELINE_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/tokenizers/precompiled_charsmap.h"
#include "models/tokenizers/regex.h"
#include "models/tokenizers/tokenizer.h"
#include "models/tokenizers/unicode.h"
#include "nlohmann/json.hpp"

namespace attnscope {

class PipelineTokenizer : public Tokenizer {
 public:
  // The library's encode, step by step. Added tokens written in the text are matched first
  // (leftmost, then longest), each one word; one with lstrip/rstrip takes the whitespace
  // before/after it, and its token is the text matched (" <mask>", as in `tokenizers`
  // Encoding.tokens; its id is "<mask>"'s); one with single_word matches only between non-word
  // characters. Each stretch between them is normalized (NFC, NFKC: a composed character is
  // aligned with the first character it was made of, as the library aligns it, so a token's
  // offsets can leave out a combining mark; NFD, NFKD, Lowercase: each character of a
  // decomposition or lower-case mapping is aligned with the one it came from; Replace: the new
  // characters are aligned with the last one replaced; Prepend: the new characters, put before a
  // stretch that is not empty, are aligned with its first character; Precompiled: see
  // PrecompiledCharsmap; Strip, StripAccents: the whitespace or marks cut are aligned with
  // nothing; BertNormalizer: its clean_text drops NUL, U+FFFD and C* but \t \n \r and makes
  // whitespace ' ', its handle_chinese_chars puts a ' ' aligned with a CJK ideograph on each side
  // of it, then NFD with Mn dropped (strip_accents, lowercase's default) and Lowercase; Nmt: the
  // ASCII controls but \t \n \f \r, U+008F and U+009F dropped, \t \n \f \r U+1680
  // U+200B-U+200F U+2028 U+2029 U+2581 U+FEFF U+FFFD made ' '), normalized added tokens are matched
  // in it, and the rest is pre-tokenized: Split patterns on PCRE2; WhitespaceSplit (pieces between
  // whitespace, which is dropped); Whitespace (runs of word characters and runs of other non-space
  // characters, Oniguruma's \w+|[^\w\s]+; whitespace dropped); BertPreTokenizer (WhitespaceSplit
  // then Punctuation, each punctuation character alone); CharDelimiterSplit (pieces between the
  // delimiter, which is dropped); Digits (each number character alone, or runs of them);
  // Punctuation (each punctuation character alone, or as its behavior says); ByteLevel (a prefix
  // space when asked, the space aligned with the first character; GPT-2's pattern
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ when use_regex,
  // case sensitive: "I'LL" is "I" "'" "LL"); Metaspace (each ' ' becomes the
  // replacement, aligned with the space; the replacement prepended, aligned with the first
  // character, to a stretch that does not start with it: always, or only to the one that starts
  // the text ("first"); with split, a piece starts at each replacement). Each piece is one word,
  // which the model turns into tokens. With trim_offsets (RobertaProcessing, or a ByteLevel
  // post-processor that asks) a token's leading and trailing "Ġ" and whitespace are left out of
  // its offsets, so a lone space token gets an empty span, except one added leading space of a
  // text's first token when the post-processor has add_prefix_space.
  // InvalidArgument: `text` is not valid UTF-8.
  absl::StatusOr<TokenizedText> Tokenize(std::string_view text) const final;
  // The file's decoders in order, each on the list of token strings, then the strings joined:
  // ByteLevel (each token's characters mapped back to bytes through GPT-2's table, a token with a
  // character outside it, such as a special token, contributing its own UTF-8; then the bytes read
  // as UTF-8 with each maximal invalid subsequence replaced by U+FFFD, Rust's
  // String::from_utf8_lossy), Replace (a plain string), ByteFallback (runs of "<0xXX>" tokens read
  // as UTF-8, one U+FFFD per token when they are not), Fuse, Strip, Metaspace (the replacement
  // becomes ' ', except in the first token, where it is dropped unless prepend_scheme is "never"),
  // BPEDecoder (the suffix becomes ' ', except in the last token, where it is dropped), WordPiece
  // (each token after the first loses the prefix it starts with, else gets a ' ' before it; with
  // cleanup, " ." " ?" " !" " ," " ' " " n't" " 'm" " do not" " 's" " 've" " 're" are then
  // fixed in each token as the library's decoders/wordpiece.rs does). Without a decoder the tokens
  // are joined with spaces, as the library does. Special tokens (added tokens marked special) are
  // dropped when `skip_special_tokens`; unknown ids are skipped. No clean-up of spaces before
  // punctuation (clean_up_tokenization_spaces false).
  std::string Decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const final;
  // Includes the added tokens.
  int64_t vocab_size() const final { return static_cast<int64_t>(id_to_token_.size()); }
  std::string IdToToken(int64_t id) const final;

 protected:
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
    enum class Kind {
      kSplit,
      kByteLevel,
      kMetaspace,
      kWhitespaceSplit,
      kWhitespace,
      kDigits,
      kPunctuation
    };
    Kind kind = Kind::kByteLevel;
    // kSplit: the matches of `regex` (or what lies between them, `invert`), kept as `behavior`
    // says. kDigits and kPunctuation: each number (N*) or punctuation character (P*, and ASCII's
    // symbols) is a match of its own, kept as `behavior` says.
    std::shared_ptr<const Regex> regex;
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    // kByteLevel.
    bool add_prefix_space = false;
    bool use_regex = true;
    // kMetaspace: the character that stands for ' ', prepended to a stretch always, to the one
    // that starts the text only (`prepend_first_only`), or never; `split` starts a piece at each.
    char32_t replacement = 0x2581;
    bool prepend = true;
    bool prepend_first_only = false;
    bool split = true;
  };
  // One normalizer of a (flattened) Sequence.
  struct NormalizerStep {
    enum class Kind {
      kNfc,
      kNfd,
      kNfkc,
      kNfkd,
      kReplace,
      kPrepend,
      kPrecompiled,
      kStrip,
      kLowercase,
      kStripAccents,
      kBertCleanText,
      kBertChineseChars,
      kNmt
    };
    Kind kind = Kind::kNfc;
    // kReplace: every match of `pattern` becomes `content`. kPrepend: `content` is put before a
    // text that is not empty.
    std::shared_ptr<const Regex> pattern;
    std::string content;
    // kPrecompiled.
    std::shared_ptr<const PrecompiledCharsmap> charsmap;
    // kStrip: the whitespace at the start / the end is removed.
    bool strip_left = false;
    bool strip_right = false;
    // kStripAccents: only nonspacing marks (Mn) go, as BertNormalizer strips them; else M*.
    bool nonspacing_only = false;
  };
  // One decoder of a (flattened) Sequence, applied to the list of token strings.
  struct DecoderStep {
    enum class Kind {
      kByteLevel,
      kReplace,
      kByteFallback,
      kFuse,
      kStrip,
      kMetaspace,
      kBpeSuffix,
      kWordPiece
    };
    Kind kind = Kind::kByteLevel;
    // kReplace: `pattern` (a plain string) becomes `content` in each token.
    std::string pattern;
    std::string content;
    // kStrip: up to `start` / `stop` copies of the character `content` cut from each token's ends.
    int64_t start = 0;
    int64_t stop = 0;
    // kMetaspace: `content` (the replacement) becomes ' ', dropped in the first token when
    // `prepend`.
    bool prepend = true;
    // kBpeSuffix: `content` (the end_of_word_suffix) becomes ' ', or nothing in the last token.
    // kWordPiece: a token after the first loses `content` (the continuing prefix) when it starts
    // with it, else gets a ' ' before it; then each token is cleaned up when `cleanup`.
    bool cleanup = true;
  };
  // Everything between the model and the template: what a tokenizer.json configures.
  struct Pipeline {
    std::vector<AddedToken> added_tokens;
    std::vector<NormalizerStep> normalizer;
    std::vector<PreTokenizerStep> pre_tokenizer;
    // The post-processor's process_offsets: a token's offsets leave out the "Ġ" and whitespace it
    // starts and ends with; with add_prefix_space one leading space of a text's first token stays.
    bool trim_offsets = false;
    bool trim_add_prefix_space = false;
    // Empty: no decoder, the tokens are joined by spaces.
    std::vector<DecoderStep> decoder = {DecoderStep{}};
  };
  // A character of the normalized text and the span [start, end) of original code points it is
  // aligned with (tokenizers' NormalizedString alignments, in code points).
  struct NormChar {
    char32_t c;
    int64_t start;
    int64_t end;
  };

  // `id_to_token` holds every id's token, the added tokens' included.
  PipelineTokenizer(std::vector<std::string> id_to_token, Pipeline pipeline,
                    PostProcessorTemplate post_processor, int64_t pad_token_id,
                    int64_t model_max_length);

  // Reads the components of tokenizer.json `root` (from `path`, for errors) that are not the
  // model: added_tokens (ids below `id_limit`, each written into `id_to_token`, grown as needed),
  // normalizer (NFC, NFD, NFKC, NFKD, Replace, Prepend, Precompiled, Strip, Lowercase,
  // StripAccents, BertNormalizer, Nmt), pre_tokenizer (ByteLevel, Split, Metaspace,
  // WhitespaceSplit, Whitespace, BertPreTokenizer, CharDelimiterSplit, Digits, Punctuation),
  // post_processor (ByteLevel, RobertaProcessing, BertProcessing: "[CLS] $A [SEP]" and
  // "[CLS] $A [SEP] $B:1 [SEP]:1", TemplateProcessing) and decoder (ByteLevel,
  // Replace, ByteFallback, Fuse, Strip, Metaspace, BPEDecoder, WordPiece), each one of those or a
  // Sequence of them.
  // Unimplemented: a component type or setting not supported, naming it and what is.
  // InvalidArgument, naming the field: anything malformed (a regex PCRE2 cannot compile, a
  // precompiled_charsmap that is not base64 or whose trie is broken).
  static absl::Status ReadComponents(const nlohmann::json& root, const std::string& path,
                                     int64_t id_limit, std::vector<std::string>* id_to_token,
                                     Pipeline* pipeline, PostProcessorTemplate* post_processor);
  // The id of `pad_token` in `id_to_token`, else 0 (transformers pads with id 0 then).
  static int64_t PadId(const std::vector<std::string>& id_to_token, const std::string& pad_token);

  // `chars` through `normalizer`, each character keeping the alignment the library gives it;
  // Regex::FindAll's error when a Replace pattern gives up on them.
  static absl::StatusOr<std::vector<NormChar>> Normalize(
      const std::vector<NormalizerStep>& normalizer, std::vector<NormChar> chars);
  // GPT-2's bytes_to_unicode: each byte's character in the ByteLevel alphabet.
  static const std::array<char32_t, 256>& ByteChars();

  // TokenizerNormalization's flags as the normalizer sets them: lowercase (a Lowercase step),
  // strip_accents (StripAccents) and unicode_form (that of the last NFC, NFD, NFKC or NFKD step,
  // or of a Precompiled charsmap that does NFKC, as SentencePiece's do; "" without one). The
  // description says the same in words ("Unicode NFKC, lower-cased, accents removed"), "" when
  // none of them is set; the model's reader says the rest.
  TokenizerNormalization NormalizerFlags() const;

  // The model: appends the tokens of one pre-tokenized piece (word `word_index`) through Emit.
  virtual void TokenizeWord(const std::vector<NormChar>& chars, int64_t word_index,
                            TokenizedText* out,
                            std::vector<std::pair<int32_t, int32_t>>* edges) const = 0;
  // Appends token `id`, shown as `token`, over original code points [start, end).
  void Emit(int64_t id, std::string token, int64_t start, int64_t end, int64_t word_index,
            TokenizedText* out, std::vector<std::pair<int32_t, int32_t>>* edges) const;

  const Pipeline& pipeline() const { return pipeline_; }
  const std::vector<std::string>& id_to_token() const { return id_to_token_; }

 private:
  // A stretch of the text between added tokens, or an added token (`added` >= 0, an index into
  // pipeline_.added_tokens) over code points [begin, end).
  struct Segment {
    int64_t added;
    int64_t begin;
    int64_t end;
  };

  // The added tokens of the raw (`normalized` false) or normalized set found in `decoded` (the
  // UTF-8 `text`), and the stretches between them: tokenizers' AddedVocabulary::find_matches.
  std::vector<Segment> FindAddedTokens(std::string_view text, const unicode::DecodedText& decoded,
                                       bool normalized) const;
  // Normalizes original code points [begin, end), then splits out the normalized added tokens,
  // pre-tokenizes and tokenizes each piece, appending to `out` (`edges` gets each token's edge
  // spaces); `word_index` counts words across calls. Regex::FindAll's error when a pattern of the
  // normalizer or pre-tokenizer gives up on the stretch.
  absl::Status TokenizeStretch(const unicode::DecodedText& decoded, int64_t begin, int64_t end,
                               int64_t* word_index, TokenizedText* out,
                               std::vector<std::pair<int32_t, int32_t>>* edges) const;
  // The pre-tokenizer's pieces of one normalized stretch, empty ones dropped; `starts_text` when
  // the stretch starts at the text's first character (Metaspace's prepend_scheme "first");
  // Regex::FindAll's error when a Split pattern gives up on it.
  absl::StatusOr<std::vector<std::vector<NormChar>>> PreTokenize(std::vector<NormChar> chars,
                                                                 bool starts_text) const;
  // Applies the post-processor's offset trimming, then fills byte_offsets.
  void FinishOffsets(const unicode::DecodedText& decoded,
                     const std::vector<std::pair<int32_t, int32_t>>& edges,
                     TokenizedText* out) const;

  std::vector<std::string> id_to_token_;
  Pipeline pipeline_;
  // Indices into pipeline_.added_tokens by first byte of their content, longest first, for the
  // raw (0) and the normalized (1) set.
  std::array<std::vector<std::vector<int32_t>>, 2> added_by_first_byte_;
  bool has_normalized_added_ = false;
  std::vector<bool> is_special_id_;
  // The "Ġ" (or whitespace) characters each token starts and ends with, for trim_offsets.
  std::vector<std::pair<int32_t, int32_t>> edge_spaces_;
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_TOKENIZERS_PIPELINE_TOKENIZER_H_

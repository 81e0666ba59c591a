// Tokenizers compatible with Hugging Face fast tokenizers (the `tokenizers` Rust library): the same
// tokens, ids and offsets, the same special-token templates, truncation and padding.
#ifndef ATTNSCOPE_MODELS_TOKENIZER_H_
#define ATTNSCOPE_MODELS_TOKENIZER_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace attnscope {

// A half-open span [start, end) into the input text.
struct Offset {
  int64_t start = 0;
  int64_t end = 0;
  bool operator==(const Offset& other) const { return start == other.start && end == other.end; }
};

// One text tokenized without special tokens. All vectors have one entry per token.
struct TokenizedText {
  std::vector<int64_t> ids;
  std::vector<std::string> tokens;
  // [start, end) in Unicode code points of the original text; characters the normaliser drops
  // belong to the kept character before them (Hugging Face NormalizedString alignment).
  std::vector<Offset> offsets;
  // The same spans in UTF-8 bytes of the original text.
  std::vector<Offset> byte_offsets;
  // Index of the pre-tokenized word each token came from (0-based, per text).
  std::vector<int64_t> word_ids;
  // True when only the text's first tokens are here: it has more, none of which any encoding would
  // keep (LoadedModel::Tokenize stops early on a text over the model's limit).
  bool is_prefix = false;

  size_t size() const { return ids.size(); }
};

// A model-ready encoding of one text or one text pair, with special tokens, truncation and padding
// applied. All vectors have one entry per position (including padding).
struct Encoding {
  std::vector<int64_t> input_ids;
  std::vector<std::string> tokens;
  std::vector<int64_t> token_type_ids;
  // 1 for real tokens (including special tokens), 0 for padding.
  std::vector<int64_t> attention_mask;
  // 1 for special tokens and padding, 0 for tokens of the texts.
  std::vector<int64_t> special_tokens_mask;
  // Code-point and byte offsets into the text the token came from; {0, 0} for special
  // tokens/padding.
  std::vector<Offset> offsets;
  std::vector<Offset> byte_offsets;
  // Word index within its text, -1 for special tokens and padding.
  std::vector<int64_t> word_ids;
  // 0 for the first text, 1 for the second, -1 for special tokens and padding.
  std::vector<int64_t> sequence_ids;

  size_t size() const { return input_ids.size(); }
  // Number of positions with attention_mask 1.
  int64_t num_real_tokens() const;
};

// Truncation strategies of Hugging Face fast tokenizers (tokenizers::utils::truncation).
enum class Truncation {
  kNone,
  // Removes tokens from the longer text first; for a pair, the shorter text is kept whole when it
  // fits in half the budget, otherwise both are cut to half (the second text gets the odd token).
  kLongestFirst,
  kOnlyFirst,
  kOnlySecond,
};

// Parses "none" / "longest_first" / "only_first" / "only_second". InvalidArgument otherwise.
absl::StatusOr<Truncation> ParseTruncation(std::string_view name);

struct EncodeOptions {
  bool add_special_tokens = true;
  Truncation truncation = Truncation::kNone;
  // Total length budget including special tokens when truncation is on; 0 means the tokenizer's
  // model_max_length.
  int64_t max_length = 0;
  // Right-pads with the pad token to this many positions (0: no padding). Never truncates.
  int64_t pad_to = 0;
};

// model_max_length of a tokenizer whose files set no limit (Hugging Face's VERY_LARGE_INTEGER):
// truncation to the model maximum then never cuts.
inline constexpr int64_t kNoMaxLength = std::numeric_limits<int64_t>::max();

// How a tokenizer changes text before it splits it, so that a display can explain its tokens.
struct TokenizerNormalization {
  bool lowercase = false;
  // Combining marks removed after NFD decomposition (BERT's strip_accents): "Tôi" -> "toi", and
  // Hangul syllables fall apart into conjoining jamo ("랭" -> "ᄅ" "ᅢ" "ᆼ").
  bool strip_accents = false;
  // The Unicode normalisation applied: "NFC", "NFD", "NFKC", "NFKC_CF" (NFKC with case folding), or
  // "" for none.
  std::string unicode_form;
  // One sentence for people saying what happens to a text, with examples.
  std::string description;
};

// Which file format a tokenizer was loaded from.
enum class TokenizerKind { kWordPiece, kSentencePiece, kByteLevelBpe, kWordLevel };

// "wordpiece", "sentencepiece", "bpe" or "wordlevel" (ModelInfo.tokenizer_kind).
std::string_view TokenizerKindName(TokenizerKind kind);

// One position of a post-processing template (Hugging Face TemplateProcessing).
struct TemplatePiece {
  enum class Kind { kSpecial, kFirst, kSecond };
  Kind kind = Kind::kSpecial;
  int64_t id = 0;     // for kSpecial
  std::string token;  // for kSpecial
  int64_t type_id = 0;
};

// The special-token layout of single texts and pairs, e.g. BERT's "[CLS] $A [SEP]" and
// "[CLS] $A [SEP] $B:1 [SEP]:1".
struct PostProcessorTemplate {
  std::vector<TemplatePiece> single;
  std::vector<TemplatePiece> pair;
};

// A loaded tokenizer. Immutable after construction and safe to use from many threads at once.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Tokenizes one text without special tokens.
  // InvalidArgument: `text` is not valid UTF-8 (the message gives the byte offset).
  virtual absl::StatusOr<TokenizedText> Tokenize(std::string_view text) const = 0;

  // Tokenizes `text`, adds special tokens, truncates and pads as `options` say.
  // InvalidArgument: invalid UTF-8; a budget smaller than the special tokens.
  absl::StatusOr<Encoding> Encode(std::string_view text, const EncodeOptions& options) const;

  // Encodes a text pair with the pair template ([CLS] a [SEP] b [SEP] for BERT).
  // InvalidArgument: invalid UTF-8; a strategy that cannot fit the budget (only_first with a first
  // text too short to cut, for example), naming the lengths and the option to change.
  absl::StatusOr<Encoding> EncodePair(std::string_view text, std::string_view text_pair,
                                      const EncodeOptions& options) const;

  // Encode / EncodePair on texts already tokenized (Tokenize): truncation, the special-token
  // template and padding. `second` is null for a single text; truncation may shorten it.
  // InvalidArgument as EncodePair. Lets a caller tokenize a text once and pair it with many others.
  absl::StatusOr<Encoding> Assemble(TokenizedText first, TokenizedText* second,
                                    const EncodeOptions& options) const;

  // Tokenizes a text of an encoder-decoder's target language (the decoder side) without special
  // tokens: Marian's target.spm, as transformers' MarianTokenizer(text_target=...). Every other
  // tokenizer has one vocabulary for both sides and tokenizes as Tokenize.
  // InvalidArgument: `text` is not valid UTF-8.
  virtual absl::StatusOr<TokenizedText> TokenizeTarget(std::string_view text) const {
    return Tokenize(text);
  }

  // TokenizeTarget with the single-text template, truncation and padding: the labels of a
  // sequence-to-sequence model ("t1 .. tn </s>" for Marian).
  absl::StatusOr<Encoding> EncodeTarget(std::string_view text, const EncodeOptions& options) const;

  // Joins tokens back into text, dropping special tokens when `skip_special_tokens`. For an
  // encoder-decoder the ids are of the target side (what the decoder writes).
  virtual std::string Decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const = 0;

  virtual TokenizerKind kind() const = 0;
  virtual TokenizerNormalization normalization() const = 0;
  virtual int64_t vocab_size() const = 0;
  // The token string of `id`, or "" when out of range.
  virtual std::string IdToToken(int64_t id) const = 0;

  int64_t pad_token_id() const { return pad_token_id_; }
  int64_t model_max_length() const { return model_max_length_; }
  const PostProcessorTemplate& post_processor() const { return template_; }

 protected:
  Tokenizer(PostProcessorTemplate post_processor, int64_t pad_token_id, int64_t model_max_length)
      : template_(std::move(post_processor)),
        pad_token_id_(pad_token_id),
        model_max_length_(model_max_length) {}

 private:
  PostProcessorTemplate template_;
  int64_t pad_token_id_;
  int64_t model_max_length_;
};

// Loads the tokenizer of a Hugging Face checkpoint directory, trying in order: tokenizer.json with
// a WordPiece model, a BPE one (GPT-2, RoBERTa, Llama 3, Qwen3, Gemma 3, Llama 2, CLIP), a Unigram
// one (XLM-RoBERTa, T5, ALBERT) or a WordLevel one (+ tokenizer_config.json's model_max_length and
// pad_token; one with a component BpeTokenizer, UnigramTokenizer or WordLevelTokenizer's
// FromTokenizerJson does not support is
// passed over for the files below, its refusal returned when none is there), source.spm +
// target.spm + vocab.json (Marian, + tokenizer_config.json's special tokens), spiece.model (T5, +
// tokenizer_config.json's extra_ids), vocab.json + merges.txt (byte-level BPE of GPT-2, RoBERTa and
// BART, + tokenizer_config.json's special tokens), vocab.txt
// (+ tokenizer_config.json), tokenizer.model (SentencePiece, + config.json and
// tokenizer_config.json for BOS/EOS handling). NotFound: none of those files exist.
// FailedPrecondition: a tokenizer.model but no loadable libattnscope_sentencepiece module (see
// sentencepiece_module.h). InvalidArgument: a file is malformed or of an unsupported kind; the
// message names the file and field.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& model_dir);

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_TOKENIZER_H_

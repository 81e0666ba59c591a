// BPE tokenizers, matching Hugging Face's `tokenizers` library token for token, offsets
// included: byte-level from vocab.json + merges.txt (GPT-2, RoBERTa and BART checkpoints, as
// BartTokenizerFast / RobertaTokenizerFast build them), and from a tokenizer.json with a BPE model
// (GPT-2, RoBERTa, Llama 3, Qwen3 layouts; the character-level BPE with byte fallback of Gemma 3
// and of SentencePiece's BPE models: Llama 2, Mistral v0.1/v0.2, TinyLlama). Both
// are the library's pipeline (PipelineTokenizer) with the BPE model; the slow files simply fix its
// components.
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
#include "models/tokenizers/pipeline_tokenizer.h"
#include "models/tokenizers/tokenizer.h"
#include "nlohmann/json.hpp"

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

class BpeTokenizer : public PipelineTokenizer {
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
  // (SentencePiece-style: Gemma 3; Llama 2, whose normalizer prepends "▁" and writes each space as
  // one, with no pre-tokenizer), with the components the library has and this reader supports:
  //   model: BPE with vocab, merges as "a b" strings or ["a", "b"] pairs (rank by position; a
  //     repeated pair takes its last rank, as the library's map does), ignore_merges (a pre-token
  //     that is whole in the vocabulary is one token: Llama 3), unk_token and fuse_unk (else a
  //     symbol with no token is dropped), byte_fallback (a character the vocabulary lacks becomes
  //     its bytes' "<0xXX>" tokens), continuing_subword_prefix (before every symbol of a piece but
  //     the first; a merge "a ##b" makes "a" + "b", the library's rule) and end_of_word_suffix
  //     (after the last symbol of a piece: CLIP's and openai-gpt's "</w>"), neither with
  //     byte_fallback; no dropout.
  //   normalizer: null, NFC, NFD, NFKC, NFKD, Replace (a "String" or "Regex" pattern), Prepend,
  //     Precompiled, Strip, Lowercase, StripAccents, BertNormalizer (openai-gpt's), Nmt, or a
  //     Sequence of those.
  //   pre_tokenizer: null, ByteLevel (add_prefix_space, use_regex with GPT-2's pattern), Split (a
  //     "Regex" or "String" pattern; behavior Isolated, Removed, MergedWithPrevious,
  //     MergedWithNext or Contiguous; invert), Metaspace, WhitespaceSplit, Whitespace,
  //     BertPreTokenizer, CharDelimiterSplit, Digits (individual_digits), Punctuation (behavior),
  //     or a Sequence of those.
  //   added_tokens: content, id, special, lstrip, rstrip, single_word, normalized. The
  //     non-normalized ones are matched in the raw text before normalization, the normalized ones
  //     (by their normalized content) in each normalized stretch between them; leftmost, then
  //     longest, as the library's Aho-Corasick does.
  //   post_processor: null, ByteLevel (trim_offsets, add_prefix_space), RobertaProcessing (cls,
  //     sep, trim_offsets, add_prefix_space), BertProcessing (cls, sep), TemplateProcessing
  //     (single, pair, special_tokens),
  //     or a Sequence of at most one offset trimmer and one template.
  //   decoder: ByteLevel, Replace (a "String" pattern), ByteFallback, Fuse, Strip, Metaspace,
  //     BPEDecoder (suffix), WordPiece (prefix, cleanup), a Sequence of those, or null (tokens
  //     joined by spaces).
  //   truncation and padding are not read: the caller's EncodeOptions decide, as transformers'
  //     fast tokenizers set them per call.
  // `model_max_length` comes from tokenizer_config.json (LoadTokenizer); the pad token is the
  // one of `pad_token` when the vocabulary has it, else id 0. `root` is the parsed file
  // (tokenizer_json::Read), `path` names it in errors.
  // Unimplemented: another model type, a component or setting that is not supported, naming it and
  // what is ("tokenizer.json '<path>': pre_tokenizer type 'UnicodeScripts' is not supported;
  // supported: ..."; a setting: "field 'model.dropout' = 0.1 is not supported; ...").
  // InvalidArgument, naming the field: anything malformed (a merge whose tokens the vocabulary
  // lacks, ids that collide or exceed the file's token count, a regex PCRE2 cannot compile).
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> FromTokenizerJson(
      const nlohmann::json& root, const std::string& path, int64_t model_max_length,
      const std::string& pad_token);

  TokenizerKind kind() const override { return TokenizerKind::kByteLevelBpe; }
  // PipelineTokenizer::NormalizerFlags (none, or NFC, for every published layout read here).
  TokenizerNormalization normalization() const override;

 private:
  // The model's settings.
  struct Model {
    // The model's alphabet: bytes as GPT-2's characters (a ByteLevel pre-tokenizer), or the
    // text's characters (SentencePiece-style BPE: Gemma), where a character the vocabulary lacks
    // becomes its UTF-8 bytes' "<0xXX>" tokens with byte_fallback, else unk.
    bool byte_level = true;
    bool byte_fallback = false;
    // Consecutive unknown characters make one unk token.
    bool fuse_unk = false;
    bool ignore_merges = false;
    // A byte (character) without a token becomes this one; -1: it is dropped (the library's BPE
    // without unk_token).
    int64_t unk_id = -1;
    // BPE::merge_word: the prefix is put before every symbol of a piece but the first ("##"), the
    // suffix after its last one ("</w>": CLIP's and openai-gpt's), before the symbol is looked up
    // and the merges run. Empty: none.
    std::string continuing_subword_prefix;
    std::string end_of_word_suffix;
  };
  // The rank of a merge and the id of the token it makes.
  struct Merge {
    int64_t rank;
    int64_t id;
  };

  BpeTokenizer(std::vector<std::string> id_to_token,
               absl::flat_hash_map<std::string, int64_t> token_to_id,
               absl::flat_hash_map<std::pair<int64_t, int64_t>, Merge> merges, Model model,
               Pipeline pipeline, PostProcessorTemplate post_processor, int64_t pad_token_id,
               int64_t model_max_length);

  // The piece's UTF-8 bytes become the characters of GPT-2's bytes_to_unicode (space "Ġ", newline
  // "Ċ"), and with ignore_merges a piece the vocabulary has whole is one token; otherwise they
  // merge by rank (the lowest-ranked pair first, leftmost among equals; `tokenizers`
  // Word::merge_all). Without a ByteLevel pre-tokenizer the symbols are the piece's characters
  // instead, a character the vocabulary lacks becoming its bytes' "<0xXX>" tokens (byte_fallback,
  // each spanning the character) or unk. A byte whose character the vocabulary lacks becomes the
  // unk token (vocab.json + merges.txt, as transformers' BartTokenizer maps it; tokenizer.json
  // with an unk_token) or is dropped (tokenizer.json without); a vocabulary with all 256 byte
  // characters, as every GPT-2-derived one has, never needs either. A token spans the characters
  // its bytes came from (a piece of a multi-byte character spans the whole character). With a
  // continuing_subword_prefix or end_of_word_suffix each symbol (byte character or character) is
  // looked up with them, as BPE::merge_word does; the offsets leave them out.
  void TokenizeWord(const std::vector<NormChar>& chars, int64_t word_index, TokenizedText* out,
                    std::vector<std::pair<int32_t, int32_t>>* edges) const override;

  // The BPE model's vocabulary (ignore_merges looks only here); from the slow files, with the
  // special tokens vocab.json lacks. Added tokens of a tokenizer.json are in id_to_token() only.
  absl::flat_hash_map<std::string, int64_t> token_to_id_;
  absl::flat_hash_map<std::pair<int64_t, int64_t>, Merge> merges_;
  Model model_;
  // The id of each byte's character (byte-level), or of its "<0xXX>" token (byte fallback), or -1.
  std::array<int64_t, 256> byte_ids_;
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_BPE_TOKENIZER_H_

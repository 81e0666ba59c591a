// Builds the WordPiece vocabulary of the default model from training text, splitting and
// normalizing words exactly as attnscope's WordPieceTokenizer does with the model's options
// (NFC, BertNormalizer, then BertPreTokenizer), so that every piece the vocabulary holds is one the
// engine can produce.
#ifndef ATTNSCOPE_TOOLS_TRAIN_VOCAB_BUILDER_H_
#define ATTNSCOPE_TOOLS_TRAIN_VOCAB_BUILDER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "models/tokenizers/wordpiece_tokenizer.h"

namespace attnscope::train {

// The special tokens, in id order: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4.
const std::vector<std::string>& SpecialTokens();

// Counts the normalized words of texts.
class WordCounter {
 public:
  // `normalization`: the options of the tokenizer the vocabulary is for (only the normalizer's
  // fields matter).
  static absl::StatusOr<WordCounter> Create(const WordPieceOptions& normalization);

  // InvalidArgument: `text` is not valid UTF-8.
  absl::Status Add(std::string_view text);

  // Normalized word (NormalizeWord) -> occurrences.
  const absl::flat_hash_map<std::string, int64_t>& counts() const { return counts_; }

 private:
  WordCounter(std::unique_ptr<WordPieceTokenizer> splitter, const WordPieceOptions& normalization)
      : splitter_(std::move(splitter)), normalization_(normalization) {}

  // A tokenizer whose vocabulary holds only the special tokens: every word it finds comes back as
  // one [UNK] token spanning the word, which is how the engine's pre-tokenizer is reused here.
  std::unique_ptr<WordPieceTokenizer> splitter_;
  WordPieceOptions normalization_;
  absl::flat_hash_map<std::string, int64_t> counts_;
};

// The normalization of one pre-tokenized word as the tokenizer does it: NFC when
// `normalization.nfc`, accents stripped (NFD, nonspacing marks dropped) when strip_accents (unset:
// when lowercase), then lower-cased when lowercase. InvalidArgument: invalid UTF-8.
absl::StatusOr<std::string> NormalizeWord(std::string_view word,
                                          const WordPieceOptions& normalization);

// Byte-pair merges over the words (word-initial pieces plain, continuations with "##", as the
// `tokenizers` WordPiece trainer does), starting from every character seen in both forms and then
// `required_tokens` (normalized already; "##" for continuations), until the vocabulary has
// `vocab_size` entries (fewer when the words run out of pairs). Ties are broken
// by the token string, so the result does not depend on hash order. Words longer than the
// tokenizer's 100-character limit are skipped (the engine maps them to [UNK] whole).
std::vector<std::string> BuildWordPieceVocab(
    const absl::flat_hash_map<std::string, int64_t>& word_counts, int64_t vocab_size,
    const std::vector<std::string>& required_tokens);

}  // namespace attnscope::train

#endif  // ATTNSCOPE_TOOLS_TRAIN_VOCAB_BUILDER_H_

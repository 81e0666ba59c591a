// SentencePiece's precompiled_charsmap, the normalizer of its models that tokenizer.json keeps as
// the Precompiled normalizer (XLM-RoBERTa, mBART, T5 converted by transformers), read and applied
// as Hugging Face's `tokenizers` does (its normalizers/precompiled.rs over the spm_precompiled
// crate), quirks included, so that tokens and offsets are the library's.
#ifndef ATTNSCOPE_MODELS_TOKENIZERS_PRECOMPILED_CHARSMAP_H_
#define ATTNSCOPE_MODELS_TOKENIZERS_PRECOMPILED_CHARSMAP_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace attnscope {

class PrecompiledCharsmap {
 public:
  // A change of the library's NormalizedString::transform: character `c` replaces the next
  // original character (`change` 0), replaces it and removes the `-change` after it (< 0), or is
  // inserted after the last one replaced (1).
  struct Change {
    char32_t c;
    int64_t change;
  };

  // Reads the charsmap's bytes (tokenizer.json has them in base64): a little-endian uint32, the
  // byte size of the trie, then the trie, a Darts-clone double array of little-endian uint32
  // units over UTF-8 bytes, whose leaves are offsets into the rest, the pool of replacements, each
  // ended by a NUL. InvalidArgument "expected X, got Y" (the caller names the field): too short
  // for its trie, a trie size that is not a multiple of 4, a pool that is not UTF-8, a leaf that
  // points outside the pool or a child outside the array.
  static absl::StatusOr<std::unique_ptr<PrecompiledCharsmap>> Parse(std::string_view bytes);

  // The changes that normalize `text` (code points), as the library computes them: for each
  // extended grapheme cluster shorter than 6 UTF-8 bytes that has a prefix in the trie, the
  // replacement of its SHORTEST such prefix for the whole cluster (the rest of the cluster is
  // lost: NFD "e" U+0302 U+0323 becomes "ê" when the charsmap has "e" U+0302, as XLM-R's has);
  // otherwise, for each character, its replacement when the trie has it, else the character.
  // A replacement of n characters for m takes the alignment of the first one replaced, its
  // characters past m inserted after it, or the m - n characters past it removed (the library's
  // `replace` in precompiled.rs, whose removal of all of them is charged to the change before it).
  std::vector<Change> Changes(const std::vector<char32_t>& text) const;

 private:
  PrecompiledCharsmap(std::vector<uint32_t> units, std::string pool)
      : units_(std::move(units)), pool_(std::move(pool)) {}

  // The replacement of the shortest prefix of `key` (UTF-8) the trie has, or nullopt: Darts-clone
  // common prefix search, first result.
  std::optional<std::string_view> Transform(std::string_view key) const;

  std::vector<uint32_t> units_;
  std::string pool_;
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_TOKENIZERS_PRECOMPILED_CHARSMAP_H_

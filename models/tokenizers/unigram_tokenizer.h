// SentencePiece Unigram tokenizers read from a Hugging Face tokenizer.json (XLM-RoBERTa, T5 and
// mT5, ALBERT, and the layout transformers' converters write), matching the `tokenizers` library
// token for token,
// offsets included: the library's pipeline (PipelineTokenizer) with its Unigram model.
#ifndef ATTNSCOPE_MODELS_TOKENIZERS_UNIGRAM_TOKENIZER_H_
#define ATTNSCOPE_MODELS_TOKENIZERS_UNIGRAM_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "models/tokenizers/pipeline_tokenizer.h"
#include "models/tokenizers/tokenizer.h"
#include "nlohmann/json.hpp"

namespace attnscope {

class UnigramTokenizer : public PipelineTokenizer {
 public:
  // Reads tokenizer.json `root` (parsed from `path`) whose model is Unigram: vocab as
  // [piece, score] pairs (a piece's id is its position; a repeated piece is looked up as its last
  // position, as the library's map keeps it), unk_id (required: the library fails to encode a
  // character no piece covers without one), byte_fallback. The other components as
  // PipelineTokenizer::ReadComponents reads them (XLM-R's: Precompiled, or Sequence of
  // Precompiled, Strip and Replace; Metaspace; TemplateProcessing; Metaspace decoder. T5's and
  // ALBERT's: WhitespaceSplit before Metaspace; ALBERT's NFKD, StripAccents and Lowercase before
  // Precompiled).
  // `model_max_length` comes from tokenizer_config.json; the pad token is `pad_token` when the
  // vocabulary has it, else id 0.
  // Unimplemented: another model type, a missing unk_id, or a component
  // ReadComponents refuses, naming it. InvalidArgument, naming the field: anything malformed (a
  // vocab entry that is not [string, number], an unk_id outside the vocabulary, a broken
  // precompiled_charsmap).
  static absl::StatusOr<std::unique_ptr<UnigramTokenizer>> FromTokenizerJson(
      const nlohmann::json& root, const std::string& path, int64_t model_max_length,
      const std::string& pad_token);

  TokenizerKind kind() const override { return TokenizerKind::kSentencePiece; }
  // PipelineTokenizer::NormalizerFlags: NFKC when the Precompiled normalizer is SentencePiece's
  // NFKC (it turns U+FB01 "ﬁ" into "fi"); lower-cased and accents removed by ALBERT's normalizer.
  TokenizerNormalization normalization() const override;

 private:
  // A byte trie of the pieces: node 0 is the root; a node's children are edges_[edges_begin,
  // edges_end), sorted by byte.
  struct TrieNode {
    // The id of the piece that ends here, or -1.
    int64_t id = -1;
    uint32_t edges_begin = 0;
    uint32_t edges_end = 0;
  };
  struct TrieEdge {
    unsigned char byte;
    uint32_t child;
  };

  UnigramTokenizer(std::vector<std::string> id_to_token, std::vector<double> scores,
                   std::vector<TrieNode> nodes, std::vector<TrieEdge> edges, int64_t unk_id,
                   bool byte_fallback, Pipeline pipeline, PostProcessorTemplate post_processor,
                   int64_t pad_token_id, int64_t model_max_length);

  // The library's Unigram::encode (encode_optimized): the segmentation of the piece's UTF-8 bytes
  // with the highest total score (Viterbi; among equal scores the path found first, pieces tried
  // shortest first), where a character no one-character piece covers may be unk, scored the
  // lowest piece score minus 10; consecutive unk characters make one token (fuse_unk, always on),
  // shown as written, whose id is the piece they spell or unk_id; with byte_fallback such a run
  // the vocabulary lacks becomes its bytes' "<0xXX>" pieces instead, each spanning the whole run,
  // when the vocabulary has them all (Unigram::tokenize). A token's offsets run from its first
  // character's alignment to its last one's.
  void TokenizeWord(const std::vector<NormChar>& chars, int64_t word_index, TokenizedText* out,
                    std::vector<std::pair<int32_t, int32_t>>* edges) const override;
  // The child of trie node `node` by `byte`, or -1.
  int64_t Child(uint32_t node, unsigned char byte) const;
  // The id of piece `text`, or -1.
  int64_t PieceId(std::string_view text) const;

  // Each vocab id's score.
  std::vector<double> scores_;
  std::vector<TrieNode> nodes_;
  std::vector<TrieEdge> edges_;
  int64_t unk_id_;
  double unk_score_;
  // The id of each byte's "<0xXX>" piece, or -1; all -1 without byte_fallback.
  std::array<int64_t, 256> byte_ids_;
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_TOKENIZERS_UNIGRAM_TOKENIZER_H_

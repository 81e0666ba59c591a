// WordLevel tokenizers read from a Hugging Face tokenizer.json (the models tokenizers'
// WordLevelTrainer makes: each word of the pre-tokenizer one token), matching the `tokenizers`
// library token for token, offsets included: the library's pipeline (PipelineTokenizer) with its
// WordLevel model (tokenizers/src/models/wordlevel/mod.rs).
#ifndef ATTNSCOPE_MODELS_TOKENIZERS_WORDLEVEL_TOKENIZER_H_
#define ATTNSCOPE_MODELS_TOKENIZERS_WORDLEVEL_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "models/tokenizers/pipeline_tokenizer.h"
#include "models/tokenizers/tokenizer.h"
#include "nlohmann/json.hpp"

namespace attnscope {

class WordLevelTokenizer : public PipelineTokenizer {
 public:
  // Reads tokenizer.json `root` (parsed from `path`) whose model is WordLevel: vocab (an object
  // token -> id, ids below the number of vocab and added tokens) and unk_token (a token of the
  // vocab: the library fails to encode a word the vocab lacks without one). The other components
  // as PipelineTokenizer::ReadComponents reads them (usually a Whitespace or WhitespaceSplit
  // pre-tokenizer). `model_max_length` comes from tokenizer_config.json; the pad token is
  // `pad_token` when the vocabulary has it, else id 0.
  // Unimplemented: another model type, or a component ReadComponents refuses, naming it.
  // InvalidArgument, naming the field: anything malformed (a vocab that is not such an object, ids
  // that collide or exceed the file's token count, an unk_token the vocab lacks).
  static absl::StatusOr<std::unique_ptr<WordLevelTokenizer>> FromTokenizerJson(
      const nlohmann::json& root, const std::string& path, int64_t model_max_length,
      const std::string& pad_token);

  TokenizerKind kind() const override { return TokenizerKind::kWordLevel; }
  // PipelineTokenizer::NormalizerFlags, and that each word is one token.
  TokenizerNormalization normalization() const override;

 private:
  WordLevelTokenizer(std::vector<std::string> id_to_token,
                     absl::flat_hash_map<std::string, int64_t> token_to_id, int64_t unk_id,
                     Pipeline pipeline, PostProcessorTemplate post_processor, int64_t pad_token_id,
                     int64_t model_max_length);

  // WordLevel::tokenize: the whole piece is one token, its vocab id or unk_token's, spanning
  // the piece's first character's alignment to its last one's.
  void TokenizeWord(const std::vector<NormChar>& chars, int64_t word_index, TokenizedText* out,
                    std::vector<std::pair<int32_t, int32_t>>* edges) const override;

  // The model's vocabulary; the added tokens are in id_to_token() only.
  absl::flat_hash_map<std::string, int64_t> token_to_id_;
  int64_t unk_id_;
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_TOKENIZERS_WORDLEVEL_TOKENIZER_H_

#include "models/tokenizers/wordlevel_tokenizer.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/tokenizers/tokenizer_json.h"
#include "models/tokenizers/unicode.h"

namespace attnscope {
namespace {

using json = nlohmann::json;
using tokenizer_json::FieldError;
using tokenizer_json::ReadVocab;
using tokenizer_json::Unsupported;

}  // namespace

absl::StatusOr<std::unique_ptr<WordLevelTokenizer>> WordLevelTokenizer::FromTokenizerJson(
    const json& root, const std::string& path, int64_t model_max_length,
    const std::string& pad_token) {
  const json model = root.value("model", json());
  const json type = model.is_object() ? model.value("type", json()) : model;
  if (type != "WordLevel") {
    return Unsupported(path, "model", type,
                       "WordLevel (here), WordPiece, BPE, Unigram (LoadTokenizer)");
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(tokenizer_json::Vocab vocab, ReadVocab(root, model, path));
  std::vector<std::string>& id_to_token = vocab.id_to_token;
  const absl::flat_hash_map<std::string, int64_t>& token_to_id = vocab.token_to_id;
  const json unk = model.value("unk_token", json("<unk>"));  // the library's default
  if (!unk.is_string() || !token_to_id.contains(unk.get<std::string>())) {
    return FieldError(path, "model.unk_token",
                      "a token of model.vocab (the library cannot encode a word the vocab lacks "
                      "without it)",
                      unk);
  }
  const int64_t unk_id = token_to_id.at(unk.get<std::string>());

  Pipeline pipeline;
  PostProcessorTemplate post_processor;
  ATTNSCOPE_RETURN_IF_ERROR(
      ReadComponents(root, path, vocab.id_limit, &id_to_token, &pipeline, &post_processor));
  const int64_t pad_id = PadId(id_to_token, pad_token);
  return std::unique_ptr<WordLevelTokenizer>(new WordLevelTokenizer(
      std::move(id_to_token), std::move(vocab.token_to_id), unk_id, std::move(pipeline),
      std::move(post_processor), pad_id, model_max_length));
}

WordLevelTokenizer::WordLevelTokenizer(std::vector<std::string> id_to_token,
                                       absl::flat_hash_map<std::string, int64_t> token_to_id,
                                       int64_t unk_id, Pipeline pipeline,
                                       PostProcessorTemplate post_processor, int64_t pad_token_id,
                                       int64_t model_max_length)
    : PipelineTokenizer(std::move(id_to_token), std::move(pipeline), std::move(post_processor),
                        pad_token_id, model_max_length),
      token_to_id_(std::move(token_to_id)),
      unk_id_(unk_id) {}

TokenizerNormalization WordLevelTokenizer::normalization() const {
  TokenizerNormalization normalization = NormalizerFlags();
  const std::string changes = std::move(normalization.description);
  normalization.description =
      absl::StrCat(changes.empty() ? "text kept as written" : changes,
                   "; each word is one token, a word the vocabulary lacks the unknown token");
  return normalization;
}

void WordLevelTokenizer::TokenizeWord(const std::vector<NormChar>& chars, int64_t word_index,
                                      TokenizedText* out,
                                      std::vector<std::pair<int32_t, int32_t>>* edges) const {
  if (chars.empty()) return;
  std::string word;
  int64_t start = chars.front().start;
  int64_t end = chars.front().end;
  for (const NormChar& c : chars) {
    unicode::AppendUtf8(c.c, &word);
    start = std::min(start, c.start);
    end = std::max(end, c.end);
  }
  const auto it = token_to_id_.find(word);
  const int64_t id = it != token_to_id_.end() ? it->second : unk_id_;
  Emit(id, id_to_token()[id], start, end, word_index, out, edges);
}

}  // namespace attnscope

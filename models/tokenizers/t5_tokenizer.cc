#include "models/tokenizers/t5_tokenizer.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"

namespace attnscope {

absl::StatusOr<std::unique_ptr<T5Tokenizer>> T5Tokenizer::Load(const std::string& model_path,
                                                               const T5TokenizerOptions& options) {
  if (!FileExists(model_path)) {
    return absl::NotFoundError(
        absl::StrCat("spiece.model '", model_path, "': expected a file, got nothing there"));
  }
  if (options.extra_ids < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spiece.model '", model_path,
        "': extra_ids: expected a number of sentinel tokens >= 0, got ", options.extra_ids));
  }
  // Loaded to append "</s>" only so that its template names the model's own eos piece; T5's
  // template below is built from it.
  SentencePieceOptions with_eos;
  with_eos.add_bos_token = false;
  with_eos.add_eos_token = true;
  ATTNSCOPE_ASSIGN_OR_RETURN(auto pieces, SentencePieceTokenizer::Load(model_path, with_eos));
  TemplatePiece eos = pieces->post_processor().single.back();
  // T5's pad is piece 0 of its own model; SentencePieceTokenizer falls back to 0 only when the
  // model defines none, which for T5 would pad with an ordinary piece.
  if (pieces->IdToToken(pieces->pad_token_id()) != "<pad>") {
    return absl::InvalidArgumentError(absl::StrCat(
        "spiece.model '", model_path, "': expected a \"<pad>\" piece (T5's pad_token, id 0), got '",
        pieces->IdToToken(pieces->pad_token_id()), "' at id ", pieces->pad_token_id()));
  }
  eos.type_id = 0;
  PostProcessorTemplate post_processor;
  post_processor.single = {{TemplatePiece::Kind::kFirst, 0, "", 0}, eos};
  post_processor.pair = {
      {TemplatePiece::Kind::kFirst, 0, "", 0}, eos, {TemplatePiece::Kind::kSecond, 0, "", 0}, eos};
  const int64_t pad_id = pieces->pad_token_id();
  return std::unique_ptr<T5Tokenizer>(new T5Tokenizer(std::move(pieces), std::move(post_processor),
                                                      pad_id, options.extra_ids,
                                                      options.model_max_length));
}

T5Tokenizer::T5Tokenizer(std::unique_ptr<SentencePieceTokenizer> pieces,
                         PostProcessorTemplate post_processor, int64_t pad_token_id,
                         int64_t extra_ids, int64_t model_max_length)
    : Tokenizer(std::move(post_processor), pad_token_id, model_max_length),
      pieces_(std::move(pieces)),
      extra_ids_(extra_ids) {}

absl::StatusOr<TokenizedText> T5Tokenizer::Tokenize(std::string_view text) const {
  return pieces_->Tokenize(text);
}

std::string T5Tokenizer::IdToToken(int64_t id) const {
  const int64_t spm_size = pieces_->vocab_size();
  if (id >= spm_size && id < vocab_size()) {
    return absl::StrCat("<extra_id_", vocab_size() - 1 - id, ">");
  }
  return pieces_->IdToToken(id);
}

std::string T5Tokenizer::Decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  const int64_t spm_size = pieces_->vocab_size();
  std::string text;
  std::vector<int64_t> run;
  const auto flush = [&] {
    if (run.empty()) return;
    text += pieces_->Decode(run, skip_special_tokens);
    run.clear();
  };
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (id >= spm_size) {  // a sentinel
      if (skip_special_tokens) continue;
      flush();
      text += IdToToken(id);
      continue;
    }
    run.push_back(id);
  }
  flush();
  return text;
}

}  // namespace attnscope

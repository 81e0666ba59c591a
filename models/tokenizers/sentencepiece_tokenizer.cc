#include "models/tokenizers/sentencepiece_tokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "models/tokenizers/unicode.h"

namespace attnscope {
namespace {

constexpr std::string_view kWordBoundary = "\xE2\x96\x81";  // U+2581, SentencePiece's space.

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

absl::StatusOr<int64_t> ResolveId(std::optional<int64_t> configured, int model_id,
                                  int64_t vocab_size, const std::string& path,
                                  const std::string& name) {
  const int64_t id = configured.value_or(model_id);
  if (id < 0 || id >= vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer.model '", path, "': ", name, ": expected an id in [0, ", vocab_size, "), got ",
        id, configured.has_value() ? " (from config.json)" : " (the model defines none)"));
  }
  return id;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Load(
    const std::string& model_path, const SentencePieceOptions& options) {
  // SentencePiece reads the file itself: only a regular file of bounded size is handed to it.
  if (absl::Status file = CheckRegularFile(model_path, kMaxTokenizerFileBytes); !file.ok()) {
    if (!absl::IsNotFound(file)) return file;
    return absl::NotFoundError(
        absl::StrCat("tokenizer.model '", model_path, "': expected a file, got nothing there"));
  }
  std::string error;
  if (!sentencepiece_bridge::Processor::LoadModule(&error)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tokenizer.model '", model_path, "': SentencePiece support is not installed: ", error));
  }
  auto processor = std::make_unique<sentencepiece_bridge::Processor>();
  if (!processor->Load(model_path, &error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.model '", model_path,
                     "': expected a SentencePiece model, got a file it cannot load: ", error));
  }
  const int64_t vocab_size = processor->GetPieceSize();
  const auto special = [&](int64_t id, int64_t type_id) {
    return TemplatePiece{TemplatePiece::Kind::kSpecial, id,
                         processor->IdToPiece(static_cast<int>(id)), type_id};
  };
  PostProcessorTemplate post_processor;
  std::optional<TemplatePiece> bos[2];
  std::optional<TemplatePiece> eos[2];
  if (options.add_bos_token) {
    ATTNSCOPE_ASSIGN_OR_RETURN(int64_t bos_id, ResolveId(options.bos_token_id, processor->bos_id(),
                                                         vocab_size, model_path, "bos_token_id"));
    bos[0] = special(bos_id, 0);
    bos[1] = special(bos_id, 1);
  }
  if (options.add_eos_token) {
    ATTNSCOPE_ASSIGN_OR_RETURN(int64_t eos_id, ResolveId(options.eos_token_id, processor->eos_id(),
                                                         vocab_size, model_path, "eos_token_id"));
    eos[0] = special(eos_id, 0);
    eos[1] = special(eos_id, 1);
  }
  // LlamaTokenizerFast.update_post_processor: "<s>:0 $A:0 </s>:0" and, for a pair,
  // "... <s>:1 $B:1 </s>:1", each special token present only when enabled.
  const auto append_text = [&](std::vector<TemplatePiece>* pieces, int type_id) {
    if (bos[type_id].has_value()) pieces->push_back(*bos[type_id]);
    pieces->push_back({type_id == 0 ? TemplatePiece::Kind::kFirst : TemplatePiece::Kind::kSecond, 0,
                       "", type_id});
    if (eos[type_id].has_value()) pieces->push_back(*eos[type_id]);
  };
  append_text(&post_processor.single, 0);
  append_text(&post_processor.pair, 0);
  append_text(&post_processor.pair, 1);

  int64_t pad_id = 0;
  if (options.pad_token_id.has_value()) {
    ATTNSCOPE_ASSIGN_OR_RETURN(
        pad_id, ResolveId(options.pad_token_id, -1, vocab_size, model_path, "pad_token_id"));
  } else if (processor->pad_id() >= 0) {
    pad_id = processor->pad_id();
  }
  return std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer(
      std::move(processor), std::move(post_processor), pad_id, options.model_max_length));
}

SentencePieceTokenizer::SentencePieceTokenizer(
    std::unique_ptr<sentencepiece_bridge::Processor> processor,
    PostProcessorTemplate post_processor, int64_t pad_token_id, int64_t model_max_length)
    : Tokenizer(std::move(post_processor), pad_token_id, model_max_length),
      processor_(std::move(processor)) {}

int64_t SentencePieceTokenizer::vocab_size() const { return processor_->GetPieceSize(); }

TokenizerNormalization SentencePieceNormalization(const std::string& name,
                                                  std::string_view model_file) {
  TokenizerNormalization normalization;
  if (name == "nmt_nfkc" || name == "nfkc") {
    normalization.unicode_form = "NFKC";
  } else if (name == "nmt_nfkc_cf" || name == "nfkc_cf") {
    normalization.unicode_form = "NFKC_CF";
    normalization.lowercase = true;
  }
  const std::string normalizer =
      absl::StrCat("SentencePiece normalizer '", name.empty() ? "identity" : name, "'",
                   model_file.empty() ? "" : absl::StrCat(" of ", std::string(model_file)));
  normalization.description =
      normalization.unicode_form.empty()
          ? absl::StrCat(normalizer, ": text kept as written (case and accents kept)")
          : absl::StrCat(normalizer, ": Unicode ", normalization.unicode_form,
                         normalization.lowercase ? " with case folding" : " (case kept)",
                         ", accents kept");
  return normalization;
}

TokenizerNormalization SentencePieceTokenizer::normalization() const {
  return SentencePieceNormalization(processor_->NormalizerName(), /*model_file=*/"");
}

std::string SentencePieceTokenizer::IdToToken(int64_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return processor_->IdToPiece(static_cast<int>(id));
}

absl::StatusOr<TokenizedText> SentencePieceTokenizer::Tokenize(std::string_view text) const {
  // SentencePiece would replace invalid bytes silently; the API promises an error instead.
  ATTNSCOPE_ASSIGN_OR_RETURN(unicode::DecodedText decoded, unicode::DecodeUtf8(text));
  std::vector<sentencepiece_bridge::Piece> pieces;
  std::string error;
  if (!processor_->Encode(text, &pieces, &error)) {
    return absl::InternalError(absl::StrCat("SentencePiece encode failed: ", error));
  }
  TokenizedText out;
  out.ids.reserve(pieces.size());
  int64_t word_index = -1;
  for (const sentencepiece_bridge::Piece& piece : pieces) {
    const int64_t byte_begin = std::min<int64_t>(piece.begin, static_cast<int64_t>(text.size()));
    const int64_t byte_end =
        std::clamp<int64_t>(piece.end, byte_begin, static_cast<int64_t>(text.size()));
    const int64_t start = decoded.CodePointAtByte(byte_begin);
    const int64_t end = std::max(start, decoded.CodePointsBeforeByte(byte_end));
    if (word_index < 0 || StartsWith(piece.piece, kWordBoundary)) ++word_index;
    out.ids.push_back(piece.id);
    out.tokens.push_back(piece.piece);
    out.offsets.push_back({start, end});
    out.byte_offsets.push_back({decoded.ByteOffset(start), decoded.ByteOffset(end)});
    out.word_ids.push_back(word_index);
  }
  return out;
}

std::string SentencePieceTokenizer::Decode(const std::vector<int64_t>& ids,
                                           bool skip_special_tokens) const {
  std::string text;
  std::vector<int> run;
  const auto flush = [&] {
    if (run.empty()) return;
    std::string piece_text;
    std::string error;
    // Decoding only fails on out-of-range ids, which never reach `run`.
    processor_->Decode(run, &piece_text, &error);
    // SentencePiece drops the leading space of its input's first piece; after a literal special
    // token that space is real (HF: "<s> Once").
    if (!text.empty() && StartsWith(processor_->IdToPiece(run.front()), kWordBoundary)) {
      text.push_back(' ');
    }
    text += piece_text;
    run.clear();
  };
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    const int sp_id = static_cast<int>(id);
    if (processor_->IsControl(sp_id) || processor_->IsUnknown(sp_id)) {
      if (skip_special_tokens) continue;
      flush();
      text += processor_->IdToPiece(sp_id);
      continue;
    }
    run.push_back(sp_id);
  }
  flush();
  return text;
}

}  // namespace attnscope

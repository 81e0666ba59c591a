#include "models/tokenizers/marian_tokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/json_util.h"
#include "common/status_macros.h"
#include "models/tokenizers/sentencepiece_tokenizer.h"
#include "models/tokenizers/unicode.h"
#include "nlohmann/json.hpp"

namespace attnscope {
namespace {

using json = nlohmann::json;

constexpr std::string_view kWordBoundary = "\xE2\x96\x81";  // U+2581, SentencePiece's space.

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// A byte range [begin, end) of the caller's text.
struct Span {
  size_t begin = 0;
  size_t end = 0;
};

// The matches of MarianTokenizer.language_code_re, re.compile(">>.+<<"), left to right as
// re.sub finds them: ">>", at least one character, and the last "<<" of the line ('.' matches
// anything but '\n').
std::vector<Span> LanguageCodes(std::string_view text) {
  std::vector<Span> codes;
  size_t from = 0;
  while (from < text.size()) {
    const size_t open = text.find(">>", from);
    if (open == std::string_view::npos) break;
    const size_t line_end = std::min(text.find('\n', open), text.size());
    const size_t close = text.substr(0, line_end).rfind("<<");
    if (close != std::string_view::npos && close >= open + 3) {
      codes.push_back({open, close + 2});
      from = close + 2;
    } else {
      from = open + 1;
    }
  }
  return codes;
}

std::string StripWhitespace(std::string text) {
  const auto is_space = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  };
  size_t begin = 0;
  while (begin < text.size() && is_space(text[begin])) ++begin;
  size_t end = text.size();
  while (end > begin && is_space(text[end - 1])) --end;
  return text.substr(begin, end - begin);
}

absl::StatusOr<std::unique_ptr<sentencepiece_bridge::Processor>> LoadModel(
    const std::string& path) {
  // SentencePiece reads the file itself: only a regular file of bounded size is handed to it.
  if (absl::Status file = CheckRegularFile(path, kMaxTokenizerFileBytes); !file.ok()) {
    if (!absl::IsNotFound(file)) return file;
    return absl::NotFoundError(absl::StrCat("Marian SentencePiece model '", path,
                                            "': expected a file, got nothing there"));
  }
  std::string error;
  if (!sentencepiece_bridge::Processor::LoadModule(&error)) {
    return absl::FailedPreconditionError(
        absl::StrCat("Marian SentencePiece model '", path,
                     "': SentencePiece support is not installed: ", error));
  }
  auto processor = std::make_unique<sentencepiece_bridge::Processor>();
  if (!processor->Load(path, &error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Marian SentencePiece model '", path,
                     "': expected a SentencePiece model, got a file it cannot load: ", error));
  }
  return processor;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MarianTokenizer>> MarianTokenizer::Load(
    const std::string& model_dir, const MarianTokenizerOptions& options) {
  ATTNSCOPE_ASSIGN_OR_RETURN(auto source, LoadModel(JoinPath(model_dir, "source.spm")));
  ATTNSCOPE_ASSIGN_OR_RETURN(auto target, LoadModel(JoinPath(model_dir, "target.spm")));

  const std::string vocab_path = JoinPath(model_dir, "vocab.json");
  if (absl::Status file = CheckRegularFile(vocab_path, kMaxTokenizerFileBytes); !file.ok()) {
    if (!absl::IsNotFound(file)) return file;
    return absl::NotFoundError(
        absl::StrCat("vocab.json '", vocab_path, "': expected a file, got nothing there"));
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(std::string contents,
                             ReadFileToString(vocab_path, kMaxTokenizerFileBytes));
  const json vocab = json::parse(contents, nullptr, /*allow_exceptions=*/false);
  if (vocab.is_discarded() || !vocab.is_object() || vocab.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("vocab.json '", vocab_path,
                                                   "': expected a JSON object of piece -> id, got ",
                                                   DescribeJsonText(contents)));
  }
  std::vector<std::string> pieces(vocab.size());
  std::vector<bool> seen(vocab.size(), false);
  absl::flat_hash_map<std::string, int64_t> ids;
  ids.reserve(vocab.size());
  for (const auto& [piece, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= static_cast<int64_t>(vocab.size()) || seen[id.get<int64_t>()]) {
      return absl::InvalidArgumentError(absl::StrCat("vocab.json '", vocab_path, "': piece '",
                                                     piece, "': expected a distinct id in [0, ",
                                                     vocab.size(), "), got ", id.dump()));
    }
    seen[id.get<int64_t>()] = true;
    pieces[id.get<int64_t>()] = piece;
    ids[piece] = id.get<int64_t>();
  }
  const auto special_id = [&](const std::string& token,
                              const std::string& name) -> absl::StatusOr<int64_t> {
    const auto it = ids.find(token);
    if (it == ids.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "vocab.json '", vocab_path, "': ", name, " '", token,
          "': expected an entry for it, got none (set tokenizer_config.json's ", name, ")"));
    }
    return it->second;
  };
  ATTNSCOPE_ASSIGN_OR_RETURN(int64_t eos_id, special_id(options.eos_token, "eos_token"));
  ATTNSCOPE_ASSIGN_OR_RETURN(int64_t unk_id, special_id(options.unk_token, "unk_token"));
  ATTNSCOPE_ASSIGN_OR_RETURN(int64_t pad_id, special_id(options.pad_token, "pad_token"));

  const TemplatePiece eos{TemplatePiece::Kind::kSpecial, eos_id, options.eos_token, 0};
  PostProcessorTemplate post_processor;
  post_processor.single = {{TemplatePiece::Kind::kFirst, 0, "", 0}, eos};
  post_processor.pair = {
      {TemplatePiece::Kind::kFirst, 0, "", 0}, {TemplatePiece::Kind::kSecond, 0, "", 0}, eos};
  return std::unique_ptr<MarianTokenizer>(
      new MarianTokenizer(std::move(source), std::move(target), std::move(pieces), std::move(ids),
                          {eos_id, unk_id, pad_id}, std::move(post_processor), pad_id, unk_id,
                          options.model_max_length));
}

MarianTokenizer::MarianTokenizer(std::unique_ptr<sentencepiece_bridge::Processor> source,
                                 std::unique_ptr<sentencepiece_bridge::Processor> target,
                                 std::vector<std::string> pieces,
                                 absl::flat_hash_map<std::string, int64_t> ids,
                                 std::vector<int64_t> special_ids,
                                 PostProcessorTemplate post_processor, int64_t pad_token_id,
                                 int64_t unk_token_id, int64_t model_max_length)
    : Tokenizer(std::move(post_processor), pad_token_id, model_max_length),
      source_(std::move(source)),
      target_(std::move(target)),
      pieces_(std::move(pieces)),
      ids_(std::move(ids)),
      special_ids_(std::move(special_ids)),
      unk_token_id_(unk_token_id) {}

TokenizerNormalization MarianTokenizer::normalization() const {
  return SentencePieceNormalization(source_->NormalizerName(), "source.spm");
}

std::string MarianTokenizer::IdToToken(int64_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return pieces_[id];
}

absl::StatusOr<TokenizedText> MarianTokenizer::Tokenize(std::string_view text) const {
  return TokenizeWith(*source_, text);
}

absl::StatusOr<TokenizedText> MarianTokenizer::TokenizeTarget(std::string_view text) const {
  return TokenizeWith(*target_, text);
}

absl::StatusOr<TokenizedText> MarianTokenizer::TokenizeWith(
    const sentencepiece_bridge::Processor& processor, std::string_view text) const {
  ATTNSCOPE_ASSIGN_OR_RETURN(unicode::DecodedText decoded, unicode::DecodeUtf8(text));
  // The text SentencePiece sees, and for each of its bytes the byte of `text` it came from.
  const std::vector<Span> codes = LanguageCodes(text);
  std::string kept;
  std::vector<size_t> origin;
  size_t from = 0;
  for (size_t i = 0; i <= codes.size(); ++i) {
    const size_t until = i < codes.size() ? codes[i].begin : text.size();
    for (size_t at = from; at < until; ++at) {
      kept.push_back(text[at]);
      origin.push_back(at);
    }
    if (i < codes.size()) from = codes[i].end;
  }
  std::vector<sentencepiece_bridge::Piece> pieces;
  std::string error;
  if (!processor.Encode(kept, &pieces, &error)) {
    return absl::InternalError(absl::StrCat("SentencePiece encode failed: ", error));
  }

  TokenizedText out;
  int64_t word_index = -1;
  const auto add = [&](const std::string& piece, size_t byte_begin, size_t byte_end,
                       bool starts_word) {
    const int64_t start = decoded.CodePointAtByte(static_cast<int64_t>(byte_begin));
    const int64_t end =
        std::max(start, decoded.CodePointsBeforeByte(static_cast<int64_t>(byte_end)));
    if (word_index < 0 || starts_word) ++word_index;
    const auto it = ids_.find(piece);
    out.ids.push_back(it == ids_.end() ? unk_token_id_ : it->second);
    out.tokens.push_back(piece);
    out.offsets.push_back({start, end});
    out.byte_offsets.push_back({decoded.ByteOffset(start), decoded.ByteOffset(end)});
    out.word_ids.push_back(word_index);
  };
  if (!codes.empty() && codes.front().begin == 0) {
    add(std::string(text.substr(0, codes.front().end)), 0, codes.front().end,
        /*starts_word=*/true);
  }
  for (const sentencepiece_bridge::Piece& piece : pieces) {
    // A piece covering no input (the 2nd..nth byte of a byte-fallback character) sits where it is.
    const size_t begin = std::min<size_t>(piece.begin, kept.size());
    const size_t end = std::clamp<size_t>(piece.end, begin, kept.size());
    const size_t byte_begin = begin < kept.size() ? origin[begin] : text.size();
    const size_t byte_end = end > begin ? origin[end - 1] + 1 : byte_begin;
    add(piece.piece, byte_begin, byte_end, StartsWith(piece.piece, kWordBoundary));
  }
  return out;
}

std::string MarianTokenizer::Decode(const std::vector<int64_t>& ids,
                                    bool skip_special_tokens) const {
  std::string text;
  std::vector<std::string> run;
  const auto flush = [&] {
    std::string piece_text;
    std::string error;
    // DecodePieces only fails on a malformed model, which Load would have refused.
    if (!run.empty()) target_->DecodePieces(run, &piece_text, &error);
    text += piece_text;
    run.clear();
  };
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (std::find(special_ids_.begin(), special_ids_.end(), id) != special_ids_.end()) {
      if (skip_special_tokens) continue;
      flush();
      absl::StrAppend(&text, pieces_[id], " ");
      continue;
    }
    run.push_back(pieces_[id]);
  }
  flush();
  // MarianTokenizer.convert_tokens_to_string turns the U+2581 that SentencePiece leaves (after a
  // special token) into spaces and strips the ends.
  std::string spaced;
  for (size_t at = 0; at < text.size();) {
    if (StartsWith(std::string_view(text).substr(at), kWordBoundary)) {
      spaced.push_back(' ');
      at += kWordBoundary.size();
    } else {
      spaced.push_back(text[at++]);
    }
  }
  return StripWhitespace(std::move(spaced));
}

}  // namespace attnscope

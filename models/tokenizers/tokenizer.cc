#include "models/tokenizers/tokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace attnscope {
namespace {

int64_t Length(const TokenizedText& text) { return static_cast<int64_t>(text.size()); }

void TruncateTo(TokenizedText* text, int64_t length) {
  if (Length(*text) <= length) return;
  text->ids.resize(length);
  text->tokens.resize(length);
  text->offsets.resize(length);
  text->byte_offsets.resize(length);
  text->word_ids.resize(length);
}

int64_t CountSpecial(const std::vector<TemplatePiece>& pieces) {
  return std::count_if(pieces.begin(), pieces.end(), [](const TemplatePiece& piece) {
    return piece.kind == TemplatePiece::Kind::kSpecial;
  });
}

// tokenizers::utils::truncation::truncate_encodings with stride 0 and right-side truncation;
// `budget` excludes the special tokens. `second` is null for a single text.
absl::Status Truncate(Truncation strategy, int64_t budget, TokenizedText* first,
                      TokenizedText* second) {
  const int64_t total = Length(*first) + (second != nullptr ? Length(*second) : 0);
  if (strategy == Truncation::kNone || total <= budget) return absl::OkStatus();
  if (strategy == Truncation::kLongestFirst) {
    if (second == nullptr) {
      TruncateTo(first, budget);
      return absl::OkStatus();
    }
    int64_t n1 = Length(*first);
    int64_t n2 = Length(*second);
    const bool swap = n1 > n2;
    if (swap) std::swap(n1, n2);
    // The shorter text keeps everything it can while leaving the longer one at least as much.
    n2 = n1 > budget ? n1 : std::max(n1, budget - n1);
    if (n1 + n2 > budget) {
      n1 = budget / 2;
      n2 = n1 + budget % 2;
    }
    if (swap) std::swap(n1, n2);
    TruncateTo(first, n1);
    TruncateTo(second, n2);
    return absl::OkStatus();
  }
  const bool cut_first = strategy == Truncation::kOnlyFirst;
  if (!cut_first && second == nullptr) {
    return absl::InvalidArgumentError(
        "truncation 'only_second': expected a text pair, got a single text; use longest_first or "
        "only_first for single texts");
  }
  TokenizedText* target = cut_first ? first : second;
  const int64_t to_remove = total - budget;
  if (Length(*target) <= to_remove) {
    const char* strategy = cut_first ? "only_first" : "only_second";
    return absl::InvalidArgumentError(absl::StrCat(
        "truncation '", strategy, "': the texts have ", total, " tokens (first ", Length(*first),
        ", second ", second != nullptr ? Length(*second) : 0, ") and max_length leaves room for ",
        budget, " besides the special tokens, so ", to_remove, " must be cut from the ",
        cut_first ? "first" : "second", " text (", strategy,
        " cuts no other); expected it to have more than ", to_remove, " tokens, got ",
        Length(*target), "; use truncation longest_first or a larger max_length"));
  }
  TruncateTo(target, Length(*target) - to_remove);
  return absl::OkStatus();
}

void AppendSpecial(const TemplatePiece& piece, Encoding* encoding) {
  encoding->input_ids.push_back(piece.id);
  encoding->tokens.push_back(piece.token);
  encoding->token_type_ids.push_back(piece.type_id);
  encoding->attention_mask.push_back(1);
  encoding->special_tokens_mask.push_back(1);
  encoding->offsets.push_back({0, 0});
  encoding->byte_offsets.push_back({0, 0});
  encoding->word_ids.push_back(-1);
  encoding->sequence_ids.push_back(-1);
}

void AppendText(const TokenizedText& text, int64_t type_id, int64_t sequence_id,
                Encoding* encoding) {
  encoding->input_ids.insert(encoding->input_ids.end(), text.ids.begin(), text.ids.end());
  encoding->tokens.insert(encoding->tokens.end(), text.tokens.begin(), text.tokens.end());
  encoding->token_type_ids.insert(encoding->token_type_ids.end(), text.size(), type_id);
  encoding->attention_mask.insert(encoding->attention_mask.end(), text.size(), 1);
  encoding->special_tokens_mask.insert(encoding->special_tokens_mask.end(), text.size(), 0);
  encoding->offsets.insert(encoding->offsets.end(), text.offsets.begin(), text.offsets.end());
  encoding->byte_offsets.insert(encoding->byte_offsets.end(), text.byte_offsets.begin(),
                                text.byte_offsets.end());
  encoding->word_ids.insert(encoding->word_ids.end(), text.word_ids.begin(), text.word_ids.end());
  encoding->sequence_ids.insert(encoding->sequence_ids.end(), text.size(), sequence_id);
}

void PadTo(int64_t length, int64_t pad_id, const std::string& pad_token, Encoding* encoding) {
  const int64_t current = static_cast<int64_t>(encoding->size());
  if (current >= length) return;
  const size_t n = static_cast<size_t>(length - current);
  encoding->input_ids.insert(encoding->input_ids.end(), n, pad_id);
  encoding->tokens.insert(encoding->tokens.end(), n, pad_token);
  encoding->token_type_ids.insert(encoding->token_type_ids.end(), n, 0);
  encoding->attention_mask.insert(encoding->attention_mask.end(), n, 0);
  encoding->special_tokens_mask.insert(encoding->special_tokens_mask.end(), n, 1);
  encoding->offsets.insert(encoding->offsets.end(), n, Offset{0, 0});
  encoding->byte_offsets.insert(encoding->byte_offsets.end(), n, Offset{0, 0});
  encoding->word_ids.insert(encoding->word_ids.end(), n, -1);
  encoding->sequence_ids.insert(encoding->sequence_ids.end(), n, -1);
}

}  // namespace

int64_t Encoding::num_real_tokens() const {
  return std::count(attention_mask.begin(), attention_mask.end(), 1);
}

absl::StatusOr<Truncation> ParseTruncation(std::string_view name) {
  if (name == "none") return Truncation::kNone;
  if (name == "longest_first") return Truncation::kLongestFirst;
  if (name == "only_first") return Truncation::kOnlyFirst;
  if (name == "only_second") return Truncation::kOnlySecond;
  return absl::InvalidArgumentError(
      absl::StrCat("truncation '", std::string(name),
                   "': expected none, longest_first, only_first or only_second"));
}

std::string_view TokenizerKindName(TokenizerKind kind) {
  switch (kind) {
    case TokenizerKind::kWordPiece:
      return "wordpiece";
    case TokenizerKind::kSentencePiece:
      return "sentencepiece";
    case TokenizerKind::kByteLevelBpe:
      return "bpe";
    case TokenizerKind::kWordLevel:
      return "wordlevel";
  }
  return "unknown";
}

absl::StatusOr<Encoding> Tokenizer::Encode(std::string_view text,
                                           const EncodeOptions& options) const {
  ATTNSCOPE_ASSIGN_OR_RETURN(TokenizedText first, Tokenize(text));
  return Assemble(std::move(first), nullptr, options);
}

absl::StatusOr<Encoding> Tokenizer::EncodeTarget(std::string_view text,
                                                 const EncodeOptions& options) const {
  ATTNSCOPE_ASSIGN_OR_RETURN(TokenizedText first, TokenizeTarget(text));
  return Assemble(std::move(first), nullptr, options);
}

absl::StatusOr<Encoding> Tokenizer::EncodePair(std::string_view text, std::string_view text_pair,
                                               const EncodeOptions& options) const {
  ATTNSCOPE_ASSIGN_OR_RETURN(TokenizedText first, Tokenize(text));
  ATTNSCOPE_ASSIGN_OR_RETURN(TokenizedText second, Tokenize(text_pair));
  return Assemble(std::move(first), &second, options);
}

absl::StatusOr<Encoding> Tokenizer::Assemble(TokenizedText first, TokenizedText* second,
                                             const EncodeOptions& options) const {
  if (options.max_length < 0 || options.pad_to < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_length/pad_to: expected values >= 0, got ",
                                                   options.max_length, "/", options.pad_to));
  }
  const std::vector<TemplatePiece>& pieces = second == nullptr ? template_.single : template_.pair;
  const int64_t num_special = options.add_special_tokens ? CountSpecial(pieces) : 0;
  if (options.truncation != Truncation::kNone) {
    const int64_t max_length = options.max_length > 0 ? options.max_length : model_max_length_;
    if (max_length < num_special) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_length ", max_length, ": expected at least the ", num_special,
                       " special tokens the template adds, got fewer; use a larger max_length"));
    }
    ATTNSCOPE_RETURN_IF_ERROR(
        Truncate(options.truncation, max_length - num_special, &first, second));
  }

  Encoding encoding;
  if (options.add_special_tokens) {
    for (const TemplatePiece& piece : pieces) {
      switch (piece.kind) {
        case TemplatePiece::Kind::kSpecial:
          AppendSpecial(piece, &encoding);
          break;
        case TemplatePiece::Kind::kFirst:
          AppendText(first, piece.type_id, 0, &encoding);
          break;
        case TemplatePiece::Kind::kSecond:
          if (second != nullptr) AppendText(*second, piece.type_id, 1, &encoding);
          break;
      }
    }
  } else {
    // Without a template the texts keep the type ids they were encoded with: 0 and 1.
    AppendText(first, 0, 0, &encoding);
    if (second != nullptr) AppendText(*second, 1, 1, &encoding);
  }
  PadTo(options.pad_to, pad_token_id_, IdToToken(pad_token_id_), &encoding);
  return encoding;
}

}  // namespace attnscope

#include "models/tokenizers/wordpiece_tokenizer.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/json_util.h"
#include "common/status_macros.h"
#include "models/tokenizers/tokenizer_json.h"
#include "models/tokenizers/unicode.h"
#include "nlohmann/json.hpp"

namespace attnscope {
namespace {

using json = nlohmann::json;

// A character of the normalized text and the span [start, end) of original code points it stands
// for (Hugging Face NormalizedString alignments, in code points instead of bytes).
struct NormChar {
  char32_t c;
  int64_t start;
  int64_t end;
};

// BertNormalizer's is_control: general category C*, except the three whitespace controls.
bool IsControl(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  return unicode::IsOther(c);
}

// BertNormalizer's is_chinese_char, ranges verbatim from `tokenizers` (including its 0x2B920
// start for Extension E, where the original BERT code has 0x2B820).
bool IsChineseChar(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// BertPreTokenizer's is_bert_punc: ASCII punctuation (which includes symbols such as $ + < = > ^ `
// | ~) or Unicode P*.
bool IsBertPunctuation(char32_t c) {
  const bool ascii_punctuation = (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) ||
                                 (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
  return ascii_punctuation || unicode::IsPunctuation(c);
}

// Removes characters as NormalizedString::filter does: a kept character keeps its own span and a
// removed one's span goes with it, so a token that ends before removed characters ends there too
// (npm tokenizers 0.23.2 gives "va" of an NFD "và" [0, 2), not [0, 3)), and removed characters
// between two tokens belong to neither. Only a token's inner removed characters lie in its span.
template <typename Drop>
std::vector<NormChar> Filter(const std::vector<NormChar>& chars, Drop drop) {
  std::vector<NormChar> kept;
  kept.reserve(chars.size());
  std::copy_if(chars.begin(), chars.end(), std::back_inserter(kept),
               [&](const NormChar& ch) { return !drop(ch.c); });
  return kept;
}

// BertNormalizer::normalize, stage by stage in the reference order (each stage sees the previous
// stage's alignments, which matters for where dropped characters' spans end up).
std::vector<NormChar> Normalize(std::vector<NormChar> chars, const WordPieceOptions& options) {
  if (options.nfc) {
    std::vector<char32_t> code_points;
    code_points.reserve(chars.size());
    for (const NormChar& ch : chars) code_points.push_back(ch.c);
    std::vector<NormChar> composed;
    composed.reserve(chars.size());
    for (const unicode::ComposedChar& ch : unicode::Nfc(code_points)) {
      composed.push_back({ch.c, chars[ch.first].start, chars[ch.last].end});
    }
    chars = std::move(composed);
  }
  if (options.clean_text) {
    chars = Filter(chars, [](char32_t c) { return c == 0 || c == 0xFFFD || IsControl(c); });
    // BertNormalizer's is_whitespace (\t \n \r or Rust's char::is_whitespace) is White_Space.
    for (NormChar& ch : chars) {
      if (unicode::IsWhiteSpace(ch.c)) ch.c = ' ';
    }
  }
  if (options.handle_chinese_chars) {
    std::vector<NormChar> spaced;
    spaced.reserve(chars.size());
    for (const NormChar& ch : chars) {
      if (IsChineseChar(ch.c)) {
        spaced.push_back({' ', ch.start, ch.end});
        spaced.push_back(ch);
        spaced.push_back({' ', ch.start, ch.end});
      } else {
        spaced.push_back(ch);
      }
    }
    chars = std::move(spaced);
  }
  if (options.strip_accents.value_or(options.lowercase)) {
    std::vector<char32_t> code_points;
    code_points.reserve(chars.size());
    for (const NormChar& ch : chars) code_points.push_back(ch.c);
    std::vector<NormChar> decomposed;
    decomposed.reserve(chars.size());
    for (const unicode::SourcedChar& sourced : unicode::Nfd(code_points)) {
      // Characters a decomposition produces share the span of the character they came from.
      decomposed.push_back({sourced.c, chars[sourced.source].start, chars[sourced.source].end});
    }
    chars = Filter(decomposed, unicode::IsNonspacingMark);
  }
  if (options.lowercase) {
    std::vector<NormChar> lowered;
    lowered.reserve(chars.size());
    for (const NormChar& ch : chars) {
      for (char32_t lower : unicode::ToLower(ch.c)) lowered.push_back({lower, ch.start, ch.end});
    }
    chars = std::move(lowered);
  }
  return chars;
}

// transformers' clean_up_tokenization: the replacements run one after another, as in Python.
std::string CleanUpTokenization(std::string text) {
  static constexpr std::pair<const char*, const char*> kReplacements[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
  };
  for (const auto& [from, to] : kReplacements) text = absl::StrReplaceAll(text, {{from, to}});
  return text;
}

std::vector<TemplatePiece> BertLayout(int64_t cls_id, const std::string& cls, int64_t sep_id,
                                      const std::string& sep, bool pair) {
  using Kind = TemplatePiece::Kind;
  std::vector<TemplatePiece> pieces = {
      {Kind::kSpecial, cls_id, cls, 0}, {Kind::kFirst, 0, "", 0}, {Kind::kSpecial, sep_id, sep, 0}};
  if (pair) {
    pieces.push_back({Kind::kSecond, 0, "", 1});
    pieces.push_back({Kind::kSpecial, sep_id, sep, 1});
  }
  return pieces;
}

// --- tokenizer.json parsing ---------------------------------------------------------------------

using tokenizer_json::FieldError;
using tokenizer_json::GetBool;
using tokenizer_json::GetInt;
using tokenizer_json::GetString;

absl::Status ParseNormalizer(const json& normalizer, const std::string& path,
                             WordPieceOptions* options) {
  if (normalizer.is_null()) {
    options->clean_text = false;
    options->handle_chinese_chars = false;
    options->strip_accents = false;
    options->lowercase = false;
    return absl::OkStatus();
  }
  // Sequence [NFC, BertNormalizer]: a BERT normalizer that composes first, so that decomposed
  // input ("e" + U+0302) finds the precomposed pieces of a vocabulary built on NFC text.
  if (normalizer.is_object() && normalizer.value("type", json()) == "Sequence") {
    const json steps = normalizer.value("normalizers", json());
    if (!steps.is_array() || steps.size() != 2 || !steps[0].is_object() ||
        steps[0].value("type", json()) != "NFC") {
      return FieldError(path, "normalizer.normalizers",
                        "[{\"type\": \"NFC\"}, {\"type\": \"BertNormalizer\", ...}]", steps);
    }
    ATTNSCOPE_RETURN_IF_ERROR(ParseNormalizer(steps[1], path, options));
    options->nfc = true;
    return absl::OkStatus();
  }
  if (!normalizer.is_object() || normalizer.value("type", json()) != "BertNormalizer") {
    return FieldError(path, "normalizer",
                      "null, type BertNormalizer, or a Sequence of NFC and BertNormalizer",
                      normalizer);
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(
      options->clean_text, GetBool(normalizer, "clean_text", true, path, "normalizer.clean_text"));
  ATTNSCOPE_ASSIGN_OR_RETURN(
      options->handle_chinese_chars,
      GetBool(normalizer, "handle_chinese_chars", true, path, "normalizer.handle_chinese_chars"));
  ATTNSCOPE_ASSIGN_OR_RETURN(options->lowercase,
                             GetBool(normalizer, "lowercase", true, path, "normalizer.lowercase"));
  const auto strip = normalizer.find("strip_accents");
  if (strip == normalizer.end() || strip->is_null()) {
    options->strip_accents.reset();
  } else if (strip->is_boolean()) {
    options->strip_accents = strip->get<bool>();
  } else {
    return FieldError(path, "normalizer.strip_accents", "null, true or false", *strip);
  }
  return absl::OkStatus();
}

// One side of a TemplateProcessing: [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
// {"Sequence": {"id": "A", "type_id": 0}}, ...], special tokens expanded through `special_tokens`.
absl::StatusOr<std::vector<TemplatePiece>> ParseTemplate(const json& pieces,
                                                         const json& special_tokens,
                                                         const std::string& path,
                                                         const std::string& field) {
  if (!pieces.is_array()) return FieldError(path, field, "an array", pieces);
  std::vector<TemplatePiece> result;
  for (const json& piece : pieces) {
    if (piece.is_object() && piece.contains("Sequence")) {
      const json& sequence = piece["Sequence"];
      ATTNSCOPE_ASSIGN_OR_RETURN(std::string id,
                                 GetString(sequence, "id", path, field + ".Sequence.id"));
      ATTNSCOPE_ASSIGN_OR_RETURN(int64_t type_id,
                                 GetInt(sequence, "type_id", path, field + ".Sequence.type_id"));
      if (id != "A" && id != "B")
        return FieldError(path, field + ".Sequence.id", "\"A\" or \"B\"", id);
      result.push_back(
          {id == "A" ? TemplatePiece::Kind::kFirst : TemplatePiece::Kind::kSecond, 0, "", type_id});
    } else if (piece.is_object() && piece.contains("SpecialToken")) {
      const json& special = piece["SpecialToken"];
      ATTNSCOPE_ASSIGN_OR_RETURN(std::string name,
                                 GetString(special, "id", path, field + ".SpecialToken.id"));
      ATTNSCOPE_ASSIGN_OR_RETURN(int64_t type_id,
                                 GetInt(special, "type_id", path, field + ".SpecialToken.type_id"));
      const std::string entry_field = "post_processor.special_tokens." + name;
      if (!special_tokens.is_object() || !special_tokens.contains(name)) {
        return FieldError(path, entry_field, "an entry for the template's special token", json());
      }
      const json& entry = special_tokens[name];
      const json ids = entry.value("ids", json());
      const json tokens = entry.value("tokens", json());
      if (!ids.is_array() || !tokens.is_array() || ids.size() != tokens.size()) {
        return FieldError(path, entry_field, "arrays ids and tokens of equal length", entry);
      }
      for (size_t k = 0; k < ids.size(); ++k) {
        if (!ids[k].is_number_integer() || !tokens[k].is_string()) {
          return FieldError(path, entry_field, "integer ids and string tokens", entry);
        }
        result.push_back({TemplatePiece::Kind::kSpecial, ids[k].get<int64_t>(),
                          tokens[k].get<std::string>(), type_id});
      }
    } else {
      return FieldError(path, field, "SpecialToken or Sequence entries", piece);
    }
  }
  return result;
}

absl::StatusOr<std::optional<PostProcessorTemplate>> ParsePostProcessor(const json& processor,
                                                                        const std::string& path) {
  if (processor.is_null()) return std::optional<PostProcessorTemplate>();
  const json type = processor.is_object() ? processor.value("type", json()) : json();
  PostProcessorTemplate result;
  if (type == "TemplateProcessing") {
    const json special_tokens = processor.value("special_tokens", json::object());
    ATTNSCOPE_ASSIGN_OR_RETURN(
        result.single, ParseTemplate(processor.value("single", json()), special_tokens, path,
                                     "post_processor.single"));
    ATTNSCOPE_ASSIGN_OR_RETURN(result.pair,
                               ParseTemplate(processor.value("pair", json()), special_tokens, path,
                                             "post_processor.pair"));
    return std::optional<PostProcessorTemplate>(std::move(result));
  }
  if (type == "BertProcessing") {
    const json cls = processor.value("cls", json());
    const json sep = processor.value("sep", json());
    const auto valid = [](const json& token) {
      return token.is_array() && token.size() == 2 && token[0].is_string() &&
             token[1].is_number_integer();
    };
    if (!valid(cls)) return FieldError(path, "post_processor.cls", "[token, id]", cls);
    if (!valid(sep)) return FieldError(path, "post_processor.sep", "[token, id]", sep);
    const std::string cls_token = cls[0].get<std::string>();
    const std::string sep_token = sep[0].get<std::string>();
    result.single =
        BertLayout(cls[1].get<int64_t>(), cls_token, sep[1].get<int64_t>(), sep_token, false);
    result.pair =
        BertLayout(cls[1].get<int64_t>(), cls_token, sep[1].get<int64_t>(), sep_token, true);
    return std::optional<PostProcessorTemplate>(std::move(result));
  }
  return FieldError(path, "post_processor", "null, TemplateProcessing or BertProcessing",
                    processor);
}

}  // namespace

absl::StatusOr<std::unique_ptr<WordPieceTokenizer>> WordPieceTokenizer::Create(
    std::vector<std::string> vocab, WordPieceOptions options) {
  absl::flat_hash_map<std::string, int64_t> token_to_id;
  token_to_id.reserve(vocab.size());
  // Like HF load_vocab's dict, a repeated token keeps its last id.
  for (size_t id = 0; id < vocab.size(); ++id) token_to_id[vocab[id]] = static_cast<int64_t>(id);

  std::vector<std::string> special_tokens = {options.unk_token, options.cls_token,
                                             options.sep_token, options.pad_token,
                                             options.mask_token};
  special_tokens.insert(special_tokens.end(), options.additional_special_tokens.begin(),
                        options.additional_special_tokens.end());
  special_tokens.erase(std::remove(special_tokens.begin(), special_tokens.end(), ""),
                       special_tokens.end());
  std::sort(special_tokens.begin(), special_tokens.end());
  special_tokens.erase(std::unique(special_tokens.begin(), special_tokens.end()),
                       special_tokens.end());
  if (options.unk_token.empty()) {
    return absl::InvalidArgumentError("unk_token: expected a token, got an empty string");
  }
  for (const std::string& token : special_tokens) {
    if (token_to_id.emplace(token, static_cast<int64_t>(vocab.size())).second) {
      vocab.push_back(token);
    }
  }

  PostProcessorTemplate post_processor;
  if (options.post_processor.has_value()) {
    post_processor = *options.post_processor;
    for (const std::vector<TemplatePiece>* side : {&post_processor.single, &post_processor.pair}) {
      for (const TemplatePiece& piece : *side) {
        if (piece.kind != TemplatePiece::Kind::kSpecial) continue;
        const auto it = token_to_id.find(piece.token);
        if (it == token_to_id.end() || it->second != piece.id) {
          return absl::InvalidArgumentError(
              absl::StrCat("post-processor token '", piece.token, "': expected id ",
                           it == token_to_id.end() ? std::string("(a vocabulary token)")
                                                   : absl::StrCat(it->second),
                           ", got ", piece.id));
        }
      }
    }
  } else {
    if (options.cls_token.empty() || options.sep_token.empty()) {
      return absl::InvalidArgumentError(
          "cls_token/sep_token: expected both for BERT's template, got an empty one");
    }
    const int64_t cls_id = token_to_id[options.cls_token];
    const int64_t sep_id = token_to_id[options.sep_token];
    post_processor.single = BertLayout(cls_id, options.cls_token, sep_id, options.sep_token, false);
    post_processor.pair = BertLayout(cls_id, options.cls_token, sep_id, options.sep_token, true);
  }
  // HF pads with id 0 when no pad token is configured.
  const int64_t pad_id = options.pad_token.empty() ? 0 : token_to_id[options.pad_token];

  // Longest first, so that at one position the longest special token wins (HF's leftmost-longest
  // matching).
  std::stable_sort(special_tokens.begin(), special_tokens.end(),
                   [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return std::unique_ptr<WordPieceTokenizer>(
      new WordPieceTokenizer(std::move(vocab), std::move(token_to_id), std::move(special_tokens),
                             std::move(options), std::move(post_processor), pad_id));
}

WordPieceTokenizer::WordPieceTokenizer(std::vector<std::string> id_to_token,
                                       absl::flat_hash_map<std::string, int64_t> token_to_id,
                                       std::vector<std::string> special_tokens,
                                       WordPieceOptions options,
                                       PostProcessorTemplate post_processor, int64_t pad_token_id)
    : Tokenizer(std::move(post_processor), pad_token_id, options.model_max_length),
      id_to_token_(std::move(id_to_token)),
      token_to_id_(std::move(token_to_id)),
      special_tokens_(std::move(special_tokens)),
      is_special_id_(id_to_token_.size(), false),
      options_(std::move(options)) {
  for (const std::string& token : special_tokens_) is_special_id_[token_to_id_.at(token)] = true;
  unk_id_ = token_to_id_.at(options_.unk_token);
}

absl::StatusOr<std::unique_ptr<WordPieceTokenizer>> WordPieceTokenizer::FromVocabFile(
    const std::string& vocab_path, WordPieceOptions options) {
  ATTNSCOPE_ASSIGN_OR_RETURN(std::string contents,
                             ReadFileToString(vocab_path, kMaxTokenizerFileBytes));
  std::vector<std::string> vocab = absl::StrSplit(contents, '\n');
  // A final newline ends the last line rather than starting an empty one.
  if (!vocab.empty() && vocab.back().empty()) vocab.pop_back();
  for (std::string& token : vocab) {
    if (!token.empty() && token.back() == '\r') token.pop_back();
  }
  if (vocab.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab.txt '", vocab_path, "': expected one token per line, got no tokens"));
  }
  if (absl::StartsWith(contents, kByteOrderMark)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vocab.txt '", vocab_path,
        "': line 1: expected a token, got a byte-order mark before it (U+FEFF, an editor's mark, "
        "read as part of the token); save the file as UTF-8 without it"));
  }
  // HF's load_vocab reads the file as UTF-8 and fails on anything else.
  for (size_t line = 0; line < vocab.size(); ++line) {
    if (const absl::Status utf8 = unicode::CheckUtf8(vocab[line]); !utf8.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocab.txt '", vocab_path, "': line ", line + 1, ": ", utf8.message()));
    }
  }
  // HF would add a special token the file lacks past its last line, where the model's embeddings
  // hold no trained row for it (or another token's): [UNK] (the fast tokenizer's WordPiece refuses
  // to build without it) and the tokens BERT's template puts in every input must be in the file.
  // A vocab.txt without them is another model's or no vocabulary.
  std::vector<std::pair<const char*, const std::string*>> required = {
      {"unk_token", &options.unk_token}};
  if (!options.post_processor.has_value()) {
    required.push_back({"cls_token", &options.cls_token});
    required.push_back({"sep_token", &options.sep_token});
  }
  for (const auto& [name, token] : required) {
    if (!token->empty() && std::find(vocab.begin(), vocab.end(), *token) == vocab.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocab.txt '", vocab_path, "': special token '", *token, "' (", name,
                       "): expected a line of the file, got none among its ", vocab.size(),
                       " lines (the vocabulary of another model? tokenizer_config.json's ", name,
                       " names the token the model was trained with)"));
    }
  }
  auto tokenizer = Create(std::move(vocab), std::move(options));
  if (!tokenizer.ok()) {
    return absl::Status(
        tokenizer.status().code(),
        absl::StrCat("vocab.txt '", vocab_path, "': ", tokenizer.status().message()));
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<WordPieceTokenizer>> WordPieceTokenizer::FromTokenizerJson(
    const std::string& path, int64_t model_max_length, const std::string& pad_token) {
  ATTNSCOPE_ASSIGN_OR_RETURN(const json root, tokenizer_json::Read(path));
  return FromTokenizerJson(root, path, model_max_length, pad_token);
}

absl::StatusOr<std::unique_ptr<WordPieceTokenizer>> WordPieceTokenizer::FromTokenizerJson(
    const json& root, const std::string& path, int64_t model_max_length,
    const std::string& pad_token) {
  const json model = root.value("model", json());
  if (!model.is_object() || model.value("type", json()) != "WordPiece") {
    return FieldError(path, "model.type", "\"WordPiece\"",
                      model.is_object() ? model.value("type", json()) : model);
  }
  WordPieceOptions options;
  options.model_max_length = model_max_length;
  ATTNSCOPE_ASSIGN_OR_RETURN(options.unk_token,
                             GetString(model, "unk_token", path, "model.unk_token"));
  if (model.contains("continuing_subword_prefix")) {
    ATTNSCOPE_ASSIGN_OR_RETURN(
        options.continuing_subword_prefix,
        GetString(model, "continuing_subword_prefix", path, "model.continuing_subword_prefix"));
  }
  if (model.contains("max_input_chars_per_word")) {
    ATTNSCOPE_ASSIGN_OR_RETURN(
        options.max_input_chars_per_word,
        GetInt(model, "max_input_chars_per_word", path, "model.max_input_chars_per_word"));
    // tokenizers' WordPiece reads it as a usize.
    if (options.max_input_chars_per_word < 0) {
      return FieldError(path, "model.max_input_chars_per_word", "a count of at least 0",
                        model["max_input_chars_per_word"]);
    }
  }
  const json vocab_json = model.value("vocab", json());
  if (!vocab_json.is_object() || vocab_json.empty()) {
    return FieldError(path, "model.vocab", "a non-empty object token -> id", vocab_json);
  }
  std::vector<std::string> vocab(vocab_json.size());
  std::vector<bool> seen(vocab_json.size(), false);
  for (const auto& [token, id] : vocab_json.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= static_cast<int64_t>(vocab.size()) || seen[id.get<size_t>()]) {
      return FieldError(path, "model.vocab." + token,
                        absl::StrCat("a distinct id in [0, ", vocab.size(), ")"), id);
    }
    vocab[id.get<size_t>()] = token;
    seen[id.get<size_t>()] = true;
  }

  ATTNSCOPE_RETURN_IF_ERROR(ParseNormalizer(root.value("normalizer", json()), path, &options));
  const json pre_tokenizer = root.value("pre_tokenizer", json());
  if (!pre_tokenizer.is_object() || pre_tokenizer.value("type", json()) != "BertPreTokenizer") {
    return FieldError(path, "pre_tokenizer", "type BertPreTokenizer", pre_tokenizer);
  }

  // Special tokens come from added_tokens; BERT's default names are kept only when present.
  const json added_tokens = root.value("added_tokens", json::array());
  if (!added_tokens.is_array()) return FieldError(path, "added_tokens", "an array", added_tokens);
  for (const json& added : added_tokens) {
    ATTNSCOPE_ASSIGN_OR_RETURN(std::string content,
                               GetString(added, "content", path, "added_tokens[].content"));
    ATTNSCOPE_ASSIGN_OR_RETURN(int64_t id, GetInt(added, "id", path, "added_tokens[].id"));
    ATTNSCOPE_ASSIGN_OR_RETURN(bool special,
                               GetBool(added, "special", false, path, "added_tokens[].special"));
    if (!special) {
      return FieldError(path, "added_tokens[" + content + "].special",
                        "true (non-special added tokens are not supported)", added);
    }
    const auto existing = std::find(vocab.begin(), vocab.end(), content);
    const int64_t expected_id =
        existing != vocab.end() ? existing - vocab.begin() : static_cast<int64_t>(vocab.size());
    if (id != expected_id) {
      return FieldError(path, "added_tokens[" + content + "].id",
                        absl::StrCat(expected_id, " (its vocabulary id or the next free id)"), id);
    }
    if (existing == vocab.end()) vocab.push_back(content);
    ATTNSCOPE_ASSIGN_OR_RETURN(const bool lstrip,
                               GetBool(added, "lstrip", false, path, "added_tokens[].lstrip"));
    ATTNSCOPE_ASSIGN_OR_RETURN(const bool rstrip,
                               GetBool(added, "rstrip", false, path, "added_tokens[].rstrip"));
    if (lstrip) options.lstrip_tokens.push_back(content);
    if (rstrip) options.rstrip_tokens.push_back(content);
    options.additional_special_tokens.push_back(content);
  }
  // tokenizers fails every text with an unknown word when its unk_token has no id ("Missing [UNK]
  // token from the vocabulary"); the file is refused here instead of inventing an id for it.
  if (std::find(vocab.begin(), vocab.end(), options.unk_token) == vocab.end()) {
    return FieldError(path, "model.unk_token", "a token of model.vocab or added_tokens",
                      model["unk_token"]);
  }
  const json post_processor = root.value("post_processor", json());
  const auto listed = [&](const std::string& token) {
    return std::find(options.additional_special_tokens.begin(),
                     options.additional_special_tokens.end(),
                     token) != options.additional_special_tokens.end();
  };
  for (std::string* name :
       {&options.cls_token, &options.sep_token, &options.pad_token, &options.mask_token}) {
    const bool for_template =
        post_processor.is_null() && (name == &options.cls_token || name == &options.sep_token);
    if (std::find(vocab.begin(), vocab.end(), *name) == vocab.end() ||
        (!listed(*name) && !for_template)) {
      name->clear();
    }
  }
  const json padding = root.value("padding", json());
  if (!pad_token.empty() && std::find(vocab.begin(), vocab.end(), pad_token) != vocab.end()) {
    options.pad_token = pad_token;
  } else if (padding.is_object() && padding.contains("pad_token")) {
    ATTNSCOPE_ASSIGN_OR_RETURN(options.pad_token,
                               GetString(padding, "pad_token", path, "padding.pad_token"));
  }
  const json truncation = root.value("truncation", json());
  if (truncation.is_object() && truncation.contains("max_length")) {
    ATTNSCOPE_ASSIGN_OR_RETURN(options.model_max_length,
                               GetInt(truncation, "max_length", path, "truncation.max_length"));
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(options.post_processor, ParsePostProcessor(post_processor, path));
  auto tokenizer = Create(std::move(vocab), std::move(options));
  if (!tokenizer.ok()) {
    return absl::Status(
        tokenizer.status().code(),
        absl::StrCat("tokenizer.json '", path, "': ", tokenizer.status().message()));
  }
  return tokenizer;
}

TokenizerNormalization WordPieceTokenizer::normalization() const {
  TokenizerNormalization normalization;
  normalization.lowercase = options_.lowercase;
  normalization.strip_accents = options_.strip_accents.value_or(options_.lowercase);
  if (normalization.strip_accents) {
    normalization.unicode_form = "NFD";
  } else if (options_.nfc) {
    normalization.unicode_form = "NFC";
  }
  if (options_.nfc && !normalization.strip_accents) {
    normalization.description = absl::StrCat(
        normalization.lowercase
            ? "composed to NFC and lower-cased, accents kept: 'Tôi' becomes 'tôi'"
            : "composed to NFC, case and accents kept",
        "; Hangul syllables stay whole, also when typed as conjoining jamo or combining marks");
  } else if (normalization.lowercase && normalization.strip_accents) {
    normalization.description =
        "lower-cased, then accents stripped (NFD, combining marks removed): 'Tôi' becomes 'toi', "
        "and Hangul syllables fall apart into conjoining jamo ('랭' becomes 'ᄅ', 'ᅢ', 'ᆼ')";
  } else if (normalization.strip_accents) {
    normalization.description =
        "accents stripped (NFD, combining marks removed), case kept: 'Tôi' becomes 'Toi', and "
        "Hangul syllables fall apart into conjoining jamo";
  } else if (normalization.lowercase) {
    normalization.description = "lower-cased, accents kept: 'Tôi' becomes 'tôi'";
  } else {
    normalization.description = "text kept as written (no lower-casing, accents kept)";
  }
  return normalization;
}

std::string WordPieceTokenizer::IdToToken(int64_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return id_to_token_[id];
}

int64_t WordPieceTokenizer::TokenToId(std::string_view token) const {
  const auto it = token_to_id_.find(absl::string_view(token.data(), token.size()));
  return it == token_to_id_.end() ? -1 : it->second;
}

absl::StatusOr<TokenizedText> WordPieceTokenizer::Tokenize(std::string_view text) const {
  ATTNSCOPE_ASSIGN_OR_RETURN(unicode::DecodedText decoded, unicode::DecodeUtf8(text));
  TokenizedText out;
  int64_t word_index = 0;
  int64_t segment_start = 0;
  int64_t i = 0;
  while (i < decoded.size()) {
    // Special tokens are matched on the original text (HF added tokens with normalized=false) and
    // split the text into segments normalized on their own.
    const std::string_view rest = text.substr(decoded.ByteOffset(i));
    const auto match = std::find_if(
        special_tokens_.begin(), special_tokens_.end(),
        [&](const std::string& token) { return rest.compare(0, token.size(), token) == 0; });
    if (match == special_tokens_.end()) {
      ++i;
      continue;
    }
    int64_t start = i;
    int64_t end = decoded.CodePointsBeforeByte(decoded.ByteOffset(i) + match->size());
    // lstrip takes no whitespace a previous match took; the token is then the text matched,
    // whitespace included (`tokenizers` shows " <mask>").
    if (absl::c_linear_search(options_.lstrip_tokens, *match)) {
      while (start > segment_start && unicode::IsWhiteSpace(decoded.code_points[start - 1])) {
        --start;
      }
    }
    if (absl::c_linear_search(options_.rstrip_tokens, *match)) {
      while (end < decoded.size() && unicode::IsWhiteSpace(decoded.code_points[end])) ++end;
    }
    TokenizeSegment(decoded, segment_start, start, &word_index, &out);
    out.ids.push_back(token_to_id_.at(*match));
    out.tokens.push_back(std::string(text.substr(
        decoded.ByteOffset(start), decoded.ByteOffset(end) - decoded.ByteOffset(start))));
    out.offsets.push_back({start, end});
    out.byte_offsets.push_back({decoded.ByteOffset(start), decoded.ByteOffset(end)});
    out.word_ids.push_back(word_index++);
    i = end;
    segment_start = end;
  }
  TokenizeSegment(decoded, segment_start, decoded.size(), &word_index, &out);
  return out;
}

void WordPieceTokenizer::TokenizeSegment(const unicode::DecodedText& decoded, int64_t begin,
                                         int64_t end, int64_t* word_index,
                                         TokenizedText* out) const {
  if (begin >= end) return;
  std::vector<NormChar> chars;
  chars.reserve(end - begin);
  for (int64_t i = begin; i < end; ++i) chars.push_back({decoded.code_points[i], i, i + 1});
  chars = Normalize(std::move(chars), options_);

  // BertPreTokenizer: whitespace separates words and is dropped; punctuation is a word of its own.
  std::vector<std::pair<size_t, size_t>> words;
  size_t word_start = 0;
  for (size_t k = 0; k < chars.size(); ++k) {
    const bool space = unicode::IsWhiteSpace(chars[k].c);
    const bool punctuation = !space && IsBertPunctuation(chars[k].c);
    if (!space && !punctuation) continue;
    if (word_start < k) words.emplace_back(word_start, k);
    if (punctuation) words.emplace_back(k, k + 1);
    word_start = k + 1;
  }
  if (word_start < chars.size()) words.emplace_back(word_start, chars.size());

  const auto emit = [&](int64_t id, std::string token, size_t first, size_t last) {
    const int64_t start = chars[first].start;
    const int64_t stop = chars[last - 1].end;
    out->ids.push_back(id);
    out->tokens.push_back(std::move(token));
    out->offsets.push_back({start, stop});
    out->byte_offsets.push_back({decoded.ByteOffset(start), decoded.ByteOffset(stop)});
    out->word_ids.push_back(*word_index);
  };
  for (const auto& [first, last] : words) {
    const size_t length = last - first;
    // WordPiece: greedy longest match first, continuation pieces carry the prefix; a word with
    // an unmatchable remainder becomes one unk token.
    std::string utf8;
    std::vector<size_t> char_bytes = {0};
    for (size_t k = first; k < last; ++k) {
      unicode::AppendUtf8(chars[k].c, &utf8);
      char_bytes.push_back(utf8.size());
    }
    const size_t num_before = out->size();
    bool matched = static_cast<int64_t>(length) <= options_.max_input_chars_per_word;
    size_t start = 0;
    while (matched && start < length) {
      size_t stop = length;
      int64_t id = -1;
      std::string piece;
      for (; stop > start; --stop) {
        piece = std::string(utf8, char_bytes[start], char_bytes[stop] - char_bytes[start]);
        if (start > 0) piece = options_.continuing_subword_prefix + piece;
        const auto it = token_to_id_.find(piece);
        if (it != token_to_id_.end()) {
          id = it->second;
          break;
        }
      }
      if (id < 0) {
        matched = false;
        break;
      }
      emit(id, std::move(piece), first + start, first + stop);
      start = stop;
    }
    if (!matched) {
      out->ids.resize(num_before);
      out->tokens.resize(num_before);
      out->offsets.resize(num_before);
      out->byte_offsets.resize(num_before);
      out->word_ids.resize(num_before);
      emit(unk_id_, options_.unk_token, first, last);
    }
    ++*word_index;
  }
}

std::string WordPieceTokenizer::Decode(const std::vector<int64_t>& ids,
                                       bool skip_special_tokens) const {
  std::string text;
  bool first = true;
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special_tokens && is_special_id_[id]) continue;
    const std::string& token = id_to_token_[id];
    if (!first && absl::StartsWith(token, options_.continuing_subword_prefix)) {
      text.append(token, options_.continuing_subword_prefix.size());
    } else {
      if (!first) text.push_back(' ');
      text.append(token);
    }
    first = false;
  }
  return CleanUpTokenization(std::move(text));
}

}  // namespace attnscope

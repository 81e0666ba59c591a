// PipelineTokenizer::ReadComponents: the components of a tokenizer.json other than its model.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/tokenizers/pipeline_tokenizer.h"
#include "models/tokenizers/precompiled_charsmap.h"
#include "models/tokenizers/regex.h"
#include "models/tokenizers/tokenizer_json.h"
#include "models/tokenizers/unicode.h"
#include "nlohmann/json.hpp"

namespace attnscope {
namespace {

using json = nlohmann::json;
using tokenizer_json::FieldError;
using tokenizer_json::GetBool;
using tokenizer_json::GetInt;
using tokenizer_json::GetString;
using tokenizer_json::Unsupported;
using tokenizer_json::UnsupportedValue;

constexpr char kNormalizers[] =
    "NFC, NFD, NFKC, NFKD, Replace, Prepend, Precompiled, Strip, Lowercase, StripAccents, "
    "BertNormalizer, Nmt, Sequence (of those), null";
constexpr char kPreTokenizers[] =
    "ByteLevel, Split, Metaspace, WhitespaceSplit, Whitespace, BertPreTokenizer, "
    "CharDelimiterSplit, Digits, Punctuation, Sequence (of those), null";
constexpr char kPostProcessors[] =
    "ByteLevel, RobertaProcessing, BertProcessing, TemplateProcessing, Sequence (of those), null";
constexpr char kDecoders[] =
    "ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, BPEDecoder, WordPiece, Sequence (of "
    "those), null";

// The components of a normalizer, pre-tokenizer, post-processor or decoder in order: nested
// Sequences (whose list is under `list_key`) opened, nulls left out.
std::vector<json> Flatten(const json& component, const char* list_key) {
  std::vector<json> flat;
  if (component.is_null()) return flat;
  if (component.is_object() && component.value("type", json()) == "Sequence" &&
      component.value(list_key, json()).is_array()) {
    for (const json& inner : component[list_key]) {
      std::vector<json> more = Flatten(inner, list_key);
      flat.insert(flat.end(), more.begin(), more.end());
    }
    return flat;
  }
  flat.push_back(component);
  return flat;
}

json TypeOf(const json& component) {
  return component.is_object() ? component.value("type", json()) : component;
}

// The "pattern" of a Split pre-tokenizer or Replace normalizer: {"Regex": ...} or {"String": ...}.
absl::StatusOr<std::shared_ptr<const Regex>> ParsePattern(const json& component,
                                                          const std::string& path,
                                                          const std::string& where) {
  const json pattern = component.value("pattern", json());
  const bool literal = pattern.is_object() && pattern.contains("String");
  const json text =
      pattern.is_object() ? pattern.value(literal ? "String" : "Regex", json()) : json();
  if (!text.is_string()) {
    return FieldError(path, where + ".pattern", "{\"Regex\": ...} or {\"String\": ...}", pattern);
  }
  absl::StatusOr<std::unique_ptr<Regex>> regex = Regex::Create(text.get<std::string>(), literal);
  if (!regex.ok()) {
    return FieldError(path, where + ".pattern", "a pattern PCRE2 compiles",
                      absl::StrCat(text.get<std::string>(), " (", regex.status().message(), ")"));
  }
  return std::shared_ptr<const Regex>(std::move(regex).value());
}

// A post-processor's template piece list ("single" or "pair" of TemplateProcessing).
absl::Status ParseTemplate(const json& pieces, const json& special_tokens, const std::string& path,
                           const std::string& field, std::vector<TemplatePiece>* out) {
  if (!pieces.is_array()) return FieldError(path, field, "an array of pieces", pieces);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const json& piece = pieces[i];
    const std::string where = absl::StrCat(field, "[", i, "]");
    if (piece.is_object() && piece.contains("Sequence")) {
      const json& sequence = piece["Sequence"];
      ATTNSCOPE_ASSIGN_OR_RETURN(const std::string id,
                                 GetString(sequence, "id", path, where + ".Sequence.id"));
      ATTNSCOPE_ASSIGN_OR_RETURN(const int64_t type_id,
                                 GetInt(sequence, "type_id", path, where + ".Sequence.type_id"));
      if (id != "A" && id != "B") return FieldError(path, where + ".Sequence.id", "A or B", id);
      out->push_back(
          {id == "A" ? TemplatePiece::Kind::kFirst : TemplatePiece::Kind::kSecond, 0, "", type_id});
      continue;
    }
    if (!piece.is_object() || !piece.contains("SpecialToken")) {
      return FieldError(path, where, "{\"Sequence\": ...} or {\"SpecialToken\": ...}", piece);
    }
    const json& special = piece["SpecialToken"];
    ATTNSCOPE_ASSIGN_OR_RETURN(const std::string name,
                               GetString(special, "id", path, where + ".SpecialToken.id"));
    ATTNSCOPE_ASSIGN_OR_RETURN(const int64_t type_id,
                               GetInt(special, "type_id", path, where + ".SpecialToken.type_id"));
    const json entry = special_tokens.is_object() ? special_tokens.value(name, json()) : json();
    const std::string entry_field = absl::StrCat("post_processor.special_tokens.", name);
    const json ids = entry.is_object() ? entry.value("ids", json()) : json();
    const json tokens = entry.is_object() ? entry.value("tokens", json()) : json();
    if (!ids.is_array() || !tokens.is_array() || ids.size() != tokens.size() || ids.empty()) {
      return FieldError(path, entry_field, "{\"ids\": [...], \"tokens\": [...]} of one length",
                        entry);
    }
    // A special token of several ids is that many positions, as the library expands it.
    for (size_t k = 0; k < ids.size(); ++k) {
      if (!ids[k].is_number_integer() || !tokens[k].is_string()) {
        return FieldError(path, entry_field, "integer ids and string tokens", entry);
      }
      out->push_back({TemplatePiece::Kind::kSpecial, ids[k].get<int64_t>(),
                      tokens[k].get<std::string>(), type_id});
    }
  }
  return absl::OkStatus();
}

// A Metaspace pre-tokenizer's or decoder's settings.
struct Metaspace {
  char32_t replacement;
  // "always", "first" or "never".
  std::string prepend_scheme;
  bool split;
};

// The library's Metaspace deserializer: one replacement character, prepend_scheme "always" by
// default, a legacy add_prefix_space false only with "never" (which it then means), split true by
// default.
absl::StatusOr<Metaspace> ParseMetaspace(const json& component, const std::string& path,
                                         const std::string& where) {
  Metaspace metaspace;
  ATTNSCOPE_ASSIGN_OR_RETURN(const std::string replacement,
                             GetString(component, "replacement", path, where + ".replacement"));
  absl::StatusOr<unicode::DecodedText> decoded = unicode::DecodeUtf8(replacement);
  if (!decoded.ok() || decoded->size() != 1) {
    return FieldError(path, where + ".replacement", "one character", replacement);
  }
  metaspace.replacement = decoded->code_points[0];
  const json scheme = component.value("prepend_scheme", json("always"));
  if (scheme != "always" && scheme != "first" && scheme != "never") {
    return FieldError(path, where + ".prepend_scheme", "\"always\", \"first\" or \"never\"",
                      scheme);
  }
  metaspace.prepend_scheme = scheme.get<std::string>();
  ATTNSCOPE_ASSIGN_OR_RETURN(
      const bool add_prefix_space,
      GetBool(component, "add_prefix_space", true, path, where + ".add_prefix_space"));
  if (!add_prefix_space && metaspace.prepend_scheme != "never") {
    return FieldError(path, where + ".add_prefix_space",
                      "true, or false with prepend_scheme \"never\"", false);
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(metaspace.split,
                             GetBool(component, "split", true, path, where + ".split"));
  return metaspace;
}

}  // namespace

absl::Status PipelineTokenizer::ReadComponents(const json& root, const std::string& path,
                                               int64_t id_limit,
                                               std::vector<std::string>* id_to_token_out,
                                               Pipeline* pipeline_out,
                                               PostProcessorTemplate* post_processor_out) {
  std::vector<std::string>& id_to_token = *id_to_token_out;
  Pipeline& pipeline = *pipeline_out;
  PostProcessorTemplate& post_processor = *post_processor_out;
  const json added_tokens = root.value("added_tokens", json::array());
  if (!added_tokens.is_array()) return FieldError(path, "added_tokens", "an array", added_tokens);
  const std::string id_range =
      absl::StrCat("an id in [0, ", id_limit, "), the number of vocab and added tokens");

  // --- added tokens ---
  for (size_t i = 0; i < added_tokens.size(); ++i) {
    const json& entry = added_tokens[i];
    const std::string field = absl::StrCat("added_tokens[", i, "]");
    AddedToken added;
    ATTNSCOPE_ASSIGN_OR_RETURN(added.content,
                               GetString(entry, "content", path, field + ".content"));
    ATTNSCOPE_ASSIGN_OR_RETURN(added.id, GetInt(entry, "id", path, field + ".id"));
    if (added.id < 0 || added.id >= id_limit) {
      return FieldError(path, field + ".id", id_range, entry["id"]);
    }
    ATTNSCOPE_ASSIGN_OR_RETURN(added.special,
                               GetBool(entry, "special", false, path, field + ".special"));
    ATTNSCOPE_ASSIGN_OR_RETURN(added.lstrip,
                               GetBool(entry, "lstrip", false, path, field + ".lstrip"));
    ATTNSCOPE_ASSIGN_OR_RETURN(added.rstrip,
                               GetBool(entry, "rstrip", false, path, field + ".rstrip"));
    ATTNSCOPE_ASSIGN_OR_RETURN(added.single_word,
                               GetBool(entry, "single_word", false, path, field + ".single_word"));
    // AddedToken's default: normalized unless special.
    ATTNSCOPE_ASSIGN_OR_RETURN(added.normalized, GetBool(entry, "normalized", !added.special, path,
                                                         field + ".normalized"));
    const auto index = static_cast<size_t>(added.id);
    if (index >= id_to_token.size()) id_to_token.resize(index + 1);
    // An added token repeats its vocabulary entry (the same content at the same id) or takes a
    // free id. The library gives one whose id another token holds the next free id instead, which
    // no converter writes: the id the file says would then not be the token's.
    if (!id_to_token[index].empty() && id_to_token[index] != added.content) {
      return FieldError(path, field + ".id",
                        absl::StrCat("an id no other token has ('", id_to_token[index], "')"),
                        entry["id"]);
    }
    // The library looks an id up in the added tokens first.
    id_to_token[index] = added.content;
    pipeline.added_tokens.push_back(std::move(added));
  }

  // --- normalizer ---
  for (const json& normalizer : Flatten(root.value("normalizer", json()), "normalizers")) {
    const json type = TypeOf(normalizer);
    NormalizerStep step;
    if (type == "NFC") {
      step.kind = NormalizerStep::Kind::kNfc;
    } else if (type == "NFD") {
      step.kind = NormalizerStep::Kind::kNfd;
    } else if (type == "NFKC") {
      step.kind = NormalizerStep::Kind::kNfkc;
    } else if (type == "NFKD") {
      step.kind = NormalizerStep::Kind::kNfkd;
    } else if (type == "Lowercase") {
      step.kind = NormalizerStep::Kind::kLowercase;
    } else if (type == "StripAccents") {
      step.kind = NormalizerStep::Kind::kStripAccents;
    } else if (type == "Prepend") {
      step.kind = NormalizerStep::Kind::kPrepend;
      ATTNSCOPE_ASSIGN_OR_RETURN(step.content,
                                 GetString(normalizer, "prepend", path, "normalizer.prepend"));
    } else if (type == "Replace") {
      step.kind = NormalizerStep::Kind::kReplace;
      ATTNSCOPE_ASSIGN_OR_RETURN(step.pattern, ParsePattern(normalizer, path, "normalizer"));
      ATTNSCOPE_ASSIGN_OR_RETURN(step.content,
                                 GetString(normalizer, "content", path, "normalizer.content"));
    } else if (type == "Precompiled") {
      step.kind = NormalizerStep::Kind::kPrecompiled;
      const std::string field = "normalizer.precompiled_charsmap";
      ATTNSCOPE_ASSIGN_OR_RETURN(const std::string base64,
                                 GetString(normalizer, "precompiled_charsmap", path, field));
      std::string bytes;
      if (!absl::Base64Unescape(base64, &bytes)) {
        return FieldError(path, field, "base64", base64.substr(0, 40) + "...");
      }
      absl::StatusOr<std::unique_ptr<PrecompiledCharsmap>> charsmap =
          PrecompiledCharsmap::Parse(bytes);
      if (!charsmap.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("tokenizer.json '", path, "': field '",
                                                       field, "': ", charsmap.status().message()));
      }
      step.charsmap = std::move(charsmap).value();
    } else if (type == "Strip") {
      step.kind = NormalizerStep::Kind::kStrip;
      ATTNSCOPE_ASSIGN_OR_RETURN(
          step.strip_left, GetBool(normalizer, "strip_left", true, path, "normalizer.strip_left"));
      ATTNSCOPE_ASSIGN_OR_RETURN(step.strip_right, GetBool(normalizer, "strip_right", true, path,
                                                           "normalizer.strip_right"));
    } else if (type == "Nmt") {
      step.kind = NormalizerStep::Kind::kNmt;
    } else if (type == "BertNormalizer") {
      // normalizers/bert.rs: its stages in order, as steps of their own.
      ATTNSCOPE_ASSIGN_OR_RETURN(const bool clean_text, GetBool(normalizer, "clean_text", true,
                                                                path, "normalizer.clean_text"));
      ATTNSCOPE_ASSIGN_OR_RETURN(const bool chinese_chars,
                                 GetBool(normalizer, "handle_chinese_chars", true, path,
                                         "normalizer.handle_chinese_chars"));
      ATTNSCOPE_ASSIGN_OR_RETURN(const bool lowercase, GetBool(normalizer, "lowercase", true, path,
                                                               "normalizer.lowercase"));
      const json strip = normalizer.value("strip_accents", json());
      if (!strip.is_null() && !strip.is_boolean()) {
        return FieldError(path, "normalizer.strip_accents", "null or a boolean", strip);
      }
      const bool strip_accents = strip.is_null() ? lowercase : strip.get<bool>();
      const auto push = [&](NormalizerStep::Kind kind, bool nonspacing_only) {
        NormalizerStep stage;
        stage.kind = kind;
        stage.nonspacing_only = nonspacing_only;
        pipeline.normalizer.push_back(std::move(stage));
      };
      if (clean_text) push(NormalizerStep::Kind::kBertCleanText, /*nonspacing_only=*/false);
      if (chinese_chars) push(NormalizerStep::Kind::kBertChineseChars, /*nonspacing_only=*/false);
      if (strip_accents) {
        push(NormalizerStep::Kind::kNfd, /*nonspacing_only=*/false);
        push(NormalizerStep::Kind::kStripAccents, /*nonspacing_only=*/true);
      }
      if (!lowercase) continue;
      step.kind = NormalizerStep::Kind::kLowercase;
    } else {
      return Unsupported(path, "normalizer", type, kNormalizers);
    }
    pipeline.normalizer.push_back(std::move(step));
  }

  // The library matches a normalized added token by its content normalized (the token written in
  // NFD matches the NFC text), and its id decodes to that form too (observed in the goldens).
  if (!pipeline.normalizer.empty()) {
    for (AddedToken& added : pipeline.added_tokens) {
      if (!added.normalized) continue;
      absl::StatusOr<unicode::DecodedText> decoded = unicode::DecodeUtf8(added.content);
      if (!decoded.ok()) continue;  // nlohmann_json has checked the UTF-8 already.
      std::vector<NormChar> chars;
      for (char32_t c : decoded->code_points) chars.push_back({c, 0, 0});
      absl::StatusOr<std::vector<NormChar>> normalized_chars =
          Normalize(pipeline.normalizer, std::move(chars));
      if (!normalized_chars.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("tokenizer.json '", path, "': added token '", added.content,
                         "': expected the normalizer to normalize it, got: ",
                         normalized_chars.status().message()));
      }
      std::string normalized;
      for (const NormChar& c : *normalized_chars) unicode::AppendUtf8(c.c, &normalized);
      id_to_token[static_cast<size_t>(added.id)] = normalized;
      added.content = std::move(normalized);
    }
  }

  // --- pre-tokenizer ---
  // The "behavior" of a Split (which must have one) or Punctuation pre-tokenizer.
  const auto parse_behavior = [&path](const json& pre_tokenizer,
                                      const json& missing) -> absl::StatusOr<SplitBehavior> {
    const json behavior = pre_tokenizer.value("behavior", missing);
    static const std::pair<const char*, SplitBehavior> kBehaviors[] = {
        {"Isolated", SplitBehavior::kIsolated},
        {"Removed", SplitBehavior::kRemoved},
        {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
        {"MergedWithNext", SplitBehavior::kMergedWithNext},
        {"Contiguous", SplitBehavior::kContiguous}};
    const auto found = std::find_if(std::begin(kBehaviors), std::end(kBehaviors),
                                    [&](const auto& known) { return behavior == known.first; });
    if (found == std::end(kBehaviors)) {
      return FieldError(path, "pre_tokenizer.behavior",
                        "Isolated, Removed, MergedWithPrevious, MergedWithNext or Contiguous",
                        behavior);
    }
    return found->second;
  };
  for (const json& pre_tokenizer : Flatten(root.value("pre_tokenizer", json()), "pretokenizers")) {
    const json type = TypeOf(pre_tokenizer);
    PreTokenizerStep step;
    if (type == "ByteLevel") {
      step.kind = PreTokenizerStep::Kind::kByteLevel;
      ATTNSCOPE_ASSIGN_OR_RETURN(
          step.add_prefix_space,
          GetBool(pre_tokenizer, "add_prefix_space", true, path, "pre_tokenizer.add_prefix_space"));
      ATTNSCOPE_ASSIGN_OR_RETURN(step.use_regex, GetBool(pre_tokenizer, "use_regex", true, path,
                                                         "pre_tokenizer.use_regex"));
    } else if (type == "Split") {
      step.kind = PreTokenizerStep::Kind::kSplit;
      ATTNSCOPE_ASSIGN_OR_RETURN(step.regex, ParsePattern(pre_tokenizer, path, "pre_tokenizer"));
      ATTNSCOPE_ASSIGN_OR_RETURN(step.behavior, parse_behavior(pre_tokenizer, json()));
      ATTNSCOPE_ASSIGN_OR_RETURN(
          step.invert, GetBool(pre_tokenizer, "invert", false, path, "pre_tokenizer.invert"));
    } else if (type == "Metaspace") {
      step.kind = PreTokenizerStep::Kind::kMetaspace;
      ATTNSCOPE_ASSIGN_OR_RETURN(const Metaspace metaspace,
                                 ParseMetaspace(pre_tokenizer, path, "pre_tokenizer"));
      step.replacement = metaspace.replacement;
      step.prepend = metaspace.prepend_scheme != "never";
      step.prepend_first_only = metaspace.prepend_scheme == "first";
      step.split = metaspace.split;
    } else if (type == "WhitespaceSplit") {
      step.kind = PreTokenizerStep::Kind::kWhitespaceSplit;
    } else if (type == "Whitespace") {
      step.kind = PreTokenizerStep::Kind::kWhitespace;
    } else if (type == "BertPreTokenizer") {
      // pre_tokenizers/bert.rs: whitespace removed, then each punctuation character alone.
      PreTokenizerStep whitespace;
      whitespace.kind = PreTokenizerStep::Kind::kWhitespaceSplit;
      pipeline.pre_tokenizer.push_back(std::move(whitespace));
      step.kind = PreTokenizerStep::Kind::kPunctuation;
      step.behavior = SplitBehavior::kIsolated;
    } else if (type == "CharDelimiterSplit") {
      // pre_tokenizers/delimiter.rs: a split on the one character, Removed.
      ATTNSCOPE_ASSIGN_OR_RETURN(
          const std::string delimiter,
          GetString(pre_tokenizer, "delimiter", path, "pre_tokenizer.delimiter"));
      absl::StatusOr<unicode::DecodedText> decoded = unicode::DecodeUtf8(delimiter);
      if (!decoded.ok() || decoded->size() != 1) {
        return FieldError(path, "pre_tokenizer.delimiter", "one character", delimiter);
      }
      absl::StatusOr<std::unique_ptr<Regex>> regex = Regex::Create(delimiter, /*literal=*/true);
      if (!regex.ok()) {
        return FieldError(path, "pre_tokenizer.delimiter", "a character PCRE2 matches",
                          absl::StrCat(delimiter, " (", regex.status().message(), ")"));
      }
      step.kind = PreTokenizerStep::Kind::kSplit;
      step.regex = std::move(regex).value();
      step.behavior = SplitBehavior::kRemoved;
    } else if (type == "Digits") {
      step.kind = PreTokenizerStep::Kind::kDigits;
      ATTNSCOPE_ASSIGN_OR_RETURN(const bool individual,
                                 GetBool(pre_tokenizer, "individual_digits", false, path,
                                         "pre_tokenizer.individual_digits"));
      step.behavior = individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
    } else if (type == "Punctuation") {
      step.kind = PreTokenizerStep::Kind::kPunctuation;
      ATTNSCOPE_ASSIGN_OR_RETURN(step.behavior, parse_behavior(pre_tokenizer, "Isolated"));
    } else {
      return Unsupported(path, "pre_tokenizer", type, kPreTokenizers);
    }
    pipeline.pre_tokenizer.push_back(std::move(step));
  }

  // --- post-processor ---
  // Without a template the library's default: the texts only, the second with type id 1.
  using Kind = TemplatePiece::Kind;
  post_processor.single = {{Kind::kFirst, 0, "", 0}};
  post_processor.pair = {{Kind::kFirst, 0, "", 0}, {Kind::kSecond, 0, "", 1}};
  bool has_template = false;
  bool has_trimmer = false;
  for (const json& processor : Flatten(root.value("post_processor", json()), "processors")) {
    const json type = TypeOf(processor);
    const bool roberta = type == "RobertaProcessing";
    const bool bert = type == "BertProcessing";
    if (type == "ByteLevel" || roberta) {
      if (has_trimmer) {
        return Unsupported(path, "post_processor", type,
                           "at most one ByteLevel or RobertaProcessing in a Sequence");
      }
      has_trimmer = true;
      ATTNSCOPE_ASSIGN_OR_RETURN(
          pipeline.trim_offsets,
          GetBool(processor, "trim_offsets", true, path, "post_processor.trim_offsets"));
      ATTNSCOPE_ASSIGN_OR_RETURN(
          pipeline.trim_add_prefix_space,
          GetBool(processor, "add_prefix_space", true, path, "post_processor.add_prefix_space"));
    }
    if (roberta || bert || type == "TemplateProcessing") {
      if (has_template) {
        return Unsupported(path, "post_processor", type, "at most one template in a Sequence");
      }
      has_template = true;
    }
    if (roberta || bert) {
      TemplatePiece special[2];
      for (int k = 0; k < 2; ++k) {
        const char* key = k == 0 ? "cls" : "sep";
        const json value = processor.value(key, json());
        if (!value.is_array() || value.size() != 2 || !value[0].is_string() ||
            !value[1].is_number_integer()) {
          return FieldError(path, absl::StrCat("post_processor.", key), "[token, id]", value);
        }
        special[k] = {Kind::kSpecial, value[1].get<int64_t>(), value[0].get<std::string>(), 0};
      }
      const auto& [cls, sep] = special;
      post_processor.single = {cls, {Kind::kFirst, 0, "", 0}, sep};
      if (bert) {
        // processors/bert.rs: the second text and its [SEP] have type id 1.
        TemplatePiece second_sep = sep;
        second_sep.type_id = 1;
        post_processor.pair = {
            cls, {Kind::kFirst, 0, "", 0}, sep, {Kind::kSecond, 0, "", 1}, second_sep};
      } else {
        // Every type id 0, also in pairs (RobertaProcessing).
        post_processor.pair = {cls, {Kind::kFirst, 0, "", 0},  sep,
                               sep, {Kind::kSecond, 0, "", 0}, sep};
      }
    } else if (type == "TemplateProcessing") {
      const json special_tokens = processor.value("special_tokens", json::object());
      post_processor.single.clear();
      post_processor.pair.clear();
      ATTNSCOPE_RETURN_IF_ERROR(ParseTemplate(processor.value("single", json()), special_tokens,
                                              path, "post_processor.single",
                                              &post_processor.single));
      ATTNSCOPE_RETURN_IF_ERROR(ParseTemplate(processor.value("pair", json()), special_tokens, path,
                                              "post_processor.pair", &post_processor.pair));
    } else if (type != "ByteLevel") {
      return Unsupported(path, "post_processor", type, kPostProcessors);
    }
  }
  for (const std::vector<TemplatePiece>* pieces : {&post_processor.single, &post_processor.pair}) {
    for (const TemplatePiece& piece : *pieces) {
      if (piece.kind == Kind::kSpecial &&
          (piece.id < 0 || piece.id >= static_cast<int64_t>(id_to_token.size()))) {
        return FieldError(path, "post_processor", "special token ids of the vocabulary",
                          absl::StrCat(piece.token, " = ", piece.id));
      }
    }
  }

  // --- decoder ---
  pipeline.decoder.clear();
  for (const json& decoder : Flatten(root.value("decoder", json()), "decoders")) {
    const json type = TypeOf(decoder);
    DecoderStep step;
    if (type == "ByteLevel") {
      step.kind = DecoderStep::Kind::kByteLevel;
    } else if (type == "ByteFallback") {
      step.kind = DecoderStep::Kind::kByteFallback;
    } else if (type == "Fuse") {
      step.kind = DecoderStep::Kind::kFuse;
    } else if (type == "Replace") {
      step.kind = DecoderStep::Kind::kReplace;
      const json pattern = decoder.value("pattern", json());
      if (!pattern.is_object() || !pattern.value("String", json()).is_string()) {
        return Unsupported(path, "decoder Replace pattern", pattern, "{\"String\": ...}");
      }
      step.pattern = pattern["String"].get<std::string>();
      ATTNSCOPE_ASSIGN_OR_RETURN(step.content,
                                 GetString(decoder, "content", path, "decoder.content"));
    } else if (type == "Strip") {
      step.kind = DecoderStep::Kind::kStrip;
      ATTNSCOPE_ASSIGN_OR_RETURN(step.content,
                                 GetString(decoder, "content", path, "decoder.content"));
      ATTNSCOPE_ASSIGN_OR_RETURN(step.start, GetInt(decoder, "start", path, "decoder.start"));
      ATTNSCOPE_ASSIGN_OR_RETURN(step.stop, GetInt(decoder, "stop", path, "decoder.stop"));
    } else if (type == "Metaspace") {
      step.kind = DecoderStep::Kind::kMetaspace;
      ATTNSCOPE_ASSIGN_OR_RETURN(const Metaspace metaspace,
                                 ParseMetaspace(decoder, path, "decoder"));
      step.content.clear();
      unicode::AppendUtf8(metaspace.replacement, &step.content);
      step.prepend = metaspace.prepend_scheme != "never";
    } else if (type == "BPEDecoder") {
      step.kind = DecoderStep::Kind::kBpeSuffix;
      step.content = "</w>";  // the library's default
      if (decoder.contains("suffix")) {
        ATTNSCOPE_ASSIGN_OR_RETURN(step.content,
                                   GetString(decoder, "suffix", path, "decoder.suffix"));
      }
    } else if (type == "WordPiece") {
      step.kind = DecoderStep::Kind::kWordPiece;
      step.content = "##";  // the library's default
      if (decoder.contains("prefix")) {
        ATTNSCOPE_ASSIGN_OR_RETURN(step.content,
                                   GetString(decoder, "prefix", path, "decoder.prefix"));
      }
      ATTNSCOPE_ASSIGN_OR_RETURN(step.cleanup,
                                 GetBool(decoder, "cleanup", true, path, "decoder.cleanup"));
    } else {
      return Unsupported(path, "decoder", type, kDecoders);
    }
    pipeline.decoder.push_back(std::move(step));
  }
  return absl::OkStatus();
}

}  // namespace attnscope

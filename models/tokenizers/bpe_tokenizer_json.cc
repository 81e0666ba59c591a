// BpeTokenizer::FromTokenizerJson: a tokenizer.json with a BPE model over bytes, read into the same
// pipeline the slow files make (bpe_tokenizer.cc runs it).
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "models/tokenizers/bpe_tokenizer.h"
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

constexpr char kNormalizers[] = "NFC, Replace, Sequence (of those), null";
constexpr char kPreTokenizers[] = "ByteLevel, Split, Sequence (of those), null";
constexpr char kPostProcessors[] =
    "ByteLevel, RobertaProcessing, TemplateProcessing, Sequence (of those), null";
constexpr char kDecoders[] =
    "ByteLevel, Replace, ByteFallback, Fuse, Strip, Sequence (of those), null";

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

}  // namespace

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromTokenizerJson(
    const std::string& path, int64_t model_max_length, const std::string& pad_token) {
  ATTNSCOPE_ASSIGN_OR_RETURN(const json root, tokenizer_json::Read(path));
  const json model = root.value("model", json());
  if (TypeOf(model) != "BPE") {
    return Unsupported(path, "model", TypeOf(model), "BPE (here), WordPiece (LoadTokenizer)");
  }

  // --- model ---
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json value = model.value(key, json());
    if (!value.is_null() && value != "") {
      return UnsupportedValue(path, absl::StrCat("model.", key), value, "null or \"\"");
    }
  }
  if (!model.value("dropout", json()).is_null() && model["dropout"] != 0.0) {
    return UnsupportedValue(path, "model.dropout", model["dropout"],
                            "null (deterministic encoding)");
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(const bool ignore_merges,
                             GetBool(model, "ignore_merges", false, path, "model.ignore_merges"));
  ATTNSCOPE_ASSIGN_OR_RETURN(const bool byte_fallback,
                             GetBool(model, "byte_fallback", false, path, "model.byte_fallback"));
  ATTNSCOPE_ASSIGN_OR_RETURN(const bool fuse_unk,
                             GetBool(model, "fuse_unk", false, path, "model.fuse_unk"));

  const json& vocab = model.value("vocab", json());
  if (!vocab.is_object() || vocab.empty()) {
    return FieldError(path, "model.vocab", "a non-empty object token -> id", vocab);
  }
  const json added_tokens = root.value("added_tokens", json::array());
  if (!added_tokens.is_array()) return FieldError(path, "added_tokens", "an array", added_tokens);
  // The library keeps ids in maps, so they may leave gaps; a table indexed by id must not be made
  // huge by one stray id, so ids stay below the number of tokens the file has (dense ids, the
  // layout every converter writes, always do).
  const int64_t id_limit = static_cast<int64_t>(vocab.size() + added_tokens.size());
  const std::string id_range =
      absl::StrCat("an id in [0, ", id_limit, "), the number of vocab and added tokens");
  absl::flat_hash_map<std::string, int64_t> token_to_id;
  token_to_id.reserve(vocab.size());
  std::vector<std::string> id_to_token;
  std::vector<bool> taken;
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= id_limit) {
      return FieldError(path, "model.vocab." + token, id_range, id);
    }
    const auto index = static_cast<size_t>(id.get<int64_t>());
    if (index >= id_to_token.size()) {
      id_to_token.resize(index + 1);
      taken.resize(index + 1, false);
    }
    if (taken[index]) {
      return FieldError(path, "model.vocab." + token,
                        absl::StrCat("an id no other token has (", id_to_token[index], ")"), id);
    }
    taken[index] = true;
    id_to_token[index] = token;
    token_to_id[token] = id.get<int64_t>();
  }

  const json& merges_json = model.value("merges", json());
  if (!merges_json.is_array()) {
    return FieldError(path, "model.merges", "an array of \"a b\" strings or [a, b] pairs",
                      merges_json);
  }
  absl::flat_hash_map<std::pair<int64_t, int64_t>, Merge> merges;
  merges.reserve(merges_json.size());
  for (size_t rank = 0; rank < merges_json.size(); ++rank) {
    const json& merge = merges_json[rank];
    const std::string field = absl::StrCat("model.merges[", rank, "]");
    std::string parts[2];
    if (merge.is_string()) {
      // The library's legacy format: exactly one space.
      const std::vector<std::string> split = absl::StrSplit(merge.get<std::string>(), ' ');
      if (split.size() != 2) {
        return FieldError(path, field, "two tokens separated by one space", merge);
      }
      parts[0] = split[0];
      parts[1] = split[1];
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      parts[0] = merge[0].get<std::string>();
      parts[1] = merge[1].get<std::string>();
    } else {
      return FieldError(path, field, "\"a b\" or [\"a\", \"b\"]", merge);
    }
    const std::string merged = parts[0] + parts[1];
    int64_t ids[3];
    const std::string* names[3] = {&parts[0], &parts[1], &merged};
    for (int k = 0; k < 3; ++k) {
      const auto it = token_to_id.find(*names[k]);
      if (it == token_to_id.end()) {
        return FieldError(
            path, field,
            absl::StrCat(k == 2 ? "a merged token '" : "tokens '", *names[k], "' in model.vocab"),
            merge);
      }
      ids[k] = it->second;
    }
    // The library collects the merges into a map: a repeated pair keeps its last rank.
    merges.insert_or_assign(std::make_pair(ids[0], ids[1]),
                            Merge{static_cast<int64_t>(rank), ids[2]});
  }

  Pipeline pipeline;
  pipeline.ignore_merges = ignore_merges;
  pipeline.byte_fallback = byte_fallback;
  pipeline.fuse_unk = fuse_unk;
  const json unk = model.value("unk_token", json());
  if (!unk.is_null()) {
    if (!unk.is_string() || !token_to_id.contains(unk.get<std::string>())) {
      return FieldError(path, "model.unk_token", "null or a token of model.vocab", unk);
    }
    pipeline.unk_id = token_to_id.at(unk.get<std::string>());
  }

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
    } else if (type == "Replace") {
      step.kind = NormalizerStep::Kind::kReplace;
      ATTNSCOPE_ASSIGN_OR_RETURN(step.pattern, ParsePattern(normalizer, path, "normalizer"));
      ATTNSCOPE_ASSIGN_OR_RETURN(step.content,
                                 GetString(normalizer, "content", path, "normalizer.content"));
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
      std::string normalized;
      for (const NormChar& c : Normalize(pipeline.normalizer, std::move(chars))) {
        unicode::AppendUtf8(c.c, &normalized);
      }
      id_to_token[static_cast<size_t>(added.id)] = normalized;
      added.content = std::move(normalized);
    }
  }

  // --- pre-tokenizer ---
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
      const json behavior = pre_tokenizer.value("behavior", json());
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
      step.behavior = found->second;
      ATTNSCOPE_ASSIGN_OR_RETURN(
          step.invert, GetBool(pre_tokenizer, "invert", false, path, "pre_tokenizer.invert"));
    } else {
      return Unsupported(path, "pre_tokenizer", type, kPreTokenizers);
    }
    pipeline.pre_tokenizer.push_back(std::move(step));
  }
  // Without a ByteLevel pre-tokenizer the model's symbols are characters (Gemma's layout).
  pipeline.byte_level = std::any_of(
      pipeline.pre_tokenizer.begin(), pipeline.pre_tokenizer.end(),
      [](const PreTokenizerStep& step) { return step.kind == PreTokenizerStep::Kind::kByteLevel; });

  // --- post-processor ---
  // Without a template the library's default: the texts only, the second with type id 1.
  using Kind = TemplatePiece::Kind;
  PostProcessorTemplate post_processor;
  post_processor.single = {{Kind::kFirst, 0, "", 0}};
  post_processor.pair = {{Kind::kFirst, 0, "", 0}, {Kind::kSecond, 0, "", 1}};
  bool has_template = false;
  bool has_trimmer = false;
  for (const json& processor : Flatten(root.value("post_processor", json()), "processors")) {
    const json type = TypeOf(processor);
    const bool roberta = type == "RobertaProcessing";
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
    if (roberta || type == "TemplateProcessing") {
      if (has_template) {
        return Unsupported(path, "post_processor", type, "at most one template in a Sequence");
      }
      has_template = true;
    }
    if (roberta) {
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
      // Every type id 0, also in pairs (RobertaProcessing).
      post_processor.single = {cls, {Kind::kFirst, 0, "", 0}, sep};
      post_processor.pair = {cls, {Kind::kFirst, 0, "", 0},  sep,
                             sep, {Kind::kSecond, 0, "", 0}, sep};
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
    } else {
      return Unsupported(path, "decoder", type, kDecoders);
    }
    pipeline.decoder.push_back(std::move(step));
  }

  int64_t pad_id = 0;
  if (!pad_token.empty()) {
    const auto it = std::find(id_to_token.begin(), id_to_token.end(), pad_token);
    if (it != id_to_token.end()) pad_id = it - id_to_token.begin();
  }
  return std::unique_ptr<BpeTokenizer>(
      new BpeTokenizer(std::move(id_to_token), std::move(token_to_id), std::move(merges),
                       std::move(pipeline), std::move(post_processor), pad_id, model_max_length));
}

}  // namespace attnscope

// BpeTokenizer::FromTokenizerJson: a tokenizer.json with a BPE model, read into the same pipeline
// the slow files make.
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
#include "models/tokenizers/tokenizer_json.h"
#include "nlohmann/json.hpp"

namespace attnscope {
namespace {

using json = nlohmann::json;
using tokenizer_json::FieldError;
using tokenizer_json::GetBool;
using tokenizer_json::GetInt;
using tokenizer_json::GetString;
using tokenizer_json::ReadVocab;
using tokenizer_json::Unsupported;
using tokenizer_json::UnsupportedValue;

json TypeOf(const json& component) {
  return component.is_object() ? component.value("type", json()) : component;
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromTokenizerJson(
    const json& root, const std::string& path, int64_t model_max_length,
    const std::string& pad_token) {
  const json model = root.value("model", json());
  if (TypeOf(model) != "BPE") {
    return Unsupported(path, "model", TypeOf(model),
                       "BPE (here), WordPiece, Unigram, WordLevel (LoadTokenizer)");
  }

  // --- model ---
  Model settings;
  for (auto [key, affix] :
       {std::pair{"continuing_subword_prefix", &settings.continuing_subword_prefix},
        std::pair{"end_of_word_suffix", &settings.end_of_word_suffix}}) {
    const json value = model.value(key, json());
    if (!value.is_null() && !value.is_string()) {
      return FieldError(path, absl::StrCat("model.", key), "null or a string", value);
    }
    if (value.is_string()) *affix = value.get<std::string>();
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
  if (byte_fallback &&
      !(settings.continuing_subword_prefix.empty() && settings.end_of_word_suffix.empty())) {
    // The library would spell the affixes' bytes as "<0xXX>" tokens too, with offsets of their own.
    return UnsupportedValue(path, "model.byte_fallback", true,
                            "false when model.continuing_subword_prefix or "
                            "model.end_of_word_suffix is set");
  }

  ATTNSCOPE_ASSIGN_OR_RETURN(tokenizer_json::Vocab vocab, ReadVocab(root, model, path));
  const int64_t id_limit = vocab.id_limit;
  std::vector<std::string>& id_to_token = vocab.id_to_token;
  absl::flat_hash_map<std::string, int64_t>& token_to_id = vocab.token_to_id;

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
    // The library's BPE builder: the right token's first prefix-length bytes are dropped ("a"
    // and "##b" make "ab"), whatever they are.
    const size_t prefix_size = settings.continuing_subword_prefix.size();
    if (parts[1].size() < prefix_size) {
      return FieldError(path, field,
                        absl::StrCat("a right token at least as long as the continuing prefix '",
                                     settings.continuing_subword_prefix, "'"),
                        merge);
    }
    const std::string merged = parts[0] + parts[1].substr(prefix_size);
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

  settings.ignore_merges = ignore_merges;
  settings.byte_fallback = byte_fallback;
  settings.fuse_unk = fuse_unk;
  const json unk = model.value("unk_token", json());
  if (!unk.is_null()) {
    if (!unk.is_string() || !token_to_id.contains(unk.get<std::string>())) {
      return FieldError(path, "model.unk_token", "null or a token of model.vocab", unk);
    }
    settings.unk_id = token_to_id.at(unk.get<std::string>());
  }

  Pipeline pipeline;
  PostProcessorTemplate post_processor;
  ATTNSCOPE_RETURN_IF_ERROR(
      ReadComponents(root, path, id_limit, &id_to_token, &pipeline, &post_processor));
  // Without a ByteLevel pre-tokenizer the model's symbols are characters (Gemma's layout).
  settings.byte_level = std::any_of(
      pipeline.pre_tokenizer.begin(), pipeline.pre_tokenizer.end(),
      [](const PreTokenizerStep& step) { return step.kind == PreTokenizerStep::Kind::kByteLevel; });

  const int64_t pad_id = PadId(id_to_token, pad_token);
  return std::unique_ptr<BpeTokenizer>(
      new BpeTokenizer(std::move(id_to_token), std::move(token_to_id), std::move(merges), settings,
                       std::move(pipeline), std::move(post_processor), pad_id, model_max_length));
}

}  // namespace attnscope

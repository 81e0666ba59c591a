// LoadTokenizer: picks the tokenizer files of a Hugging Face checkpoint directory and turns
// tokenizer_config.json / config.json into tokenizer options.
#include <sys/stat.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/json_util.h"
#include "common/status_macros.h"
#include "models/tokenizers/bpe_tokenizer.h"
#include "models/tokenizers/marian_tokenizer.h"
#include "models/tokenizers/sentencepiece_tokenizer.h"
#include "models/tokenizers/t5_tokenizer.h"
#include "models/tokenizers/tokenizer.h"
#include "models/tokenizers/tokenizer_json.h"
#include "models/tokenizers/unigram_tokenizer.h"
#include "models/tokenizers/wordlevel_tokenizer.h"
#include "models/tokenizers/wordpiece_tokenizer.h"
#include "nlohmann/json.hpp"

namespace attnscope {
namespace {

using json = nlohmann::json;

// HF writes model_max_length = int(1e30) for "no limit"; anything this large means the same.
constexpr double kUnlimitedLength = 1e18;

bool IsDirectory(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

// The parsed file, or null when it does not exist (these files are all optional).
absl::StatusOr<json> ReadOptionalJson(const std::string& path, const std::string& what,
                                      uint64_t max_bytes) {
  ATTNSCOPE_ASSIGN_OR_RETURN(const bool exists, OptionalFileExists(path));
  if (!exists) return json();
  ATTNSCOPE_ASSIGN_OR_RETURN(std::string contents, ReadFileToString(path, max_bytes));
  json parsed = json::parse(contents, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " '", path, "': expected a JSON object, got ", DescribeJsonText(contents)));
  }
  ATTNSCOPE_RETURN_IF_ERROR(CheckJsonDepth(parsed, absl::StrCat(what, " '", path, "'")));
  return parsed;
}

absl::Status FieldError(const std::string& what, const std::string& path, const std::string& field,
                        const std::string& expected, const json& got) {
  return absl::InvalidArgumentError(absl::StrCat(what, " '", path, "': field '", field,
                                                 "': expected ", expected, ", got ",
                                                 JsonExcerpt(got, 200)));
}

absl::Status ReadBool(const json& object, const std::string& key, const std::string& what,
                      const std::string& path, bool* out) {
  if (!object.is_object() || !object.contains(key) || object[key].is_null())
    return absl::OkStatus();
  if (!object[key].is_boolean()) return FieldError(what, path, key, "true or false", object[key]);
  *out = object[key].get<bool>();
  return absl::OkStatus();
}

absl::Status ReadId(const json& object, const std::string& key, const std::string& what,
                    const std::string& path, std::optional<int64_t>* out) {
  if (!object.is_object() || !object.contains(key) || object[key].is_null())
    return absl::OkStatus();
  json value = object[key];
  // Newer configs list several end-of-sequence ids; the template uses the first.
  if (value.is_array() && !value.empty()) value = value[0];
  if (!value.is_number_integer()) return FieldError(what, path, key, "an integer id", object[key]);
  *out = value.get<int64_t>();
  return absl::OkStatus();
}

// A special token is written either as a string or as an AddedToken object {"content": ...}.
bool TokenContent(const json& value, std::string* out) {
  if (value.is_string()) {
    *out = value.get<std::string>();
    return true;
  }
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    *out = value["content"].get<std::string>();
    return true;
  }
  return false;
}

absl::Status ReadTokenName(const json& object, const std::string& key, const std::string& path,
                           std::string* out) {
  if (!object.is_object() || !object.contains(key) || object[key].is_null())
    return absl::OkStatus();
  if (!TokenContent(object[key], out)) {
    return FieldError("tokenizer_config.json", path, key,
                      "a string or an object with a string \"content\"", object[key]);
  }
  return absl::OkStatus();
}

// tokenizer_config.json model_max_length, else config.json max_position_embeddings, else no limit.
int64_t ModelMaxLength(const json& tokenizer_config, const json& config) {
  if (tokenizer_config.is_object() && tokenizer_config.contains("model_max_length")) {
    const json& value = tokenizer_config["model_max_length"];
    if (value.is_number() && value.get<double>() >= 1 && value.get<double>() < kUnlimitedLength) {
      return static_cast<int64_t>(value.get<double>());
    }
    if (value.is_number()) return kNoMaxLength;
  }
  if (config.is_object() && config.contains("max_position_embeddings") &&
      config["max_position_embeddings"].is_number_integer() &&
      config["max_position_embeddings"].get<int64_t>() > 0) {
    return config["max_position_embeddings"].get<int64_t>();
  }
  return kNoMaxLength;
}

// BertTokenizerFast's arguments as transformers reads them from tokenizer_config.json.
absl::StatusOr<WordPieceOptions> WordPieceOptionsFromConfig(const json& tokenizer_config,
                                                            const std::string& path) {
  WordPieceOptions options;
  const std::string what = "tokenizer_config.json";
  ATTNSCOPE_RETURN_IF_ERROR(
      ReadBool(tokenizer_config, "do_lower_case", what, path, &options.lowercase));
  ATTNSCOPE_RETURN_IF_ERROR(ReadBool(tokenizer_config, "tokenize_chinese_chars", what, path,
                                     &options.handle_chinese_chars));
  if (tokenizer_config.is_object() && tokenizer_config.contains("strip_accents") &&
      !tokenizer_config["strip_accents"].is_null()) {
    bool strip = false;
    ATTNSCOPE_RETURN_IF_ERROR(ReadBool(tokenizer_config, "strip_accents", what, path, &strip));
    options.strip_accents = strip;
  }
  ATTNSCOPE_RETURN_IF_ERROR(ReadTokenName(tokenizer_config, "unk_token", path, &options.unk_token));
  ATTNSCOPE_RETURN_IF_ERROR(ReadTokenName(tokenizer_config, "cls_token", path, &options.cls_token));
  ATTNSCOPE_RETURN_IF_ERROR(ReadTokenName(tokenizer_config, "sep_token", path, &options.sep_token));
  ATTNSCOPE_RETURN_IF_ERROR(ReadTokenName(tokenizer_config, "pad_token", path, &options.pad_token));
  ATTNSCOPE_RETURN_IF_ERROR(
      ReadTokenName(tokenizer_config, "mask_token", path, &options.mask_token));
  if (!tokenizer_config.is_object()) return options;
  const json additional = tokenizer_config.value("additional_special_tokens", json::array());
  if (!additional.is_array()) {
    return FieldError(what, path, "additional_special_tokens", "an array", additional);
  }
  for (size_t i = 0; i < additional.size(); ++i) {
    std::string name;
    if (!TokenContent(additional[i], &name)) {
      return FieldError(what, path, absl::StrCat("additional_special_tokens[", i, "]"),
                        "a string or an object with a string \"content\"", additional[i]);
    }
    options.additional_special_tokens.push_back(name);
  }
  // transformers >= 4.34 lists every added token here; the special ones are matched literally.
  const json decoder = tokenizer_config.value("added_tokens_decoder", json::object());
  if (!decoder.is_object())
    return FieldError(what, path, "added_tokens_decoder", "an object", decoder);
  for (const auto& [id, token] : decoder.items()) {
    if (!token.is_object() || token.value("special", json()) != true) continue;
    std::string name;
    if (!TokenContent(token, &name)) {
      return FieldError(what, path, "added_tokens_decoder." + id,
                        "an object with a string \"content\"", token);
    }
    options.additional_special_tokens.push_back(name);
  }
  return options;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& model_dir) {
  if (!IsDirectory(model_dir)) {
    return absl::NotFoundError(
        absl::StrCat("model directory '", model_dir, "': expected a directory, got nothing there"));
  }
  const std::string tokenizer_config_path = JoinPath(model_dir, "tokenizer_config.json");
  const std::string config_path = JoinPath(model_dir, "config.json");
  ATTNSCOPE_ASSIGN_OR_RETURN(
      json tokenizer_config,
      ReadOptionalJson(tokenizer_config_path, "tokenizer_config.json", kMaxSettingsFileBytes));
  ATTNSCOPE_ASSIGN_OR_RETURN(json config,
                             ReadOptionalJson(config_path, "config.json", kMaxSettingsFileBytes));
  // Each tokenizer file that is there but not a regular file is an error, never taken for absent.
  const auto exists = [&](const char* name) {
    return OptionalFileExists(JoinPath(model_dir, name));
  };
  const int64_t model_max_length = ModelMaxLength(tokenizer_config, config);

  // tokenizer.json first, as transformers' fast tokenizers read it. One of another model type, or
  // one with components its reader does not support, is skipped in favour of the files below; its
  // error is reported only when nothing else is there.
  absl::Status unsupported_json = absl::OkStatus();
  const std::string json_path = JoinPath(model_dir, "tokenizer.json");
  ATTNSCOPE_ASSIGN_OR_RETURN(const bool has_json, exists("tokenizer.json"));
  if (has_json) {
    // Parsed once for every reader: a Llama 3 or Gemma 3 tokenizer.json is 9 to 33 MB, and each
    // parse of it costs half a second.
    ATTNSCOPE_ASSIGN_OR_RETURN(const json root, tokenizer_json::Read(json_path));
    std::string pad_token;
    ATTNSCOPE_RETURN_IF_ERROR(
        ReadTokenName(tokenizer_config, "pad_token", tokenizer_config_path, &pad_token));
    const json model = root.value("model", json());
    const json type = model.is_object() ? model.value("type", json()) : json();
    if (type == "WordPiece") {
      ATTNSCOPE_ASSIGN_OR_RETURN(auto tokenizer, WordPieceTokenizer::FromTokenizerJson(
                                                     root, json_path, model_max_length, pad_token));
      return std::unique_ptr<Tokenizer>(std::move(tokenizer));
    }
    // A malformed file is an error; a well-formed one a reader does not support (a component or
    // setting it lacks) leaves the slow files their turn.
    if (type == "BPE") {
      absl::StatusOr<std::unique_ptr<BpeTokenizer>> bpe =
          BpeTokenizer::FromTokenizerJson(root, json_path, model_max_length, pad_token);
      if (bpe.ok()) return std::unique_ptr<Tokenizer>(std::move(bpe).value());
      if (!absl::IsUnimplemented(bpe.status())) return bpe.status();
      unsupported_json = absl::InvalidArgumentError(bpe.status().message());
    } else if (type == "Unigram") {
      absl::StatusOr<std::unique_ptr<UnigramTokenizer>> unigram =
          UnigramTokenizer::FromTokenizerJson(root, json_path, model_max_length, pad_token);
      if (unigram.ok()) return std::unique_ptr<Tokenizer>(std::move(unigram).value());
      if (!absl::IsUnimplemented(unigram.status())) return unigram.status();
      unsupported_json = absl::InvalidArgumentError(unigram.status().message());
    } else if (type == "WordLevel") {
      absl::StatusOr<std::unique_ptr<WordLevelTokenizer>> word_level =
          WordLevelTokenizer::FromTokenizerJson(root, json_path, model_max_length, pad_token);
      if (word_level.ok()) return std::unique_ptr<Tokenizer>(std::move(word_level).value());
      if (!absl::IsUnimplemented(word_level.status())) return word_level.status();
      unsupported_json = absl::InvalidArgumentError(word_level.status().message());
    } else {
      unsupported_json = FieldError("tokenizer.json", json_path, "model.type",
                                    "\"WordPiece\", \"BPE\", \"Unigram\" or \"WordLevel\" (or a "
                                    "vocab.txt or tokenizer.model beside it)",
                                    type);
    }
  }

  ATTNSCOPE_ASSIGN_OR_RETURN(const bool has_source_spm, exists("source.spm"));
  ATTNSCOPE_ASSIGN_OR_RETURN(const bool has_target_spm, exists("target.spm"));
  if (has_source_spm || has_target_spm) {
    MarianTokenizerOptions options;
    ATTNSCOPE_RETURN_IF_ERROR(
        ReadTokenName(tokenizer_config, "eos_token", tokenizer_config_path, &options.eos_token));
    ATTNSCOPE_RETURN_IF_ERROR(
        ReadTokenName(tokenizer_config, "unk_token", tokenizer_config_path, &options.unk_token));
    ATTNSCOPE_RETURN_IF_ERROR(
        ReadTokenName(tokenizer_config, "pad_token", tokenizer_config_path, &options.pad_token));
    bool separate_vocabs = false;
    ATTNSCOPE_RETURN_IF_ERROR(ReadBool(tokenizer_config, "separate_vocabs", "tokenizer_config.json",
                                       tokenizer_config_path, &separate_vocabs));
    if (separate_vocabs) {
      return FieldError("tokenizer_config.json", tokenizer_config_path, "separate_vocabs",
                        "false (one vocab.json for both languages; target_vocab.json is not "
                        "supported)",
                        true);
    }
    options.model_max_length = model_max_length;
    ATTNSCOPE_ASSIGN_OR_RETURN(auto tokenizer, MarianTokenizer::Load(model_dir, options));
    return std::unique_ptr<Tokenizer>(std::move(tokenizer));
  }

  // T5's spiece.model (T5Tokenizer): after Marian's files, before the BPE and WordPiece ones.
  const std::string spiece_path = JoinPath(model_dir, "spiece.model");
  ATTNSCOPE_ASSIGN_OR_RETURN(const bool has_spiece, exists("spiece.model"));
  if (has_spiece) {
    T5TokenizerOptions options;
    options.model_max_length = model_max_length;
    if (tokenizer_config.is_object() && tokenizer_config.contains("extra_ids") &&
        !tokenizer_config["extra_ids"].is_null()) {
      const json& extra_ids = tokenizer_config["extra_ids"];
      if (!extra_ids.is_number_integer() || extra_ids.get<int64_t>() < 0) {
        return FieldError("tokenizer_config.json", tokenizer_config_path, "extra_ids",
                          "a number of sentinel tokens >= 0", extra_ids);
      }
      options.extra_ids = extra_ids.get<int64_t>();
    }
    ATTNSCOPE_ASSIGN_OR_RETURN(auto tokenizer, T5Tokenizer::Load(spiece_path, options));
    return std::unique_ptr<Tokenizer>(std::move(tokenizer));
  }

  const std::string bpe_vocab_path = JoinPath(model_dir, "vocab.json");
  const std::string merges_path = JoinPath(model_dir, "merges.txt");
  ATTNSCOPE_ASSIGN_OR_RETURN(const bool has_bpe_vocab, exists("vocab.json"));
  ATTNSCOPE_ASSIGN_OR_RETURN(const bool has_merges, exists("merges.txt"));
  if (has_bpe_vocab && has_merges) {
    BpeOptions options;
    for (const auto& [key, name] :
         {std::pair<const char*, std::string*>{"bos_token", &options.bos_token},
          {"eos_token", &options.eos_token},
          {"cls_token", &options.cls_token},
          {"sep_token", &options.sep_token},
          {"unk_token", &options.unk_token},
          {"pad_token", &options.pad_token},
          {"mask_token", &options.mask_token}}) {
      ATTNSCOPE_RETURN_IF_ERROR(ReadTokenName(tokenizer_config, key, tokenizer_config_path, name));
    }
    bool add_prefix_space = false;
    ATTNSCOPE_RETURN_IF_ERROR(ReadBool(tokenizer_config, "add_prefix_space",
                                       "tokenizer_config.json", tokenizer_config_path,
                                       &add_prefix_space));
    if (add_prefix_space) {
      return FieldError("tokenizer_config.json", tokenizer_config_path, "add_prefix_space",
                        "false (a space added before the text is not supported)", true);
    }
    ATTNSCOPE_RETURN_IF_ERROR(ReadBool(tokenizer_config, "trim_offsets", "tokenizer_config.json",
                                       tokenizer_config_path, &options.trim_offsets));
    options.model_max_length = model_max_length;
    ATTNSCOPE_ASSIGN_OR_RETURN(
        auto tokenizer, BpeTokenizer::FromFiles(bpe_vocab_path, merges_path, std::move(options)));
    return std::unique_ptr<Tokenizer>(std::move(tokenizer));
  }

  const std::string vocab_path = JoinPath(model_dir, "vocab.txt");
  ATTNSCOPE_ASSIGN_OR_RETURN(const bool has_vocab_txt, exists("vocab.txt"));
  if (has_vocab_txt) {
    ATTNSCOPE_ASSIGN_OR_RETURN(WordPieceOptions options,
                               WordPieceOptionsFromConfig(tokenizer_config, tokenizer_config_path));
    options.model_max_length = model_max_length;
    ATTNSCOPE_ASSIGN_OR_RETURN(auto tokenizer,
                               WordPieceTokenizer::FromVocabFile(vocab_path, std::move(options)));
    return std::unique_ptr<Tokenizer>(std::move(tokenizer));
  }

  const std::string sp_path = JoinPath(model_dir, "tokenizer.model");
  ATTNSCOPE_ASSIGN_OR_RETURN(const bool has_sp_model, exists("tokenizer.model"));
  if (has_sp_model) {
    SentencePieceOptions options;
    options.model_max_length = model_max_length;
    ATTNSCOPE_RETURN_IF_ERROR(ReadBool(tokenizer_config, "add_bos_token", "tokenizer_config.json",
                                       tokenizer_config_path, &options.add_bos_token));
    ATTNSCOPE_RETURN_IF_ERROR(ReadBool(tokenizer_config, "add_eos_token", "tokenizer_config.json",
                                       tokenizer_config_path, &options.add_eos_token));
    ATTNSCOPE_RETURN_IF_ERROR(
        ReadId(config, "bos_token_id", "config.json", config_path, &options.bos_token_id));
    ATTNSCOPE_RETURN_IF_ERROR(
        ReadId(config, "eos_token_id", "config.json", config_path, &options.eos_token_id));
    ATTNSCOPE_RETURN_IF_ERROR(
        ReadId(config, "pad_token_id", "config.json", config_path, &options.pad_token_id));
    ATTNSCOPE_ASSIGN_OR_RETURN(auto tokenizer, SentencePieceTokenizer::Load(sp_path, options));
    return std::unique_ptr<Tokenizer>(std::move(tokenizer));
  }

  if (!unsupported_json.ok()) return unsupported_json;
  return absl::NotFoundError(absl::StrCat(
      "tokenizer files in '", model_dir,
      "': expected tokenizer.json (WordPiece, BPE, Unigram or WordLevel), source.spm + target.spm "
      "+ "
      "vocab.json (Marian), "
      "spiece.model (T5), vocab.json + merges.txt (byte-level BPE), vocab.txt or tokenizer.model, "
      "got none of them"));
}

}  // namespace attnscope

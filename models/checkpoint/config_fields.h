// config.json's field reading that every family's reader shares (config.cc, family_configs.cc):
// the bounds of its sizes and FieldReader's one error style. Internal to models/checkpoint.
#ifndef ATTNSCOPE_MODELS_CHECKPOINT_CONFIG_FIELDS_H_
#define ATTNSCOPE_MODELS_CHECKPOINT_CONFIG_FIELDS_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/json_util.h"
#include "common/status_macros.h"
#include "models/checkpoint/config.h"
#include "nlohmann/json.hpp"

namespace attnscope::config_internal {

using Json = nlohmann::json;

// Upper bounds of config.json's sizes, checked before anything is allocated from them. Each is
// far above every published checkpoint (in brackets) and below 2^31, since ModelInfo carries them
// as int32; the weights file then has to agree with the exact values.
constexpr int64_t kMaxVocabSize = 1 << 24;         // [256,000: Gemma; 250,112: mT5]
constexpr int64_t kMaxHiddenSize = 1 << 16;        // [16,384: Llama 3.1 405B]
constexpr int64_t kMaxLayers = 1024;               // [126: Llama 3.1 405B]
constexpr int64_t kMaxHeads = 1024;                // [128]
constexpr int64_t kMaxHeadDim = 4096;              // [256]
constexpr int64_t kMaxIntermediateSize = 1 << 18;  // [65,536: T5 11B]
constexpr int64_t kMaxPositions = 1 << 20;         // [1,010,000: Qwen2.5 1M]
constexpr int64_t kMaxTypeVocabSize = 1024;        // [2: BERT]
constexpr int64_t kMaxRelativeBuckets = 4096;      // [32: T5]

// Reads config.json fields with one error style: "config 'file': field 'x': expected Y, got Z",
// quoting at most a short excerpt of what the file holds.
class FieldReader {
 public:
  FieldReader(const Json& json, absl::string_view source) : json_(json), source_(source) {}

  absl::Status Error(absl::string_view field, absl::string_view expected,
                     absl::string_view got) const {
    return absl::InvalidArgumentError(absl::StrCat("config '", source_, "': field '", field,
                                                   "': expected ", expected, ", got ", got));
  }

  // An integer in [low, high]; `fallback` when config.json omits it (or has null), an error when
  // there is no fallback.
  absl::StatusOr<int64_t> Int(const char* field, int64_t low, int64_t high,
                              std::optional<int64_t> fallback = std::nullopt) const {
    const std::string expected = absl::StrCat(low, " to ", high);
    auto it = json_.find(field);
    if (it == json_.end() || it->is_null()) {
      if (fallback.has_value()) return *fallback;
      return Error(field, expected, "nothing (field missing)");
    }
    if (!it->is_number_integer()) {
      return Error(field, absl::StrCat("an integer, ", expected), Got(*it));
    }
    // Above 2^63 the value wraps when read as int64_t: compare unsigned values as they are.
    if (it->is_number_unsigned() &&
        it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Error(field, expected, Got(*it));
    }
    const int64_t value = it->get<int64_t>();
    if (value < low || value > high) return Error(field, expected, std::to_string(value));
    return value;
  }

  // A size: an integer in [1, high].
  absl::StatusOr<int64_t> Size(const char* field, int64_t high,
                               std::optional<int64_t> fallback = std::nullopt) const {
    return Int(field, 1, high, fallback);
  }

  // A token id: in [0, vocab_size), or -1 (or null) for none when `allow_none`. Newer configs
  // list several end-of-sequence ids; every one must be in range, the first is kept.
  absl::StatusOr<int64_t> TokenId(const char* field, int64_t fallback, int64_t vocab_size,
                                  bool allow_none = true) const {
    const std::string expected = absl::StrCat("an id in [0, ", vocab_size, ") (vocab_size)",
                                              allow_none ? " or -1 for none" : "");
    auto it = json_.find(field);
    if (it == json_.end() || it->is_null()) return fallback;
    std::vector<const Json*> ids;
    if (it->is_array() && !it->empty()) {
      for (const Json& id : *it) ids.push_back(&id);
    } else {
      ids.push_back(&*it);
    }
    for (const Json* id : ids) {
      if (!id->is_number_integer()) return Error(field, expected, Got(*it));
      const bool too_large =
          id->is_number_unsigned() && id->get<uint64_t>() >= static_cast<uint64_t>(vocab_size);
      const int64_t value = id->get<int64_t>();
      if (too_large || value < (allow_none ? -1 : 0) || value >= vocab_size ||
          (value == -1 && ids.size() > 1)) {
        return Error(field, expected, Got(*it));
      }
    }
    return ids.front()->get<int64_t>();
  }

  // Every id of a token id field that may list several, checked as TokenId checks them:
  // {fallback} when absent, none for -1.
  absl::StatusOr<std::vector<int64_t>> TokenIds(const char* field, int64_t fallback,
                                                int64_t vocab_size) const {
    ATTNSCOPE_ASSIGN_OR_RETURN(const int64_t first, TokenId(field, fallback, vocab_size));
    std::vector<int64_t> ids;
    auto it = json_.find(field);
    if (it != json_.end() && it->is_array()) {
      for (const Json& id : *it) ids.push_back(id.get<int64_t>());
    } else if (first >= 0) {
      ids.push_back(first);
    }
    return ids;
  }

  // A finite number > 0, and at least `low` when `low` > 0.
  absl::StatusOr<double> Positive(const char* field, double fallback, double low = 0) const {
    auto it = json_.find(field);
    if (it == json_.end() || it->is_null()) return fallback;
    const std::string expected =
        low > 0 ? absl::StrCat("a finite number of at least ", low) : "a finite number > 0";
    if (!it->is_number()) return Error(field, expected, Got(*it));
    const double value = it->get<double>();
    if (!std::isfinite(value) || value <= 0 || value < low) return Error(field, expected, Got(*it));
    return value;
  }

  absl::StatusOr<bool> BoolOr(const char* field, bool fallback) const {
    auto it = json_.find(field);
    if (it == json_.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) return Error(field, "true or false", Got(*it));
    return it->get<bool>();
  }

  // OK when config.json omits `field` or has null; otherwise an error that expects `expected`.
  absl::Status Absent(const char* field, absl::string_view expected) const {
    auto it = json_.find(field);
    if (it == json_.end() || it->is_null()) return absl::OkStatus();
    return Error(field, expected, Got(*it));
  }

  absl::StatusOr<std::string> StringOr(const char* field, std::string fallback) const {
    auto it = json_.find(field);
    if (it == json_.end() || it->is_null()) return fallback;
    if (!it->is_string()) return Error(field, "a string", Got(*it));
    return it->get<std::string>();
  }

  // What the file holds, as an error message may quote it.
  static std::string Got(const Json& value) { return JsonExcerpt(value); }
  static std::string Quoted(absl::string_view text) {
    return absl::StrCat("\"", Excerpt(text), "\"");
  }

 private:
  const Json& json_;
  absl::string_view source_;
};

// The ids every architecture reads, checked against vocab_size.
absl::Status ReadTokenIds(const FieldReader& reader, int64_t pad, int64_t bos, int64_t eos,
                          ModelConfig& config);

// A classifier's labels: id2label, and num_labels (its size unless config.json says otherwise).
absl::Status ReadLabels(const FieldReader& reader, const Json& json, ModelConfig& config);

// rope_scaling: null, or "linear" scaling's factor (RoPE's other scalings, Llama 3's "llama3",
// "dynamic" and YaRN, change the frequencies otherwise: served with plain RoPE the attentions
// would not be transformers'). 1 for none.
absl::StatusOr<double> ReadLinearRopeScaling(const FieldReader& reader, const Json& json);

// A number config.json may give under either of two names (GPTNeoXConfig's rotary_pct and
// rotary_emb_base, which newer transformers calls partial_rotary_factor and rope_theta). Given
// under both, the values must agree: transformers 4's GPTNeoXConfig overwrites the newer name
// with the older one, and later versions read the newer one.
absl::StatusOr<double> PositiveUnderEither(const FieldReader& reader, const Json& json,
                                           const char* name, const char* old_name, double fallback,
                                           double low = 0);

}  // namespace attnscope::config_internal

#endif  // ATTNSCOPE_MODELS_CHECKPOINT_CONFIG_FIELDS_H_

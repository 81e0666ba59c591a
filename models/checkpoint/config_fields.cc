#include "models/checkpoint/config_fields.h"

#include "absl/strings/numbers.h"

namespace attnscope::config_internal {

absl::Status ReadTokenIds(const FieldReader& reader, int64_t pad, int64_t bos, int64_t eos,
                          ModelConfig& config) {
  ATTNSCOPE_ASSIGN_OR_RETURN(config.pad_token_id,
                             reader.TokenId("pad_token_id", pad, config.vocab_size));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.bos_token_id,
                             reader.TokenId("bos_token_id", bos, config.vocab_size));
  ATTNSCOPE_ASSIGN_OR_RETURN(config.eos_token_ids,
                             reader.TokenIds("eos_token_id", eos, config.vocab_size));
  config.eos_token_id = config.eos_token_ids.empty() ? -1 : config.eos_token_ids.front();
  return absl::OkStatus();
}

absl::Status ReadLabels(const FieldReader& reader, const Json& json, ModelConfig& config) {
  if (auto it = json.find("id2label"); it != json.end() && it->is_object()) {
    for (const auto& [key, label] : it->items()) {
      int64_t index = 0;
      // transformers numbers the labels 0..N-1; an index beyond them has no classifier row.
      if (!absl::SimpleAtoi(key, &index) || index < 0 ||
          index >= static_cast<int64_t>(it->size()) || !label.is_string()) {
        return reader.Error(
            "id2label",
            absl::StrCat("an object of \"index\": \"label\" with indices 0 to ", it->size() - 1),
            absl::StrCat(FieldReader::Quoted(key), ": ", FieldReader::Got(label)));
      }
      config.id2label[index] = label.get<std::string>();
    }
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(
      config.num_labels,
      reader.Int("num_labels", 0, kMaxVocabSize, static_cast<int64_t>(config.id2label.size())));
  return absl::OkStatus();
}

absl::StatusOr<double> ReadLinearRopeScaling(const FieldReader& reader, const Json& json) {
  auto it = json.find("rope_scaling");
  if (it == json.end() || it->is_null()) return 1.0;
  constexpr absl::string_view kExpected =
      "null or {\"rope_type\": \"linear\", \"factor\": a number of at least 1} (the other "
      "RoPE scalings are not implemented; plain RoPE would give other attentions than "
      "transformers does)";
  if (!it->is_object()) return reader.Error("rope_scaling", kExpected, FieldReader::Got(*it));
  // transformers reads "type" where older configs wrote it instead of "rope_type".
  const auto type = it->contains("rope_type") ? it->find("rope_type") : it->find("type");
  const auto factor = it->find("factor");
  if (type == it->end() || *type != "linear" || factor == it->end() || !factor->is_number() ||
      !std::isfinite(factor->get<double>()) || factor->get<double>() < 1.0) {
    return reader.Error("rope_scaling", kExpected, FieldReader::Got(*it));
  }
  return factor->get<double>();
}

absl::StatusOr<double> PositiveUnderEither(const FieldReader& reader, const Json& json,
                                           const char* name, const char* old_name, double fallback,
                                           double low) {
  ATTNSCOPE_ASSIGN_OR_RETURN(const double old_value, reader.Positive(old_name, fallback, low));
  auto it = json.find(name);
  if (it == json.end() || it->is_null()) return old_value;
  ATTNSCOPE_ASSIGN_OR_RETURN(const double value, reader.Positive(name, fallback, low));
  auto old_it = json.find(old_name);
  if (old_it != json.end() && !old_it->is_null() && value != old_value) {
    return reader.Error(name,
                        absl::StrCat(old_name, "'s value ", old_value,
                                     " (both are given; transformers versions read different "
                                     "ones), or only one of the two"),
                        absl::StrCat(value));
  }
  return value;
}

}  // namespace attnscope::config_internal

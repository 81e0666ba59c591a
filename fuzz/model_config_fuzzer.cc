// config.json parsing (ParseModelConfig) on arbitrary bytes. A config it accepts must be one the
// architectures can be built from: every size positive and the head arithmetic exact.
#include <cstddef>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_util.h"
#include "models/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::StatusOr<attnscope::ModelConfig> parsed = attnscope::ParseModelConfig(
      absl::string_view(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
  if (!parsed.ok()) {
    ATTNSCOPE_FUZZ_CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument,
                         parsed.status().ToString());
    return 0;
  }
  const attnscope::ModelConfig& config = *parsed;
  ATTNSCOPE_FUZZ_CHECK(config.vocab_size > 0 && config.hidden_size > 0 &&
                           config.num_hidden_layers > 0 && config.intermediate_size > 0 &&
                           config.max_position_embeddings > 0,
                       "accepted config: expected positive sizes");
  ATTNSCOPE_FUZZ_CHECK(
      config.num_attention_heads > 0 && config.num_key_value_heads > 0 &&
          config.num_attention_heads % config.num_key_value_heads == 0,
      absl::StrCat("accepted config: expected kv heads (", config.num_key_value_heads,
                   ") dividing heads (", config.num_attention_heads, ")"));
  ATTNSCOPE_FUZZ_CHECK(config.head_dim > 0 && config.num_queries_per_kv() >= 1,
                       "accepted config: expected a positive head_dim");
  ATTNSCOPE_FUZZ_CHECK(!attnscope::ArchitectureName(config.architecture).empty(),
                       "accepted config: expected a named architecture");
  return 0;
}

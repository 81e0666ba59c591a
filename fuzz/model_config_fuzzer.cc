// config.json parsing (ParseModelConfig) on arbitrary bytes. A config it accepts must be one the
// architectures can be built from: every size within the bounds config.h documents, the head
// arithmetic exact, every token id inside the vocabulary, the epsilons and the RoPE base finite and
// positive. A config it refuses gets one short line.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_util.h"
#include "models/checkpoint/config.h"

namespace {

bool Within(int64_t value, int64_t low, int64_t high) { return value >= low && value <= high; }

bool IsTokenId(int64_t id, int64_t vocab_size) { return id == -1 || Within(id, 0, vocab_size - 1); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::StatusOr<attnscope::ModelConfig> parsed = attnscope::ParseModelConfig(
      absl::string_view(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
  if (!parsed.ok()) {
    const absl::string_view message = parsed.status().message();
    ATTNSCOPE_FUZZ_CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument,
                         parsed.status().ToString());
    ATTNSCOPE_FUZZ_CHECK(message.size() < 1000 && message.find('\n') == absl::string_view::npos,
                         absl::StrCat("refusal: expected one line under 1000 bytes, got ",
                                      message.size(), " bytes"));
    return 0;
  }
  const attnscope::ModelConfig& config = *parsed;
  ATTNSCOPE_FUZZ_CHECK(
      Within(config.vocab_size, 1, 1 << 24) && Within(config.hidden_size, 1, 1 << 16) &&
          Within(config.num_hidden_layers, 1, 1024) &&
          Within(config.intermediate_size, 1, 1 << 18) &&
          Within(config.max_position_embeddings, 1, 1 << 20) && Within(config.head_dim, 1, 4096),
      "accepted config: expected sizes within their bounds");
  ATTNSCOPE_FUZZ_CHECK(
      Within(config.num_attention_heads, 1, 1024) && config.num_key_value_heads > 0 &&
          config.num_attention_heads % config.num_key_value_heads == 0,
      absl::StrCat("accepted config: expected kv heads (", config.num_key_value_heads,
                   ") dividing heads (", config.num_attention_heads, ")"));
  ATTNSCOPE_FUZZ_CHECK(config.head_dim > 0 && config.num_queries_per_kv() >= 1,
                       "accepted config: expected a positive head_dim");
  if (config.is_encoder_decoder) {
    ATTNSCOPE_FUZZ_CHECK(Within(config.decoder_layers, 1, 1024) &&
                             Within(config.decoder_attention_heads, 1, 1024) &&
                             Within(config.decoder_ffn_dim, 1, 1 << 18) &&
                             Within(config.decoder_start_token_id, 0, config.vocab_size - 1),
                         "accepted encoder-decoder: expected decoder sizes within their bounds");
  }
  for (const int64_t id : {config.pad_token_id, config.bos_token_id, config.eos_token_id}) {
    ATTNSCOPE_FUZZ_CHECK(IsTokenId(id, config.vocab_size),
                         absl::StrCat("accepted config: token id ", id, " outside the vocabulary (",
                                      config.vocab_size, ")"));
  }
  ATTNSCOPE_FUZZ_CHECK(std::isfinite(config.layer_norm_eps) && config.layer_norm_eps > 0 &&
                           std::isfinite(config.rms_norm_eps) && config.rms_norm_eps > 0 &&
                           std::isfinite(config.rope_theta) && config.rope_theta >= 1,
                       "accepted config: expected finite positive epsilons and RoPE base");
  ATTNSCOPE_FUZZ_CHECK(!attnscope::ArchitectureName(config.architecture).empty(),
                       "accepted config: expected a named architecture");
  return 0;
}

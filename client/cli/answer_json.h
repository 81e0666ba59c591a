// The CLI's JSON for the answers several commands print: token lists, model descriptions,
// attention, and tensors (inline as nested arrays, or as .npy files with --npy_dir).
#ifndef ATTNSCOPE_CLIENT_CLI_ANSWER_JSON_H_
#define ATTNSCOPE_CLIENT_CLI_ANSWER_JSON_H_

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "attnscope/v1/attnscope.pb.h"
#include "client/client.h"
#include "client/tensor.h"

namespace attnscope::cli {

// {"tokens", "input_ids", "token_type_ids", "special_tokens_mask", "offsets" and "byte_offsets"
// ([start, end) pairs), "word_ids", "sequence_ids"}: one entry per token each.
nlohmann::json TokensToJson(const v1::Tokens& tokens);

// Every field of `info`, snake_case.
nlohmann::json ModelInfoToJson(const v1::ModelInfo& info);

// Renders tensors as {"shape", "dim_names", "dtype"} and either "values" (nested arrays, the last
// dimension innermost) or, with --npy_dir, "npy": the path of a .npy file holding them.
class TensorWriter {
 public:
  // An empty `npy_dir` renders values inline; otherwise files go there (it must exist).
  explicit TensorWriter(std::string npy_dir) : npy_dir_(std::move(npy_dir)) {}

  // Renders `tensor` into object[key]; with --npy_dir its file is named file_prefix + key + ".npy".
  // Internal: the file cannot be written.
  absl::Status AddTo(nlohmann::json& object, const std::string& key, const DecodedTensor& tensor,
                     const std::string& file_prefix = "") const;

  // The same for a tensor the answer may leave out: nothing is added when it is absent.
  absl::Status AddTo(nlohmann::json& object, const std::string& key,
                     const std::optional<DecodedTensor>& tensor,
                     const std::string& file_prefix = "") const;

 private:
  absl::StatusOr<nlohmann::json> Render(const DecodedTensor& tensor, const std::string& name) const;

  std::string npy_dir_;
};

// A GetAttention / StreamAttention answer: model, tokens, layers, heads, window starts, the
// tensors it has (attentions, scores, top_k_indices, rollout) and with decoder_text the decoder's
// tokens, labels, layers, heads, window starts and tensors. Internal as TensorWriter::AddTo.
absl::StatusOr<nlohmann::json> AttentionToJson(const AttentionResult& result,
                                               const TensorWriter& writer);

}  // namespace attnscope::cli

#endif  // ATTNSCOPE_CLIENT_CLI_ANSWER_JSON_H_

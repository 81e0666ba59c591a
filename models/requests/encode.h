// Encode: the query and answer (RequestRunner::RunEncode).
#ifndef ATTNSCOPE_MODELS_REQUESTS_ENCODE_H_
#define ATTNSCOPE_MODELS_REQUESTS_ENCODE_H_

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "models/requests/types.h"

namespace attnscope {

struct EncodeQuery {
  std::string model;
  std::vector<TextInput> inputs;
  TokenizationQuery tokenization;
  // Also every layer's hidden states (embeddings first).
  bool output_hidden_states = false;
  // Unset: no pooled vector.
  std::optional<Pooling> pooling;
  // L2-normalise the pooled vector; InvalidArgument without pooling.
  bool normalize = false;
  OutputDType dtype = OutputDType::kFloat32;
};

struct EncodedInput {
  EncodedText tokens;
  // [token, hidden].
  torch::Tensor last_hidden_state;
  // L + 1 tensors [token, hidden] (embeddings first), when output_hidden_states.
  std::vector<torch::Tensor> hidden_states;
  // [hidden], when pooling is set.
  torch::Tensor pooled;
};

struct EncodeAnswer {
  const LoadedModel* model = nullptr;
  OutputDType dtype = OutputDType::kFloat32;
  // One per input, in query order.
  std::vector<EncodedInput> results;
};

// What shrinks an over-cap Encode answer.
inline constexpr absl::string_view kEncodeFixes =
    "send fewer inputs per call, leave output_hidden_states off, or use dtype DTYPE_FLOAT16";

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_REQUESTS_ENCODE_H_

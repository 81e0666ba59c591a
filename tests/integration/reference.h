// Expected answers computed in the test process from the committed engine API (LoadTokenizer,
// LoadTransformerModel, TransformerModel::Forward), with the GetAttention options (selection,
// aggregation, rollout, window, top-k) re-implemented here from the proto's documentation, so that
// the server's own post-processing is checked rather than reused.
#ifndef ATTNSCOPE_TESTS_INTEGRATION_REFERENCE_H_
#define ATTNSCOPE_TESTS_INTEGRATION_REFERENCE_H_

#include <torch/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attnscope/v1/attnscope.pb.h"
#include "client/tensor.h"
#include "gtest/gtest.h"
#include "models/architectures/transformer.h"
#include "models/tokenizers/tokenizer.h"

namespace attnscope::testing {

// GetAttention's expected tensors for one request.
struct ExpectedAttention {
  Encoding encoding;
  std::vector<int32_t> layers;
  std::vector<int32_t> heads;
  int32_t query_start = 0;
  int32_t key_start = 0;
  torch::Tensor attentions;     // [layer, head, query, key] or [..., k] float32
  torch::Tensor scores;         // same, when include_scores
  torch::Tensor top_k_indices;  // [layer, head, query, k] int64, when top_k
  torch::Tensor rollout;        // [query, key], when rollout
};

class Reference {
 public:
  // Loads the tokenizer and weights of `model_dir`; aborts the test on failure.
  explicit Reference(const std::string& model_dir);

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const TransformerModel& model() const { return *model_; }

  // The encoding the server should produce for `text` / `text_pair` under `options`.
  Encoding Encode(const std::string& text, const std::optional<std::string>& text_pair,
                  const v1::TokenizationOptions& options) const;
  // A forward pass of one unpadded encoding with attentions, scores and hidden states.
  ForwardOutput Forward(const Encoding& encoding) const;
  ExpectedAttention Attention(const v1::GetAttentionRequest& request) const;

 private:
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<TransformerModel> model_;
};

// Converts the options of a request to the tokenizer's.
EncodeOptions ToEncodeOptions(const v1::TokenizationOptions& options);

// Checks a decoded tensor against an expected float tensor: same shape and, per element,
// |actual - expected| <= abs_tol + rel_tol * |expected| (0, 0 = bit-exact equality).
::testing::AssertionResult TensorNear(const DecodedTensor& actual, const torch::Tensor& expected,
                                      double abs_tol = 0, double rel_tol = 0);
// Checks an INT32 decoded tensor against an expected integer tensor exactly.
::testing::AssertionResult IntTensorEq(const DecodedTensor& actual, const torch::Tensor& expected);
// Checks the server's Tokens message against an Encoding field by field.
::testing::AssertionResult TokensEq(const v1::Tokens& actual, const Encoding& expected);

}  // namespace attnscope::testing

#endif  // ATTNSCOPE_TESTS_INTEGRATION_REFERENCE_H_

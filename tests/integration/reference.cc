#include "tests/integration/reference.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace attnscope::testing {
namespace {

torch::Tensor ToLongTensor(const std::vector<int64_t>& values) {
  return torch::tensor(values, torch::kInt64).unsqueeze(0);
}

std::vector<int32_t> Resolve(const google::protobuf::RepeatedField<int32_t>& requested,
                             int64_t count) {
  std::vector<int32_t> out;
  if (requested.empty()) {
    for (int64_t i = 0; i < count; ++i) out.push_back(static_cast<int32_t>(i));
  }
  for (int32_t index : requested)
    out.push_back(index < 0 ? static_cast<int32_t>(index + count) : index);
  return out;
}

torch::Tensor Index(const std::vector<int32_t>& values) {
  return torch::tensor(std::vector<int64_t>(values.begin(), values.end()), torch::kInt64);
}

}  // namespace

Reference::Reference(const std::string& model_dir) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(model_dir);
  if (!tokenizer.ok()) {
    ADD_FAILURE() << tokenizer.status();
    std::abort();
  }
  tokenizer_ = *std::move(tokenizer);
  absl::StatusOr<std::unique_ptr<TransformerModel>> model =
      LoadTransformerModel(ModelOptions{model_dir});
  if (!model.ok()) {
    ADD_FAILURE() << model.status();
    std::abort();
  }
  model_ = *std::move(model);
}

EncodeOptions ToEncodeOptions(const v1::TokenizationOptions& options) {
  EncodeOptions out;
  out.add_special_tokens = !options.skip_special_tokens();
  switch (options.truncation()) {
    case v1::TRUNCATION_LONGEST_FIRST:
      out.truncation = Truncation::kLongestFirst;
      break;
    case v1::TRUNCATION_ONLY_FIRST:
      out.truncation = Truncation::kOnlyFirst;
      break;
    case v1::TRUNCATION_ONLY_SECOND:
      out.truncation = Truncation::kOnlySecond;
      break;
    default:
      out.truncation = Truncation::kNone;
  }
  out.max_length = options.max_length();
  return out;
}

Encoding Reference::Encode(const std::string& text, const std::optional<std::string>& text_pair,
                           const v1::TokenizationOptions& options) const {
  EncodeOptions encode_options = ToEncodeOptions(options);
  // "0 = the model's maximum": the tokenizer's own limit may be unset (SentencePiece).
  if (encode_options.truncation != Truncation::kNone && encode_options.max_length == 0) {
    encode_options.max_length = model_->max_positions();
  }
  absl::StatusOr<Encoding> encoding = text_pair.has_value()
                                          ? tokenizer_->EncodePair(text, *text_pair, encode_options)
                                          : tokenizer_->Encode(text, encode_options);
  EXPECT_TRUE(encoding.ok()) << encoding.status();
  return encoding.ok() ? *std::move(encoding) : Encoding();
}

ForwardOutput Reference::Forward(const Encoding& encoding) const {
  ForwardInput input;
  input.input_ids = ToLongTensor(encoding.input_ids);
  input.token_type_ids = ToLongTensor(encoding.token_type_ids);
  ForwardOptions options;
  options.output_attentions = true;
  options.output_attention_scores = true;
  options.output_hidden_states = true;
  options.output_logits = true;
  absl::StatusOr<ForwardOutput> output = model_->Forward(input, options);
  EXPECT_TRUE(output.ok()) << output.status();
  return output.ok() ? *std::move(output) : ForwardOutput();
}

ExpectedAttention Reference::Attention(const v1::GetAttentionRequest& request) const {
  ExpectedAttention expected;
  std::optional<std::string> pair;
  if (request.has_text_pair()) pair = request.text_pair();
  expected.encoding = Encode(request.text(), pair, request.tokenization());
  const ForwardOutput output = Forward(expected.encoding);
  const int64_t num_layers = model_->config().num_hidden_layers;
  const int64_t num_heads = model_->config().num_attention_heads;
  const int64_t length = static_cast<int64_t>(expected.encoding.size());

  // [L, N, S, S] of batch item 0.
  const torch::Tensor all = torch::stack(output.attentions).select(1, 0);
  const torch::Tensor all_scores = torch::stack(output.attention_scores).select(1, 0);
  expected.layers = Resolve(request.layers(), num_layers);
  expected.heads = Resolve(request.heads(), num_heads);
  auto select = [&](const torch::Tensor& tensor) {
    torch::Tensor out =
        tensor.index_select(0, Index(expected.layers)).index_select(1, Index(expected.heads));
    switch (request.head_aggregation()) {
      case v1::HEAD_AGGREGATION_MEAN:
        return out.mean(1, /*keepdim=*/true);
      case v1::HEAD_AGGREGATION_MAX:
        return std::get<0>(out.max(1, /*keepdim=*/true));
      default:
        return out;
    }
  };
  const v1::Window& window = request.window();
  const int64_t query_end = window.query_end() == 0 ? length : window.query_end();
  const int64_t key_end = window.key_end() == 0 ? length : window.key_end();
  expected.query_start = window.query_start();
  expected.key_start = window.key_start();
  auto cut = [&](const torch::Tensor& tensor) {
    return tensor.slice(-2, window.query_start(), query_end).slice(-1, window.key_start(), key_end);
  };
  torch::Tensor attentions = cut(select(all));
  if (request.include_scores()) expected.scores = cut(select(all_scores));
  if (request.top_k() > 0) {
    auto [values, indices] =
        attentions.topk(request.top_k(), -1, /*largest=*/true, /*sorted=*/true);
    attentions = values;
    expected.top_k_indices = indices + window.key_start();
  }
  expected.attentions = attentions.contiguous();
  if (request.rollout()) {
    // Abnar & Zuidema as the proto documents it: A~ = 0.5 mean_heads(A) + 0.5 I, rows
    // re-normalised, rollout = A~_{L-1} x ... x A~_0, computed in float64.
    const torch::Tensor eye = torch::eye(length, torch::kFloat64);
    torch::Tensor rollout = eye;
    for (int64_t layer = 0; layer < num_layers; ++layer) {
      torch::Tensor a = 0.5 * all[layer].to(torch::kFloat64).mean(0) + 0.5 * eye;
      a = a / a.sum(-1, /*keepdim=*/true);
      rollout = a.matmul(rollout);
    }
    expected.rollout = cut(rollout).to(torch::kFloat32).contiguous();
  }
  return expected;
}

::testing::AssertionResult TensorNear(const DecodedTensor& actual, const torch::Tensor& expected,
                                      double abs_tol, double rel_tol) {
  const std::vector<int64_t> shape(expected.sizes().begin(), expected.sizes().end());
  if (actual.shape != shape) {
    return ::testing::AssertionFailure() << "shape [" << absl::StrJoin(actual.shape, ", ")
                                         << "], expected [" << absl::StrJoin(shape, ", ") << "]";
  }
  const torch::Tensor flat = expected.to(torch::kFloat32).contiguous().view(-1);
  const float* want = flat.data_ptr<float>();
  if (static_cast<int64_t>(actual.values.size()) != flat.numel()) {
    return ::testing::AssertionFailure()
           << actual.values.size() << " values, expected " << flat.numel();
  }
  int64_t mismatches = 0;
  std::string first;
  for (int64_t i = 0; i < flat.numel(); ++i) {
    const double got = actual.values[i];
    const double exp = want[i];
    const bool ok = (abs_tol == 0 && rel_tol == 0)
                        ? (got == exp || (std::isnan(got) && std::isnan(exp)))
                        : std::fabs(got - exp) <= abs_tol + rel_tol * std::fabs(exp);
    if (!ok && mismatches++ == 0) {
      first = absl::StrCat("element ", i, ": got ", got, ", expected ", exp);
    }
  }
  if (mismatches > 0) {
    return ::testing::AssertionFailure()
           << mismatches << " of " << flat.numel() << " elements differ; first " << first;
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult IntTensorEq(const DecodedTensor& actual, const torch::Tensor& expected) {
  const std::vector<int64_t> shape(expected.sizes().begin(), expected.sizes().end());
  if (actual.shape != shape) {
    return ::testing::AssertionFailure() << "shape [" << absl::StrJoin(actual.shape, ", ")
                                         << "], expected [" << absl::StrJoin(shape, ", ") << "]";
  }
  const torch::Tensor flat = expected.to(torch::kInt64).contiguous().view(-1);
  for (int64_t i = 0; i < flat.numel(); ++i) {
    if (actual.int_values[i] != flat[i].item<int64_t>()) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << actual.int_values[i]
                                           << ", expected " << flat[i].item<int64_t>();
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult TokensEq(const v1::Tokens& actual, const Encoding& expected) {
  const std::vector<std::string> tokens(actual.tokens().begin(), actual.tokens().end());
  if (tokens != expected.tokens) {
    return ::testing::AssertionFailure()
           << "tokens [" << absl::StrJoin(tokens, " ") << "], expected ["
           << absl::StrJoin(expected.tokens, " ") << "]";
  }
  const size_t n = expected.size();
  if (static_cast<size_t>(actual.input_ids_size()) != n ||
      static_cast<size_t>(actual.offsets_size()) != n ||
      static_cast<size_t>(actual.byte_offsets_size()) != n ||
      static_cast<size_t>(actual.token_type_ids_size()) != n ||
      static_cast<size_t>(actual.special_tokens_mask_size()) != n ||
      static_cast<size_t>(actual.word_ids_size()) != n ||
      static_cast<size_t>(actual.sequence_ids_size()) != n) {
    return ::testing::AssertionFailure() << "a per-token field does not have " << n << " entries";
  }
  for (size_t i = 0; i < n; ++i) {
    const bool ok = actual.input_ids(i) == expected.input_ids[i] &&
                    actual.token_type_ids(i) == expected.token_type_ids[i] &&
                    actual.special_tokens_mask(i) == expected.special_tokens_mask[i] &&
                    actual.offsets(i).start() == expected.offsets[i].start &&
                    actual.offsets(i).end() == expected.offsets[i].end &&
                    actual.byte_offsets(i).start() == expected.byte_offsets[i].start &&
                    actual.byte_offsets(i).end() == expected.byte_offsets[i].end &&
                    actual.word_ids(i) == expected.word_ids[i] &&
                    actual.sequence_ids(i) == expected.sequence_ids[i];
    if (!ok) {
      return ::testing::AssertionFailure()
             << "token " << i << " '" << expected.tokens[i] << "': got id " << actual.input_ids(i)
             << " type " << actual.token_type_ids(i) << " special " << actual.special_tokens_mask(i)
             << " offsets [" << actual.offsets(i).start() << ", " << actual.offsets(i).end()
             << ") bytes [" << actual.byte_offsets(i).start() << ", "
             << actual.byte_offsets(i).end() << ") word " << actual.word_ids(i) << " sequence "
             << actual.sequence_ids(i) << "; expected id " << expected.input_ids[i] << " type "
             << expected.token_type_ids[i] << " special " << expected.special_tokens_mask[i]
             << " offsets [" << expected.offsets[i].start << ", " << expected.offsets[i].end
             << ") bytes [" << expected.byte_offsets[i].start << ", "
             << expected.byte_offsets[i].end << ") word " << expected.word_ids[i] << " sequence "
             << expected.sequence_ids[i];
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace attnscope::testing

// Encode: hidden states and pooled embeddings of a batch of inputs.

#include "models/requests/encode.h"

#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/requests/checks.h"
#include "models/requests/requests.h"

namespace attnscope {

using requests_internal::CheckInput;
using requests_internal::CheckInputCount;
using requests_internal::PassGroups;
using requests_internal::TooLarge;
using requests_internal::ToTextOptions;

absl::StatusOr<EncodeAnswer> RequestRunner::RunEncode(const EncodeQuery& query,
                                                      const CallCheck& check,
                                                      absl::string_view client) const {
  EncodeAnswer answer;
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.model, FindModel(query.model));
  if (query.inputs.empty()) {
    return absl::InvalidArgumentError("inputs: expected at least one input, got none; add one");
  }
  ATTNSCOPE_RETURN_IF_ERROR(
      CheckInputCount(query.inputs.size(), "inputs", options_.max_inputs_per_request));
  answer.dtype = query.dtype;
  if (query.normalize && !query.pooling.has_value()) {
    return absl::InvalidArgumentError(
        "normalize: L2 normalisation applies to the pooled vector, but pooling is none; set "
        "`pooling` to POOLING_CLS or POOLING_MEAN, or leave `normalize` false");
  }
  if (query.pooling == Pooling::kCls && query.tokenization.skip_special_tokens) {
    // CLS pooling takes the first position: without special tokens that is the first word's
    // vector, which the caller would take for the model's sentence vector.
    return absl::InvalidArgumentError(
        "pooling POOLING_CLS: pools the first token, the model's [CLS] (or BOS) only with its "
        "special tokens; expected tokenization.skip_special_tokens false, got true; leave "
        "`skip_special_tokens` off, or pool with POOLING_MEAN");
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(const TextOptions options,
                             ToTextOptions(query.tokenization, Truncation::kNone));
  if (query.pooling == Pooling::kCls && answer.model->model().is_decoder()) {
    // A causal model's first position attends to itself alone: its vector is the same whatever
    // the text.
    return absl::InvalidArgumentError(absl::StrCat(
        "pooling POOLING_CLS: model '", answer.model->name(),
        "' is a decoder (causal attention), whose first token sees no other, so its vector says "
        "nothing of the text; expected an encoder with a [CLS] token, got a decoder; pool with "
        "POOLING_MEAN"));
  }
  std::vector<Encoding> encodings;
  for (size_t i = 0; i < query.inputs.size(); ++i) {
    ATTNSCOPE_RETURN_IF_ERROR(CheckInput(query.inputs[i], absl::StrCat("inputs[", i, "].")));
    ATTNSCOPE_ASSIGN_OR_RETURN(
        EncodedText tokens,
        TokenizeInput(*answer.model, query.inputs[i], options, absl::StrCat("inputs[", i, "].")));
    const Encoding& encoding = tokens.encoding;
    if (query.pooling == Pooling::kCls &&
        (encoding.special_tokens_mask.empty() || encoding.special_tokens_mask[0] == 0)) {
      // Marian puts no special token first: the first position is the first word.
      return absl::InvalidArgumentError(absl::StrCat(
          "inputs[", i,
          "]: pooling POOLING_CLS pools the first token, expected a special token "
          "([CLS] or <s>) there, got '",
          encoding.tokens.empty() ? "" : encoding.tokens[0], "', a token of the text: model '",
          answer.model->name(), "' puts none first; pool with POOLING_MEAN"));
    }
    encodings.push_back(tokens.encoding);
    answer.results.emplace_back().tokens = std::move(tokens);
  }
  // Refuse before the forward pass, as GetAttention does: the tensors' size is known from the
  // token counts, and an over-cap answer would hold the forward pass only to be dropped.
  const ModelConfig& config = answer.model->config();
  int64_t tokens = 0;
  for (const Encoding& encoding : encodings) tokens += static_cast<int64_t>(encoding.size());
  ATTNSCOPE_RETURN_IF_ERROR(CheckWork("Encode", tokens,
                                      absl::StrCat(encodings.size(), " inputs, one pass each"),
                                      "send fewer or shorter inputs per call"));
  const int64_t states = query.output_hidden_states ? config.num_hidden_layers + 2 : 1;
  const int64_t pooled_vectors =
      query.pooling.has_value() ? static_cast<int64_t>(encodings.size()) : 0;
  const int64_t bytes =
      (tokens * states + pooled_vectors) * config.hidden_size * BytesPerElement(answer.dtype);
  if (bytes > options_.max_response_bytes) {
    return TooLarge("Encode", bytes, options_.max_response_bytes,
                    answer.dtype == OutputDType::kFloat32
                        ? kEncodeFixes
                        : "send fewer inputs per call, or leave output_hidden_states off");
  }
  ForwardOptions forward;
  forward.output_attentions = false;
  forward.output_logits = false;
  forward.output_hidden_states = query.output_hidden_states;
  // A pass of at most max_batch_tokens padded tokens at a time, as the batcher's own: 64 inputs of
  // 510 tokens in one pass of 32,768 took 600 MB more and held every other call 5-6 s.
  size_t first = 0;
  for (const size_t end : PassGroups(encodings, [&](int64_t inputs, int64_t longest) {
         return inputs * longest <= options_.batching.max_batch_tokens;
       })) {
    std::vector<Encoding> group(std::make_move_iterator(encodings.begin() + first),
                                std::make_move_iterator(encodings.begin() + end));
    ATTNSCOPE_ASSIGN_OR_RETURN(
        BatchOutput batch, batcher_.Run(*answer.model, std::move(group), forward, check, client));
    torch::Tensor pooled;
    if (query.pooling.has_value()) {
      ATTNSCOPE_ASSIGN_OR_RETURN(pooled, PoolHiddenStates(batch.forward.last_hidden_state,
                                                          batch.attention_mask, *query.pooling));
      if (query.normalize) {
        ATTNSCOPE_ASSIGN_OR_RETURN(pooled, L2Normalize(pooled));
      }
    }
    for (size_t b = first; b < end; ++b) {
      const int64_t row = static_cast<int64_t>(b - first);
      EncodedInput& result = answer.results[b];
      const int64_t length = static_cast<int64_t>(result.tokens.encoding.size());
      result.last_hidden_state = batch.forward.last_hidden_state[row].narrow(0, 0, length);
      if (query.output_hidden_states) {
        for (const torch::Tensor& hidden : batch.forward.hidden_states) {
          result.hidden_states.push_back(hidden[row].narrow(0, 0, length));
        }
      }
      if (pooled.defined()) result.pooled = pooled[row];
    }
    first = end;
  }
  return answer;
}

}  // namespace attnscope

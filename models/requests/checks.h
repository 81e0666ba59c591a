// Checks and helpers that several use cases of the request layer share: text and input checks,
// tokenization options, the size cap's refusal, and small conversions. Internal to
// models/requests (namespace requests_internal); the contract's errors are documented in
// requests.h.
#ifndef ATTNSCOPE_MODELS_REQUESTS_CHECKS_H_
#define ATTNSCOPE_MODELS_REQUESTS_CHECKS_H_

#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/requests/requests.h"

namespace attnscope::requests_internal {

using Clock = std::chrono::steady_clock;

// Seconds from `start` to now, for the observer's timings.
double SecondsSince(Clock::time_point start);

// InvalidArgument naming `field` when `text` is empty or not valid UTF-8 (with the decoder's
// reason and byte position).
absl::Status CheckText(const std::string& text, absl::string_view field);

// CheckText on a text and its optional pair, as `prefix` + "text" and `prefix` + "text_pair".
absl::Status CheckInput(const TextInput& input, absl::string_view prefix);

// The original text of each token: the bytes at its byte offsets in the text it came from.
std::vector<std::string> OriginalTexts(const Encoding& encoding, absl::string_view text,
                                       absl::string_view text_pair);

// The words of `tokens` (see WordSpans) with their original text.
std::vector<Word> WordsOf(const EncodedText& tokens, const TextInput& input);

// The one rule for an empty text, on every text field: it must give at least one token of its
// own. An empty string is refused by CheckText already; this catches whitespace and characters the
// tokenizer drops, which would otherwise be served as a sequence of special tokens alone.
absl::Status CheckHasTokens(const TokenizedText& tokens, absl::string_view field);

// InvalidArgument when a call carries more than `max` inputs (or documents) in `field`.
absl::Status CheckInputCount(size_t count, absl::string_view field, int max);

// InvalidArgument for skip_special_tokens on a model with a classifier head: a cross-encoder's
// score reads the pair with its special tokens ([CLS] query [SEP] document [SEP] for BERT), and a
// score of the texts without them would be a number the model was never trained to give. The
// specials stay in the input; special_tokens_mask marks them for a display that leaves them out.
absl::Status CheckScoredWithSpecialTokens(const LoadedModel& model,
                                          const TokenizationQuery& tokenization);

// ResourceExhausted with TooLargeMessage: an answer of `bytes` over the cap `cap`.
absl::Status TooLarge(absl::string_view rpc, int64_t bytes, int64_t cap, absl::string_view fixes);

// Heads in an answer: all `heads` selected, or 1 when they are aggregated.
int64_t HeadsOut(HeadAggregation aggregation, size_t heads);

// The tokenizer's options for a query's tokenization (truncation `default_truncation` when it
// sets none). InvalidArgument naming tokenization.max_length when it is negative, or set without
// truncation.
absl::StatusOr<TextOptions> ToTextOptions(const TokenizationQuery& tokenization,
                                          Truncation default_truncation);

// The call's inputs in consecutive groups of one forward pass each, as end indices into
// `encodings`: each group as long as `fits(inputs, longest)` allows (inputs padded to the
// longest), and at least one input.
std::vector<size_t> PassGroups(const std::vector<Encoding>& encodings,
                               const std::function<bool(int64_t, int64_t)>& fits);

// [1, S] int64.
torch::Tensor Row(const std::vector<int64_t>& values);

}  // namespace attnscope::requests_internal

#endif  // ATTNSCOPE_MODELS_REQUESTS_CHECKS_H_

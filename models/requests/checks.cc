#include "models/requests/checks.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "models/tokenizers/unicode.h"

namespace attnscope::requests_internal {

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

absl::Status CheckText(const std::string& text, absl::string_view field) {
  if (text.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": expected a non-empty UTF-8 text, got an empty one; set `", field, "`"));
  }
  // Checked here so that the message names the field (the tokenizer sees one text at a time).
  if (absl::StatusOr<unicode::DecodedText> decoded = unicode::DecodeUtf8(text); !decoded.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", decoded.status().message()));
  }
  return absl::OkStatus();
}

absl::Status CheckInput(const TextInput& input, absl::string_view prefix) {
  ATTNSCOPE_RETURN_IF_ERROR(CheckText(input.text, absl::StrCat(prefix, "text")));
  if (input.text_pair.has_value()) {
    ATTNSCOPE_RETURN_IF_ERROR(CheckText(*input.text_pair, absl::StrCat(prefix, "text_pair")));
  }
  return absl::OkStatus();
}

// The original text of each token: the bytes at its byte offsets in the text it came from.
std::vector<std::string> OriginalTexts(const Encoding& encoding, absl::string_view text,
                                       absl::string_view text_pair) {
  std::vector<std::string> texts(encoding.size());
  for (size_t i = 0; i < encoding.size(); ++i) {
    const int64_t sequence = encoding.sequence_ids[i];
    if (sequence < 0) continue;
    const absl::string_view source = sequence == 0 ? text : text_pair;
    const Offset& span = encoding.byte_offsets[i];
    if (span.start >= 0 && span.end >= span.start &&
        span.end <= static_cast<int64_t>(source.size())) {
      texts[i] = std::string(source.substr(span.start, span.end - span.start));
    }
  }
  return texts;
}

// The words of `tokens` (see WordSpans) with their original text.
std::vector<Word> WordsOf(const EncodedText& tokens, const TextInput& input) {
  const Encoding& encoding = tokens.encoding;
  std::vector<Word> words;
  for (const WordSpan& span :
       WordSpans(encoding.word_ids, encoding.sequence_ids, encoding.tokens)) {
    Word& word = words.emplace_back();
    word.tokens = span;
    const int64_t first = span.token_start;
    const int64_t last = span.token_end - 1;
    word.sequence_id = encoding.sequence_ids[first];
    if (word.sequence_id < 0) {
      word.text = encoding.tokens[first];
      continue;
    }
    word.offsets = {encoding.offsets[first].start, encoding.offsets[last].end};
    word.byte_offsets = {encoding.byte_offsets[first].start, encoding.byte_offsets[last].end};
    const std::string& source = word.sequence_id == 0 ? input.text : *input.text_pair;
    word.text =
        source.substr(word.byte_offsets.start, word.byte_offsets.end - word.byte_offsets.start);
  }
  return words;
}

// The one rule for an empty text, on every text field: it must give at least one token of its
// own. An empty string is refused by CheckText already; this catches whitespace and characters the
// tokenizer drops, which would otherwise be served as a sequence of special tokens alone.
absl::Status CheckHasTokens(const TokenizedText& tokens, absl::string_view field) {
  if (tokens.size() > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field,
                   ": expected text that yields at least one token, got none (it is only "
                   "whitespace or characters the tokenizer drops); send text with words in it"));
}

// InvalidArgument when a call carries more than `max` inputs (or documents) in `field`.
absl::Status CheckInputCount(size_t count, absl::string_view field, int max) {
  if (count <= static_cast<size_t>(max)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, ": expected at most ", max,
                                                 " per call (--max_inputs_per_request), got ",
                                                 count, "; split them over several calls"));
}

// InvalidArgument for skip_special_tokens on a model with a classifier head: a cross-encoder's
// score reads the pair with its special tokens ([CLS] query [SEP] document [SEP] for BERT), and a
// score of the texts without them would be a number the model was never trained to give. The
// specials stay in the input; special_tokens_mask marks them for a display that leaves them out.
absl::Status CheckScoredWithSpecialTokens(const LoadedModel& model,
                                          const TokenizationQuery& tokenization) {
  if (!tokenization.skip_special_tokens || !model.model().has_classifier()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "tokenization.skip_special_tokens: model '", model.name(),
      "' is a cross-encoder, whose score reads the pair with its special tokens (as the template "
      "gives them: [CLS] query [SEP] document [SEP] for BERT); expected false, got true; leave "
      "`skip_special_tokens` off and use "
      "Tokens.special_tokens_mask to hide them in a display"));
}

absl::Status TooLarge(absl::string_view rpc, int64_t bytes, int64_t cap, absl::string_view fixes) {
  return absl::ResourceExhaustedError(TooLargeMessage(rpc, bytes, cap, fixes));
}

int64_t HeadsOut(HeadAggregation aggregation, size_t heads) {
  return aggregation == HeadAggregation::kNone ? static_cast<int64_t>(heads) : 1;
}

absl::StatusOr<TextOptions> ToTextOptions(const TokenizationQuery& tokenization,
                                          Truncation default_truncation) {
  TextOptions options;
  options.truncation = tokenization.truncation.value_or(default_truncation);
  if (tokenization.max_length < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenization.max_length ", tokenization.max_length,
                     ": expected 0 (the model's limit) or a positive count of tokens, got ",
                     tokenization.max_length, "; fix `tokenization.max_length`"));
  }
  if (options.truncation == Truncation::kNone && tokenization.max_length != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenization.max_length ", tokenization.max_length,
        ": only applies with truncation, but tokenization.truncation is none; set a truncation "
        "strategy (e.g. TRUNCATION_LONGEST_FIRST) or leave max_length 0"));
  }
  options.max_length = tokenization.max_length;
  options.add_special_tokens = !tokenization.skip_special_tokens;
  return options;
}

std::vector<size_t> PassGroups(const std::vector<Encoding>& encodings,
                               const std::function<bool(int64_t, int64_t)>& fits) {
  std::vector<size_t> ends;
  for (size_t first = 0; first < encodings.size();) {
    size_t end = first;
    int64_t longest = 0;
    while (end < encodings.size()) {
      const int64_t next_longest = std::max(longest, static_cast<int64_t>(encodings[end].size()));
      if (end > first && !fits(static_cast<int64_t>(end - first + 1), next_longest)) break;
      longest = next_longest;
      ++end;
    }
    ends.push_back(end);
    first = end;
  }
  return ends;
}

// [1, S] int64.
torch::Tensor Row(const std::vector<int64_t>& values) {
  return torch::tensor(values, torch::kInt64).view({1, -1});
}

}  // namespace attnscope::requests_internal

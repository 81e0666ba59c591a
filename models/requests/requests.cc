#include "models/requests/requests.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "models/requests/checks.h"

namespace attnscope {

using requests_internal::CheckHasTokens;
using requests_internal::CheckInput;
using requests_internal::OriginalTexts;
using requests_internal::SecondsSince;
using requests_internal::ToTextOptions;
using Clock = requests_internal::Clock;

int64_t BytesPerElement(OutputDType dtype) { return dtype == OutputDType::kFloat32 ? 4 : 2; }

std::string TooLargeMessage(absl::string_view rpc, int64_t bytes, int64_t cap,
                            absl::string_view fixes) {
  return absl::StrCat(rpc, " response would be ", bytes, " bytes, over this server's cap of ", cap,
                      " bytes (--max_response_bytes); ", fixes);
}

RequestRunner::RequestRunner(const Options& options,
                             std::vector<std::unique_ptr<LoadedModel>> models,
                             RequestObserver* observer)
    : options_(options),
      models_(std::move(models)),
      observer_(observer),
      batcher_(options.batching, observer),
      gate_(kComputeSlots),
      answer_budget_(options.max_answer_bytes_in_flight, "--max_answer_bytes_in_flight",
                     options.max_answer_bytes_per_client, "--max_answer_bytes_per_client",
                     [observer](bool over_client_share) {
                       if (observer != nullptr) observer->OnAnswerBytesRefused(over_client_share);
                     }) {}

absl::StatusOr<const LoadedModel*> RequestRunner::FindModel(const std::string& name) const {
  if (models_.empty()) return absl::UnavailableError("no model is loaded yet");
  if (name.empty()) return models_.front().get();
  std::vector<std::string> names;
  for (const auto& model : models_) {
    if (model->name() == name) return model.get();
    names.push_back(model->name());
  }
  // A name is echoed only in part: it comes from the caller and can be of any length.
  constexpr size_t kEchoedBytes = 64;
  const std::string echoed = name.size() <= kEchoedBytes
                                 ? name
                                 : absl::StrCat(absl::string_view(name).substr(0, kEchoedBytes),
                                                "... (", name.size(), " bytes)");
  return absl::NotFoundError(
      absl::StrCat("model '", echoed, "': not loaded; loaded models: ", absl::StrJoin(names, ", "),
                   "; set `model` to one of them or leave it empty for '", names.front(), "'"));
}

absl::StatusOr<EncodedText> RequestRunner::TokenizeInput(const LoadedModel& model,
                                                         const TextInput& input,
                                                         const TextOptions& options,
                                                         absl::string_view field_prefix) const {
  const Clock::time_point start = Clock::now();
  ATTNSCOPE_ASSIGN_OR_RETURN(TokenizedText first, model.Tokenize(input.text));
  ATTNSCOPE_RETURN_IF_ERROR(CheckHasTokens(first, absl::StrCat(field_prefix, "text")));
  std::optional<TokenizedText> second;
  if (input.text_pair.has_value()) {
    ATTNSCOPE_ASSIGN_OR_RETURN(second, model.Tokenize(*input.text_pair));
    ATTNSCOPE_RETURN_IF_ERROR(CheckHasTokens(*second, absl::StrCat(field_prefix, "text_pair")));
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(Encoding encoding,
                             model.Assemble(std::move(first), std::move(second), options));
  if (observer_ != nullptr) {
    observer_->OnTokenized(SecondsSince(start), static_cast<int64_t>(encoding.size()));
  }
  EncodedText encoded;
  encoded.original_texts = OriginalTexts(encoding, input.text, input.text_pair.value_or(""));
  encoded.encoding = std::move(encoding);
  return encoded;
}

absl::Status RequestRunner::CheckWork(absl::string_view rpc, int64_t token_passes,
                                      absl::string_view work, absl::string_view fixes) const {
  if (token_passes <= options_.max_call_tokens) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      rpc, ": ", work, " = ", token_passes, " token passes, over this server's limit of ",
      options_.max_call_tokens, " per call (--max_call_tokens); ", fixes));
}

absl::StatusOr<TokenizeAnswer> RequestRunner::Tokenize(const TokenizeQuery& query) const {
  TokenizeAnswer answer;
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.model, FindModel(query.model));
  ATTNSCOPE_RETURN_IF_ERROR(CheckInput(query.input, ""));
  ATTNSCOPE_ASSIGN_OR_RETURN(const TextOptions options,
                             ToTextOptions(query.tokenization, Truncation::kNone));
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.tokens, TokenizeInput(*answer.model, query.input, options, ""));
  return answer;
}

}  // namespace attnscope

// `attnscope encode`: hidden states and pooled vectors, one input per --text.
#include <memory>

#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"
#include "client/cli/flags.h"
#include "common/status_macros.h"

namespace attnscope::cli {
namespace {

struct Flags {
  std::string model;
  TextFlags text;
  TokenizationFlags tokenization;
  bool hidden_states = false;
  v1::Pooling pooling = v1::POOLING_NONE;
  bool normalize = false;
  v1::DType dtype = v1::DTYPE_FLOAT32;
};

absl::StatusOr<v1::EncodeRequest> EncodeRequest(const Flags& flags) {
  v1::EncodeRequest request;
  request.set_model(flags.model);
  const std::vector<std::string>& texts = flags.text.texts;
  const std::vector<std::string>& pairs = flags.text.pairs;
  if (texts.empty()) return UsageError("'encode' needs --text (repeatable)");
  if (!pairs.empty() && pairs.size() != texts.size()) {
    return UsageError(absl::StrCat("'encode' got ", texts.size(), " --text but ", pairs.size(),
                                   " --text_pair; give one --text_pair per --text or none"));
  }
  for (size_t i = 0; i < texts.size(); ++i) {
    v1::EncodeInput* input = request.add_inputs();
    input->set_text(texts[i]);
    if (!pairs.empty()) input->set_text_pair(pairs[i]);
  }
  *request.mutable_tokenization() = flags.tokenization.ToProto();
  request.set_output_hidden_states(flags.hidden_states);
  request.set_pooling(flags.pooling);
  request.set_normalize(flags.normalize);
  request.set_dtype(flags.dtype);
  return request;
}

}  // namespace

Command AddEncodeCommand(CLI::App& app, std::optional<std::string>* npy_dir) {
  CLI::App* command = app.add_subcommand(
      "encode", "hidden states and pooled vectors (--text repeatable, one input each)");
  auto flags = std::make_shared<Flags>();
  AddModelFlag(*command, &flags->model);
  AddTextFlags(*command, &flags->text);
  AddTokenizationFlags(*command, &flags->tokenization);
  command->option_defaults()->group("Encode");
  AddSwitch(*command, "--hidden_states", "add every layer's hidden states, embeddings first",
            &flags->hidden_states);
  AddChoiceFlag<v1::Pooling>(
      *command, "--pooling", "add a pooled vector: the first token's, or the mean (default none)",
      {{"none", v1::POOLING_NONE}, {"cls", v1::POOLING_CLS}, {"mean", v1::POOLING_MEAN}},
      &flags->pooling);
  AddSwitch(*command, "--normalize", "L2-normalise the pooled vector", &flags->normalize);
  AddDTypeFlag(*command, &flags->dtype);
  AddNpyDirFlag(*command, npy_dir);
  return {
      command, [flags](const CommandContext& context) -> absl::StatusOr<Output> {
        ATTNSCOPE_ASSIGN_OR_RETURN(v1::EncodeRequest request, EncodeRequest(*flags));
        ATTNSCOPE_ASSIGN_OR_RETURN(EncodeResponse response,
                                   context.client.Encode(request, context.call));
        json out = {{"model", response.model}, {"results", json::array()}};
        for (size_t i = 0; i < response.results.size(); ++i) {
          const EncodeResult& result = response.results[i];
          json item = {{"tokens", TokensToJson(result.tokens)}};
          const std::string prefix = absl::StrCat("input", i, "_");
          ATTNSCOPE_RETURN_IF_ERROR(
              context.writer.AddTo(item, "last_hidden_state", result.last_hidden_state, prefix));
          ATTNSCOPE_RETURN_IF_ERROR(
              context.writer.AddTo(item, "hidden_states", result.hidden_states, prefix));
          ATTNSCOPE_RETURN_IF_ERROR(context.writer.AddTo(item, "pooled", result.pooled, prefix));
          out["results"].push_back(std::move(item));
        }
        return JsonOutput(std::move(out));
      }};
}

}  // namespace attnscope::cli

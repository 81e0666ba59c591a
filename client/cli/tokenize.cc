// `attnscope tokenize`: tokens, ids and offsets of a text or text pair.
#include <memory>

#include "client/cli/commands.h"
#include "client/cli/flags.h"
#include "common/status_macros.h"

namespace attnscope::cli {

Command AddTokenizeCommand(CLI::App& app) {
  CLI::App* command = app.add_subcommand("tokenize", "tokens, ids and offsets");
  auto input = std::make_shared<TextInputFlags>();
  AddTextInputFlags(*command, input.get());
  return {command, [input](const CommandContext& context) -> absl::StatusOr<Output> {
            v1::TokenizeRequest request;
            ATTNSCOPE_RETURN_IF_ERROR(SetTextInput("tokenize", *input, &request));
            ATTNSCOPE_ASSIGN_OR_RETURN(v1::TokenizeResponse response,
                                       context.client.Tokenize(request, context.call));
            return JsonOutput(
                json{{"model", response.model()}, {"tokens", TokensToJson(response.tokens())}});
          }};
}

}  // namespace attnscope::cli

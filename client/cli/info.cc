// `attnscope info`: one model's description.
#include <memory>

#include "client/cli/commands.h"
#include "client/cli/flags.h"
#include "common/status_macros.h"

namespace attnscope::cli {

Command AddInfoCommand(CLI::App& app) {
  CLI::App* command = app.add_subcommand("info", "one model's description");
  auto model = std::make_shared<std::string>();
  AddModelFlag(*command, model.get());
  return {command, [model](const CommandContext& context) -> absl::StatusOr<Output> {
            ATTNSCOPE_ASSIGN_OR_RETURN(v1::ModelInfo info,
                                       context.client.GetModelInfo(*model, context.call));
            return JsonOutput(ModelInfoToJson(info));
          }};
}

}  // namespace attnscope::cli

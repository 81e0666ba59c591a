// `attnscope models`: the loaded models.
#include "client/cli/commands.h"
#include "common/status_macros.h"

namespace attnscope::cli {

Command AddModelsCommand(CLI::App& app) {
  CLI::App* command = app.add_subcommand("models", "the loaded models");
  return {command, [](const CommandContext& context) -> absl::StatusOr<Output> {
            ATTNSCOPE_ASSIGN_OR_RETURN(std::vector<v1::ModelInfo> models,
                                       context.client.ListModels(context.call));
            json out = {{"models", json::array()}};
            for (const v1::ModelInfo& info : models) out["models"].push_back(ModelInfoToJson(info));
            return JsonOutput(std::move(out));
          }};
}

}  // namespace attnscope::cli

// `attnscope health`: grpc.health.v1 status; exits 0 only when SERVING (the image's HEALTHCHECK
// and the Kubernetes probes run it).
#include <memory>

#include "client/cli/commands.h"
#include "client/cli/flags.h"
#include "common/status_macros.h"

namespace attnscope::cli {

Command AddHealthCommand(CLI::App& app) {
  CLI::App* command =
      app.add_subcommand("health", "grpc.health.v1 status; exits 0 only when SERVING");
  auto service = std::make_shared<std::string>();
  command->option_defaults()->group("Health");
  AddStringFlag(*command, "--service", "NAME",
                "the service to ask about, e.g. attnscope.v1.AttentionService (default: the whole "
                "server)",
                service.get());
  return {command, [service](const CommandContext& context) -> absl::StatusOr<Output> {
            ATTNSCOPE_ASSIGN_OR_RETURN(ServingStatus status,
                                       context.client.Health(*service, context.call));
            Output out = JsonOutput(json{
                {"status", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(status)}});
            if (status != grpc::health::v1::HealthCheckResponse::SERVING) out.exit_code = 1;
            return out;
          }};
}

}  // namespace attnscope::cli

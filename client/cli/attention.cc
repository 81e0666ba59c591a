// `attnscope attention`: GetAttention, attention of one text or text pair, as JSON or as each
// query token's most attended tokens. `attnscope stream` (stream.cc) is the same command over
// StreamAttention.
#include <memory>

#include "client/attention_display.h"
#include "client/cli/attention_request.h"
#include "client/cli/commands.h"
#include "common/status_macros.h"

namespace attnscope::cli {
namespace {

struct Flags {
  AttentionFlags attention;
  TextOutputFlags output;
};

}  // namespace

Command AddAttentionCommandOver(CLI::App& app, const std::string& name,
                                const std::string& description, std::optional<std::string>* npy_dir,
                                AttentionRpc rpc) {
  CLI::App* command = app.add_subcommand(name, description);
  auto flags = std::make_shared<Flags>();
  AddAttentionQueryFlags(*command, &flags->attention);
  AddAttentionOnlyFlags(*command, &flags->attention);
  AddNpyDirFlag(*command, npy_dir);
  AddTextOutputFlags(*command, &flags->output);
  return {command,
          [name, flags, npy_dir, rpc](const CommandContext& context) -> absl::StatusOr<Output> {
            ATTNSCOPE_ASSIGN_OR_RETURN(
                std::optional<int> text_rows,
                TextRows(flags->output, npy_dir->has_value(), flags->attention.scores));
            ATTNSCOPE_ASSIGN_OR_RETURN(v1::GetAttentionRequest request,
                                       AttentionRequest(name, flags->attention));
            ATTNSCOPE_ASSIGN_OR_RETURN(AttentionResult result,
                                       (context.client.*rpc)(request, context.call));
            if (text_rows.has_value()) {
              ATTNSCOPE_ASSIGN_OR_RETURN(
                  std::string text, AttentionText(result, request.head_aggregation(), *text_rows));
              return TextOutput(std::move(text));
            }
            ATTNSCOPE_ASSIGN_OR_RETURN(json out, AttentionToJson(result, context.writer));
            return JsonOutput(std::move(out));
          }};
}

Command AddAttentionCommand(CLI::App& app, std::optional<std::string>* npy_dir) {
  return AddAttentionCommandOver(app, "attention",
                                 "GetAttention: attention of one text or text pair", npy_dir,
                                 &Client::GetAttention);
}

}  // namespace attnscope::cli

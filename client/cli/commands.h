// The `attnscope` commands, one file each: every Add*Command adds its subcommand to `app` with its
// description and flags (beside the connection flags, which main.cc declares on every command),
// and returns the function that runs it. `npy_dir` is --npy_dir, which main.cc creates before a
// command that declared it runs.
#ifndef ATTNSCOPE_CLIENT_CLI_COMMANDS_H_
#define ATTNSCOPE_CLIENT_CLI_COMMANDS_H_

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "client/cli/command.h"

namespace attnscope::cli {

Command AddModelsCommand(CLI::App& app);
Command AddInfoCommand(CLI::App& app);
Command AddTokenizeCommand(CLI::App& app);
// 'attention' (GetAttention) and 'stream' (the same request over StreamAttention).
Command AddAttentionCommand(CLI::App& app, std::optional<std::string>* npy_dir);
Command AddStreamCommand(CLI::App& app, std::optional<std::string>* npy_dir);
Command AddEncodeCommand(CLI::App& app, std::optional<std::string>* npy_dir);
Command AddCrossCommand(CLI::App& app, std::optional<std::string>* npy_dir);
Command AddHeatmapCommand(CLI::App& app);
Command AddAttributeCommand(CLI::App& app);
Command AddGenerateCommand(CLI::App& app, std::optional<std::string>* npy_dir);
Command AddHealthCommand(CLI::App& app);
Command AddBenchCommand(CLI::App& app);

}  // namespace attnscope::cli

#endif  // ATTNSCOPE_CLIENT_CLI_COMMANDS_H_

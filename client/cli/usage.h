// The text `attnscope --help` prints, made from the CLI11 declarations: the commands with their
// descriptions and the flags each reads, then every flag once with its help, by group.
#ifndef ATTNSCOPE_CLIENT_CLI_USAGE_H_
#define ATTNSCOPE_CLIENT_CLI_USAGE_H_

#include <CLI/CLI.hpp>
#include <string>

namespace attnscope::cli {

// The help of `app` (attnscope and its subcommands). Options in no group (hidden) are left out;
// the group "Connection" is listed first and not under each command, since every command reads it.
std::string Usage(CLI::App& app);

}  // namespace attnscope::cli

#endif  // ATTNSCOPE_CLIENT_CLI_USAGE_H_

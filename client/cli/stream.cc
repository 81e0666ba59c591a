// `attnscope stream`: the request of 'attention' over StreamAttention, which has no response size
// cap; the same flags and output.
#include "client/cli/attention_request.h"
#include "client/cli/commands.h"

namespace attnscope::cli {

Command AddStreamCommand(CLI::App& app, std::optional<std::string>* npy_dir) {
  return AddAttentionCommandOver(app, "stream",
                                 "the same request over StreamAttention (no size cap), same output",
                                 npy_dir, &Client::StreamAttention);
}

}  // namespace attnscope::cli

// The GetAttentionRequest that 'attention', 'stream' and 'heatmap' send, and the flags it is
// built from.
#ifndef ATTNSCOPE_CLIENT_CLI_ATTENTION_REQUEST_H_
#define ATTNSCOPE_CLIENT_CLI_ATTENTION_REQUEST_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "attnscope/v1/attnscope.pb.h"
#include "client/cli/command.h"
#include "client/cli/flags.h"
#include "client/client.h"

namespace attnscope::cli {

struct AttentionFlags {
  TextInputFlags input;
  SelectionFlags selection;
  std::optional<v1::Window> window;
  std::optional<std::string> decoder_text;
  std::optional<v1::Window> decoder_window;
  // Declared by 'attention' and 'stream' only (AddAttentionOnlyFlags); 'heatmap' draws dense
  // float32 weights.
  bool rollout = false;
  bool scores = false;
  v1::DType dtype = v1::DTYPE_FLOAT32;
  std::optional<int32_t> top_k;
};

// What all three read: the text input, --layers, --heads, --aggregate, --window, --decoder_text
// and --decoder_window.
void AddAttentionQueryFlags(CLI::App& command, AttentionFlags* flags);

// --rollout, --scores, --dtype and --top_k.
void AddAttentionOnlyFlags(CLI::App& command, AttentionFlags* flags);

// The request of `command` ("attention", "stream", "heatmap"); a usage error when --text is
// missing or --text / --text_pair given twice.
absl::StatusOr<v1::GetAttentionRequest> AttentionRequest(const std::string& command,
                                                         const AttentionFlags& flags);

// Registers 'attention' or 'stream', which differ only in the RPC: `rpc` is Client::GetAttention
// or Client::StreamAttention.
using AttentionRpc = absl::StatusOr<AttentionResult> (Client::*)(const v1::GetAttentionRequest&,
                                                                 const CallOptions&);
Command AddAttentionCommandOver(CLI::App& app, const std::string& name,
                                const std::string& description, std::optional<std::string>* npy_dir,
                                AttentionRpc rpc);

}  // namespace attnscope::cli

#endif  // ATTNSCOPE_CLIENT_CLI_ATTENTION_REQUEST_H_

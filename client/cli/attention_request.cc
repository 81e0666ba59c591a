#include "client/cli/attention_request.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace attnscope::cli {
namespace {

constexpr char kWindowForm[] =
    "four integers QUERY_START,QUERY_END,KEY_START,KEY_END (end 0 = to the end of the sequence)";

absl::StatusOr<v1::Window> ParseWindow(const std::string& flag, const std::string& text) {
  ATTNSCOPE_ASSIGN_OR_RETURN(std::vector<int32_t> values, ParseIntList(flag, text, kWindowForm));
  if (values.size() != 4) {
    return UsageError(absl::StrCat(flag, ": got ", values.size(), " values; pass ", kWindowForm));
  }
  v1::Window window;
  window.set_query_start(values[0]);
  window.set_query_end(values[1]);
  window.set_key_start(values[2]);
  window.set_key_end(values[3]);
  return window;
}

}  // namespace

void AddAttentionQueryFlags(CLI::App& command, AttentionFlags* flags) {
  AddTextInputFlags(command, &flags->input);
  AddSelectionFlags(command, &flags->selection);
  command.option_defaults()->group("Attention");
  AddParsedFlag(command, "--window", "QS,QE,KS,KE",
                "only query tokens [QS, QE) and key tokens [KS, KE); end 0 = to the end",
                &flags->window,
                [](const std::string& text) { return ParseWindow("--window", text); });
  AddStringFlag(command, "--decoder_text", "T",
                "encoder-decoders (marian, bart, t5): the translation the decoder reads; adds the "
                "decoder's self-attention, rows by the token each position reads, and its "
                "cross-attention over --text's tokens, rows by the token each position writes "
                "(heatmap: draws the cross-attention, target tokens down, source tokens across)",
                &flags->decoder_text);
  AddParsedFlag(command, "--decoder_window", "QS,QE,KS,KE",
                "as --window for the decoder's rows, and the decoder keys of its self-attention",
                &flags->decoder_window,
                [](const std::string& text) { return ParseWindow("--decoder_window", text); });
}

void AddAttentionOnlyFlags(CLI::App& command, AttentionFlags* flags) {
  command.option_defaults()->group("Attention");
  AddSwitch(command, "--rollout",
            "add attention rollout (Abnar & Zuidema 2020) over every layer and head of the model, "
            "whatever --layers and --heads select",
            &flags->rollout);
  AddSwitch(command, "--scores", "add the pre-softmax scores", &flags->scores);
  AddDTypeFlag(command, &flags->dtype);
  command.option_defaults()->group("Attention");
  AddInt32Flag(command, "--top_k", "K",
               "keep each row's K largest weights, with their key positions in top_k_indices",
               &flags->top_k);
}

absl::StatusOr<v1::GetAttentionRequest> AttentionRequest(const std::string& command,
                                                         const AttentionFlags& flags) {
  v1::GetAttentionRequest request;
  ATTNSCOPE_RETURN_IF_ERROR(SetTextInput(command, flags.input, &request));
  request.mutable_layers()->Add(flags.selection.layers.begin(), flags.selection.layers.end());
  request.mutable_heads()->Add(flags.selection.heads.begin(), flags.selection.heads.end());
  request.set_head_aggregation(flags.selection.aggregation);
  request.set_rollout(flags.rollout);
  request.set_include_scores(flags.scores);
  request.set_dtype(flags.dtype);
  if (flags.top_k.has_value()) request.set_top_k(*flags.top_k);
  if (flags.window.has_value()) *request.mutable_window() = *flags.window;
  if (flags.decoder_window.has_value()) *request.mutable_decoder_window() = *flags.decoder_window;
  if (flags.decoder_text.has_value()) request.set_decoder_text(*flags.decoder_text);
  return request;
}

}  // namespace attnscope::cli

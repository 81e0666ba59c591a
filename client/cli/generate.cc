// `attnscope generate`: text after --prompt from a decoder model, or its translation by an
// encoder-decoder, printed as it is written.
#include <unistd.h>

#include <functional>
#include <iostream>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"
#include "client/cli/flags.h"
#include "client/cli/terminal.h"
#include "common/status_macros.h"

namespace attnscope::cli {
namespace {

struct Flags {
  std::string model;
  std::string prompt;
  // Unspecified: the server runs greedy search, or beam search with more than one beam.
  v1::DecodingMethod method = v1::DECODING_METHOD_UNSPECIFIED;
  std::optional<int32_t> max_new_tokens;
  std::optional<int32_t> num_beams;
  std::optional<double> length_penalty;
  std::optional<double> temperature;
  std::optional<int32_t> top_k;
  std::optional<double> top_p;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;
  bool attentions = false;
  SelectionFlags selection;
  v1::DType dtype = v1::DTYPE_FLOAT32;
  std::string format = "text";
};

absl::StatusOr<uint64_t> ParseSeed(const std::string& text) {
  uint64_t seed;
  if (!absl::SimpleAtoi(text, &seed)) {
    return UsageError(
        absl::StrCat("--seed: '", text, "' is not an integer in [0, 18446744073709551615]"));
  }
  return seed;
}

// Declares `name` taking a number.
void AddDoubleFlag(CLI::App& command, const std::string& name, const std::string& value_name,
                   std::string help, std::optional<double>* value) {
  AddParsedFlag(command, name, value_name, std::move(help), value,
                [name](const std::string& text) { return ParseDouble(name, text); });
}

v1::GenerateRequest GenerateRequest(const Flags& flags) {
  v1::GenerateRequest request;
  request.set_model(flags.model);
  request.set_prompt(flags.prompt);
  request.set_method(flags.method);
  if (flags.max_new_tokens.has_value()) request.set_max_new_tokens(*flags.max_new_tokens);
  if (flags.num_beams.has_value()) request.set_num_beams(*flags.num_beams);
  if (flags.top_k.has_value()) request.set_top_k(*flags.top_k);
  if (flags.length_penalty.has_value()) request.set_length_penalty(*flags.length_penalty);
  if (flags.temperature.has_value()) request.set_temperature(*flags.temperature);
  if (flags.top_p.has_value()) request.set_top_p(*flags.top_p);
  if (flags.seed.has_value()) request.set_seed(*flags.seed);
  request.set_ignore_eos(flags.ignore_eos);
  request.set_output_attentions(flags.attentions);
  request.mutable_layers()->Add(flags.selection.layers.begin(), flags.selection.layers.end());
  request.mutable_heads()->Add(flags.selection.heads.begin(), flags.selection.heads.end());
  request.set_head_aggregation(flags.selection.aggregation);
  request.set_dtype(flags.dtype);
  return request;
}

absl::StatusOr<Output> RunGenerate(const Flags& flags, const CommandContext& context) {
  if (flags.format == "text" && flags.attentions) {
    return UsageError("--attentions: the text output prints no attention; add --format json");
  }
  const v1::GenerateRequest request = GenerateRequest(flags);
  std::function<void(const GeneratedTokenResult&)> on_token;
  std::function<void(const v1::GenerateHeader&)> on_header;
  bool printed = false;
  // A decoder-only model continues the prompt; an encoder-decoder's output (a translation) goes
  // on a line of its own below its source.
  std::string prompt_end;
  if (flags.format == "text") {
    on_header = [&](const v1::GenerateHeader& header) {
      if (header.encoder_decoder()) prompt_end = "\n";
    };
    // The text is printed as it is written, after the prompt, so the output reads on.
    const bool terminal = IsTerminal(STDOUT_FILENO);
    on_token = [&, terminal](const GeneratedTokenResult& token) {
      if (!printed) std::cout << ForTerminal(request.prompt(), terminal) << prompt_end;
      printed = true;
      std::cout << ForTerminal(token.token.text(), terminal) << std::flush;
    };
  }
  absl::StatusOr<GenerateResult> result =
      context.client.Generate(request, on_token, context.call, on_header);
  if (!result.ok()) {
    // The streamed text ends its line before the error is printed.
    if (printed) std::cout << "\n";
    return result.status();
  }
  const v1::GenerateDone& done = result->done;
  if (flags.format == "text") {
    return TextOutput(absl::StrCat(
        printed ? "" : request.prompt() + prompt_end, "\n[", done.ids_size(), " tokens, ",
        done.finish_reason() == v1::FINISH_REASON_EOS ? "stopped at the end-of-text token"
                                                      : "stopped at --max_new_tokens",
        ", score ", done.score(), "]\n"));
  }
  json tokens = json::array();
  for (const GeneratedTokenResult& token : result->tokens) {
    json item = {{"index", token.token.index()}, {"position", token.token.position()},
                 {"id", token.token.id()},       {"token", token.token.token()},
                 {"text", token.token.text()},   {"logprob", token.token.logprob()}};
    ATTNSCOPE_RETURN_IF_ERROR(context.writer.AddTo(
        item, "attention", token.attention, absl::StrCat("token", token.token.index(), "_")));
    tokens.push_back(std::move(item));
  }
  const v1::GenerateHeader& header = result->header;
  return JsonOutput(
      json{{"model", header.model()},
           {"method", v1::DecodingMethod_Name(header.method())},
           {"encoder_decoder", header.encoder_decoder()},
           {"prompt_tokens", TokensToJson(header.prompt_tokens())},
           {"layers", std::vector<int32_t>(header.layers().begin(), header.layers().end())},
           {"heads", std::vector<int32_t>(header.heads().begin(), header.heads().end())},
           {"tokens", std::move(tokens)},
           {"finish_reason", v1::FinishReason_Name(done.finish_reason())},
           {"ids", std::vector<int32_t>(done.ids().begin(), done.ids().end())},
           {"text", done.text()},
           {"score", done.score()}});
}

}  // namespace

Command AddGenerateCommand(CLI::App& app, std::optional<std::string>* npy_dir) {
  CLI::App* command = app.add_subcommand(
      "generate",
      "text after --prompt from a decoder model, or its translation by an encoder-decoder, "
      "printed as it is written");
  auto flags = std::make_shared<Flags>();
  AddModelFlag(*command, &flags->model);
  command->option_defaults()->group("Generate");
  AddStringFlag(*command, "--prompt", "P",
                "the text to continue or translate (may be empty: "
                "start from <s>)",
                &flags->prompt);
  AddInt32Flag(*command, "--max_new_tokens", "N", "tokens to write at most (default 20)",
               &flags->max_new_tokens);
  AddChoiceFlag<v1::DecodingMethod>(
      *command, "--method",
      "how tokens are chosen (default greedy, or beam_search with --num_beams over 1)",
      {{"greedy", v1::DECODING_METHOD_GREEDY},
       {"beam_search", v1::DECODING_METHOD_BEAM_SEARCH},
       {"sampling", v1::DECODING_METHOD_SAMPLING}},
      &flags->method);
  AddInt32Flag(*command, "--num_beams", "N", "beam search: beams (default 4)", &flags->num_beams);
  AddDoubleFlag(*command, "--length_penalty", "X", "beam search: length penalty (default 1)",
                &flags->length_penalty);
  AddDoubleFlag(*command, "--temperature", "T", "sampling: temperature (default 1)",
                &flags->temperature);
  AddInt32Flag(*command, "--top_k", "K", "sampling: the K most likely tokens (default 0 = all)",
               &flags->top_k);
  AddDoubleFlag(*command, "--top_p", "P", "sampling: nucleus probability (default 1)",
                &flags->top_p);
  AddParsedFlag(*command, "--seed", "S", "sampling: the random seed", &flags->seed, ParseSeed);
  AddSwitch(*command, "--ignore_eos", "go on past the end-of-text token", &flags->ignore_eos);
  AddSwitch(*command, "--attentions",
            "add each token's attention over its context (--layers --heads --aggregate --dtype "
            "as for attention; needs --format json)",
            &flags->attentions);
  AddSelectionFlags(*command, &flags->selection);
  AddDTypeFlag(*command, &flags->dtype);
  AddNpyDirFlag(*command, npy_dir);
  command->option_defaults()->group("Generate");
  AddChoiceFlag<std::string>(
      *command, "--format",
      "text (default): the prompt, then the new text as it arrives, then a line saying why it "
      "stopped; json: header, tokens with ids, logprobs and attention, and the summary",
      {{"text", "text"}, {"json", "json"}}, &flags->format);
  return {command, [flags](const CommandContext& context) { return RunGenerate(*flags, context); }};
}

}  // namespace attnscope::cli

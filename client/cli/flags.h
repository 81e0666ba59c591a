// Flags of the `attnscope` commands, declared once on each command's CLI11 subcommand with their
// help, and the flags several commands share (the connection, the text input, the attention
// selection, the output format).
//
// A value flag is written --name=VALUE or --name VALUE; --name= is the empty value (so is a --name
// with nothing after it, or followed by another flag: CLI11 cannot tell them apart). A value that
// starts with '-' and a letter reads as a flag of its own unless it is attached: --text=-x.
// Each value is converted and checked in its flag's CLI11 callback, which refuses a bad one with
// the project's own message ("--top_k: '1e9' is not an integer in [...]") rather than CLI11's. A
// flag given twice is refused unless it is repeatable (--text, --text_pair, --document).
#ifndef ATTNSCOPE_CLIENT_CLI_FLAGS_H_
#define ATTNSCOPE_CLIENT_CLI_FLAGS_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "attnscope/v1/attnscope.pb.h"
#include "client/cli/command.h"
#include "client/client.h"
#include "common/status_macros.h"

namespace attnscope::cli {

// Ends parsing with `status`'s message (a usage mistake, exit 2) when it is not OK. Only flag
// callbacks call it: CLI11 reports a callback's failure by exception.
void RefuseIfError(const absl::Status& status);

// Declares the value flag `name` ("--name") on `command`, `value_name` standing for its value in
// the help. `on_values` gets the value of every occurrence, in order.
CLI::Option* AddValueFlag(CLI::App& command, const std::string& name, const std::string& value_name,
                          std::string help,
                          std::function<void(const std::vector<std::string>&)> on_values);

// The one value of a flag that may be given once: "--name given twice" otherwise.
const std::string& OnlyValue(const std::string& name, const std::vector<std::string>& values);

// Declares `name` taking one value, which `parse` (text -> absl::StatusOr<T>) converts into
// *value (a T or a std::optional<T>).
template <typename Target, typename Parse>
CLI::Option* AddParsedFlag(CLI::App& command, const std::string& name,
                           const std::string& value_name, std::string help, Target* value,
                           Parse parse) {
  return AddValueFlag(command, name, value_name, std::move(help),
                      [name, value, parse](const std::vector<std::string>& values) {
                        auto parsed = parse(OnlyValue(name, values));
                        RefuseIfError(parsed.status());
                        *value = *std::move(parsed);
                      });
}

// Declares a switch: --name (or --name=true) sets *value, --name=false leaves it.
CLI::Option* AddSwitch(CLI::App& command, const std::string& name, std::string help, bool* value);

// Declares `name` taking one value, kept as given in *value (a std::string, or a
// std::optional<std::string> where being given matters).
template <typename Target>
CLI::Option* AddStringFlag(CLI::App& command, const std::string& name,
                           const std::string& value_name, std::string help, Target* value) {
  return AddValueFlag(
      command, name, value_name, std::move(help),
      [name, value](const std::vector<std::string>& values) { *value = OnlyValue(name, values); });
}

// Declares `name` as repeatable: every value, in order.
CLI::Option* AddRepeatableFlag(CLI::App& command, const std::string& name,
                               const std::string& value_name, std::string help,
                               std::vector<std::string>* values);

// Declares `name` taking one of `choices` (text -> value), listed in that order when another
// value is refused: "--pooling: 'max' is not one of none, cls, mean".
template <typename T>
CLI::Option* AddChoiceFlag(CLI::App& command, const std::string& name, std::string help,
                           std::vector<std::pair<std::string, T>> choices, T* value) {
  std::vector<std::string> names;
  for (const auto& choice : choices) names.push_back(choice.first);
  auto parse = [name, choices, names](const std::string& text) -> absl::StatusOr<T> {
    for (const auto& [choice_name, choice] : choices) {
      if (choice_name == text) return choice;
    }
    return UsageError(
        absl::StrCat(name, ": '", text, "' is not one of ", absl::StrJoin(names, ", ")));
  };
  return AddParsedFlag(command, name, absl::StrJoin(names, "|"), std::move(help), value, parse);
}

// Value parsers; each refusal names the flag and says what it takes.
absl::StatusOr<int64_t> ParseInt(const std::string& flag, const std::string& text);
// For the request fields that are int32 on the wire, so that a large value is refused rather than
// wrapped.
absl::StatusOr<int32_t> ParseInt32(const std::string& flag, const std::string& text);
// A comma-separated list of int32; `form` says what the flag takes, for the error message.
absl::StatusOr<std::vector<int32_t>> ParseIntList(const std::string& flag, const std::string& text,
                                                  absl::string_view form);
absl::StatusOr<double> ParseDouble(const std::string& flag, const std::string& text);
// Seconds ("1.5") or an Abseil duration ("500ms", "2m"), above zero.
absl::StatusOr<absl::Duration> ParseDuration(const std::string& flag, const std::string& text);

// Declares `name` taking an int32.
CLI::Option* AddInt32Flag(CLI::App& command, const std::string& name, const std::string& value_name,
                          std::string help, std::optional<int32_t>* value);

// The text of --text or --text_pair for a command that takes one: "'tokenize' takes one
// --text_pair, got 2; only 'encode' takes several (one input each)" otherwise. Nullopt when the
// flag was not given.
absl::StatusOr<std::optional<std::string>> OneOf(const std::string& command,
                                                 const std::string& flag,
                                                 const std::vector<std::string>& values);
// The same for a flag the command needs: "'heatmap' needs --out" when absent.
absl::StatusOr<std::string> Required(const std::string& command, const std::string& flag,
                                     const std::vector<std::string>& values);
absl::StatusOr<std::string> Required(const std::string& command, const std::string& flag,
                                     const std::optional<std::string>& value);

// The connection flags, which every command reads.
struct ConnectionFlags {
  std::optional<std::string> server;
  std::optional<absl::Duration> timeout;
  std::optional<int64_t> max_response_bytes;
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::optional<std::string> api_key_file;
};
void AddConnectionFlags(CLI::App& command, ConnectionFlags* flags);

// The client's options from the connection flags and ATTNSCOPE_API_KEY: the target, the receive
// limit, TLS credentials and the API key. A usage error names the flag when a file cannot be read
// or --tls_cert_file comes without --tls_key_file.
absl::StatusOr<ClientOptions> ClientOptionsFrom(const ConnectionFlags& flags);

// --model, which every command that asks a model reads ("" = the server's first model).
void AddModelFlag(CLI::App& command, std::string* model);

// --text and --text_pair, repeatable ('encode' takes one input per --text; the others take one).
struct TextFlags {
  std::vector<std::string> texts;
  std::vector<std::string> pairs;
};
void AddTextFlags(CLI::App& command, TextFlags* flags);

// --truncation, --max_length and --skip_special_tokens.
struct TokenizationFlags {
  std::optional<v1::Truncation> truncation;
  std::optional<int32_t> max_length;
  bool skip_special_tokens = false;

  // True when any of the three was given.
  bool given() const;
  v1::TokenizationOptions ToProto() const;
};
void AddTokenizationFlags(CLI::App& command, TokenizationFlags* flags);

// --model, --text (required, one), --text_pair (one) and the tokenization flags, the input of
// tokenize, attention, stream, heatmap and attribute.
struct TextInputFlags {
  std::string model;
  TextFlags text;
  TokenizationFlags tokenization;
};
void AddTextInputFlags(CLI::App& command, TextInputFlags* flags);

// Sets the model, text, text pair and tokenization of any request with those fields
// (TokenizeRequest, GetAttentionRequest, AttributeRequest).
template <typename Request>
absl::Status SetTextInput(const std::string& command, const TextInputFlags& flags,
                          Request* request);

// --layers, --heads and --aggregate: which layers and heads to return and how heads combine.
struct SelectionFlags {
  std::vector<int32_t> layers;
  std::vector<int32_t> heads;
  v1::HeadAggregation aggregation = v1::HEAD_AGGREGATION_NONE;
};
void AddSelectionFlags(CLI::App& command, SelectionFlags* flags);

// --dtype of the returned tensors.
void AddDTypeFlag(CLI::App& command, v1::DType* dtype);

// --npy_dir: each tensor written as DIR/<name>.npy, the JSON giving its path.
void AddNpyDirFlag(CLI::App& command, std::optional<std::string>* npy_dir);

// --format=json|text and --top, the output of attention, stream and cross.
struct TextOutputFlags {
  std::string format = "json";
  // Parsed by TextRows, after the format: --top matters only to --format text.
  std::optional<std::string> top;
};
void AddTextOutputFlags(CLI::App& command, TextOutputFlags* flags);

// Nullopt for JSON output, otherwise how many tokens a text row shows (--top, default 3). Refuses
// --top without --format text, and --npy_dir (`npy_dir_given`) or --scores (`scores`) with it.
absl::StatusOr<std::optional<int>> TextRows(const TextOutputFlags& flags, bool npy_dir_given,
                                            bool scores);

template <typename Request>
absl::Status SetTextInput(const std::string& command, const TextInputFlags& flags,
                          Request* request) {
  request->set_model(flags.model);
  ATTNSCOPE_ASSIGN_OR_RETURN(*request->mutable_text(),
                             Required(command, "--text", flags.text.texts));
  ATTNSCOPE_ASSIGN_OR_RETURN(std::optional<std::string> pair,
                             OneOf(command, "--text_pair", flags.text.pairs));
  if (pair.has_value()) request->set_text_pair(*std::move(pair));
  *request->mutable_tokenization() = flags.tokenization.ToProto();
  return absl::OkStatus();
}

}  // namespace attnscope::cli

#endif  // ATTNSCOPE_CLIENT_CLI_FLAGS_H_

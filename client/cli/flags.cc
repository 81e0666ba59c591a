#include "client/cli/flags.h"

#include <cstdlib>
#include <fstream>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace attnscope::cli {
namespace {

constexpr char kNotInt32[] = "is not an integer in [-2147483648, 2147483647]";

constexpr char kIndexListForm[] =
    "a comma-separated list like 0,-1 (negative counts from the end), or leave the flag out for "
    "all";

// Empty for the server's default, as when the flag is left out.
absl::StatusOr<v1::DType> ParseDType(const std::string& text) {
  if (text.empty() || text == "float32") return v1::DTYPE_FLOAT32;
  if (text == "float16") return v1::DTYPE_FLOAT16;
  if (text == "bfloat16") return v1::DTYPE_BFLOAT16;
  return UsageError(absl::StrCat("--dtype: '", text, "' is not one of float32, float16, bfloat16"));
}

absl::StatusOr<v1::HeadAggregation> ParseAggregation(const std::string& text) {
  if (text.empty() || text == "none") return v1::HEAD_AGGREGATION_NONE;
  if (text == "mean") return v1::HEAD_AGGREGATION_MEAN;
  if (text == "max") return v1::HEAD_AGGREGATION_MAX;
  return UsageError(absl::StrCat("--aggregate: '", text, "' is not one of none, mean, max"));
}

absl::StatusOr<v1::Truncation> ParseTruncation(const std::string& text) {
  if (text.empty()) return v1::TRUNCATION_UNSPECIFIED;
  if (text == "none") return v1::TRUNCATION_NONE;
  if (text == "longest_first") return v1::TRUNCATION_LONGEST_FIRST;
  if (text == "only_first") return v1::TRUNCATION_ONLY_FIRST;
  if (text == "only_second") return v1::TRUNCATION_ONLY_SECOND;
  return UsageError(absl::StrCat("--truncation: '", text,
                                 "' is not one of none, longest_first, only_first, only_second"));
}

}  // namespace

void RefuseIfError(const absl::Status& status) {
  if (!status.ok()) throw CLI::ValidationError(std::string(status.message()));
}

CLI::Option* AddValueFlag(CLI::App& command, const std::string& name, const std::string& value_name,
                          std::string help,
                          std::function<void(const std::vector<std::string>&)> on_values) {
  const CLI::callback_t callback = [on_values =
                                        std::move(on_values)](const CLI::results_t& values) {
    on_values(values);
    return true;
  };
  CLI::Option* option = command.add_option(name, callback, std::move(help));
  // At most one value per occurrence, so that `--name=` is the empty value: with exactly one,
  // CLI11 2.1 takes the next argument for `--name=`. All occurrences reach the callback, which
  // decides whether a second one is allowed.
  option->expected(/*value_min=*/0, /*value_max=*/1);
  option->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  option->type_name(value_name);
  return option;
}

const std::string& OnlyValue(const std::string& name, const std::vector<std::string>& values) {
  if (values.size() > 1) RefuseIfError(UsageError(absl::StrCat(name, " given twice")));
  return values.front();
}

CLI::Option* AddSwitch(CLI::App& command, const std::string& name, std::string help, bool* value) {
  const CLI::callback_t callback = [name, value](const CLI::results_t& values) {
    for (const std::string& given : values) {
      if (given != "true" && given != "false") {
        RefuseIfError(UsageError(absl::StrCat(name, " takes no value (or =true / =false)")));
      }
      *value = *value || given == "true";
    }
    return true;
  };
  CLI::Option* option = command.add_option(name, callback, std::move(help));
  // No value: CLI11 gives "true" for --name and the text after '=' for --name=VALUE.
  option->expected(/*value=*/0);
  option->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  return option;
}

CLI::Option* AddRepeatableFlag(CLI::App& command, const std::string& name,
                               const std::string& value_name, std::string help,
                               std::vector<std::string>* values) {
  return AddValueFlag(command, name, value_name, std::move(help),
                      [values](const std::vector<std::string>& given) { *values = given; });
}

absl::StatusOr<int64_t> ParseInt(const std::string& flag, const std::string& text) {
  int64_t value;
  if (!absl::SimpleAtoi(text, &value)) {
    return UsageError(absl::StrCat(flag, ": '", text, "' is not an integer"));
  }
  return value;
}

absl::StatusOr<int32_t> ParseInt32(const std::string& flag, const std::string& text) {
  int32_t value;
  if (!absl::SimpleAtoi(text, &value)) {
    return UsageError(absl::StrCat(flag, ": '", text, "' ", kNotInt32));
  }
  return value;
}

absl::StatusOr<std::vector<int32_t>> ParseIntList(const std::string& flag, const std::string& text,
                                                  absl::string_view form) {
  if (text.empty()) {
    return UsageError(absl::StrCat(flag, ": empty; pass ", form));
  }
  std::vector<int32_t> values;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    int32_t value;
    if (!absl::SimpleAtoi(piece, &value)) {
      return UsageError(
          absl::StrCat(flag, ": '", piece, "' in '", text, "' ", kNotInt32, "; pass ", form));
    }
    values.push_back(value);
  }
  return values;
}

absl::StatusOr<double> ParseDouble(const std::string& flag, const std::string& text) {
  double value;
  if (!absl::SimpleAtod(text, &value)) {
    return UsageError(absl::StrCat(flag, ": '", text, "' is not a number"));
  }
  return value;
}

absl::StatusOr<absl::Duration> ParseDuration(const std::string& flag, const std::string& text) {
  double seconds;
  absl::Duration duration;
  if (absl::SimpleAtod(text, &seconds)) {
    duration = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(text, &duration)) {
    return UsageError(
        absl::StrCat(flag, ": '", text, "' is neither seconds nor a duration like 500ms or 2m"));
  }
  if (duration <= absl::ZeroDuration()) {
    return UsageError(absl::StrCat(flag, ": expected a positive duration, got '", text, "'; e.g. ",
                                   flag, "=30s"));
  }
  return duration;
}

CLI::Option* AddInt32Flag(CLI::App& command, const std::string& name, const std::string& value_name,
                          std::string help, std::optional<int32_t>* value) {
  return AddParsedFlag(command, name, value_name, std::move(help), value,
                       [name](const std::string& text) { return ParseInt32(name, text); });
}

absl::StatusOr<std::optional<std::string>> OneOf(const std::string& command,
                                                 const std::string& flag,
                                                 const std::vector<std::string>& values) {
  if (values.empty()) return std::optional<std::string>();
  if (values.size() > 1) {
    return UsageError(absl::StrCat("'", command, "' takes one ", flag, ", got ", values.size(),
                                   "; only 'encode' takes several (one input each)"));
  }
  return std::optional<std::string>(values.front());
}

absl::StatusOr<std::string> Required(const std::string& command, const std::string& flag,
                                     const std::vector<std::string>& values) {
  ATTNSCOPE_ASSIGN_OR_RETURN(std::optional<std::string> value, OneOf(command, flag, values));
  return Required(command, flag, value);
}

absl::StatusOr<std::string> Required(const std::string& command, const std::string& flag,
                                     const std::optional<std::string>& value) {
  if (!value.has_value()) return UsageError(absl::StrCat("'", command, "' needs ", flag));
  return *value;
}

void AddConnectionFlags(CLI::App& command, ConnectionFlags* flags) {
  command.option_defaults()->group("Connection");
  AddStringFlag(command, "--server", "HOST:PORT",
                "the server: host:port, or a gRPC resolver URI such as "
                "dns:///attnscope.example:50051 whose addresses are called in turn (default "
                "127.0.0.1:50051)",
                &flags->server);
  AddParsedFlag(
      command, "--timeout", "DURATION",
      "the deadline of the call: seconds, or a duration such as 500ms or 2m (default 60s)",
      &flags->timeout, [](const std::string& text) { return ParseDuration("--timeout", text); });
  AddParsedFlag(
      command, "--max_response_bytes", "N",
      "the server's --max_response_bytes, the cap of an answer (default 67108864); the channel "
      "accepts 1 MiB more for the non-tensor fields",
      &flags->max_response_bytes, [](const std::string& text) -> absl::StatusOr<int64_t> {
        ATTNSCOPE_ASSIGN_OR_RETURN(int64_t bytes, ParseInt("--max_response_bytes", text));
        if (bytes < 1) {
          return UsageError(
              absl::StrCat("--max_response_bytes: expected a positive size in bytes, got ", bytes,
                           "; match the server's --max_response_bytes"));
        }
        return bytes;
      });
  AddStringFlag(command, "--tls_ca_file", "CA.pem",
                "TLS: the CA that signed the server's certificate (without it, the system's "
                "roots); this or a client certificate turns TLS on",
                &flags->tls_ca_file);
  AddStringFlag(command, "--tls_cert_file", "CERT.pem",
                "TLS: a client certificate, for a server that requires one (mutual TLS); needs "
                "--tls_key_file",
                &flags->tls_cert_file);
  AddStringFlag(command, "--tls_key_file", "KEY.pem", "TLS: the client certificate's key",
                &flags->tls_key_file);
  AddStringFlag(command, "--api_key_file", "FILE",
                "a file whose first line is the API key, sent as `authorization: Bearer <key>` "
                "(default: the environment variable ATTNSCOPE_API_KEY)",
                &flags->api_key_file);
}

absl::StatusOr<ClientOptions> ClientOptionsFrom(const ConnectionFlags& flags) {
  ClientOptions options;
  if (flags.server.has_value()) options.target = *flags.server;
  if (flags.max_response_bytes.has_value()) {
    options.max_response_bytes = *flags.max_response_bytes;
  }
  if (!flags.tls_ca_file.empty() || !flags.tls_cert_file.empty() || !flags.tls_key_file.empty()) {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        TlsCredentials(flags.tls_ca_file, flags.tls_cert_file, flags.tls_key_file);
    if (!credentials.ok()) return UsageError(credentials.status().message());
    options.credentials = *std::move(credentials);
  }
  if (flags.api_key_file.has_value()) {
    std::ifstream file(*flags.api_key_file);
    std::string first;
    if (!file || !std::getline(file, first) || absl::StripAsciiWhitespace(first).empty()) {
      return UsageError(absl::StrCat("--api_key_file '", *flags.api_key_file,
                                     "': expected a readable file with the key on its first "
                                     "line, got none"));
    }
    options.api_key = std::string(absl::StripAsciiWhitespace(first));
  } else if (const char* key_env = std::getenv("ATTNSCOPE_API_KEY"); key_env != nullptr) {
    options.api_key = std::string(absl::StripAsciiWhitespace(key_env));
  }
  return options;
}

void AddModelFlag(CLI::App& command, std::string* model) {
  command.option_defaults()->group("Input");
  AddStringFlag(command, "--model", "NAME",
                "the model to ask, by the name it is served under (default: the first model "
                "served)",
                model);
}

void AddTextFlags(CLI::App& command, TextFlags* flags) {
  command.option_defaults()->group("Input");
  AddRepeatableFlag(command, "--text", "T", "the text (encode: repeatable, one input each)",
                    &flags->texts);
  AddRepeatableFlag(command, "--text_pair", "T",
                    "the second text of a pair, e.g. a cross-encoder's document (encode: one per "
                    "--text)",
                    &flags->pairs);
}

bool TokenizationFlags::given() const {
  return truncation.has_value() || max_length.has_value() || skip_special_tokens;
}

v1::TokenizationOptions TokenizationFlags::ToProto() const {
  v1::TokenizationOptions options;
  if (truncation.has_value()) options.set_truncation(*truncation);
  if (max_length.has_value()) options.set_max_length(*max_length);
  options.set_skip_special_tokens(skip_special_tokens);
  return options;
}

void AddTokenizationFlags(CLI::App& command, TokenizationFlags* flags) {
  command.option_defaults()->group("Input");
  AddParsedFlag(command, "--truncation", "none|longest_first|only_first|only_second",
                "how a text over --max_length is cut, as Hugging Face tokenizers do it (default: "
                "the server's, longest_first at the model's maximum)",
                &flags->truncation, ParseTruncation);
  AddInt32Flag(command, "--max_length", "N",
               "the token budget with special tokens (default 0: the model's maximum)",
               &flags->max_length);
  AddSwitch(command, "--skip_special_tokens", "leave out [CLS], [SEP], <s> and the like",
            &flags->skip_special_tokens);
}

void AddTextInputFlags(CLI::App& command, TextInputFlags* flags) {
  AddModelFlag(command, &flags->model);
  AddTextFlags(command, &flags->text);
  AddTokenizationFlags(command, &flags->tokenization);
}

void AddSelectionFlags(CLI::App& command, SelectionFlags* flags) {
  command.option_defaults()->group("Attention");
  AddParsedFlag(command, "--layers", "0,-1",
                "the layers to return, comma-separated; negative counts from the end (default "
                "all)",
                &flags->layers, [](const std::string& text) {
                  return ParseIntList("--layers", text, kIndexListForm);
                });
  AddParsedFlag(
      command, "--heads", "0,2", "the heads to return, as --layers (default all)", &flags->heads,
      [](const std::string& text) { return ParseIntList("--heads", text, kIndexListForm); });
  AddParsedFlag(command, "--aggregate", "none|mean|max",
                "combine the selected heads into one (default none)", &flags->aggregation,
                ParseAggregation);
}

void AddDTypeFlag(CLI::App& command, v1::DType* dtype) {
  command.option_defaults()->group("Attention");
  AddParsedFlag(command, "--dtype", "float32|float16|bfloat16",
                "the element type on the wire; values are printed as float either way (default "
                "float32)",
                dtype, ParseDType);
}

void AddNpyDirFlag(CLI::App& command, std::optional<std::string>* npy_dir) {
  command.option_defaults()->group("Output");
  AddStringFlag(command, "--npy_dir", "DIR",
                "write each tensor as DIR/<name>.npy (float32 '<f4' or int32 '<i4'), created if "
                "missing; the JSON gives its path instead of its values",
                npy_dir);
}

void AddTextOutputFlags(CLI::App& command, TextOutputFlags* flags) {
  command.option_defaults()->group("Output");
  AddStringFlag(command, "--format", "json|text",
                "json (default), or text: for each query token its --top most attended tokens "
                "with their weights, e.g. `Tôi   -> yêu 0.41, Việt 0.22, [SEP] 0.10`",
                &flags->format);
  AddStringFlag(command, "--top", "N", "with --format text: tokens per row (default 3)",
                &flags->top);
}

absl::StatusOr<std::optional<int>> TextRows(const TextOutputFlags& flags, bool npy_dir_given,
                                            bool scores) {
  if (flags.format == "json") {
    if (flags.top.has_value()) {
      return UsageError("--top applies to --format text; add --format text or leave --top out");
    }
    return std::optional<int>();
  }
  if (flags.format != "text") {
    return UsageError(absl::StrCat("--format: '", flags.format, "' is not one of json, text"));
  }
  if (npy_dir_given) {
    return UsageError("--npy_dir names its files in the JSON output; leave out --format text");
  }
  if (scores) {
    return UsageError("--format text shows attention weights only; use JSON for --scores");
  }
  if (!flags.top.has_value()) return std::optional<int>(3);
  ATTNSCOPE_ASSIGN_OR_RETURN(int32_t top, ParseInt32("--top", *flags.top));
  if (top < 1) {
    return UsageError(absl::StrCat("--top: expected at least 1 token per row, got ", top));
  }
  return std::optional<int>(top);
}

}  // namespace attnscope::cli

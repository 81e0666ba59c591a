// attnscope: the command-line client of attnscope-server. Prints JSON on stdout (tokens, offsets,
// shapes and tensor values as nested arrays, or with --npy_dir the paths of .npy files holding the
// tensors); with --format text, attention as each query token's most attended tokens; 'heatmap'
// draws attention into a PNG or SVG file; 'attribute' prints tables of token and word attributions
// (JSON with --format json). When a call fails it prints the gRPC code and the
// server's message on stderr and exits 1; a malformed command line exits 2.
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/attention_display.h"
#include "client/client.h"
#include "client/npy.h"
#include "client/render/heatmap.h"

namespace attnscope {
namespace {

using json = nlohmann::json;

constexpr char kUsage[] = R"(usage: attnscope COMMAND [--flag=value | --flag value]...

Commands:
  models      the loaded models
  info        one model's description (--model; default the first model served)
  tokenize    tokens, ids and offsets (--text [--text_pair])
  attention   GetAttention: attention of one text or text pair
  stream      the same request over StreamAttention (no size cap), same output
  encode      hidden states and pooled vectors (--text repeatable, one input each)
  cross       query-to-document attention (--query, --document repeatable)
  heatmap     attention drawn as a PNG or SVG heatmap (--text [--text_pair] --out FILE)
  attribute   which tokens and words made a cross-encoder's score (--text QUERY --text_pair DOC)
  generate    text after --prompt from a decoder model, or its translation by an encoder-decoder,
              printed as it is written
  health      grpc.health.v1 status; exits 0 only when SERVING
  bench       load: concurrent clients calling GetAttention, Encode and CrossAttention

Connection:  --server=127.0.0.1:50051  --timeout=60s (or seconds)  --max_response_bytes=67108864
             (the server's cap; the channel accepts 1 MiB more for the non-tensor fields)
             TLS: --tls_ca_file CA.pem (verifies the server; without it, the system's roots)
             --tls_cert_file, --tls_key_file (a client certificate, for mutual TLS). Either turns
             TLS on. API key: the environment variable ATTNSCOPE_API_KEY or --api_key_file FILE
             (its first line), sent as `authorization: Bearer <key>`
Input:       --model NAME  --text T  --text_pair T  --truncation=none|longest_first|only_first|
             only_second  --max_length N  --skip_special_tokens
Attention:   --layers=0,-1  --heads=0,2  --aggregate=none|mean|max  --rollout  --scores
             --dtype=float32|float16|bfloat16  --top_k K  --window=QS,QE,KS,KE (end 0 = to the end)
             Encoder-decoders (marian, bart, t5): --decoder_text T (the translation the decoder reads;
             adds the decoder's self-attention, rows by the token each position reads, and its
             cross-attention over --text's tokens, rows by the token each position writes)
             --decoder_window=QS,QE,KS,KE (decoder rows, and decoder keys of its self-attention)
Encode:      --hidden_states  --pooling=none|cls|mean  --normalize  --dtype
Cross:       --query Q  --document D (repeatable)  --doc_to_query  --layers --heads --aggregate
Heatmap:     --out FILE.png | FILE.svg (the extension picks the format)  --layers --heads
             --aggregate --window as for attention  --vmax V (the value drawn darkest; default the
             largest value shown, so the scale is 0..max; --vmax=1 for 0..1)
             --decoder_text T: the cross-attention, target tokens down (the token each decoder
             position writes), source tokens across
             One layer and one head: one panel. One layer, several heads: a grid of heads. Several
             layers with --aggregate mean: one panel per layer (head means). Rows are query tokens,
             columns key tokens, labelled with their original text ([CLS] etc. for special
             tokens); YlOrBr colours with a colour bar. Prints the file's path and size as JSON.
Attribute:   --method=integrated_gradients,occlusion,gradient_x_input (comma-separated; default
             all three)  --steps N (integrated-gradients steps; default 50, at most 1000)
             --target N (classifier label; default 0)  --occlusion_token=mask|unk (default mask)
             --baseline=pad|zero (integrated-gradients baseline; default pad)  --format=text|json
             (default text: the score, then the words of --text_pair and of --text highest
             first, then every token; json: the AttributeResponse with snake_case field names)
Generate:    --prompt P (may be empty: start from <s>)  --max_new_tokens N (default 20)
             --method=greedy|beam_search|sampling (default greedy)  --num_beams N (default 4)
             --length_penalty X (default 1)  --temperature T  --top_k K  --top_p P (sampling;
             defaults 1, 0 = all, 1)  --seed S  --ignore_eos  --attentions (each token's
             attention over its context; --layers --heads --aggregate --dtype as for attention)
             --format=text|json (default text: the prompt, then the new text as it arrives, then
             a line saying why it stopped; json: header, tokens with ids, logprobs and attention,
             and the summary)
Health:      --service NAME
Bench:       --clients N (default 8) callers at once, each calling again as soon as it is
             answered, for --duration (default 30s) or until --requests N calls in all;
             --rpc=mixed|attention|encode|cross (mixed takes turns); --model, --text (default
             "Tôi yêu Việt Nam quá"), --query and --document for cross (default "Việt Nam" and
             the text). Prints calls/s, latency p50/p90/p99/max in ms and errors by code as JSON
Output:      --format=json|text (attention, stream, cross; default json; attribute: default text): text prints, for each
             query token, its --top N most attended tokens (default 3) with their weights:
               Tôi   -> yêu 0.41, Việt 0.22, [SEP] 0.10
             --npy_dir DIR  writes each tensor as DIR/<name>.npy (float32 '<f4' or int32 '<i4')
             and the JSON gives its path instead of its values
)";

// The payload that marks a status as a mistake in the command line (exit 2) rather than a call
// the server or the connection refused (exit 1).
constexpr char kUsagePayload[] = "type.attnscope.dev/cli.usage";

absl::Status UsageError(absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kUsagePayload, absl::Cord());
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsagePayload).has_value();
}

// Flags that take no value.
const std::set<std::string>& BoolFlags() {
  static const auto* flags =
      new std::set<std::string>{"rollout",       "scores",       "normalize",
                                "hidden_states", "doc_to_query", "skip_special_tokens",
                                "ignore_eos",    "attentions"};
  return *flags;
}

// Value flags that keep every occurrence; any other flag given twice is refused.
const std::set<std::string>& RepeatableFlags() {
  static const auto* flags = new std::set<std::string>{"text", "text_pair", "document"};
  return *flags;
}

// The flags each command reads, beside the connection flags every command takes. A flag outside
// its command's set is refused rather than silently ignored.
const std::map<std::string, std::set<std::string>>& CommandFlags() {
  static const auto* flags = [] {
    const std::set<std::string> input = {"model",      "text",       "text_pair",
                                         "truncation", "max_length", "skip_special_tokens"};
    const std::set<std::string> attention = {
        "layers", "heads",   "aggregate", "rollout", "scores",       "dtype",         "top_k",
        "window", "npy_dir", "format",    "top",     "decoder_text", "decoder_window"};
    auto with = [](std::set<std::string> a, const std::set<std::string>& b) {
      a.insert(b.begin(), b.end());
      return a;
    };
    return new std::map<std::string, std::set<std::string>>{
        {"models", {}},
        {"info", {"model"}},
        {"tokenize", input},
        {"attention", with(input, attention)},
        {"stream", with(input, attention)},
        {"encode", with(input, {"hidden_states", "pooling", "normalize", "dtype", "npy_dir"})},
        {"cross",
         {"model", "query", "document", "truncation", "max_length", "skip_special_tokens", "layers",
          "heads", "aggregate", "doc_to_query", "dtype", "npy_dir", "format", "top"}},
        {"heatmap", with(input, {"layers", "heads", "aggregate", "window", "out", "vmax",
                                 "decoder_text", "decoder_window"})},
        {"attribute",
         with(input, {"method", "steps", "target", "occlusion_token", "baseline", "format"})},
        {"generate",
         {"model", "prompt", "max_new_tokens", "method", "num_beams", "length_penalty",
          "temperature", "top_k", "top_p", "seed", "ignore_eos", "attentions", "layers", "heads",
          "aggregate", "dtype", "npy_dir", "format"}},
        {"health", {"service"}},
        {"bench",
         {"model", "text", "query", "document", "clients", "duration", "requests", "rpc"}}};
  }();
  return *flags;
}

const std::set<std::string>& ConnectionFlags() {
  static const auto* flags = new std::set<std::string>{
      "server",        "timeout",      "max_response_bytes", "tls_ca_file",
      "tls_cert_file", "tls_key_file", "api_key_file"};
  return *flags;
}

// Every flag of some command, or of the connection.
const std::set<std::string>& KnownFlags() {
  static const auto* flags = [] {
    auto* known = new std::set<std::string>(ConnectionFlags());
    for (const auto& [command, names] : CommandFlags()) known->insert(names.begin(), names.end());
    return known;
  }();
  return *flags;
}

struct CommandLine {
  std::string command;
  std::map<std::string, std::vector<std::string>> values;

  bool Has(const std::string& name) const { return values.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& fallback = "") const {
    auto it = values.find(name);
    return it == values.end() ? fallback : it->second.back();
  }
  std::vector<std::string> GetAll(const std::string& name) const {
    auto it = values.find(name);
    return it == values.end() ? std::vector<std::string>() : it->second;
  }
};

absl::StatusOr<CommandLine> ParseCommandLine(int argc, char** argv) {
  if (argc < 2) return UsageError("missing COMMAND");
  CommandLine line;
  line.command = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      return UsageError(absl::StrCat("unexpected argument '", arg, "'"));
    }
    arg = arg.substr(2);
    std::string name = arg;
    std::optional<std::string> value;
    if (const size_t equals = arg.find('='); equals != std::string::npos) {
      name = arg.substr(0, equals);
      value = arg.substr(equals + 1);
    }
    if (BoolFlags().count(name)) {
      if (value.has_value() && *value != "true" && *value != "false") {
        return UsageError(absl::StrCat("--", name, " takes no value (or =true / =false)"));
      }
      if (value.value_or("true") == "true") line.values[name].push_back("true");
      continue;
    }
    if (!KnownFlags().count(name)) {
      return UsageError(absl::StrCat("unknown flag --", name));
    }
    if (!value.has_value()) {
      if (i + 1 >= argc) return UsageError(absl::StrCat("--", name, " needs a value"));
      value = argv[++i];
    }
    if (line.values.count(name) && !RepeatableFlags().count(name)) {
      return UsageError(absl::StrCat("--", name, " given twice"));
    }
    line.values[name].push_back(*value);
  }
  return line;
}

// Refuses an unknown command, and flags the command does not read (naming the commands that do).
absl::Status CheckFlagsApply(const CommandLine& line) {
  const auto command = CommandFlags().find(line.command);
  if (command == CommandFlags().end()) {
    return UsageError(absl::StrCat("unknown command '", line.command, "'"));
  }
  for (const auto& [flag, values] : line.values) {
    if (ConnectionFlags().count(flag) || command->second.count(flag)) continue;
    std::vector<std::string> users;
    for (const auto& [name, flags] : CommandFlags()) {
      if (flags.count(flag)) users.push_back(name);
    }
    return UsageError(absl::StrCat("--", flag, " does not apply to '", line.command,
                                   "'; it is read by: ", absl::StrJoin(users, ", ")));
  }
  return absl::OkStatus();
}

constexpr char kNotInt32[] = "is not an integer in [-2147483648, 2147483647]";

absl::StatusOr<int64_t> ParseInt(const std::string& flag, const std::string& text) {
  int64_t value;
  if (!absl::SimpleAtoi(text, &value)) {
    return UsageError(absl::StrCat("--", flag, ": '", text, "' is not an integer"));
  }
  return value;
}

// For the request fields that are int32 on the wire, so that a large value is refused rather than
// wrapped.
absl::StatusOr<int32_t> ParseInt32(const std::string& flag, const std::string& text) {
  int32_t value;
  if (!absl::SimpleAtoi(text, &value)) {
    return UsageError(absl::StrCat("--", flag, ": '", text, "' ", kNotInt32));
  }
  return value;
}

// A comma-separated list of integers; `form` says what the flag takes, for the error message.
absl::StatusOr<std::vector<int32_t>> ParseIntList(const std::string& flag, const std::string& text,
                                                  absl::string_view form) {
  if (text.empty()) {
    return UsageError(absl::StrCat("--", flag, ": empty; pass ", form));
  }
  std::vector<int32_t> values;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    int32_t value;
    if (!absl::SimpleAtoi(piece, &value)) {
      return UsageError(
          absl::StrCat("--", flag, ": '", piece, "' in '", text, "' ", kNotInt32, "; pass ", form));
    }
    values.push_back(value);
  }
  return values;
}

constexpr char kIndexListForm[] =
    "a comma-separated list like 0,-1 (negative counts from the end), or leave the flag out for "
    "all";
constexpr char kWindowForm[] =
    "four integers QUERY_START,QUERY_END,KEY_START,KEY_END (end 0 = to the end of the sequence)";

// --layers and --heads into the request's repeated fields; absent flags leave them empty (all).
absl::Status ParseSelection(const CommandLine& line,
                            google::protobuf::RepeatedField<int32_t>* layers,
                            google::protobuf::RepeatedField<int32_t>* heads) {
  for (auto [flag, out] : {std::pair{"layers", layers}, std::pair{"heads", heads}}) {
    if (!line.Has(flag)) continue;
    absl::StatusOr<std::vector<int32_t>> values =
        ParseIntList(flag, line.Get(flag), kIndexListForm);
    if (!values.ok()) return values.status();
    out->Add(values->begin(), values->end());
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Duration> ParseTimeout(const std::string& text,
                                            const std::string& flag = "timeout") {
  double seconds;
  absl::Duration duration;
  if (absl::SimpleAtod(text, &seconds)) {
    duration = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(text, &duration)) {
    return UsageError(absl::StrCat("--", flag, ": '", text,
                                   "' is neither seconds nor a duration like 500ms or 2m"));
  }
  if (duration <= absl::ZeroDuration()) {
    return UsageError(absl::StrCat("--", flag, ": expected a positive duration, got '", text,
                                   "'; e.g. --", flag, "=30s"));
  }
  return duration;
}

// The value of --`flag` (`fallback` when the flag is absent) among `choices`, in the order the
// usage error lists them.
template <typename T>
absl::StatusOr<T> ParseChoice(const CommandLine& line, const std::string& flag,
                              const std::string& fallback,
                              const std::vector<std::pair<std::string, T>>& choices) {
  const std::string value = line.Get(flag, fallback);
  std::vector<std::string> names;
  for (const auto& [name, choice] : choices) {
    if (name == value) return choice;
    names.push_back(name);
  }
  return UsageError(
      absl::StrCat("--", flag, ": '", value, "' is not one of ", absl::StrJoin(names, ", ")));
}

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

absl::StatusOr<v1::TokenizationOptions> ParseTokenization(const CommandLine& line) {
  v1::TokenizationOptions options;
  const std::string truncation = line.Get("truncation");
  if (truncation == "none") {
    options.set_truncation(v1::TRUNCATION_NONE);
  } else if (truncation == "longest_first") {
    options.set_truncation(v1::TRUNCATION_LONGEST_FIRST);
  } else if (truncation == "only_first") {
    options.set_truncation(v1::TRUNCATION_ONLY_FIRST);
  } else if (truncation == "only_second") {
    options.set_truncation(v1::TRUNCATION_ONLY_SECOND);
  } else if (!truncation.empty()) {
    return UsageError(absl::StrCat("--truncation: '", truncation,
                                   "' is not one of none, longest_first, only_first, only_second"));
  }
  if (line.Has("max_length")) {
    absl::StatusOr<int32_t> max_length = ParseInt32("max_length", line.Get("max_length"));
    if (!max_length.ok()) return max_length.status();
    options.set_max_length(*max_length);
  }
  options.set_skip_special_tokens(line.Has("skip_special_tokens"));
  return options;
}

// --text and --text_pair repeat only for 'encode' (one input each); elsewhere a second one would
// silently replace the first.
absl::Status CheckSingle(const CommandLine& line, const std::string& name) {
  const size_t count = line.GetAll(name).size();
  if (count <= 1) return absl::OkStatus();
  return UsageError(absl::StrCat("'", line.command, "' takes one --", name, ", got ", count,
                                 "; only 'encode' takes several (one input each)"));
}

absl::StatusOr<std::string> RequiredFlag(const CommandLine& line, const std::string& name) {
  if (!line.Has(name)) {
    return UsageError(absl::StrCat("'", line.command, "' needs --", name));
  }
  if (absl::Status status = CheckSingle(line, name); !status.ok()) return status;
  return line.Get(name);
}

// The value of an optional single-valued flag, or nullopt when absent.
absl::StatusOr<std::optional<std::string>> OptionalFlag(const CommandLine& line,
                                                        const std::string& name) {
  if (!line.Has(name)) return std::optional<std::string>();
  if (absl::Status status = CheckSingle(line, name); !status.ok()) return status;
  return std::optional<std::string>(line.Get(name));
}

json OffsetsToJson(const google::protobuf::RepeatedPtrField<v1::Offset>& offsets) {
  json out = json::array();
  for (const v1::Offset& offset : offsets) out.push_back({offset.start(), offset.end()});
  return out;
}

json TokensToJson(const v1::Tokens& tokens) {
  return {
      {"tokens", std::vector<std::string>(tokens.tokens().begin(), tokens.tokens().end())},
      {"input_ids", std::vector<int64_t>(tokens.input_ids().begin(), tokens.input_ids().end())},
      {"token_type_ids",
       std::vector<int64_t>(tokens.token_type_ids().begin(), tokens.token_type_ids().end())},
      {"special_tokens_mask", std::vector<int32_t>(tokens.special_tokens_mask().begin(),
                                                   tokens.special_tokens_mask().end())},
      {"offsets", OffsetsToJson(tokens.offsets())},
      {"byte_offsets", OffsetsToJson(tokens.byte_offsets())},
      {"word_ids", std::vector<int64_t>(tokens.word_ids().begin(), tokens.word_ids().end())},
      {"sequence_ids",
       std::vector<int32_t>(tokens.sequence_ids().begin(), tokens.sequence_ids().end())},
  };
}

json ModelInfoToJson(const v1::ModelInfo& info) {
  return {
      {"name", info.name()},
      {"architecture", info.architecture()},
      {"architectures",
       std::vector<std::string>(info.architectures().begin(), info.architectures().end())},
      {"num_hidden_layers", info.num_hidden_layers()},
      {"num_attention_heads", info.num_attention_heads()},
      {"num_key_value_heads", info.num_key_value_heads()},
      {"hidden_size", info.hidden_size()},
      {"head_dim", info.head_dim()},
      {"vocab_size", info.vocab_size()},
      {"max_position_embeddings", info.max_position_embeddings()},
      {"tokenizer_kind", info.tokenizer_kind()},
      {"has_classifier", info.has_classifier()},
      {"labels", std::vector<std::string>(info.labels().begin(), info.labels().end())},
      {"weights_checksum", info.weights_checksum()},
      {"is_causal", info.is_causal()},
      {"is_encoder_decoder", info.is_encoder_decoder()},
      {"decoder_layers", info.decoder_layers()},
      {"decoder_attention_heads", info.decoder_attention_heads()},
  };
}

// Values of dimension `dim` onwards starting at flat index `offset`, as nested arrays.
template <typename T>
json Nest(const std::vector<T>& values, const std::vector<int64_t>& shape, size_t dim,
          int64_t offset) {
  if (dim == shape.size()) return values[offset];
  int64_t stride = 1;
  for (size_t i = dim + 1; i < shape.size(); ++i) stride *= shape[i];
  json out = json::array();
  for (int64_t i = 0; i < shape[dim]; ++i)
    out.push_back(Nest(values, shape, dim + 1, offset + i * stride));
  return out;
}

// Renders tensors inline or, with --npy_dir, as .npy files named after their role.
class TensorWriter {
 public:
  explicit TensorWriter(std::string npy_dir) : npy_dir_(std::move(npy_dir)) {}

  // Renders `tensor` into object[key]; with --npy_dir its file is named file_prefix + key.
  absl::Status AddTo(json& object, const std::string& key, const DecodedTensor& tensor,
                     const std::string& file_prefix = "") const {
    absl::StatusOr<json> rendered = Render(tensor, file_prefix + key);
    if (!rendered.ok()) return rendered.status();
    object[key] = *std::move(rendered);
    return absl::OkStatus();
  }

  // The same for a tensor the answer may leave out: nothing is added when it is absent.
  absl::Status AddTo(json& object, const std::string& key,
                     const std::optional<DecodedTensor>& tensor,
                     const std::string& file_prefix = "") const {
    return tensor.has_value() ? AddTo(object, key, *tensor, file_prefix) : absl::OkStatus();
  }

 private:
  absl::StatusOr<json> Render(const DecodedTensor& tensor, const std::string& name) const {
    json out = {{"shape", tensor.shape},
                {"dim_names", tensor.dim_names},
                {"dtype", DTypeName(tensor.wire_dtype)}};
    if (npy_dir_.empty()) {
      out["values"] = tensor.is_int() ? Nest(tensor.int_values, tensor.shape, 0, 0)
                                      : Nest(tensor.values, tensor.shape, 0, 0);
      return out;
    }
    const std::string path = (std::filesystem::path(npy_dir_) / (name + ".npy")).string();
    absl::Status status = WriteNpy(tensor, path);
    if (!status.ok()) return status;
    out["npy"] = path;
    return out;
  }

  std::string npy_dir_;
};

absl::StatusOr<json> AttentionToJson(const AttentionResult& result, const TensorWriter& writer) {
  json out = {{"model", result.model},
              {"tokens", TokensToJson(result.tokens)},
              {"layers", result.layers},
              {"heads", result.heads},
              {"query_start", result.query_start},
              {"key_start", result.key_start}};
  absl::Status status = writer.AddTo(out, "attentions", result.attentions);
  if (status.ok()) status = writer.AddTo(out, "scores", result.scores);
  if (status.ok()) status = writer.AddTo(out, "top_k_indices", result.top_k_indices);
  if (status.ok()) status = writer.AddTo(out, "rollout", result.rollout);
  if (status.ok() && result.decoder.has_value()) {
    const AttentionResult::Decoder& decoder = *result.decoder;
    out["decoder_tokens"] = TokensToJson(decoder.tokens);
    out["decoder_labels"] = TokensToJson(decoder.labels);
    out["decoder_layers"] = decoder.layers;
    out["decoder_heads"] = decoder.heads;
    out["decoder_query_start"] = decoder.query_start;
    out["decoder_key_start"] = decoder.key_start;
    status = writer.AddTo(out, "decoder_attentions", decoder.attentions);
    if (status.ok()) status = writer.AddTo(out, "decoder_top_k_indices", decoder.top_k_indices);
    if (status.ok()) status = writer.AddTo(out, "cross_attentions", decoder.cross_attentions);
    if (status.ok()) {
      status = writer.AddTo(out, "cross_top_k_indices", decoder.cross_top_k_indices);
    }
  }
  if (!status.ok()) return status;
  return out;
}

// --model, --text (required), --text_pair and the tokenization flags, into any request with those
// fields (TokenizeRequest, GetAttentionRequest, AttributeRequest).
template <typename Request>
absl::Status SetTextInput(const CommandLine& line, Request* request) {
  request->set_model(line.Get("model"));
  absl::StatusOr<std::string> text = RequiredFlag(line, "text");
  if (!text.ok()) return text.status();
  request->set_text(*text);
  absl::StatusOr<std::optional<std::string>> text_pair = OptionalFlag(line, "text_pair");
  if (!text_pair.ok()) return text_pair.status();
  if (text_pair->has_value()) request->set_text_pair(**text_pair);
  absl::StatusOr<v1::TokenizationOptions> tokenization = ParseTokenization(line);
  if (!tokenization.ok()) return tokenization.status();
  *request->mutable_tokenization() = *tokenization;
  return absl::OkStatus();
}

absl::StatusOr<v1::GetAttentionRequest> AttentionRequest(const CommandLine& line) {
  v1::GetAttentionRequest request;
  if (absl::Status status = SetTextInput(line, &request); !status.ok()) return status;
  if (absl::Status status = ParseSelection(line, request.mutable_layers(), request.mutable_heads());
      !status.ok()) {
    return status;
  }
  absl::StatusOr<v1::HeadAggregation> aggregation = ParseAggregation(line.Get("aggregate"));
  if (!aggregation.ok()) return aggregation.status();
  request.set_head_aggregation(*aggregation);
  request.set_rollout(line.Has("rollout"));
  request.set_include_scores(line.Has("scores"));
  absl::StatusOr<v1::DType> dtype = ParseDType(line.Get("dtype"));
  if (!dtype.ok()) return dtype.status();
  request.set_dtype(*dtype);
  if (line.Has("top_k")) {
    absl::StatusOr<int32_t> top_k = ParseInt32("top_k", line.Get("top_k"));
    if (!top_k.ok()) return top_k.status();
    request.set_top_k(*top_k);
  }
  for (const auto& [flag, out] : {std::pair{"window", request.mutable_window()},
                                  std::pair{"decoder_window", request.mutable_decoder_window()}}) {
    if (!line.Has(flag)) continue;
    absl::StatusOr<std::vector<int32_t>> window = ParseIntList(flag, line.Get(flag), kWindowForm);
    if (!window.ok()) return window.status();
    if (window->size() != 4) {
      return UsageError(
          absl::StrCat("--", flag, ": got ", window->size(), " values; pass ", kWindowForm));
    }
    out->set_query_start((*window)[0]);
    out->set_query_end((*window)[1]);
    out->set_key_start((*window)[2]);
    out->set_key_end((*window)[3]);
  }
  absl::StatusOr<std::optional<std::string>> decoder_text = OptionalFlag(line, "decoder_text");
  if (!decoder_text.ok()) return decoder_text.status();
  if (decoder_text->has_value()) request.set_decoder_text(**decoder_text);
  return request;
}

// What a command prints on stdout: JSON, or text (--format text).
struct Output {
  json value;
  std::optional<std::string> text;
};

Output JsonOutput(json value) { return {std::move(value), std::nullopt}; }

// --format and --top: nullopt for JSON output, otherwise how many tokens to show per query token.
absl::StatusOr<std::optional<int>> TextRows(const CommandLine& line) {
  const std::string format = line.Get("format", "json");
  if (format == "json") {
    if (line.Has("top")) {
      return UsageError("--top applies to --format text; add --format text or leave --top out");
    }
    return std::optional<int>();
  }
  if (format != "text") {
    return UsageError(absl::StrCat("--format: '", format, "' is not one of json, text"));
  }
  if (line.Has("npy_dir")) {
    return UsageError("--npy_dir names its files in the JSON output; leave out --format text");
  }
  if (line.Has("scores")) {
    return UsageError("--format text shows attention weights only; use JSON for --scores");
  }
  if (!line.Has("top")) return std::optional<int>(3);
  absl::StatusOr<int32_t> top = ParseInt32("top", line.Get("top"));
  if (!top.ok()) return top.status();
  if (*top < 1) {
    return UsageError(absl::StrCat("--top: expected at least 1 token per row, got ", *top));
  }
  return std::optional<int>(*top);
}

absl::StatusOr<Output> RunHeatmap(const CommandLine& line, Client& client,
                                  const CallOptions& call) {
  absl::StatusOr<std::string> path = RequiredFlag(line, "out");
  if (!path.ok()) return path.status();
  absl::StatusOr<render::ImageFormat> format = render::ImageFormatFromPath(*path);
  if (!format.ok()) return UsageError(absl::StrCat("--out: ", format.status().message()));
  std::optional<double> vmax;
  if (line.Has("vmax")) {
    double value;
    if (!absl::SimpleAtod(line.Get("vmax"), &value) || !(value > 0) || !std::isfinite(value)) {
      return UsageError(absl::StrCat("--vmax: expected a positive number such as 1, got '",
                                     line.Get("vmax"), "'"));
    }
    vmax = value;
  }
  absl::StatusOr<v1::GetAttentionRequest> request = AttentionRequest(line);
  if (!request.ok()) return request.status();
  // Streamed, so that a large selection meets no response size cap; the picture's own size limit
  // (kMaxImageSide) comes first.
  absl::StatusOr<AttentionResult> result = client.StreamAttention(*request, call);
  if (!result.ok()) return result.status();
  absl::StatusOr<render::Heatmap> heatmap = AttentionHeatmap(*result, request->head_aggregation());
  if (!heatmap.ok()) return heatmap.status();
  heatmap->vmax = vmax;
  absl::StatusOr<render::RenderedHeatmap> rendered = render::WriteHeatmap(*heatmap, *path);
  if (!rendered.ok()) return rendered.status();
  if (!rendered->texts_with_unknown_glyphs.empty()) {
    std::cerr << "attnscope: warning: no installed font has some characters of '"
              << absl::StrJoin(rendered->texts_with_unknown_glyphs, "', '")
              << "'; they are drawn as boxes in " << *path
              << " (install fonts-noto-cjk: scripts/install-deps.sh)\n";
  }
  const render::HeatmapLayout& layout = rendered->layout;
  return JsonOutput({{"path", *path},
                     {"format", *format == render::ImageFormat::kPng ? "png" : "svg"},
                     {"width", layout.width},
                     {"height", layout.height},
                     {"panels", heatmap->panels.size()},
                     {"vmax", layout.vmax},
                     {"layers", result->layers},
                     {"heads", result->heads}});
}

// What one bench caller saw of one call.
struct BenchCall {
  int rpc = 0;
  absl::StatusCode code = absl::StatusCode::kOk;
  double milliseconds = 0;
};

// `attnscope bench`: load from --clients threads sharing the client's channel (HTTP/2 carries
// their calls side by side), the measure text-embeddings-inference's and Triton's load tools give:
// throughput, latency percentiles and errors by code.
absl::StatusOr<Output> RunBench(const CommandLine& line, Client& client, const CallOptions& call) {
  int64_t clients = 8;
  if (line.Has("clients")) {
    absl::StatusOr<int64_t> parsed = ParseInt("clients", line.Get("clients"));
    if (!parsed.ok()) return parsed.status();
    if (*parsed < 1 || *parsed > 4096) {
      return UsageError(absl::StrCat("--clients: expected 1 to 4096 callers, got ", *parsed));
    }
    clients = *parsed;
  }
  int64_t requests = 0;
  if (line.Has("requests")) {
    absl::StatusOr<int64_t> parsed = ParseInt("requests", line.Get("requests"));
    if (!parsed.ok()) return parsed.status();
    if (*parsed < 1)
      return UsageError(absl::StrCat("--requests: expected 1 or more, got ", *parsed));
    requests = *parsed;
  }
  absl::Duration duration = absl::Seconds(30);
  if (line.Has("duration")) {
    absl::StatusOr<absl::Duration> parsed = ParseTimeout(line.Get("duration"), "duration");
    if (!parsed.ok()) return parsed.status();
    duration = *parsed;
  }
  static constexpr const char* kRpcs[] = {"GetAttention", "Encode", "CrossAttention"};
  const std::string rpc = line.Get("rpc", "mixed");
  std::vector<int> rpcs;
  if (rpc == "mixed") {
    rpcs = {0, 1, 2};
  } else if (rpc == "attention") {
    rpcs = {0};
  } else if (rpc == "encode") {
    rpcs = {1};
  } else if (rpc == "cross") {
    rpcs = {2};
  } else {
    return UsageError(
        absl::StrCat("--rpc: expected mixed, attention, encode or cross, got '", rpc, "'"));
  }
  const std::string text = line.Get("text", "Tôi yêu Việt Nam quá");
  v1::GetAttentionRequest attention;
  attention.set_model(line.Get("model"));
  attention.set_text(text);
  v1::EncodeRequest encode;
  encode.set_model(line.Get("model"));
  encode.add_inputs()->set_text(text);
  v1::CrossAttentionRequest cross;
  cross.set_model(line.Get("model"));
  cross.set_query(line.Get("query", "Việt Nam"));
  std::vector<std::string> documents = line.GetAll("document");
  if (documents.empty()) documents = {text};
  for (const std::string& document : documents) cross.add_documents(document);

  std::atomic<int64_t> issued{0};
  const absl::Time start = absl::Now();
  const absl::Time end = start + duration;
  std::vector<std::vector<BenchCall>> seen(clients);
  std::vector<std::thread> threads;
  for (int64_t i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      for (;;) {
        const int64_t index = issued.fetch_add(1);
        if (requests > 0 ? index >= requests : absl::Now() >= end) return;
        BenchCall done;
        done.rpc = rpcs[index % rpcs.size()];
        const absl::Time begin = absl::Now();
        absl::Status status;
        if (done.rpc == 0) {
          status = client.GetAttention(attention, call).status();
        } else if (done.rpc == 1) {
          status = client.Encode(encode, call).status();
        } else {
          status = client.CrossAttention(cross, call).status();
        }
        done.milliseconds = absl::ToDoubleMilliseconds(absl::Now() - begin);
        done.code = status.code();
        seen[i].push_back(done);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);

  std::vector<double> latencies;
  std::map<std::string, int64_t> errors;
  std::map<std::string, int64_t> calls;
  for (const std::vector<BenchCall>& caller : seen) {
    for (const BenchCall& done : caller) {
      latencies.push_back(done.milliseconds);
      ++calls[kRpcs[done.rpc]];
      if (done.code != absl::StatusCode::kOk) ++errors[absl::StatusCodeToString(done.code)];
    }
  }
  std::sort(latencies.begin(), latencies.end());
  // Nearest-rank percentiles.
  auto percentile = [&latencies](double p) {
    if (latencies.empty()) return 0.0;
    const size_t rank = static_cast<size_t>(std::ceil(p / 100 * latencies.size()));
    return latencies[std::max<size_t>(rank, 1) - 1];
  };
  return JsonOutput({{"clients", clients},
                     {"rpc", rpc},
                     {"seconds", seconds},
                     {"calls", latencies.size()},
                     {"calls_per_second", latencies.size() / seconds},
                     {"calls_by_rpc", calls},
                     {"latency_ms",
                      {{"p50", percentile(50)},
                       {"p90", percentile(90)},
                       {"p99", percentile(99)},
                       {"max", latencies.empty() ? 0.0 : latencies.back()}}},
                     {"errors", errors}});
}

absl::StatusOr<v1::AttributeRequest> AttributeRequest(const CommandLine& line) {
  v1::AttributeRequest request;
  if (absl::Status status = SetTextInput(line, &request); !status.ok()) return status;
  if (line.Has("method")) {
    const std::string methods = line.Get("method");
    for (absl::string_view method : absl::StrSplit(methods, ',')) {
      if (method == "occlusion") {
        request.add_methods(v1::ATTRIBUTION_METHOD_OCCLUSION);
      } else if (method == "gradient_x_input") {
        request.add_methods(v1::ATTRIBUTION_METHOD_GRADIENT_X_INPUT);
      } else if (method == "integrated_gradients") {
        request.add_methods(v1::ATTRIBUTION_METHOD_INTEGRATED_GRADIENTS);
      } else {
        return UsageError(absl::StrCat("--method: '", method, "' in '", methods,
                                       "' is not one of occlusion, gradient_x_input, "
                                       "integrated_gradients"));
      }
    }
  }
  for (const auto& [flag, setter] :
       {std::pair<const char*, void (v1::AttributeRequest::*)(int32_t)>{
            "steps", &v1::AttributeRequest::set_integrated_gradients_steps},
        std::pair<const char*, void (v1::AttributeRequest::*)(int32_t)>{
            "target", &v1::AttributeRequest::set_target}}) {
    if (!line.Has(flag)) continue;
    absl::StatusOr<int32_t> value = ParseInt32(flag, line.Get(flag));
    if (!value.ok()) return value.status();
    (request.*setter)(*value);
  }
  absl::StatusOr<v1::OcclusionToken> occlusion_token = ParseChoice<v1::OcclusionToken>(
      line, "occlusion_token", "mask",
      {{"mask", v1::OCCLUSION_TOKEN_MASK}, {"unk", v1::OCCLUSION_TOKEN_UNK}});
  if (!occlusion_token.ok()) return occlusion_token.status();
  request.set_occlusion_token(*occlusion_token);
  absl::StatusOr<v1::AttributionBaseline> baseline = ParseChoice<v1::AttributionBaseline>(
      line, "baseline", "pad",
      {{"pad", v1::ATTRIBUTION_BASELINE_PAD}, {"zero", v1::ATTRIBUTION_BASELINE_ZERO}});
  if (!baseline.ok()) return baseline.status();
  request.set_baseline(*baseline);
  return request;
}

absl::StatusOr<Output> RunAttribute(const CommandLine& line, Client& client,
                                    const CallOptions& call) {
  absl::StatusOr<std::string> format =
      ParseChoice<std::string>(line, "format", "text", {{"text", "text"}, {"json", "json"}});
  if (!format.ok()) return format.status();
  absl::StatusOr<v1::AttributeRequest> request = AttributeRequest(line);
  if (!request.ok()) return request.status();
  absl::StatusOr<v1::AttributeResponse> response = client.Attribute(*request, call);
  if (!response.ok()) return response.status();
  if (*format == "text") {
    absl::StatusOr<std::string> text = AttributionText(*response);
    if (!text.ok()) return text.status();
    return Output{json(), *std::move(text)};
  }
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(*response, &out, options).ok()) {
    return absl::InternalError("attribute: the answer could not be printed as JSON");
  }
  return JsonOutput(json::parse(out));
}

absl::StatusOr<v1::GenerateRequest> GenerateRequest(const CommandLine& line) {
  v1::GenerateRequest request;
  request.set_model(line.Get("model"));
  request.set_prompt(line.Get("prompt"));
  absl::StatusOr<v1::DecodingMethod> method =
      ParseChoice<v1::DecodingMethod>(line, "method", "greedy",
                                      {{"greedy", v1::DECODING_METHOD_GREEDY},
                                       {"beam_search", v1::DECODING_METHOD_BEAM_SEARCH},
                                       {"sampling", v1::DECODING_METHOD_SAMPLING}});
  if (!method.ok()) return method.status();
  request.set_method(*method);
  for (const auto& [flag, setter] :
       {std::pair<const char*, void (v1::GenerateRequest::*)(int32_t)>{
            "max_new_tokens", &v1::GenerateRequest::set_max_new_tokens},
        std::pair<const char*, void (v1::GenerateRequest::*)(int32_t)>{
            "num_beams", &v1::GenerateRequest::set_num_beams},
        std::pair<const char*, void (v1::GenerateRequest::*)(int32_t)>{
            "top_k", &v1::GenerateRequest::set_top_k}}) {
    if (!line.Has(flag)) continue;
    absl::StatusOr<int32_t> value = ParseInt32(flag, line.Get(flag));
    if (!value.ok()) return value.status();
    (request.*setter)(*value);
  }
  for (const auto& [flag, setter] :
       {std::pair<const char*, void (v1::GenerateRequest::*)(double)>{
            "length_penalty", &v1::GenerateRequest::set_length_penalty},
        std::pair<const char*, void (v1::GenerateRequest::*)(double)>{
            "temperature", &v1::GenerateRequest::set_temperature},
        std::pair<const char*, void (v1::GenerateRequest::*)(double)>{
            "top_p", &v1::GenerateRequest::set_top_p}}) {
    if (!line.Has(flag)) continue;
    double value;
    if (!absl::SimpleAtod(line.Get(flag), &value)) {
      return UsageError(absl::StrCat("--", flag, ": '", line.Get(flag), "' is not a number"));
    }
    (request.*setter)(value);
  }
  if (line.Has("seed")) {
    uint64_t seed;
    if (!absl::SimpleAtoi(line.Get("seed"), &seed)) {
      return UsageError(absl::StrCat("--seed: '", line.Get("seed"),
                                     "' is not an integer in [0, 18446744073709551615]"));
    }
    request.set_seed(seed);
  }
  request.set_ignore_eos(line.Has("ignore_eos"));
  request.set_output_attentions(line.Has("attentions"));
  if (absl::Status status = ParseSelection(line, request.mutable_layers(), request.mutable_heads());
      !status.ok()) {
    return status;
  }
  absl::StatusOr<v1::HeadAggregation> aggregation = ParseAggregation(line.Get("aggregate"));
  if (!aggregation.ok()) return aggregation.status();
  request.set_head_aggregation(*aggregation);
  absl::StatusOr<v1::DType> dtype = ParseDType(line.Get("dtype"));
  if (!dtype.ok()) return dtype.status();
  request.set_dtype(*dtype);
  return request;
}

absl::StatusOr<Output> RunGenerate(const CommandLine& line, Client& client, const CallOptions& call,
                                   const TensorWriter& writer) {
  absl::StatusOr<std::string> format =
      ParseChoice<std::string>(line, "format", "text", {{"text", "text"}, {"json", "json"}});
  if (!format.ok()) return format.status();
  if (*format == "text" && line.Has("attentions")) {
    return UsageError("--attentions: the text output prints no attention; add --format json");
  }
  absl::StatusOr<v1::GenerateRequest> request = GenerateRequest(line);
  if (!request.ok()) return request.status();
  std::function<void(const GeneratedTokenResult&)> on_token;
  std::function<void(const v1::GenerateHeader&)> on_header;
  bool printed = false;
  // A decoder-only model continues the prompt; an encoder-decoder's output (a translation) goes
  // on a line of its own below its source.
  std::string prompt_end;
  if (*format == "text") {
    on_header = [&](const v1::GenerateHeader& header) {
      if (header.encoder_decoder()) prompt_end = "\n";
    };
    // The text is printed as it is written, after the prompt, so the output reads on.
    on_token = [&](const GeneratedTokenResult& token) {
      if (!printed) std::cout << request->prompt() << prompt_end;
      printed = true;
      std::cout << token.token.text() << std::flush;
    };
  }
  absl::StatusOr<GenerateResult> result = client.Generate(*request, on_token, call, on_header);
  if (printed && !result.ok()) std::cout << "\n";
  if (!result.ok()) return result.status();
  const v1::GenerateDone& done = result->done;
  if (*format == "text") {
    return Output{json(), absl::StrCat(printed ? "" : request->prompt() + prompt_end, "\n[",
                                       done.ids_size(), " tokens, ",
                                       done.finish_reason() == v1::FINISH_REASON_EOS
                                           ? "stopped at the end-of-text token"
                                           : "stopped at --max_new_tokens",
                                       ", score ", done.score(), "]\n")};
  }
  json tokens = json::array();
  for (const GeneratedTokenResult& token : result->tokens) {
    json item = {{"index", token.token.index()}, {"position", token.token.position()},
                 {"id", token.token.id()},       {"token", token.token.token()},
                 {"text", token.token.text()},   {"logprob", token.token.logprob()}};
    if (absl::Status status = writer.AddTo(item, "attention", token.attention,
                                           absl::StrCat("token", token.token.index(), "_"));
        !status.ok()) {
      return status;
    }
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

absl::StatusOr<Output> RunCommand(const CommandLine& line, Client& client, const CallOptions& call,
                                  const TensorWriter& writer) {
  const std::string& command = line.command;
  if (command == "models") {
    absl::StatusOr<std::vector<v1::ModelInfo>> models = client.ListModels(call);
    if (!models.ok()) return models.status();
    json out = {{"models", json::array()}};
    for (const v1::ModelInfo& info : *models) out["models"].push_back(ModelInfoToJson(info));
    return JsonOutput(std::move(out));
  }
  if (command == "info") {
    absl::StatusOr<v1::ModelInfo> info = client.GetModelInfo(line.Get("model"), call);
    if (!info.ok()) return info.status();
    return JsonOutput(ModelInfoToJson(*info));
  }
  if (command == "tokenize") {
    v1::TokenizeRequest request;
    if (absl::Status status = SetTextInput(line, &request); !status.ok()) return status;
    absl::StatusOr<v1::TokenizeResponse> response = client.Tokenize(request, call);
    if (!response.ok()) return response.status();
    return JsonOutput(
        json{{"model", response->model()}, {"tokens", TokensToJson(response->tokens())}});
  }
  if (command == "attention" || command == "stream") {
    absl::StatusOr<std::optional<int>> text_rows = TextRows(line);
    if (!text_rows.ok()) return text_rows.status();
    absl::StatusOr<v1::GetAttentionRequest> request = AttentionRequest(line);
    if (!request.ok()) return request.status();
    absl::StatusOr<AttentionResult> result = command == "attention"
                                                 ? client.GetAttention(*request, call)
                                                 : client.StreamAttention(*request, call);
    if (!result.ok()) return result.status();
    if (text_rows->has_value()) {
      absl::StatusOr<std::string> text =
          AttentionText(*result, request->head_aggregation(), **text_rows);
      if (!text.ok()) return text.status();
      return Output{json(), *std::move(text)};
    }
    absl::StatusOr<json> out = AttentionToJson(*result, writer);
    if (!out.ok()) return out.status();
    return JsonOutput(*std::move(out));
  }
  if (command == "encode") {
    v1::EncodeRequest request;
    request.set_model(line.Get("model"));
    const std::vector<std::string> texts = line.GetAll("text");
    const std::vector<std::string> pairs = line.GetAll("text_pair");
    if (texts.empty()) return UsageError("'encode' needs --text (repeatable)");
    if (!pairs.empty() && pairs.size() != texts.size()) {
      return UsageError(absl::StrCat("'encode' got ", texts.size(), " --text but ", pairs.size(),
                                     " --text_pair; give one --text_pair per --text or none"));
    }
    for (size_t i = 0; i < texts.size(); ++i) {
      v1::EncodeInput* input = request.add_inputs();
      input->set_text(texts[i]);
      if (!pairs.empty()) input->set_text_pair(pairs[i]);
    }
    absl::StatusOr<v1::TokenizationOptions> tokenization = ParseTokenization(line);
    if (!tokenization.ok()) return tokenization.status();
    *request.mutable_tokenization() = *tokenization;
    request.set_output_hidden_states(line.Has("hidden_states"));
    absl::StatusOr<v1::Pooling> pooling = ParseChoice<v1::Pooling>(
        line, "pooling", "none",
        {{"none", v1::POOLING_NONE}, {"cls", v1::POOLING_CLS}, {"mean", v1::POOLING_MEAN}});
    if (!pooling.ok()) return pooling.status();
    request.set_pooling(*pooling);
    request.set_normalize(line.Has("normalize"));
    absl::StatusOr<v1::DType> dtype = ParseDType(line.Get("dtype"));
    if (!dtype.ok()) return dtype.status();
    request.set_dtype(*dtype);
    absl::StatusOr<EncodeResponse> response = client.Encode(request, call);
    if (!response.ok()) return response.status();
    json out = {{"model", response->model}, {"results", json::array()}};
    for (size_t i = 0; i < response->results.size(); ++i) {
      const EncodeResult& result = response->results[i];
      json item = {{"tokens", TokensToJson(result.tokens)}};
      const std::string prefix = absl::StrCat("input", i, "_");
      absl::Status status =
          writer.AddTo(item, "last_hidden_state", result.last_hidden_state, prefix);
      if (status.ok()) status = writer.AddTo(item, "hidden_states", result.hidden_states, prefix);
      if (status.ok()) status = writer.AddTo(item, "pooled", result.pooled, prefix);
      if (!status.ok()) return status;
      out["results"].push_back(std::move(item));
    }
    return JsonOutput(std::move(out));
  }
  if (command == "cross") {
    absl::StatusOr<std::optional<int>> text_rows = TextRows(line);
    if (!text_rows.ok()) return text_rows.status();
    v1::CrossAttentionRequest request;
    request.set_model(line.Get("model"));
    absl::StatusOr<std::string> query = RequiredFlag(line, "query");
    if (!query.ok()) return query.status();
    request.set_query(*query);
    for (const std::string& document : line.GetAll("document")) request.add_documents(document);
    if (request.documents().empty()) {
      return UsageError("'cross' needs --document (repeatable)");
    }
    absl::StatusOr<v1::TokenizationOptions> tokenization = ParseTokenization(line);
    if (!tokenization.ok()) return tokenization.status();
    // Only send tokenization when asked, so that the server's documented default (longest_first at
    // the model's maximum) applies otherwise.
    if (line.Has("truncation") || line.Has("max_length") || line.Has("skip_special_tokens")) {
      *request.mutable_tokenization() = *tokenization;
    }
    if (absl::Status status =
            ParseSelection(line, request.mutable_layers(), request.mutable_heads());
        !status.ok()) {
      return status;
    }
    absl::StatusOr<v1::HeadAggregation> aggregation = ParseAggregation(line.Get("aggregate"));
    if (!aggregation.ok()) return aggregation.status();
    request.set_head_aggregation(*aggregation);
    request.set_include_document_to_query(line.Has("doc_to_query"));
    absl::StatusOr<v1::DType> dtype = ParseDType(line.Get("dtype"));
    if (!dtype.ok()) return dtype.status();
    request.set_dtype(*dtype);
    absl::StatusOr<CrossAttentionResult> response = client.CrossAttention(request, call);
    if (!response.ok()) return response.status();
    if (text_rows->has_value()) {
      absl::StatusOr<std::string> text =
          CrossAttentionText(*response, request.head_aggregation(), **text_rows);
      if (!text.ok()) return text.status();
      return Output{json(), *std::move(text)};
    }
    json out = {{"model", response->model},
                {"layers", response->layers},
                {"heads", response->heads},
                {"documents", json::array()}};
    for (size_t i = 0; i < response->documents.size(); ++i) {
      const DocumentAttentionResult& document = response->documents[i];
      json item = {{"tokens", TokensToJson(document.tokens)},
                   {"query_positions", document.query_positions},
                   {"document_positions", document.document_positions},
                   {"logits", document.logits}};
      if (document.relevance_score.has_value()) item["relevance_score"] = *document.relevance_score;
      const std::string prefix = absl::StrCat("document", i, "_");
      absl::Status status =
          writer.AddTo(item, "query_to_document", document.query_to_document, prefix);
      if (status.ok()) {
        status = writer.AddTo(item, "document_to_query", document.document_to_query, prefix);
      }
      if (!status.ok()) return status;
      out["documents"].push_back(std::move(item));
    }
    return JsonOutput(std::move(out));
  }
  if (command == "heatmap") return RunHeatmap(line, client, call);
  if (command == "attribute") return RunAttribute(line, client, call);
  if (command == "generate") return RunGenerate(line, client, call, writer);
  if (command == "bench") return RunBench(line, client, call);
  if (command == "health") {
    absl::StatusOr<ServingStatus> status = client.Health(line.Get("service"), call);
    if (!status.ok()) return status.status();
    return JsonOutput(
        json{{"status", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(*status)}});
  }
  return UsageError(absl::StrCat("unknown command '", command, "'"));
}

// TLS credentials and the API key of the connection flags (and ATTNSCOPE_API_KEY).
absl::Status ApplySecurityFlags(const CommandLine& line, ClientOptions& options) {
  const std::string ca = line.Get("tls_ca_file");
  const std::string cert = line.Get("tls_cert_file");
  const std::string key = line.Get("tls_key_file");
  if (!ca.empty() || !cert.empty() || !key.empty()) {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        TlsCredentials(ca, cert, key);
    if (!credentials.ok()) return UsageError(credentials.status().message());
    options.credentials = *std::move(credentials);
  }
  if (line.Has("api_key_file")) {
    std::ifstream file(line.Get("api_key_file"));
    std::string first;
    if (!file || !std::getline(file, first) || absl::StripAsciiWhitespace(first).empty()) {
      return UsageError(absl::StrCat("--api_key_file '", line.Get("api_key_file"),
                                     "': expected a readable file with the key on its first "
                                     "line, got none"));
    }
    options.api_key = std::string(absl::StripAsciiWhitespace(first));
  } else if (const char* key_env = std::getenv("ATTNSCOPE_API_KEY"); key_env != nullptr) {
    options.api_key = std::string(absl::StripAsciiWhitespace(key_env));
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  bool help = argc >= 2 && std::strcmp(argv[1], "help") == 0;
  for (int i = 1; i < argc; ++i) {
    help = help || std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0;
  }
  if (help) {
    std::cout << kUsage;
    return 0;
  }
  absl::StatusOr<CommandLine> line = ParseCommandLine(argc, argv);
  if (line.ok()) {
    if (absl::Status status = CheckFlagsApply(*line); !status.ok()) line = status;
  }
  ClientOptions options;
  CallOptions call;
  if (line.ok()) {
    options.target = line->Get("server", options.target);
    if (line->Has("max_response_bytes")) {
      absl::StatusOr<int64_t> bytes =
          ParseInt("max_response_bytes", line->Get("max_response_bytes"));
      if (bytes.ok() && *bytes < 1) {
        bytes =
            UsageError(absl::StrCat("--max_response_bytes: expected a positive size in bytes, "
                                    "got ",
                                    *bytes, "; match the server's --max_response_bytes"));
      }
      if (!bytes.ok()) {
        line = bytes.status();
      } else {
        options.max_response_bytes = *bytes;
      }
    }
  }
  if (line.ok()) {
    if (absl::Status status = ApplySecurityFlags(*line, options); !status.ok()) line = status;
  }
  if (line.ok() && line->Has("timeout")) {
    absl::StatusOr<absl::Duration> timeout = ParseTimeout(line->Get("timeout"));
    if (!timeout.ok()) {
      line = timeout.status();
    } else {
      call.timeout = *timeout;
    }
  }
  if (!line.ok()) {
    std::cerr << "attnscope: " << line.status().message();
    // The whole usage only when the command itself is missing or unknown; otherwise one line.
    const bool no_command = argc < 2 || !CommandFlags().count(argv[1]);
    if (no_command) {
      std::cerr << "\n\n" << kUsage;
    } else {
      std::cerr << " (attnscope --help lists the flags)\n";
    }
    return 2;
  }
  const std::string npy_dir = line->Get("npy_dir");
  if (!npy_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(npy_dir, error);
    if (error) {
      std::cerr << "attnscope: cannot create --npy_dir '" << npy_dir << "': " << error.message()
                << "\n";
      return 2;
    }
  }
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  if (!client.ok()) {
    std::cerr << "attnscope: " << client.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<Output> out = RunCommand(*line, **client, call, TensorWriter(npy_dir));
  if (!out.ok() && IsUsageError(out.status())) {
    std::cerr << "attnscope: " << out.status().message() << " (attnscope --help lists the flags)\n";
    return 2;
  }
  if (!out.ok()) {
    std::cerr << "attnscope: " << absl::StatusCodeToString(out.status().code()) << ": "
              << out.status().message();
    if (out.status().code() == absl::StatusCode::kDeadlineExceeded) {
      std::cerr << " (the call took longer than --timeout="
                << absl::FormatDuration(call.timeout.value_or(options.default_timeout))
                << "; raise --timeout)";
    }
    std::cerr << "\n";
    return 1;
  }
  if (out->text.has_value()) {
    std::cout << *out->text;
    return 0;
  }
  // Token strings come from the server; a stray invalid UTF-8 byte must not abort the output.
  std::cout << out->value.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  if (line->command == "health" && out->value["status"] != "SERVING") return 1;
  return 0;
}

}  // namespace
}  // namespace attnscope

int main(int argc, char** argv) { return attnscope::Main(argc, argv); }

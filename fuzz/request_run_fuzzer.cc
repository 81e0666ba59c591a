// The request layer with real models: arbitrary bytes decoded as one attnscope.v1 request,
// converted with ToQuery as the gRPC front end does, and run by a RequestRunner holding a tiny
// model of each architecture the server serves (BERT, a BERT cross-encoder, Llama, Marian, BART, T5
// in both of its layouts), forward passes, attributions and generation included. Every answer must
// be OK or one of the contract's error codes for a request (proto/attnscope/v1/attnscope.proto);
// INTERNAL, UNKNOWN or a crash is a finding.
//
// Input: byte 0 picks the RPC; byte 1 picks the model (its high bit keeps the model name the
// message carries, so that unknown names are reached too); the rest is the request message.
//
// SentencePiece cannot be loaded under AddressSanitizer (its module needs RTLD_DEEPBIND), so the
// Llama, Marian and T5 checkpoints are served here with a WordPiece vocabulary of their own size:
// the fuzzer is after the request layer and the architectures, the tokenizers have fuzzers of their
// own.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "attnscope/v1/attnscope.pb.h"
#include "fuzz/fuzz_util.h"
#include "google/protobuf/stubs/logging.h"
#include "models/engine.h"
#include "models/requests/requests.h"
#include "server/query_convert.h"

namespace attnscope::fuzz {
namespace {

class NoObserver : public RequestObserver {
 public:
  void OnTokenized(double, int64_t) override {}
  void OnQueueWait(const std::string&, double) override {}
  void OnForward(const std::string&, int64_t, int64_t, int64_t, double) override {}
};

// A WordPiece vocabulary of exactly `size` entries: BERT's specials, single characters and their
// continuations, so that any text tokenizes to ids the model's embedding has.
std::string WordPieceVocabulary(int size) {
  std::vector<std::string> entries = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  const std::string characters = "abcdefghijklmnopqrstuvwxyz0123456789.,!?'-";
  for (size_t i = 0; i < characters.size() && static_cast<int>(entries.size()) < size; ++i) {
    entries.push_back(std::string(1, characters[i]));
    if (static_cast<int>(entries.size()) < size) {
      entries.push_back(absl::StrCat("##", std::string(1, characters[i])));
    }
  }
  for (int i = static_cast<int>(entries.size()); i < size; ++i) {
    entries.push_back(absl::StrCat("[unused", i, "]"));
  }
  std::string text;
  for (const std::string& entry : entries) absl::StrAppend(&text, entry, "\n");
  return text;
}

// `checkpoint`'s config and weights with a WordPiece vocabulary of `vocab_size` entries, in a
// folder of the scratch directory.
std::string WithWordPiece(const std::string& name, const std::string& checkpoint, int vocab_size) {
  const std::string dir = ScratchDir() + "/" + name;
  ATTNSCOPE_FUZZ_CHECK(mkdir(dir.c_str(), 0700) == 0, "cannot make " + dir);
  for (const char* file : {"config.json", "model.safetensors", "generation.json"}) {
    const std::string source = checkpoint + "/" + file;
    if (access(source.c_str(), R_OK) != 0) continue;
    ATTNSCOPE_FUZZ_CHECK(symlink(source.c_str(), (dir + "/" + file).c_str()) == 0,
                         "cannot link " + source);
  }
  WriteFile(dir + "/vocab.txt", WordPieceVocabulary(vocab_size));
  return dir;
}

struct Served {
  std::unique_ptr<RequestRunner> runner;
  std::vector<std::string> names;
};

Served& Runner() {
  static Served* served = [] {
    const std::string data = TestDataDir();
    const std::vector<std::pair<std::string, std::string>> models = {
        {"bert", data + "/tiny-bert"},
        {"cross-encoder", data + "/../../checkpoints/default"},
        {"bart", data + "/tiny-bart"},
        {"llama", WithWordPiece("llama", SharedDir() + "/models/stories260K", 512)},
        {"marian", WithWordPiece("marian", data + "/tiny-marian", 126)},
        {"t5", WithWordPiece("t5", data + "/tiny-t5", 63)},
        {"t5-relu-tied", WithWordPiece("t5-relu-tied", data + "/tiny-t5/relu-tied", 63)},
    };
    auto* result = new Served;
    std::vector<std::unique_ptr<LoadedModel>> loaded;
    for (const auto& [name, dir] : models) {
      LoadedModel::Options options;
      options.name = name;
      options.model_dir = dir;
      absl::StatusOr<std::unique_ptr<LoadedModel>> model = LoadedModel::Create(options);
      if (!model.ok()) {
        std::fprintf(stderr, "request_run_fuzzer: model '%s' from %s: %s\n", name.c_str(),
                     dir.c_str(), model.status().ToString().c_str());
        std::exit(2);
      }
      loaded.push_back(*std::move(model));
      result->names.push_back(name);
    }
    RequestRunner::Options options;
    // Work per call bounded well below the server's default, so that one input stays milliseconds.
    options.max_call_tokens = 4096;
    options.max_inputs_per_request = 8;
    result->runner = std::make_unique<RequestRunner>(options, std::move(loaded), new NoObserver);
    return result;
  }();
  return *served;
}

// The codes a request may get from the request layer; anything else is a bug in it.
void CheckStatus(const char* rpc, const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return;
    default:
      Fail(__FILE__, __LINE__, absl::StrCat(rpc, ": ", status.ToString()));
  }
}

const CallCheck& NoDeadline() {
  static const CallCheck* check = new CallCheck([](absl::string_view) { return absl::OkStatus(); });
  return *check;
}

// Decodes `bytes` as a Request (its model replaced by `model` unless empty), converts it with
// ToQuery and runs `run` on the query; ToQuery's refusals are checked like the runner's.
template <typename Request, typename Run>
void DecodeAndRun(const char* rpc, const uint8_t* data, size_t size, const std::string& model,
                  Run run) {
  Request request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;
  if (!model.empty()) request.set_model(model);
  auto query = server::ToQuery(request);
  CheckStatus(rpc, query.ok() ? run(*query) : query.status());
}

}  // namespace
}  // namespace attnscope::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  attnscope::fuzz::Runner();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace v1 = attnscope::v1;
  using attnscope::fuzz::CheckStatus;
  using attnscope::fuzz::DecodeAndRun;
  using attnscope::fuzz::NoDeadline;
  if (size < 2) return 0;
  attnscope::fuzz::Served& served = attnscope::fuzz::Runner();
  const attnscope::RequestRunner& runner = *served.runner;
  const uint8_t rpc = data[0] % 9;
  const std::string model = (data[1] & 0x80) ? "" : served.names[data[1] % served.names.size()];
  data += 2;
  size -= 2;
  const attnscope::CallCheck& check = NoDeadline();
  switch (rpc) {
    case 0:
      DecodeAndRun<v1::TokenizeRequest>("Tokenize", data, size, model, [&](const auto& query) {
        return runner.Tokenize(query).status();
      });
      break;
    case 1:
    case 2: {
      const auto delivery = rpc == 1 ? attnscope::Delivery::kUnary : attnscope::Delivery::kStream;
      DecodeAndRun<v1::GetAttentionRequest>(
          "GetAttention", data, size, model,
          [&](const auto& query) { return runner.RunAttention(query, check, delivery).status(); });
      break;
    }
    case 3:
      DecodeAndRun<v1::EncodeRequest>("Encode", data, size, model, [&](const auto& query) {
        return runner.RunEncode(query, check).status();
      });
      break;
    case 4:
      DecodeAndRun<v1::CrossAttentionRequest>(
          "CrossAttention", data, size, model,
          [&](const auto& query) { return runner.RunCrossAttention(query, check).status(); });
      break;
    case 5:
      DecodeAndRun<v1::AttributeRequest>("Attribute", data, size, model, [&](const auto& query) {
        return runner.RunAttribute(query, check).status();
      });
      break;
    case 6:
      DecodeAndRun<v1::GenerateRequest>("Generate", data, size, model, [&](const auto& query) {
        return runner
            .RunGenerate(
                query, check, [](const attnscope::GenerateHeader&) { return absl::OkStatus(); },
                [](const attnscope::GenerateStep&) { return absl::OkStatus(); })
            .status();
      });
      break;
    case 7:
      DecodeAndRun<v1::GetParameterRequest>(
          "GetParameter", data, size, model, [&](const auto& query) {
            CheckStatus("ListParameters", runner.ListParameters(query.model).status());
            return runner.GetParameter(query).status();
          });
      break;
    case 8:
      CheckStatus("GetTrainingRecord", runner.GetTrainingRecord(model).status());
      break;
  }
  return 0;
}

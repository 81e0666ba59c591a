// Every RPC of attnscope.v1.AttentionService with every option of its request, on one real
// attnscope-server holding a tiny model of every architecture it serves: each call is answered
// with OK or one of the contract's documented error codes (never INTERNAL, UNKNOWN or a server
// that went away), over gRPC and, for the single-option calls, over HTTP too; the server is alive
// afterwards and its resident memory stayed bounded.
//
// The options are not a hand list: they come from the request messages' descriptors, so a field
// added to the contract is called here without a change to this file. Each field gets the values
// that break code (empty, negative, zero, huge, NaN, unknown enum numbers, invalid UTF-8, special
// tokens typed as text, texts over the model's length), one at a time on a valid request, and
// every pair of two fields' option values (booleans on, enum values, one value of each other
// field), on every model. Only what makes a request valid at all (its texts, a parameter's name)
// is written here, per RPC.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/text_format.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "attnscope/v1/attnscope.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using v1::AttentionService;

// The models of the server: every architecture, and BERT with and without a classifier head.
struct ModelUnderTest {
  std::string name;
  std::string dir;
  // A text the model's tokenizer reads, and a second one for pairs and documents.
  std::string text;
  std::string text_pair;
};

// Codes the contract documents for a request the server refuses. INTERNAL (a bug), UNKNOWN (an
// exception escaped) and UNAVAILABLE (the server is gone) are failures, as is DEADLINE_EXCEEDED:
// every call here is small enough to finish within the client's deadline unless the server let it
// run unbounded.
bool Documented(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::UNIMPLEMENTED:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
      return true;
    default:
      return false;
  }
}

// Calls one RPC with a request of its type; reads a stream to its end.
using Caller =
    std::function<grpc::Status(AttentionService::Stub&, grpc::ClientContext*, const Message&)>;

template <typename Request, typename Response>
Caller Unary(grpc::Status (AttentionService::Stub::*method)(grpc::ClientContext*, const Request&,
                                                            Response*)) {
  return
      [method](AttentionService::Stub& stub, grpc::ClientContext* context, const Message& request) {
        Response response;
        return (stub.*method)(context, static_cast<const Request&>(request), &response);
      };
}

template <typename Request, typename Response>
Caller Streaming(std::unique_ptr<grpc::ClientReader<Response>> (AttentionService::Stub::*method)(
    grpc::ClientContext*, const Request&)) {
  return
      [method](AttentionService::Stub& stub, grpc::ClientContext* context, const Message& request) {
        std::unique_ptr<grpc::ClientReader<Response>> reader =
            (stub.*method)(context, static_cast<const Request&>(request));
        Response response;
        while (reader->Read(&response)) {
        }
        return reader->Finish();
      };
}

// One caller per RPC. The test fails for an RPC of the contract missing here.
std::map<std::string, Caller> Callers() {
  using Stub = AttentionService::Stub;
  return {
      {"ListModels", Unary(&Stub::ListModels)},
      {"GetModelInfo", Unary(&Stub::GetModelInfo)},
      {"Tokenize", Unary(&Stub::Tokenize)},
      {"GetAttention", Unary(&Stub::GetAttention)},
      {"StreamAttention", Streaming(&Stub::StreamAttention)},
      {"Encode", Unary(&Stub::Encode)},
      {"CrossAttention", Unary(&Stub::CrossAttention)},
      {"ListParameters", Unary(&Stub::ListParameters)},
      {"GetParameter", Unary(&Stub::GetParameter)},
      {"GetTrainingRecord", Unary(&Stub::GetTrainingRecord)},
      {"Attribute", Unary(&Stub::Attribute)},
      {"Generate", Streaming(&Stub::Generate)},
  };
}

// What makes a request of each RPC valid for `model` (text format, TEXT, PAIR and PARAMETER
// replaced); the model field is set for every RPC that has one. Generations are kept short.
std::string BaseRequest(const std::string& rpc, const ModelUnderTest& model,
                        const std::string& parameter) {
  const std::map<std::string, std::string> bases = {
      {"Tokenize", "text: 'TEXT'"},
      {"GetAttention", "text: 'TEXT'"},
      {"StreamAttention", "text: 'TEXT'"},
      {"Encode", "inputs { text: 'TEXT' }"},
      {"CrossAttention", "query: 'TEXT' documents: 'PAIR'"},
      {"GetParameter", "name: 'PARAMETER'"},
      {"Attribute", "text: 'TEXT' text_pair: 'PAIR' integrated_gradients_steps: 4"},
      {"Generate", "prompt: 'TEXT' max_new_tokens: 3"},
  };
  const auto found = bases.find(rpc);
  std::string text = found == bases.end() ? "" : found->second;
  for (const auto& [placeholder, value] :
       {std::pair<std::string, std::string>{"PARAMETER", parameter},
        {"TEXT", model.text},
        {"PAIR", model.text_pair}}) {
    for (size_t at = text.find(placeholder); at != std::string::npos; at = text.find(placeholder)) {
      text.replace(at, placeholder.size(), value);
    }
  }
  return text;
}

// A change to a request: one field set to one value (or cleared).
struct Variation {
  std::string label;
  std::function<void(Message*)> apply;
};

// The field at `path` inside `root` is reached through singular messages and the first element of
// repeated ones (added when missing).
Message* Parent(Message* root, const std::vector<const FieldDescriptor*>& path) {
  Message* message = root;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    const Reflection* reflection = message->GetReflection();
    if (path[i]->is_repeated()) {
      message = reflection->FieldSize(*message, path[i]) == 0
                    ? reflection->AddMessage(message, path[i])
                    : reflection->MutableRepeatedMessage(message, path[i], 0);
    } else {
      message = reflection->MutableMessage(message, path[i]);
    }
  }
  return message;
}

std::string PathName(const std::vector<const FieldDescriptor*>& path) {
  std::vector<std::string> names;
  for (const FieldDescriptor* field : path) names.push_back(field->name());
  return absl::StrJoin(names, ".");
}

// The values of a scalar field of `type`, as setters of one value (singular) or appenders
// (repeated). Strings depend on what the field holds: a model name, a parameter name, or a text.
struct Values {
  std::vector<std::pair<std::string, std::function<void(Message*, const FieldDescriptor*)>>> all;
  // Indices into `all` of the values combined in pairs: one or two per field.
  std::vector<size_t> options;
};

Values ValuesOf(const FieldDescriptor* field, const ModelUnderTest& model,
                const std::string& long_text) {
  Values values;
  const bool repeated = field->is_repeated();
  auto add = [&](std::string label, auto value, auto set, auto append, bool option = false) {
    if (option) values.options.push_back(values.all.size());
    values.all.push_back({std::move(label), [=](Message* message, const FieldDescriptor* f) {
                            const Reflection* reflection = message->GetReflection();
                            if (repeated) {
                              (reflection->*append)(message, f, value);
                            } else {
                              (reflection->*set)(message, f, value);
                            }
                          }});
  };
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_BOOL:
      add("true", true, &Reflection::SetBool, &Reflection::AddBool, /*option=*/true);
      add("false", false, &Reflection::SetBool, &Reflection::AddBool);
      break;
    case FieldDescriptor::CPPTYPE_ENUM: {
      const google::protobuf::EnumDescriptor* type = field->enum_type();
      for (int i = 0; i < type->value_count(); ++i) {
        add(type->value(i)->name(), type->value(i)->number(), &Reflection::SetEnumValue,
            &Reflection::AddEnumValue, /*option=*/type->value(i)->number() != 0);
      }
      add("99 (not in the enum)", 99, &Reflection::SetEnumValue, &Reflection::AddEnumValue);
      break;
    }
    case FieldDescriptor::CPPTYPE_INT32:
      for (const int32_t v : {std::numeric_limits<int32_t>::min(), -1, 0, 1, 2, 3, 100000,
                              std::numeric_limits<int32_t>::max()}) {
        add(absl::StrCat(v), v, &Reflection::SetInt32, &Reflection::AddInt32,
            /*option=*/v == -1 || v == 1);
      }
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      for (const int64_t v :
           {std::numeric_limits<int64_t>::min(), int64_t{-1}, int64_t{0}, int64_t{1}, int64_t{3},
            int64_t{1} << 40, std::numeric_limits<int64_t>::max()}) {
        add(absl::StrCat(v), v, &Reflection::SetInt64, &Reflection::AddInt64,
            /*option=*/v == 1);
      }
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      for (const uint32_t v : {0u, 1u, std::numeric_limits<uint32_t>::max()}) {
        add(absl::StrCat(v), v, &Reflection::SetUInt32, &Reflection::AddUInt32, v == 1u);
      }
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      for (const uint64_t v : {uint64_t{0}, uint64_t{1}, std::numeric_limits<uint64_t>::max()}) {
        add(absl::StrCat(v), v, &Reflection::SetUInt64, &Reflection::AddUInt64, v == 1u);
      }
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT: {
      const double inf = std::numeric_limits<double>::infinity();
      for (const double v : {std::nan(""), -inf, -1.0, 0.0, 1e-9, 0.5, 1.0, 2.0, 1e30, inf}) {
        if (field->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
          add(absl::StrCat(v), v, &Reflection::SetDouble, &Reflection::AddDouble, v == 0.5);
        } else {
          add(absl::StrCat(v), static_cast<float>(v), &Reflection::SetFloat, &Reflection::AddFloat,
              v == 0.5);
        }
      }
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      std::vector<std::pair<std::string, std::string>> strings;
      if (field->name() == "model") {
        strings = {{"''", ""}, {"'nope'", "nope"}, {"'../default'", "../default"}};
      } else if (field->name() == "name") {
        strings = {{"''", ""}, {"'nope'", "nope"}, {"'..'", ".."}};
      } else {
        strings = {{"a text", model.text},
                   {"''", ""},
                   {"' \\t\\n'", " \t\n"},
                   {"invalid UTF-8", "ab\xff\xfe\xc3"},
                   {"NUL inside", std::string("a\0b", 3)},
                   {"special tokens as text",
                    "[CLS] [SEP] [MASK] [PAD] <s> </s> <pad> <unk> <mask> >>vie<< <extra_id_0>"},
                   {"Vietnamese, Korean and emoji",
                    "Tôi yêu Việt Nam 랭체인 👩‍👩‍👧 e\xcc\x81"},
                   {"longer than the model", long_text}};
      }
      for (size_t i = 0; i < strings.size(); ++i) {
        add(strings[i].first, strings[i].second, &Reflection::SetString, &Reflection::AddString,
            /*option=*/i == 0 && field->name() != "model");
      }
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  return values;
}

// Every variation of a request of type `type`: each scalar field (inside nested messages too) set
// to each of its values, repeated fields also empty and with two elements, fields with presence
// cleared. `options` receives the variations that are combined in pairs.
void CollectVariations(const Descriptor* type, std::vector<const FieldDescriptor*> prefix,
                       const ModelUnderTest& model, const std::string& long_text,
                       std::vector<Variation>* all, std::vector<Variation>* options) {
  for (int i = 0; i < type->field_count(); ++i) {
    const FieldDescriptor* field = type->field(i);
    std::vector<const FieldDescriptor*> path = prefix;
    path.push_back(field);
    const std::string name = PathName(path);
    if (field->has_presence() || field->is_repeated()) {
      all->push_back(
          {name + " cleared", [path](Message* root) {
             Parent(root, path)->GetReflection()->ClearField(Parent(root, path), path.back());
           }});
    }
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (path.size() < 4) {
        CollectVariations(field->message_type(), path, model, long_text, all, options);
      }
      continue;
    }
    const Values values = ValuesOf(field, model, long_text);
    for (size_t v = 0; v < values.all.size(); ++v) {
      const auto& [label, set] = values.all[v];
      Variation variation{absl::StrCat(name, " = ", label), [path, set = set](Message* root) {
                            Message* parent = Parent(root, path);
                            if (path.back()->is_repeated()) {
                              parent->GetReflection()->ClearField(parent, path.back());
                            }
                            set(parent, path.back());
                          }};
      all->push_back(variation);
      for (const size_t option : values.options) {
        if (option == v) options->push_back(variation);
      }
      if (field->is_repeated() && v == 0) {
        all->push_back(
            {absl::StrCat(name, " = [", label, ", ", label, "]"), [path, set = set](Message* root) {
               Message* parent = Parent(root, path);
               parent->GetReflection()->ClearField(parent, path.back());
               set(parent, path.back());
               set(parent, path.back());
             }});
      }
    }
    // More documents or inputs than a call may carry.
    if (field->is_repeated() && field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      all->push_back({name + " x 300", [path, text = model.text](Message* root) {
                        Message* parent = Parent(root, path);
                        for (int n = 0; n < 300; ++n) {
                          parent->GetReflection()->AddString(parent, path.back(), text);
                        }
                      }});
    }
  }
}

// The same call over the HTTP front end as binary messages (application/proto, and the Connect
// streaming envelope for streams): a gRPC status carrying the HTTP status or the stream's error.
grpc::Status CallOverHttp(httplib::Client& http, const std::string& rpc, const Message& request) {
  httplib::Result result =
      http.Post(absl::StrCat("/", AttentionService::service_full_name(), "/", rpc),
                request.SerializeAsString(), "application/proto");
  if (!result) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("HTTP: no answer (", httplib::to_string(result.error()), ")"));
  }
  const std::map<int, grpc::StatusCode> codes = {{200, grpc::StatusCode::OK},
                                                 {400, grpc::StatusCode::INVALID_ARGUMENT},
                                                 {404, grpc::StatusCode::NOT_FOUND},
                                                 {413, grpc::StatusCode::RESOURCE_EXHAUSTED},
                                                 {429, grpc::StatusCode::RESOURCE_EXHAUSTED},
                                                 {501, grpc::StatusCode::UNIMPLEMENTED}};
  const auto code = codes.find(result->status);
  if (code == codes.end()) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        absl::StrCat("HTTP ", result->status, ": ", result->body.substr(0, 300)));
  }
  if (code->second != grpc::StatusCode::OK ||
      result->get_header_value("Content-Type") != "application/connect+proto") {
    return grpc::Status(code->second, result->body.substr(0, 300));
  }
  // A stream: envelopes (flags, 4-byte big-endian length, payload); the last one (flags 0x02)
  // holds {} or {"error": {"code": ..., "message": ...}}.
  const std::string& body = result->body;
  size_t at = 0;
  while (at + 5 <= body.size()) {
    const uint8_t flags = static_cast<uint8_t>(body[at]);
    uint32_t size = 0;
    for (int i = 1; i <= 4; ++i) size = (size << 8) | static_cast<uint8_t>(body[at + i]);
    if (at + 5 + size > body.size()) break;
    if (flags & 0x02) {
      const nlohmann::json end = nlohmann::json::parse(body.substr(at + 5, size), nullptr, false);
      if (!end.is_object()) break;
      if (!end.contains("error")) return grpc::Status::OK;
      const std::string name = end["error"].value("code", "");
      const std::map<std::string, grpc::StatusCode> names = {
          {"invalid_argument", grpc::StatusCode::INVALID_ARGUMENT},
          {"not_found", grpc::StatusCode::NOT_FOUND},
          {"resource_exhausted", grpc::StatusCode::RESOURCE_EXHAUSTED},
          {"unimplemented", grpc::StatusCode::UNIMPLEMENTED},
          {"failed_precondition", grpc::StatusCode::FAILED_PRECONDITION},
          {"out_of_range", grpc::StatusCode::OUT_OF_RANGE}};
      const auto found = names.find(name);
      return grpc::Status(found == names.end() ? grpc::StatusCode::INTERNAL : found->second,
                          absl::StrCat("HTTP stream ended with ", end.dump()));
    }
    at += 5 + size;
  }
  return grpc::Status(grpc::StatusCode::INTERNAL,
                      "HTTP stream: no end-of-stream envelope (flags 0x02) in the answer");
}

// Resident set size of `pid` in bytes, from /proc/PID/status.
int64_t ResidentBytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

TEST(OptionMatrixTest, EveryRpcOptionAndArchitectureAnswersOrGivesADocumentedError) {
  TempDir temp;
  BertShape shape;
  shape.layers = 2;
  shape.hidden = 32;
  shape.heads = 4;
  shape.intermediate = 64;
  shape.max_positions = 64;
  shape.vocab = 100;
  const std::string plain_bert = temp.path();
  ASSERT_TRUE(WriteRandomBert(shape, plain_bert).ok());
  const std::string data = TestDataDir();
  // tiny-t5/relu-tied (T5 v1.0's layout) shares tiny-t5's vocabulary but not its folder.
  TempDir relu_tied;
  for (const std::string file : {"relu-tied/config.json", "relu-tied/model.safetensors",
                                 "spiece.model", "tokenizer_config.json"}) {
    const std::string from = data + "/tiny-t5/" + file;
    const std::string to = relu_tied.path() + "/" + file.substr(file.find('/') + 1);
    ASSERT_EQ(symlink(from.c_str(), to.c_str()), 0) << to;
  }
  const std::vector<ModelUnderTest> models = {
      {"bert", plain_bert, RandomBertText(shape, 6), RandomBertText(shape, 4)},
      {"cross-encoder", TinyBertDir(), "what is the capital", "paris is the capital"},
      {"xlm-roberta", data + "/tiny-roberta", "how do I insert a table", "Insert a table here"},
      {"distilbert", data + "/tiny-distilbert", "what is the capital", "paris is the capital"},
      {"mpnet", data + "/tiny-mpnet", "what is the capital of france", "paris is the capital"},
      {"electra", data + "/tiny-electra", "what is the capital", "paris is the capital"},
      {"llama", Stories260kDir(), "Once upon a time", "there was a cat"},
      {"qwen2", data + "/tiny-qwen2", "Once upon a time", "there was a cat"},
      {"qwen3", data + "/tiny-qwen3", "Once upon a time", "there was a cat"},
      {"mistral", data + "/tiny-mistral", "Once upon a time, there was a little girl", "a cat"},
      {"gemma", data + "/tiny-gemma", "Once upon a time, there was a little girl", "a cat"},
      {"gemma2", data + "/tiny-gemma2", "Once upon a time, there was a little girl", "a cat"},
      {"gemma3", data + "/tiny-gemma3", "Once upon a time, there was a little girl", "a cat"},
      {"phi3", data + "/tiny-phi3", "Once upon a time, there was a little girl", "a cat"},
      {"gpt2", data + "/tiny-gpt2", "Once upon a time", "there was a cat"},
      {"gpt-neox", data + "/tiny-gpt-neox", "Once upon a time", "there was a cat"},
      {"opt", data + "/tiny-opt", "Once upon a time", "there was a cat"},
      {"marian", data + "/tiny-marian", ">>vie<< Insert a table", "Chèn bảng"},
      {"bart", data + "/tiny-bart", "Insert a table", "the table"},
      {"t5", data + "/tiny-t5", "translate: insert a table", "a table"},
      {"t5-relu-tied", relu_tied.path(), "insert a table", "a table"},
  };
  ServerProcess::Options options;
  for (const ModelUnderTest& model : models) options.models.push_back(model.name + "=" + model.dir);
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials());
  std::unique_ptr<AttentionService::Stub> stub = AttentionService::NewStub(channel);
  {
    // RoBERTa's limit: 66 positions, the first two below the first token's.
    grpc::ClientContext context;
    v1::GetModelInfoRequest request;
    request.set_model("xlm-roberta");
    v1::ModelInfo info;
    ASSERT_TRUE(stub->GetModelInfo(&context, request, &info).ok());
    EXPECT_EQ(info.architecture(), "roberta");
    EXPECT_EQ(info.max_position_embeddings(), 64);
    EXPECT_TRUE(info.has_classifier());
  }
  {
    // Qwen3's head_dim comes from config.json, not hidden_size / num_attention_heads.
    grpc::ClientContext context;
    v1::GetModelInfoRequest request;
    request.set_model("qwen3");
    v1::ModelInfo info;
    ASSERT_TRUE(stub->GetModelInfo(&context, request, &info).ok());
    EXPECT_EQ(info.architecture(), "qwen3");
    EXPECT_EQ(info.num_attention_heads(), 4);
    EXPECT_EQ(info.num_key_value_heads(), 2);
    EXPECT_EQ(info.head_dim(), 8);
    EXPECT_EQ(info.hidden_size(), 16);
    EXPECT_TRUE(info.is_causal());
  }
  // Each layer's window as its configuration class reads config.json: Mistral's and Phi-3's on
  // every layer, Gemma 2's on every other one (and Gemma 3's with sliding_window_pattern 2),
  // Qwen2's from max_window_layers (1) on; none without one.
  for (const auto& [name, windows] :
       std::vector<std::pair<std::string, std::vector<int32_t>>>{{"mistral", {4, 4}},
                                                                 {"phi3", {5, 5}},
                                                                 {"gemma", {}},
                                                                 {"gemma2", {4, 0}},
                                                                 {"gemma3", {4, 0}},
                                                                 {"qwen2", {0, 4}},
                                                                 {"qwen3", {}},
                                                                 {"gpt2", {}},
                                                                 {"opt", {}},
                                                                 {"bert", {}}}) {
    grpc::ClientContext context;
    v1::GetModelInfoRequest request;
    request.set_model(name);
    v1::ModelInfo info;
    ASSERT_TRUE(stub->GetModelInfo(&context, request, &info).ok()) << name;
    EXPECT_THAT(info.layer_sliding_windows(), ::testing::ElementsAreArray(windows)) << name;
  }

  const std::map<std::string, Caller> callers = Callers();
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          AttentionService::service_full_name());
  ASSERT_NE(service, nullptr);

  // One call of every RPC on every model first, so that the memory baseline includes each model's
  // first pass.
  struct Call {
    std::string rpc;
    const ModelUnderTest* model;
    std::string label;
    std::unique_ptr<Message> request;
    // One field changed (not a pair): also sent over HTTP.
    bool single = true;
  };
  std::vector<Call> calls;
  std::vector<Call> warm_up;
  // Longer than any of the models' max_position_embeddings (512 at most) in tokens.
  std::string long_text;
  for (int i = 0; i < 700; ++i) absl::StrAppend(&long_text, "table w", i % 90, " ");
  for (int m = 0; m < service->method_count(); ++m) {
    const google::protobuf::MethodDescriptor* method = service->method(m);
    ASSERT_TRUE(callers.count(method->name()))
        << "RPC " << method->name() << " of the contract has no caller in this test: add it to "
        << "Callers()";
    const Descriptor* type = method->input_type();
    for (const ModelUnderTest& model : models) {
      v1::ListParametersRequest list_request;
      list_request.set_model(model.name);
      v1::ListParametersResponse parameters;
      grpc::ClientContext list_context;
      ASSERT_TRUE(stub->ListParameters(&list_context, list_request, &parameters).ok());
      ASSERT_GT(parameters.parameters_size(), 0);
      std::unique_ptr<Message> base(
          google::protobuf::MessageFactory::generated_factory()->GetPrototype(type)->New());
      ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
          BaseRequest(method->name(), model, parameters.parameters(0).name()), base.get()))
          << method->name();
      if (const FieldDescriptor* field = type->FindFieldByName("model")) {
        base->GetReflection()->SetString(base.get(), field, model.name);
      }
      std::vector<Variation> variations;
      std::vector<Variation> option_values;
      CollectVariations(type, {}, model, long_text, &variations, &option_values);
      const size_t singles = variations.size();
      for (size_t i = 0; i < option_values.size(); ++i) {
        for (size_t j = i + 1; j < option_values.size(); ++j) {
          // Two values of one field are not a pair of options.
          if (option_values[i].label.substr(0, option_values[i].label.find(" = ")) ==
              option_values[j].label.substr(0, option_values[j].label.find(" = "))) {
            continue;
          }
          const Variation& a = option_values[i];
          const Variation& b = option_values[j];
          variations.push_back({a.label + ", " + b.label, [a, b](Message* root) {
                                  a.apply(root);
                                  b.apply(root);
                                }});
        }
      }
      std::unique_ptr<Message> first(base->New());
      first->CopyFrom(*base);
      warm_up.push_back({method->name(), &model, "the base request", std::move(first)});
      for (size_t v = 0; v < variations.size(); ++v) {
        std::unique_ptr<Message> request(base->New());
        request->CopyFrom(*base);
        variations[v].apply(request.get());
        calls.push_back(
            {method->name(), &model, variations[v].label, std::move(request), v < singles});
      }
    }
  }

  std::mutex mutex;
  std::vector<std::string> failures;
  std::map<grpc::StatusCode, int64_t> codes;
  std::atomic<size_t> next{0};
  // Set once the server has exited: the calls in flight then are the suspects, the rest would only
  // repeat "connection refused".
  std::atomic<bool> server_gone{false};
  auto run = [&](std::vector<Call>& list) {
    next = 0;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        std::unique_ptr<AttentionService::Stub> own = AttentionService::NewStub(channel);
        httplib::Client http("127.0.0.1", (*server)->http_port());
        http.set_read_timeout(60);
        for (size_t i = next++; i < list.size() && !server_gone; i = next++) {
          const Call& call = list[i];
          grpc::ClientContext context;
          context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
          grpc::Status status = callers.at(call.rpc)(*own, &context, *call.request);
          if (status.ok() && call.single && !server_gone)
            status = CallOverHttp(http, call.rpc, *call.request);
          std::lock_guard<std::mutex> lock(mutex);
          ++codes[status.error_code()];
          if (Documented(status.error_code()) || failures.size() >= 40) continue;
          std::string request = call.request->ShortDebugString();
          if (request.size() > 300) request = request.substr(0, 300) + "...";
          std::string failure = absl::StrCat(call.rpc, " on ", call.model->name, " with ",
                                             call.label, ": code ", status.error_code(), " '",
                                             status.error_message(), "' (request ", request, ")");
          if (status.error_code() == grpc::StatusCode::UNAVAILABLE && !server_gone) {
            if (absl::StatusOr<int> exit = (*server)->Wait(absl::Milliseconds(200)); exit.ok()) {
              server_gone = true;
              absl::StrAppend(&failure, "; the server exited (wait status ", *exit,
                              ") during this call or one beside it");
            }
          }
          failures.push_back(std::move(failure));
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
  };
  run(warm_up);
  const int64_t resident_before = ResidentBytes((*server)->pid());
  run(calls);
  const int64_t resident_after = ResidentBytes((*server)->pid());

  std::vector<std::string> tally;
  for (const auto& [code, count] : codes) tally.push_back(absl::StrCat(code, ": ", count));
  std::printf("%zu calls (%s); resident memory %.1f MB before, %.1f MB after\n",
              calls.size() + warm_up.size(), absl::StrJoin(tally, ", ").c_str(),
              resident_before / 1e6, resident_after / 1e6);
  EXPECT_TRUE(failures.empty()) << absl::StrJoin(failures, "\n");
  // The server is alive and still answers.
  grpc::ClientContext context;
  v1::ListModelsResponse listed;
  ASSERT_TRUE(stub->ListModels(&context, v1::ListModelsRequest(), &listed).ok())
      << (*server)->Log();
  EXPECT_EQ(listed.models_size(), static_cast<int>(models.size()));
  // Bounded: what the tiny models' largest answers need, not what the calls asked for.
  EXPECT_LT(resident_after - resident_before, int64_t{400} << 20);
}

}  // namespace
}  // namespace attnscope::testing

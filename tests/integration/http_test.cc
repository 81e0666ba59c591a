// The HTTP/JSON front end against the gRPC one, on one real attnscope-server: every RPC answers
// the same message over both (JSON and binary bodies), streams carry the same messages, bad input
// gets the same code and message, texts are plain JSON strings, and /metrics counts each transport.
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "attnscope/v1/attnscope.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

using google::protobuf::util::MessageDifferencer;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kPath[] = "/attnscope.v1.AttentionService/";

class HttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ServerProcess::Options options;
    options.models = {"bert=" + TinyBertDir(), "llama=" + Stories260kDir()};
    options.metrics_port = FreeTcpPort();
    options.extra_flags = {"--dashboard_dir="};
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    ASSERT_GT(server_->http_port(), 0);
  }
  static void TearDownTestSuite() { delete server_; }

  void SetUp() override {
    stub_ = v1::AttentionService::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
    http_ = std::make_unique<httplib::Client>("127.0.0.1", server_->http_port());
    http_->set_read_timeout(60);
  }

  // POSTs `body` to `method` and returns the response (status, body).
  httplib::Result Post(const std::string& method, const std::string& body,
                       const std::string& content_type = "application/json") {
    return http_->Post(absl::StrCat(kPath, method).c_str(), body, content_type.c_str());
  }

  // The JSON answer of `method` parsed into `Response`; a test failure unless it is 200.
  template <typename Response>
  Response PostJson(const std::string& method, const std::string& body) {
    Response response;
    httplib::Result result = Post(method, body);
    EXPECT_TRUE(result) << method;
    if (!result) return response;
    EXPECT_EQ(result->status, 200) << method << ": " << result->body;
    EXPECT_EQ(result->get_header_value("Content-Type"), "application/json");
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(result->body, &response).ok())
        << result->body;
    return response;
  }

  // The binary answer of `method` for `request`.
  template <typename Response>
  Response PostProto(const std::string& method, const google::protobuf::Message& request) {
    Response response;
    httplib::Result result = Post(method, request.SerializeAsString(), "application/proto");
    EXPECT_TRUE(result) << method;
    if (!result) return response;
    EXPECT_EQ(result->status, 200) << method << ": " << result->body;
    EXPECT_EQ(result->get_header_value("Content-Type"), "application/proto");
    EXPECT_TRUE(response.ParseFromString(result->body));
    return response;
  }

  static ServerProcess* server_;
  std::unique_ptr<v1::AttentionService::Stub> stub_;
  std::unique_ptr<httplib::Client> http_;
};

ServerProcess* HttpTest::server_ = nullptr;

// The gRPC answer of a unary method.
template <typename Request, typename Response>
Response CallGrpc(grpc::Status (v1::AttentionService::Stub::*method)(grpc::ClientContext*,
                                                                     const Request&, Response*),
                  v1::AttentionService::Stub* stub, const Request& request) {
  grpc::ClientContext context;
  Response response;
  const grpc::Status status = (stub->*method)(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response;
}

TEST_F(HttpTest, EveryUnaryRpcAnswersWhatGrpcAnswers) {
  using Stub = v1::AttentionService::Stub;
  v1::ListModelsRequest list;
  const auto models = CallGrpc(&Stub::ListModels, stub_.get(), list);
  ASSERT_EQ(models.models_size(), 2);
  EXPECT_TRUE(
      MessageDifferencer::Equals(PostJson<v1::ListModelsResponse>("ListModels", "{}"), models));
  // No body at all is an empty request.
  EXPECT_TRUE(
      MessageDifferencer::Equals(PostJson<v1::ListModelsResponse>("ListModels", ""), models));
  EXPECT_TRUE(
      MessageDifferencer::Equals(PostProto<v1::ListModelsResponse>("ListModels", list), models));
  // The Connect GET form: no message is an empty request; a message is URL-encoded JSON.
  httplib::Result get = http_->Get(absl::StrCat(kPath, "ListModels").c_str());
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 200);
  v1::ListModelsResponse got;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(get->body, &got).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(got, models));

  v1::GetModelInfoRequest info;
  info.set_model("llama");
  EXPECT_TRUE(
      MessageDifferencer::Equals(PostJson<v1::ModelInfo>("GetModelInfo", R"({"model": "llama"})"),
                                 CallGrpc(&Stub::GetModelInfo, stub_.get(), info)));

  // Texts are plain JSON strings, never base64.
  v1::TokenizeRequest tokenize;
  tokenize.set_model("bert");
  tokenize.set_text("Tôi yêu Việt Nam quá");
  tokenize.set_text_pair("나는 오늘 랭체인을 공부한다");
  const auto tokens = CallGrpc(&Stub::Tokenize, stub_.get(), tokenize);
  EXPECT_TRUE(MessageDifferencer::Equals(
      PostJson<v1::TokenizeResponse>(
          "Tokenize",
          R"({"model": "bert", "text": "Tôi yêu Việt Nam quá", "textPair": "나는 오늘 랭체인을 공부한다"})"),
      tokens));
  // Proto field names work as well as their lowerCamelCase JSON names.
  EXPECT_TRUE(MessageDifferencer::Equals(
      PostJson<v1::TokenizeResponse>(
          "Tokenize",
          R"({"model": "bert", "text": "Tôi yêu Việt Nam quá", "text_pair": "나는 오늘 랭체인을 공부한다"})"),
      tokens));
  EXPECT_TRUE(
      MessageDifferencer::Equals(PostProto<v1::TokenizeResponse>("Tokenize", tokenize), tokens));
  get = http_->Get(absl::StrCat(kPath, "Tokenize?encoding=json&message=",
                                httplib::detail::encode_query_param(
                                    R"({"model": "bert", "text": "Tôi yêu Việt Nam quá",
                                        "textPair": "나는 오늘 랭체인을 공부한다"})"))
                       .c_str());
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 200) << get->body;
  v1::TokenizeResponse from_get;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(get->body, &from_get).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(from_get, tokens));

  v1::GetAttentionRequest attention;
  attention.set_model("bert");
  attention.set_text("the capital of france is paris");
  attention.add_layers(-1);
  attention.add_heads(0);
  attention.add_heads(2);
  attention.set_include_scores(true);
  attention.set_rollout(true);
  attention.set_dtype(v1::DTYPE_FLOAT16);
  const auto answer = CallGrpc(&Stub::GetAttention, stub_.get(), attention);
  EXPECT_TRUE(MessageDifferencer::Equals(
      PostJson<v1::GetAttentionResponse>(
          "GetAttention",
          R"({"model": "bert", "text": "the capital of france is paris", "layers": [-1],
              "heads": [0, 2], "includeScores": true, "rollout": true, "dtype": "DTYPE_FLOAT16"})"),
      answer));
  EXPECT_TRUE(MessageDifferencer::Equals(
      PostProto<v1::GetAttentionResponse>("GetAttention", attention), answer));

  v1::EncodeRequest encode;
  encode.set_model("bert");
  encode.add_inputs()->set_text("paris");
  v1::EncodeInput* pair = encode.add_inputs();
  pair->set_text("the river");
  pair->set_text_pair("seine");
  encode.set_pooling(v1::POOLING_MEAN);
  encode.set_normalize(true);
  EXPECT_TRUE(MessageDifferencer::Equals(
      PostJson<v1::EncodeResponse>(
          "Encode",
          R"({"model": "bert", "inputs": [{"text": "paris"}, {"text": "the river", "textPair": "seine"}],
              "pooling": "POOLING_MEAN", "normalize": true})"),
      CallGrpc(&Stub::Encode, stub_.get(), encode)));

  v1::CrossAttentionRequest cross;
  cross.set_model("bert");
  cross.set_query("랭체인 뭐야");
  cross.add_documents("랭체인은 언어 모델 애플리케이션을 만드는 프레임워크다");
  cross.add_documents("paris is the capital of france");
  cross.set_include_document_to_query(true);
  EXPECT_TRUE(MessageDifferencer::Equals(
      PostJson<v1::CrossAttentionResponse>("CrossAttention",
                                           R"({"model": "bert", "query": "랭체인 뭐야",
              "documents": ["랭체인은 언어 모델 애플리케이션을 만드는 프레임워크다",
                            "paris is the capital of france"],
              "includeDocumentToQuery": true})"),
      CallGrpc(&Stub::CrossAttention, stub_.get(), cross)));

  v1::ListParametersRequest parameters;
  parameters.set_model("bert");
  EXPECT_TRUE(MessageDifferencer::Equals(
      PostJson<v1::ListParametersResponse>("ListParameters", R"({"model": "bert"})"),
      CallGrpc(&Stub::ListParameters, stub_.get(), parameters)));

  v1::GetParameterRequest parameter;
  parameter.set_model("bert");
  parameter.set_name("bert.embeddings.position_embeddings.weight");
  parameter.set_row_start(2);
  parameter.set_row_end(10);
  EXPECT_TRUE(MessageDifferencer::Equals(
      PostJson<v1::GetParameterResponse>(
          "GetParameter", R"({"model": "bert", "name": "bert.embeddings.position_embeddings.weight",
                              "rowStart": 2, "rowEnd": 10})"),
      CallGrpc(&Stub::GetParameter, stub_.get(), parameter)));
}

TEST_F(HttpTest, JsonAnswersPrintZerosAndSpellTensorsInBase64) {
  const nlohmann::json answer = nlohmann::json::parse(
      Post("GetAttention", R"({"model": "bert", "text": "hello world", "layers": [0]})")->body);
  // Canonical JSON would leave out zeros; an explicit 0 saves clients from knowing the defaults.
  EXPECT_EQ(answer["queryStart"], 0);
  EXPECT_EQ(answer["layers"], nlohmann::json::array({0}));
  EXPECT_EQ(answer["attentions"]["dtype"], "DTYPE_FLOAT32");
  EXPECT_EQ(answer["attentions"]["dimNames"],
            nlohmann::json::array({"layer", "head", "query_token", "key_token"}));
  EXPECT_EQ(answer["tokens"]["originalTexts"], nlohmann::json::array({"", "hello", "world", ""}));
  // 1 layer x 4 heads x 4 x 4 float32 values, base64 without line breaks.
  const std::string data = answer["attentions"]["data"];
  EXPECT_EQ(data.size(), 4 * ((1 * 4 * 4 * 4 * 4 + 2) / 3));
}

TEST_F(HttpTest, StreamAttentionSendsTheGrpcMessagesAsJsonLinesOrEnvelopes) {
  v1::GetAttentionRequest request;
  request.set_model("llama");
  request.set_text("Once upon a time");
  request.add_layers(0);
  request.add_layers(-1);
  request.set_rollout(true);
  std::vector<v1::StreamAttentionResponse> expected;
  {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<v1::StreamAttentionResponse>> reader =
        stub_->StreamAttention(&context, request);
    v1::StreamAttentionResponse message;
    while (reader->Read(&message)) expected.push_back(message);
    ASSERT_TRUE(reader->Finish().ok());
  }
  ASSERT_EQ(expected.size(), 4u);  // header, two layers, rollout

  httplib::Result json =
      Post("StreamAttention",
           R"({"model": "llama", "text": "Once upon a time", "layers": [0, -1], "rollout": true})");
  ASSERT_TRUE(json);
  EXPECT_EQ(json->status, 200);
  EXPECT_EQ(json->get_header_value("Content-Type"), "application/x-ndjson");
  const std::vector<std::string> lines = absl::StrSplit(json->body, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), expected.size()) << json->body.substr(0, 500);
  for (size_t i = 0; i < lines.size(); ++i) {
    v1::StreamAttentionResponse message;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(lines[i], &message).ok());
    EXPECT_TRUE(MessageDifferencer::Equals(message, expected[i])) << "line " << i;
  }

  httplib::Result binary =
      Post("StreamAttention", request.SerializeAsString(), "application/proto");
  ASSERT_TRUE(binary);
  EXPECT_EQ(binary->get_header_value("Content-Type"), "application/connect+proto");
  size_t at = 0;
  std::vector<std::string> payloads;
  std::vector<int> flags;
  while (at + 5 <= binary->body.size()) {
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(binary->body[at + i]); };
    const size_t size = (size_t{byte(1)} << 24) | (byte(2) << 16) | (byte(3) << 8) | byte(4);
    flags.push_back(byte(0));
    payloads.push_back(binary->body.substr(at + 5, size));
    at += 5 + size;
  }
  EXPECT_EQ(at, binary->body.size());
  ASSERT_EQ(payloads.size(), expected.size() + 1);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(flags[i], 0);
    v1::StreamAttentionResponse message;
    ASSERT_TRUE(message.ParseFromString(payloads[i]));
    EXPECT_TRUE(MessageDifferencer::Equals(message, expected[i])) << "envelope " << i;
  }
  // The end of the stream: flag 0x02 and an empty JSON object for success.
  EXPECT_EQ(flags.back(), 2);
  EXPECT_EQ(payloads.back(), "{}");
}

TEST_F(HttpTest, BadInputGetsTheGrpcCodeAsHttpStatusAndTheSameMessage) {
  struct Case {
    std::string json;
    int http_status;
    std::string code;
  };
  // Each body is also sent over gRPC (parsed from the same JSON, texts as bytes).
  const std::vector<Case> cases = {
      {R"({"model": "missing", "text": "hello"})", 404, "not_found"},
      {R"({"model": "bert", "text": ""})", 400, "invalid_argument"},
      {R"({"model": "bert", "text": "hello", "layers": [7]})", 400, "invalid_argument"},
      {R"({"model": "bert", "text": "hello", "topK": -2})", 400, "invalid_argument"},
      {R"({"model": "bert", "text": "hello", "window": {"queryStart": 9}})", 400,
       "invalid_argument"},
      {R"({"model": "bert", "text": "hello", "dtype": "DTYPE_INT32"})", 400, "invalid_argument"},
      {R"({"model": "bert", "text": "hello", "includeScores": true, "aggregateWords": true})", 400,
       "invalid_argument"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.json);
    nlohmann::json body = nlohmann::json::parse(c.json);
    v1::GetAttentionRequest request;
    request.set_model(body["model"].get<std::string>());
    request.set_text(body["text"].get<std::string>());
    body.erase("text");
    v1::GetAttentionRequest rest;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(body.dump(), &rest).ok());
    rest.MergeFrom(request);
    grpc::ClientContext context;
    v1::GetAttentionResponse ignored;
    const grpc::Status grpc_status = stub_->GetAttention(&context, rest, &ignored);

    httplib::Result result = Post("GetAttention", c.json);
    ASSERT_TRUE(result);
    EXPECT_EQ(result->status, c.http_status);
    const nlohmann::json error = nlohmann::json::parse(result->body);
    EXPECT_EQ(error["code"], c.code);
    EXPECT_EQ(error["message"], grpc_status.error_message());
    EXPECT_EQ(absl::AsciiStrToLower(absl::StatusCodeToString(
                  static_cast<absl::StatusCode>(grpc_status.error_code()))),
              c.code);
  }
}

TEST_F(HttpTest, MalformedRequestsSayWhatWasWrong) {
  httplib::Result not_json = Post("Tokenize", "{\"text\": ");
  ASSERT_TRUE(not_json);
  EXPECT_EQ(not_json->status, 400);
  EXPECT_THAT(nlohmann::json::parse(not_json->body)["message"].get<std::string>(),
              AllOf(HasSubstr("does not parse as JSON (parse error at line 1, column 10"),
                    HasSubstr("unexpected end of input")));

  // A number beyond double's range is the parser's error too (it throws another kind).
  httplib::Result overflow =
      Post("Tokenize", R"({"text": "hi", "tokenization": {"maxLength": 1e999}})");
  ASSERT_TRUE(overflow);
  EXPECT_EQ(overflow->status, 400);
  EXPECT_THAT(nlohmann::json::parse(overflow->body)["message"].get<std::string>(),
              HasSubstr("number overflow parsing '1e999'"));

  // Invalid UTF-8 cannot travel in JSON text; the parser refuses it before the service sees it,
  // and the answer, itself JSON, does not echo the bad bytes.
  httplib::Result bad_utf8 = Post("Tokenize", "{\"text\": \"caf\xC3\"}");
  ASSERT_TRUE(bad_utf8);
  EXPECT_EQ(bad_utf8->status, 400);
  const nlohmann::json bad_utf8_answer =
      nlohmann::json::parse(bad_utf8->body, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(bad_utf8_answer.is_discarded()) << bad_utf8->body;
  EXPECT_THAT(bad_utf8_answer["message"].get<std::string>(),
              AllOf(HasSubstr("line 1, column 15"), HasSubstr("ill-formed UTF-8 byte")));

  httplib::Result unknown_field = Post("Tokenize", R"({"text": "hi", "txet": "typo"})");
  ASSERT_TRUE(unknown_field);
  EXPECT_EQ(unknown_field->status, 400);
  EXPECT_NE(unknown_field->body.find("attnscope.v1.TokenizeRequest"), std::string::npos);

  httplib::Result unknown_method = Post("Summarize", "{}");
  ASSERT_TRUE(unknown_method);
  EXPECT_EQ(unknown_method->status, 404);
  EXPECT_EQ(nlohmann::json::parse(unknown_method->body)["code"], "unimplemented");

  httplib::Result wrong_type = Post("Tokenize", "text=hi", "text/plain");
  ASSERT_TRUE(wrong_type);
  EXPECT_EQ(wrong_type->status, 415);
  EXPECT_NE(wrong_type->body.find("Content-Type 'text/plain'"), std::string::npos);

  httplib::Result get = http_->Get(absl::StrCat(kPath, "StreamAttention").c_str());
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
  EXPECT_EQ(get->get_header_value("Allow"), "POST");
  EXPECT_NE(get->body.find("HTTP method 'GET' for StreamAttention: expected POST"),
            std::string::npos)
      << get->body;
  httplib::Result put = http_->Put("/index.html", "x", "text/plain");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 405);
  EXPECT_NE(put->body.find("HTTP method 'PUT' for the dashboard: expected GET"), std::string::npos)
      << put->body;
  EXPECT_EQ(put->get_header_value("Allow"), "GET, HEAD");
  // HEAD is GET without the body, as uptime checks send it, on the dashboard and /metrics.
  // (This server has no dashboard: its answer is the 404 that says so.)
  httplib::Result page = http_->Get("/index.html");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 404);
  httplib::Result head = http_->Head("/index.html");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, page->status);
  EXPECT_EQ(head->body, "");
  EXPECT_EQ(head->get_header_value("Content-Length"), std::to_string(page->body.size()));
  EXPECT_EQ(head->get_header_value("Content-Type"), page->get_header_value("Content-Type"));
  httplib::Result after_head = http_->Get("/index.html");  // the same connection, kept alive
  ASSERT_TRUE(after_head);
  EXPECT_EQ(after_head->body, page->body);
  httplib::Client metrics("127.0.0.1", server_->metrics_port());
  httplib::Result metrics_head = metrics.Head("/metrics");
  ASSERT_TRUE(metrics_head);
  EXPECT_EQ(metrics_head->status, 200);
  EXPECT_EQ(metrics_head->body, "");
  EXPECT_GT(std::stoll(metrics_head->get_header_value("Content-Length")), 0);

  httplib::Result timeout =
      http_->Post(absl::StrCat(kPath, "ListModels").c_str(),
                  httplib::Headers{{"Connect-Timeout-Ms", "soon"}}, "{}", "application/json");
  ASSERT_TRUE(timeout);
  EXPECT_EQ(timeout->status, 400);
  EXPECT_NE(timeout->body.find("Connect-Timeout-Ms 'soon'"), std::string::npos);
  // HTTP defines one expectation; another cannot be met.
  httplib::Result expect =
      http_->Post(absl::StrCat(kPath, "ListModels").c_str(),
                  httplib::Headers{{"Expect", "999-foo"}}, "{}", "application/json");
  ASSERT_TRUE(expect);
  EXPECT_EQ(expect->status, 417);
  EXPECT_NE(expect->body.find("request Expect '999-foo': expected 100-continue"), std::string::npos)
      << expect->body;
  // Two deadlines: which one was meant is anyone's guess.
  timeout =
      http_->Post(absl::StrCat(kPath, "ListModels").c_str(),
                  httplib::Headers{{"Connect-Timeout-Ms", "60000"}, {"Connect-Timeout-Ms", "20"}},
                  "{}", "application/json");
  ASSERT_TRUE(timeout);
  EXPECT_EQ(timeout->status, 400);
  EXPECT_NE(timeout->body.find("Connect-Timeout-Ms: given 2 times"), std::string::npos)
      << timeout->body;
  // A sign is no digit, though strtol-style parsers take it.
  timeout = http_->Post(absl::StrCat(kPath, "ListModels").c_str(),
                        httplib::Headers{{"Connect-Timeout-Ms", "+5"}}, "{}", "application/json");
  ASSERT_TRUE(timeout);
  EXPECT_EQ(timeout->status, 400);
  EXPECT_NE(timeout->body.find("Connect-Timeout-Ms '+5'"), std::string::npos) << timeout->body;

  // Over gRPC's default 4 MiB receive limit, refused as gRPC would refuse it.
  httplib::Result huge = Post("Tokenize", std::string(5 << 20, ' '));
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->status, 413);
  EXPECT_EQ(nlohmann::json::parse(huge->body)["code"], "resource_exhausted");
}

// Connect's GET form: whatever the server cannot read as one request is refused, naming the query
// parameter, instead of being read as some other request.
TEST_F(HttpTest, ConnectGetFormRefusesWhatItCannotRead) {
  struct Case {
    std::string query;
    int status;
    std::string text;
  };
  const std::string tokenize = httplib::detail::encode_query_param(R"({"text": "hi"})");
  const std::vector<Case> cases = {
      {absl::StrCat("message=", tokenize), 415, "query parameter 'encoding' missing"},
      {absl::StrCat("encoding=xml&message=", tokenize), 415, "query parameter 'encoding' 'xml'"},
      {"encoding=json", 400, "query parameter 'message' missing"},
      {absl::StrCat("encoding=json&base64=2&message=", tokenize), 400,
       "query parameter 'base64' '2'"},
      {absl::StrCat("encoding=json&message=", tokenize, "&message=%7B%7D"), 400,
       "query parameter 'message': given 2 times"},
      {absl::StrCat("encoding=json&encoding=json&message=", tokenize), 400,
       "query parameter 'encoding': given 2 times"},
      {absl::StrCat("encoding=json&connect=v2&message=", tokenize), 400,
       "query parameter 'connect' 'v2': expected v1"},
      {"encoding=json&message=%7Bnot", 400, "query parameter 'message': expected a JSON object"},
      {"encoding=proto&base64=1&message=***", 400,
       "query parameter 'message': expected URL-safe base64"},
      {absl::StrCat("encoding=json&compression=gzip&message=", tokenize), 501,
       "query parameter 'compression' 'gzip'"},
  };
  for (const Case& c : cases) {
    httplib::Result get = http_->Get(absl::StrCat(kPath, "Tokenize?", c.query).c_str());
    ASSERT_TRUE(get) << c.query;
    EXPECT_EQ(get->status, c.status) << c.query << ": " << get->body;
    EXPECT_NE(get->body.find(c.text), std::string::npos) << c.query << ": " << get->body;
  }
  // What the form allows still answers: base64=0 says the message is no base64.
  httplib::Result get =
      http_->Get(absl::StrCat(kPath, "Tokenize?encoding=json&base64=0&message=", tokenize).c_str());
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 200) << get->body;
}

TEST_F(HttpTest, StreamErrorsEndTheStreamWithAnErrorLine) {
  httplib::Result result =
      Post("StreamAttention", R"({"model": "bert", "text": "hello", "heads": [99]})");
  ASSERT_TRUE(result);
  // The stream had started (200) before the request was found wrong.
  EXPECT_EQ(result->status, 200);
  const nlohmann::json line = nlohmann::json::parse(result->body);
  EXPECT_EQ(line["error"]["code"], "invalid_argument");
  EXPECT_NE(line["error"]["message"].get<std::string>().find("head 99"), std::string::npos);
}

TEST_F(HttpTest, MetricsCountEachTransport) {
  auto count = [](const std::string& rpc, const std::string& transport) {
    absl::StatusOr<std::string> body = HttpGet(server_->metrics_port(), "/metrics");
    EXPECT_TRUE(body.ok());
    double total = 0;
    for (const MetricSample& sample : FindSamples(ParseMetrics(*body), "attnscope_requests_total",
                                                  {{"rpc", rpc}, {"transport", transport}})) {
      total += sample.value;
    }
    return total;
  };
  const double http_before = count("Tokenize", "http");
  const double grpc_before = count("Tokenize", "grpc");
  for (int i = 0; i < 3; ++i) PostJson<v1::TokenizeResponse>("Tokenize", R"({"text": "hi"})");
  v1::TokenizeRequest request;
  request.set_text("hi");
  CallGrpc(&v1::AttentionService::Stub::Tokenize, stub_.get(), request);
  EXPECT_EQ(count("Tokenize", "http") - http_before, 3);
  EXPECT_EQ(count("Tokenize", "grpc") - grpc_before, 1);
}

// cpp-httplib serves each open connection on a thread of a fixed pool, eight by default, and keeps
// a connection between requests for 5 s. Sixteen kept-alive clients (three browsers' worth) must
// leave threads for a new one: its request gets an answer within 3 s, before any of theirs
// expires.
TEST_F(HttpTest, KeptAliveConnectionsLeaveRoomForOtherClients) {
  std::vector<std::unique_ptr<httplib::Client>> idle;
  for (int i = 0; i < 16; ++i) {
    idle.push_back(std::make_unique<httplib::Client>("127.0.0.1", server_->http_port()));
    idle.back()->set_keep_alive(true);
    httplib::Result result =
        idle.back()->Post(absl::StrCat(kPath, "ListModels").c_str(), "{}", "application/json");
    ASSERT_TRUE(result) << "kept-alive client " << i << ": " << httplib::to_string(result.error());
    ASSERT_EQ(result->status, 200);
  }
  httplib::Client fresh("127.0.0.1", server_->http_port());
  fresh.set_read_timeout(3);
  httplib::Result result =
      fresh.Post(absl::StrCat(kPath, "ListModels").c_str(), "{}", "application/json");
  ASSERT_TRUE(result) << "a new client waited for a free thread: "
                      << httplib::to_string(result.error());
  EXPECT_EQ(result->status, 200);
}

TEST_F(HttpTest, WithoutADashboardTheRootSaysSo) {
  httplib::Result root = http_->Get("/");
  ASSERT_TRUE(root);
  EXPECT_EQ(root->status, 404);
  EXPECT_NE(root->body.find("/attnscope.v1.AttentionService/"), std::string::npos);
}

// A Connect envelope: flags, 4-byte big-endian length, payload.
std::string Envelope(int flags, const std::string& payload) {
  std::string out(5, '\0');
  out[0] = static_cast<char>(flags);
  for (int i = 0; i < 4; ++i)
    out[1 + i] = static_cast<char>((payload.size() >> (24 - 8 * i)) & 0xff);
  return out + payload;
}

// The (flags, payload) envelopes of a body; a test failure when it does not split into whole ones.
std::vector<std::pair<int, std::string>> Envelopes(const std::string& body) {
  std::vector<std::pair<int, std::string>> envelopes;
  size_t at = 0;
  while (at + 5 <= body.size()) {
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(body[at + i]); };
    const size_t size = (size_t{byte(1)} << 24) | (byte(2) << 16) | (byte(3) << 8) | byte(4);
    envelopes.emplace_back(byte(0), body.substr(at + 5, size));
    at += 5 + size;
  }
  EXPECT_EQ(at, body.size()) << "a cut envelope";
  return envelopes;
}

TEST_F(HttpTest, ConnectStreamingRequestsGetConnectStreamingAnswers) {
  v1::GetAttentionRequest request;
  request.set_model("llama");
  request.set_text("Once upon a time");
  request.add_layers(0);
  request.add_layers(-1);
  std::vector<v1::StreamAttentionResponse> expected;
  {
    grpc::ClientContext context;
    auto reader = stub_->StreamAttention(&context, request);
    v1::StreamAttentionResponse message;
    while (reader->Read(&message)) expected.push_back(message);
    ASSERT_TRUE(reader->Finish().ok());
  }
  ASSERT_EQ(expected.size(), 3u);  // header, two layers

  // connect+json: JSON messages in envelopes, then the end of the stream.
  httplib::Result json =
      Post("StreamAttention", Envelope(0, R"({"model": "llama", "text": "Once upon a time",
                                              "layers": [0, -1]})"),
           "application/connect+json");
  ASSERT_TRUE(json);
  EXPECT_EQ(json->status, 200);
  EXPECT_EQ(json->get_header_value("Content-Type"), "application/connect+json");
  auto envelopes = Envelopes(json->body);
  ASSERT_EQ(envelopes.size(), expected.size() + 1);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(envelopes[i].first, 0);
    v1::StreamAttentionResponse message;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(envelopes[i].second, &message).ok())
        << envelopes[i].second.substr(0, 200);
    EXPECT_TRUE(MessageDifferencer::Equals(message, expected[i])) << "envelope " << i;
  }
  EXPECT_EQ(envelopes.back().first, 2);
  EXPECT_EQ(nlohmann::json::parse(envelopes.back().second), nlohmann::json::object());

  // connect+proto: the binary request in an envelope.
  httplib::Result binary = Post("StreamAttention", Envelope(0, request.SerializeAsString()),
                                "application/connect+proto");
  ASSERT_TRUE(binary);
  EXPECT_EQ(binary->status, 200);
  EXPECT_EQ(binary->get_header_value("Content-Type"), "application/connect+proto");
  envelopes = Envelopes(binary->body);
  ASSERT_EQ(envelopes.size(), expected.size() + 1);
  for (size_t i = 0; i < expected.size(); ++i) {
    v1::StreamAttentionResponse message;
    ASSERT_TRUE(message.ParseFromString(envelopes[i].second));
    EXPECT_TRUE(MessageDifferencer::Equals(message, expected[i])) << "envelope " << i;
  }
  EXPECT_EQ(envelopes.back(), std::make_pair(2, std::string("{}")));

  // Generate too, and errors of a Connect stream come in its end-of-stream envelope with 200.
  httplib::Result generated =
      Post("Generate",
           Envelope(0, R"({"model": "llama", "prompt": "Once upon a time", "maxNewTokens": 3})"),
           "application/connect+json");
  ASSERT_TRUE(generated);
  EXPECT_EQ(generated->status, 200);
  envelopes = Envelopes(generated->body);
  ASSERT_EQ(envelopes.size(), 6u);  // header, three tokens, done, end
  EXPECT_TRUE(nlohmann::json::parse(envelopes[0].second).contains("header"));
  EXPECT_TRUE(nlohmann::json::parse(envelopes[4].second).contains("done"));
  EXPECT_EQ(envelopes.back(), std::make_pair(2, std::string("{}")));
  for (const auto& [body, code] : std::vector<std::pair<std::string, std::string>>{
           {Envelope(0, R"({"model": "nope", "prompt": "hi"})"), "not_found"},
           {Envelope(0, "{\"model\": "), "invalid_argument"},
           {Envelope(1, "{}"), "internal"},
           {Envelope(0, "{}").substr(0, 3), "invalid_argument"},
           {Envelope(0, "{}") + Envelope(0, "{}"), "invalid_argument"}}) {
    SCOPED_TRACE(body);
    httplib::Result failed = Post("Generate", body, "application/connect+json");
    ASSERT_TRUE(failed);
    EXPECT_EQ(failed->status, 200);
    EXPECT_EQ(failed->get_header_value("Content-Type"), "application/connect+json");
    envelopes = Envelopes(failed->body);
    ASSERT_EQ(envelopes.size(), 1u) << failed->body;
    EXPECT_EQ(envelopes[0].first, 2);
    const nlohmann::json end = nlohmann::json::parse(envelopes[0].second);
    EXPECT_TRUE(end["error"]["code"] == code ||
                (code == "internal" && end["error"]["code"] == "unimplemented"))
        << end.dump();
    EXPECT_FALSE(end["error"].value("message", "").empty());
  }
  // A unary method takes no streaming content type.
  httplib::Result unary = Post("Tokenize", Envelope(0, "{}"), "application/connect+json");
  ASSERT_TRUE(unary);
  EXPECT_EQ(unary->status, 415);
}

TEST_F(HttpTest, ErrorsOfTheHttpLayerItselfAreJson) {
  const int port = server_->http_port();
  const std::vector<std::pair<std::string, int>> cases = {
      // A chunk size that is not hex.
      {absl::StrCat("POST ", kPath,
                    "Tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "zz\r\n{}\r\n0\r\n\r\n"),
       400},
      // A method HTTP does not have.
      {absl::StrCat("BREW ", kPath, "Tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"), 405},
      // A header line without a colon.
      {absl::StrCat("GET ", kPath, "ListModels HTTP/1.1\r\nHost 127.0.0.1\r\n\r\n"), 400},
      // A URI longer than the limit.
      {absl::StrCat("GET /", std::string(20000, 'x'), " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"), 414},
      // An unknown path.
      {"GET /nothing/here HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 404},
  };
  for (const auto& [request, status] : cases) {
    SCOPED_TRACE(request.substr(0, 80));
    absl::StatusOr<std::unique_ptr<RawConnection>> connection = RawConnection::Open(port);
    ASSERT_TRUE(connection.ok());
    (*connection)->Send(request);
    absl::StatusOr<RawResponse> answer = (*connection)->ReadResponse(absl::Seconds(10));
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->status, status);
    EXPECT_EQ(answer->headers["content-type"], "application/json");
    const nlohmann::json error = nlohmann::json::parse(answer->body, nullptr, false);
    ASSERT_TRUE(error.is_object()) << answer->body;
    EXPECT_TRUE(error.contains("code") && error.contains("message")) << answer->body;
  }
}

TEST_F(HttpTest, AFieldReadOnceGivenTwiceIsRefused) {
  const std::string body = R"({"text": "paris"})";
  const std::string head =
      absl::StrCat("POST ", kPath,
                   "Tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ", body.size(), "\r\n");
  for (const std::string& fields :
       {std::string("Content-Type: application/json\r\nAuthorization: Bearer a\r\n"
                    "Authorization: Bearer b\r\n"),
        std::string("Content-Type: application/json\r\nContent-Type: application/proto\r\n")}) {
    SCOPED_TRACE(fields);
    absl::StatusOr<std::unique_ptr<RawConnection>> connection =
        RawConnection::Open(server_->http_port());
    ASSERT_TRUE(connection.ok());
    (*connection)->Send(absl::StrCat(head, fields, "\r\n", body));
    absl::StatusOr<RawResponse> answer = (*connection)->ReadResponse(absl::Seconds(10));
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->status, 400);
    const std::string name = absl::StrContains(fields, "Bearer") ? "Authorization" : "Content-Type";
    EXPECT_NE(
        answer->body.find(absl::StrCat("request header '", name, "': expected at most one, got 2")),
        std::string::npos)
        << answer->body;
  }
}

}  // namespace
}  // namespace attnscope::testing

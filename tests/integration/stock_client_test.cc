// Clients that know nothing of attnscope beyond its proto: a stock Connect client (code generated
// by protoc-gen-es and protoc-gen-connect-es, @connectrpc/connect-node's transport, JSON and
// binary, unary and server streaming; tests/integration/connect_client/) and Python's grpcio with
// default options (tests/integration/python_unary_client.py). Each sends Vietnamese and Korean
// texts as its generated code serialises them and must get exactly the tokens the C++ gRPC client
// gets: with text fields declared `bytes`, protobuf-JSON clients sent base64 that the server read
// as literal text.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

using ::testing::HasSubstr;

const std::vector<std::string>& Texts() {
  static const std::vector<std::string> texts = {
      "Tôi yêu Việt Nam quá", "Tiếng Việt có sáu thanh điệu: ngang, huyền, sắc, hỏi, ngã, nặng.",
      "나는 오늘 랭체인을 공부한다", "서울은 한국의 수도입니다."};
  return texts;
}

class StockClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ServerProcess::Options options;
    options.models = {"default=" + DefaultModelDir()};
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  // The C++ gRPC client's answer for each text, in the clients' JSON form.
  static nlohmann::json Expected() {
    std::unique_ptr<Client> client = server_->NewClient();
    nlohmann::json expected = nlohmann::json::array();
    for (const std::string& text : Texts()) {
      v1::TokenizeRequest request;
      request.set_model("default");
      request.set_text(text);
      absl::StatusOr<v1::TokenizeResponse> answer = client->Tokenize(request);
      EXPECT_TRUE(answer.ok()) << answer.status();
      if (!answer.ok()) return expected;
      nlohmann::json ids = nlohmann::json::array();
      for (int64_t id : answer->tokens().input_ids()) ids.push_back(std::to_string(id));
      expected.push_back({{"tokens", answer->tokens().tokens()},
                          {"input_ids", ids},
                          {"original_texts", answer->tokens().original_texts()}});
    }
    return expected;
  }

  static nlohmann::json RunClient(const std::vector<std::string>& argv) {
    const CommandResult result = RunCommand(argv, absl::Seconds(120));
    EXPECT_EQ(result.exit_code, 0) << result.stdout_text << result.stderr_text << server_->Log();
    return nlohmann::json::parse(result.stdout_text, nullptr, /*allow_exceptions=*/false);
  }

  static nlohmann::json RunConnect(const std::string& format) {
    return RunClient({ATTNSCOPE_NODE, ATTNSCOPE_CONNECT_CLIENT, "--gen", ATTNSCOPE_CONNECT_GEN,
                      "--base_url", absl::StrCat("http://127.0.0.1:", server_->http_port()),
                      "--model", "default", "--format", format, "--texts",
                      nlohmann::json(Texts()).dump()});
  }

  static void ExpectConnectAnswers(const nlohmann::json& result) {
    ASSERT_FALSE(result.is_discarded());
    const nlohmann::json expected = Expected();
    EXPECT_EQ(result["tokenize"], expected);
    // Korean and Vietnamese tokens of the texts themselves, not of their base64.
    EXPECT_EQ(result["tokenize"][0]["original_texts"][1], "Tôi");
    EXPECT_EQ(result["tokenize"][2]["original_texts"][1], "나");

    const nlohmann::json& stream = result["stream"];
    EXPECT_EQ(stream["header"]["tokens"], expected[0]);
    const std::vector<int> layers = stream["header"]["layers"];
    EXPECT_FALSE(layers.empty());
    EXPECT_EQ(stream["layers"].get<std::vector<int>>(), layers);
    const std::vector<std::string> shape = stream["header"]["attentions_shape"];
    ASSERT_EQ(shape.size(), 4u);
    int64_t total = 0;
    for (int64_t values : stream["values"]) total += values;
    EXPECT_EQ(total, std::stoll(shape[0]) * std::stoll(shape[1]) * std::stoll(shape[2]) *
                         std::stoll(shape[3]));

    EXPECT_EQ(result["unknown_model"]["code"], "NotFound");
    EXPECT_THAT(result["unknown_model"]["message"].get<std::string>(), HasSubstr("no-such-model"));
  }

  static ServerProcess* server_;
};

ServerProcess* StockClientTest::server_ = nullptr;

TEST_F(StockClientTest, ConnectJsonUnaryAndServerStreaming) {
  ExpectConnectAnswers(RunConnect("json"));
}

TEST_F(StockClientTest, ConnectBinaryUnaryAndServerStreaming) {
  ExpectConnectAnswers(RunConnect("binary"));
}

TEST_F(StockClientTest, GrpcioWithDefaultOptions) {
  const nlohmann::json result =
      RunClient({"/usr/bin/python3", ATTNSCOPE_PYTHON_UNARY_CLIENT, "--proto_dir",
                 ATTNSCOPE_PYTHON_PROTO, "--address", server_->address(), "--model", "default",
                 "--texts", nlohmann::json(Texts()).dump()});
  ASSERT_FALSE(result.is_discarded());
  EXPECT_EQ(result["tokenize"], Expected());
  EXPECT_EQ(result["unknown_model"]["code"], "NOT_FOUND");
}

}  // namespace
}  // namespace attnscope::testing

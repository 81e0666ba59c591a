// The bad-input table against the real server: each row gets its documented gRPC code
// and a message naming the problem, and a normal request right after it still succeeds (bad input
// never wedges the server).
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "attnscope/v1/attnscope.grpc.pb.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Server limits of this test: small enough that a 40-token text overflows the response cap.
constexpr int64_t kMaxTokens = 48;
constexpr int64_t kMaxResponseBytes = 50000;

// `count` whitespace-separated words that tiny-bert's vocabulary holds whole (one token each).
std::string BertWords(int count) {
  const std::vector<std::string> words = {"the", "capital", "of", "france", "is", "paris"};
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) out.push_back(words[i % words.size()]);
  return absl::StrJoin(out, " ");
}

class BadInputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ServerProcess::Options options;
    options.models = {"bert=" + TinyBertDir(), "llama=" + Stories260kDir()};
    options.max_tokens = kMaxTokens;
    options.max_response_bytes = kMaxResponseBytes;
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr) << "the server did not start";
    client_ = server_->NewClient(kMaxResponseBytes);
  }

  static v1::GetAttentionRequest Normal() {
    v1::GetAttentionRequest request;
    request.set_model("bert");
    request.set_text("the capital of france is paris");
    return request;
  }

  // Checks `status` against the row and that the server still answers a normal request exactly as
  // before the bad one.
  void ExpectRow(const std::string& row, const absl::Status& status, absl::StatusCode code,
                 const std::vector<std::string>& message_parts) {
    SCOPED_TRACE(row);
    EXPECT_EQ(status.code(), code) << status;
    const std::string message = absl::AsciiStrToLower(status.message());
    for (const std::string& part : message_parts) {
      EXPECT_THAT(message, HasSubstr(absl::AsciiStrToLower(part))) << status;
    }
    absl::StatusOr<AttentionResult> after = client_->GetAttention(Normal());
    ASSERT_TRUE(after.ok()) << "normal request after '" << row << "': " << after.status();
    EXPECT_EQ(after->attentions.shape, (std::vector<int64_t>{3, 4, 8, 8}));
  }

  static ServerProcess* server_;
  std::unique_ptr<Client> client_;
};

ServerProcess* BadInputTest::server_ = nullptr;

TEST_F(BadInputTest, EmptyText) {
  v1::GetAttentionRequest request = Normal();
  request.set_text("");
  ExpectRow("GetAttention empty text", client_->GetAttention(request).status(),
            absl::StatusCode::kInvalidArgument, {"text", "empty"});
  ExpectRow("StreamAttention empty text", client_->StreamAttention(request).status(),
            absl::StatusCode::kInvalidArgument, {"text", "empty"});
  v1::TokenizeRequest tokenize;
  tokenize.set_model("llama");
  ExpectRow("Tokenize empty text", client_->Tokenize(tokenize).status(),
            absl::StatusCode::kInvalidArgument, {"text"});
  v1::CrossAttentionRequest cross;
  cross.set_model("bert");
  cross.set_query("paris");
  cross.add_documents("");
  ExpectRow("CrossAttention empty document", client_->CrossAttention(cross).status(),
            absl::StatusCode::kInvalidArgument, {"document"});
  cross.clear_documents();
  ExpectRow("CrossAttention without documents", client_->CrossAttention(cross).status(),
            absl::StatusCode::kInvalidArgument, {"document"});
  v1::EncodeRequest encode;
  encode.set_model("bert");
  ExpectRow("Encode without inputs", client_->Encode(encode).status(),
            absl::StatusCode::kInvalidArgument, {"input"});
}

TEST_F(BadInputTest, TooManyTokensWithoutTruncation) {
  for (const std::string model : {"bert", "llama"}) {
    v1::GetAttentionRequest request;
    request.set_model(model);
    request.set_text(BertWords(60));
    ExpectRow(model + " over max_tokens", client_->GetAttention(request).status(),
              absl::StatusCode::kInvalidArgument, {absl::StrCat(kMaxTokens), "truncation"});
    // The fix the message names works.
    request.mutable_tokenization()->set_truncation(v1::TRUNCATION_LONGEST_FIRST);
    request.set_top_k(1);
    absl::StatusOr<AttentionResult> truncated = client_->GetAttention(request);
    ASSERT_TRUE(truncated.ok()) << truncated.status();
    EXPECT_EQ(truncated->tokens.tokens_size(), kMaxTokens);
  }
}

TEST_F(BadInputTest, NegativeMaxLength) {
  for (const v1::Truncation truncation : {v1::TRUNCATION_NONE, v1::TRUNCATION_LONGEST_FIRST}) {
    v1::GetAttentionRequest request = Normal();
    request.mutable_tokenization()->set_truncation(truncation);
    request.mutable_tokenization()->set_max_length(-5);
    ExpectRow(absl::StrCat("max_length -5, truncation ", v1::Truncation_Name(truncation)),
              client_->GetAttention(request).status(), absl::StatusCode::kInvalidArgument,
              {"tokenization.max_length -5", "positive count"});
  }
}

TEST_F(BadInputTest, InvalidUtf8) {
  // Texts are proto3 strings: a text that is not UTF-8 does not parse as the request at all, and
  // the answer says so rather than gRPC's bare INTERNAL.
  v1::GetAttentionRequest request = Normal();
  request.set_text(
      "paris \xC3\x28 france");  // 0xC3 starts a 2-byte sequence; 0x28 cannot continue it
  ExpectRow("invalid UTF-8", client_->GetAttention(request).status(),
            absl::StatusCode::kInvalidArgument, {"utf-8", "GetAttention"});
  v1::TokenizeRequest tokenize;
  tokenize.set_model("llama");
  tokenize.set_text("\xFF");
  ExpectRow("invalid UTF-8 Tokenize", client_->Tokenize(tokenize).status(),
            absl::StatusCode::kInvalidArgument, {"utf-8", "Tokenize"});
  tokenize.set_text("hi");
  tokenize.set_text_pair("ok \xFF");
  ExpectRow("invalid UTF-8 text_pair", client_->Tokenize(tokenize).status(),
            absl::StatusCode::kInvalidArgument, {"utf-8", "Tokenize"});
}

// Sends `bytes` as the request of `method` without generated code; the call's status.
grpc::Status GenericUnaryCall(const std::string& address, const std::string& method,
                              const std::string& bytes) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  grpc::CompletionQueue queue;
  grpc::ClientContext context;
  grpc::Slice slice(bytes);
  const grpc::ByteBuffer request(&slice, 1);
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      generic.PrepareUnaryCall(&context, method, request, &queue);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  if (!queue.Next(&tag, &ok)) return grpc::Status(grpc::StatusCode::INTERNAL, "queue shut down");
  return status;
}

// A method the server does not have (another proto, a typo) is UNIMPLEMENTED naming it and the
// methods there are; gRPC's own answer has no message.
TEST_F(BadInputTest, UnknownMethodIsNamedWithTheMethodsThereAre) {
  for (const std::string method :
       {"/attnscope.v1.AttentionService/GetAtention", "/other.v1.Service/Run"}) {
    const grpc::Status status = GenericUnaryCall(server_->address(), method, "");
    ExpectRow(
        method,
        absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message()),
        absl::StatusCode::kUnimplemented,
        {absl::StrCat("method '", method, "'"), "GetAttention", "StreamAttention"});
  }
}

// Bytes that are not the method's message at all (here: a text field cut short, and a text field
// with invalid UTF-8, sent by a client without generated code) are INVALID_ARGUMENT naming the
// RPC, and counted in the request metrics like every other call.
TEST(UndecodableRequestTest, IsInvalidArgumentAndCounted) {
  ServerProcess::Options options;
  options.models = {"bert=" + TinyBertDir()};
  options.metrics_port = FreeTcpPort();
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  // "\x12\x03" is field 2 (text), 3 bytes long; split so that "ab" is not read as hex digits.
  const std::string cut_short = "\x12\x09paris";
  const std::string invalid_utf8 = std::string("\x12\x03") + "ab\xff";
  for (const std::string& bytes : {cut_short, invalid_utf8}) {
    const grpc::Status status = GenericUnaryCall(
        (*server)->address(), "/attnscope.v1.AttentionService/GetAttention", bytes);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("GetAttention"));
    EXPECT_THAT(status.error_message(), HasSubstr("UTF-8"));
  }
  // Answered and counted, so not also written to the log, at whatever rate a client sends them.
  EXPECT_THAT((*server)->Log(), Not(HasSubstr("libprotobuf ERROR")));
  absl::StatusOr<std::string> metrics = HttpGet((*server)->metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const std::vector<MetricSample> counted =
      FindSamples(ParseMetrics(*metrics), "attnscope_requests_total",
                  {{"rpc", "GetAttention"}, {"transport", "grpc"}, {"code", "INVALID_ARGUMENT"}});
  ASSERT_EQ(counted.size(), 1u) << *metrics;
  EXPECT_EQ(counted[0].value, 2);
}

TEST_F(BadInputTest, UnknownModel) {
  v1::GetAttentionRequest request = Normal();
  request.set_model("no-such-model");
  ExpectRow("GetAttention unknown model", client_->GetAttention(request).status(),
            absl::StatusCode::kNotFound, {"no-such-model"});
  ExpectRow("GetModelInfo unknown model", client_->GetModelInfo("no-such-model").status(),
            absl::StatusCode::kNotFound, {"no-such-model"});
  // A path is never a model name.
  ExpectRow("GetModelInfo path", client_->GetModelInfo(TinyBertDir()).status(),
            absl::StatusCode::kNotFound, {});
  // The name is echoed only in part: whole, it overflowed the client's 8 KB header limit and
  // turned NOT_FOUND into the client's own RESOURCE_EXHAUSTED.
  ExpectRow("GetModelInfo 9000-byte name", client_->GetModelInfo(std::string(9000, 'm')).status(),
            absl::StatusCode::kNotFound, {"9000 bytes", "not loaded", "bert"});
}

TEST_F(BadInputTest, EncodeOverTheCapIsRefusedBeforeTheForwardPass) {
  v1::EncodeRequest request;
  request.set_model("bert");
  request.set_output_hidden_states(true);
  for (int i = 0; i < 3; ++i) request.add_inputs()->set_text(BertWords(40));  // 42 tokens each
  // The refusal quotes the tensors' size from the token counts (tiny-bert: hidden 32, 3 layers,
  // so 3 + 2 states of 32 float32 per token), not the serialized size of a computed answer, which
  // would also count the token metadata.
  const int64_t bytes = 3 * 42 * (3 + 2) * 32 * 4;
  ASSERT_GT(bytes, kMaxResponseBytes);
  ExpectRow("Encode over the cap", client_->Encode(request).status(),
            absl::StatusCode::kResourceExhausted,
            {absl::StrCat("Encode response would be ", bytes, " bytes"), "fewer inputs"});
}

TEST_F(BadInputTest, RequestOverTheServersReceiveLimit) {
  v1::GetAttentionRequest request = Normal();
  request.set_text(BertWords(1000000));  // about 5 MB, over gRPC's default 4 MB
  ExpectRow("5 MB text", client_->GetAttention(request).status(),
            absl::StatusCode::kResourceExhausted,
            {"the request is", "bytes the server accepts", "shorter texts"});
}

// gRPC inflates a compressed message whole before it checks its size, so a small gzip message
// could cost gigabytes: compressed messages are refused before they are inflated.
TEST_F(BadInputTest, CompressedRequestsAreRefusedBeforeTheyAreInflated) {
  std::unique_ptr<v1::AttentionService::Stub> stub = v1::AttentionService::NewStub(
      grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  v1::TokenizeRequest request;
  request.set_text("paris");
  for (const grpc_compression_algorithm algorithm : {GRPC_COMPRESS_GZIP, GRPC_COMPRESS_DEFLATE}) {
    grpc::ClientContext context;
    context.set_compression_algorithm(algorithm);
    v1::TokenizeResponse response;
    const grpc::Status status = stub->Tokenize(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
    EXPECT_THAT(status.error_message(), ::testing::HasSubstr("is disabled"));
  }
  grpc::ClientContext context;
  v1::TokenizeResponse response;
  EXPECT_TRUE(stub->Tokenize(&context, request, &response).ok());
  // gRPC logs each refusal; a client sending them fast does not fill the log.
  for (int i = 0; i < 40; ++i) {
    grpc::ClientContext compressed;
    compressed.set_compression_algorithm(GRPC_COMPRESS_GZIP);
    EXPECT_FALSE(stub->Tokenize(&compressed, request, &response).ok());
  }
  const std::string log = server_->Log();
  size_t lines = 0;
  for (size_t at = log.find("is disabled"); at != std::string::npos;
       at = log.find("is disabled", at + 1)) {
    ++lines;
  }
  EXPECT_LE(lines, 20u) << log.substr(0, 2000);
}

// gRPC 1.51 ended the whole connection when one call's metadata passed 8 KiB, failing every other
// call on it (54 of 54 here before). Metadata up to the listener's 64 KiB bound now reaches the
// call, and the calls beside it on the same connection are answered.
TEST_F(BadInputTest, LargeMetadataLeavesTheOtherCallsOnItsConnectionAlone) {
  const std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
  std::unique_ptr<v1::AttentionService::Stub> stub = v1::AttentionService::NewStub(channel);
  std::atomic<bool> done{false};
  std::atomic<int> others_failed{0};
  std::atomic<int> others_answered{0};
  std::vector<std::thread> others;
  for (int t = 0; t < 2; ++t) {
    others.emplace_back([&] {
      while (!done.load()) {
        grpc::ClientContext context;
        v1::GetAttentionResponse response;
        const grpc::Status status = stub->GetAttention(&context, Normal(), &response);
        (status.ok() ? others_answered : others_failed).fetch_add(1);
      }
    });
  }
  for (const size_t bytes : {9000, 30000, 60000}) {
    for (int i = 0; i < 10; ++i) {
      grpc::ClientContext context;
      context.AddMetadata("authorization", "Bearer " + std::string(bytes, 'x'));
      v1::TokenizeRequest request;
      request.set_model("bert");
      request.set_text("paris");
      v1::TokenizeResponse response;
      const grpc::Status status = stub->Tokenize(&context, request, &response);
      EXPECT_TRUE(status.ok()) << bytes << " bytes: " << status.error_message();
    }
  }
  done.store(true);
  for (std::thread& thread : others) thread.join();
  EXPECT_EQ(others_failed.load(), 0) << others_answered.load() << " answered";
  EXPECT_GT(others_answered.load(), 0);

  // Over the bound: the listener closes that call's connection; the others stay.
  std::unique_ptr<v1::AttentionService::Stub> over = v1::AttentionService::NewStub(
      grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.AddMetadata("authorization", "Bearer " + std::string(70000, 'x'));
  v1::TokenizeRequest request;
  request.set_model("bert");
  request.set_text("paris");
  v1::TokenizeResponse response;
  EXPECT_FALSE(over->Tokenize(&context, request, &response).ok());
  grpc::ClientContext after;
  v1::GetAttentionResponse answer;
  EXPECT_TRUE(stub->GetAttention(&after, Normal(), &answer).ok());
}

TEST_F(BadInputTest, CrossAttentionTextWithoutTokens) {
  v1::CrossAttentionRequest cross;
  cross.set_model("bert");
  cross.set_query(" \t ");
  cross.add_documents("paris is the capital of france");
  ExpectRow("whitespace query", client_->CrossAttention(cross).status(),
            absl::StatusCode::kInvalidArgument, {"query", "at least one token", "whitespace"});
  cross.set_query("paris");
  cross.clear_documents();
  cross.add_documents("france");
  cross.add_documents("\u200b ");  // a zero-width space, which BERT's normaliser drops
  ExpectRow("whitespace document", client_->CrossAttention(cross).status(),
            absl::StatusCode::kInvalidArgument, {"documents[1]", "at least one token"});
}

TEST_F(BadInputTest, CrossEncoderScoresOnlyWithItsSpecialTokens) {
  // A cross-encoder's score of "query document" without [CLS] and [SEP] is no relevance score.
  v1::CrossAttentionRequest cross;
  cross.set_model("bert");
  cross.set_query("paris");
  cross.add_documents("paris is the capital of france");
  cross.mutable_tokenization()->set_skip_special_tokens(true);
  ExpectRow("CrossAttention skip_special_tokens", client_->CrossAttention(cross).status(),
            absl::StatusCode::kInvalidArgument, {"skip_special_tokens", "cross-encoder"});
  v1::AttributeRequest attribute;
  attribute.set_model("bert");
  attribute.set_text("paris");
  attribute.set_text_pair("paris is the capital of france");
  attribute.mutable_tokenization()->set_skip_special_tokens(true);
  ExpectRow("Attribute skip_special_tokens", client_->Attribute(attribute).status(),
            absl::StatusCode::kInvalidArgument, {"skip_special_tokens", "cross-encoder"});
  // Attention alone has no score to spoil.
  v1::GetAttentionRequest attention = Normal();
  attention.mutable_tokenization()->set_skip_special_tokens(true);
  absl::StatusOr<AttentionResult> without_specials = client_->GetAttention(attention);
  ASSERT_TRUE(without_specials.ok()) << without_specials.status();
  EXPECT_EQ(without_specials->attentions.shape, (std::vector<int64_t>{3, 4, 6, 6}));
}

TEST_F(BadInputTest, EveryTextFieldRefusesTextWithoutTokens) {
  // One rule on every text field: a text must give at least one token of its own.
  v1::TokenizeRequest tokenize;
  tokenize.set_model("bert");
  tokenize.set_text("paris");
  tokenize.set_text_pair("  \n ");
  ExpectRow("whitespace text_pair", client_->Tokenize(tokenize).status(),
            absl::StatusCode::kInvalidArgument, {"text_pair", "at least one token", "whitespace"});
  v1::GetAttentionRequest attention = Normal();
  attention.set_text("\t");
  ExpectRow("whitespace text", client_->GetAttention(attention).status(),
            absl::StatusCode::kInvalidArgument, {"text:", "at least one token"});
  v1::EncodeRequest encode;
  encode.set_model("bert");
  encode.add_inputs()->set_text("paris");
  encode.add_inputs()->set_text("\u200b");  // a zero-width space, which BERT's normaliser drops
  ExpectRow("dropped-characters input", client_->Encode(encode).status(),
            absl::StatusCode::kInvalidArgument, {"inputs[1].text", "at least one token"});
}

TEST_F(BadInputTest, OnlySecondOnASingleTextFailsOnlyWhenItMustCut) {
  // As Hugging Face's tokenizers: only_second has nothing to cut in a single text, which is fine
  // until a cut is needed.
  v1::TokenizeRequest request;
  request.set_model("bert");
  request.set_text(BertWords(5));
  request.mutable_tokenization()->set_truncation(v1::TRUNCATION_ONLY_SECOND);
  absl::StatusOr<v1::TokenizeResponse> fits = client_->Tokenize(request);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(fits->tokens().tokens_size(), 7);
  request.mutable_tokenization()->set_max_length(5);
  ExpectRow("only_second cutting a single text", client_->Tokenize(request).status(),
            absl::StatusCode::kInvalidArgument, {"only_second", "expected a text pair"});
}

TEST_F(BadInputTest, LayerOrHeadOutOfRange) {
  for (int layer : {3, -4, 100}) {
    v1::GetAttentionRequest request = Normal();
    request.add_layers(layer);
    ExpectRow(absl::StrCat("layer ", layer), client_->GetAttention(request).status(),
              absl::StatusCode::kInvalidArgument, {"layer", absl::StrCat(layer)});
  }
  for (int head : {4, -5}) {
    v1::GetAttentionRequest request = Normal();
    request.add_heads(head);
    ExpectRow(absl::StrCat("head ", head), client_->GetAttention(request).status(),
              absl::StatusCode::kInvalidArgument, {"head", absl::StrCat(head)});
  }
  v1::CrossAttentionRequest cross;
  cross.set_model("bert");
  cross.set_query("paris");
  cross.add_documents("france");
  cross.add_heads(9);
  ExpectRow("CrossAttention head 9", client_->CrossAttention(cross).status(),
            absl::StatusCode::kInvalidArgument, {"head", "9"});
}

TEST_F(BadInputTest, TopK) {
  // The proto: top_k "when > 0" sparsifies, so 0 is the dense answer, not an error.
  v1::GetAttentionRequest request = Normal();
  request.set_top_k(0);
  absl::StatusOr<AttentionResult> dense = client_->GetAttention(request);
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_EQ(dense->attentions.shape, (std::vector<int64_t>{3, 4, 8, 8}));
  EXPECT_FALSE(dense->top_k_indices.has_value());

  request.set_top_k(9);  // rows have 8 keys
  ExpectRow("top_k 9 > 8 keys", client_->GetAttention(request).status(),
            absl::StatusCode::kInvalidArgument, {"top_k", "9", "8"});
  request.set_top_k(-1);
  ExpectRow("top_k -1", client_->GetAttention(request).status(), absl::StatusCode::kInvalidArgument,
            {"top_k"});
  // "After the window": 3 keys in the window, so 4 is too many even though rows have 8.
  request.set_top_k(4);
  request.mutable_window()->set_key_start(2);
  request.mutable_window()->set_key_end(5);
  ExpectRow("top_k 4 > 3 windowed keys", client_->GetAttention(request).status(),
            absl::StatusCode::kInvalidArgument, {"top_k", "4", "3"});
  // The proto: top_k and include_scores together are contradictory.
  request.set_top_k(2);
  request.clear_window();
  request.set_include_scores(true);
  ExpectRow("top_k with include_scores", client_->GetAttention(request).status(),
            absl::StatusCode::kInvalidArgument, {"top_k", "include_scores"});
  request.set_include_scores(false);
  request.set_top_k(8);
  absl::StatusOr<AttentionResult> whole_row = client_->GetAttention(request);
  ASSERT_TRUE(whole_row.ok()) << whole_row.status();
  EXPECT_EQ(whole_row->attentions.shape, (std::vector<int64_t>{3, 4, 8, 8}));
}

TEST_F(BadInputTest, WindowOutsideTheSequence) {
  struct Row {
    const char* name;
    int query_start, query_end, key_start, key_end;
  };
  const std::vector<Row> rows = {
      {"query_start past the end", 8, 0, 0, 0}, {"query_end past the end", 0, 9, 0, 0},
      {"key_end past the end", 0, 0, 0, 20},    {"key_start after key_end", 0, 0, 5, 3},
      {"negative query_start", -1, 0, 0, 0},
  };
  for (const Row& row : rows) {
    v1::GetAttentionRequest request = Normal();
    v1::Window* window = request.mutable_window();
    window->set_query_start(row.query_start);
    window->set_query_end(row.query_end);
    window->set_key_start(row.key_start);
    window->set_key_end(row.key_end);
    ExpectRow(row.name, client_->GetAttention(request).status(), absl::StatusCode::kInvalidArgument,
              {"window"});
  }
}

TEST_F(BadInputTest, ResponseOverTheCap) {
  v1::GetAttentionRequest request = Normal();
  request.set_text(BertWords(38));  // 40 tokens: 3 x 4 x 40 x 40 float32 = 76800 bytes
  const absl::Status status = client_->GetAttention(request).status();
  ExpectRow("response over the cap", status, absl::StatusCode::kResourceExhausted,
            {"StreamAttention", "float16", "top_k", absl::StrCat(kMaxResponseBytes)});
  // Each fix the message names works.
  absl::StatusOr<AttentionResult> streamed = client_->StreamAttention(request);
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  EXPECT_EQ(streamed->attentions.shape, (std::vector<int64_t>{3, 4, 40, 40}));
  request.set_dtype(v1::DTYPE_FLOAT16);
  EXPECT_TRUE(client_->GetAttention(request).ok());
  request.set_dtype(v1::DTYPE_FLOAT32);
  request.add_layers(0);
  EXPECT_TRUE(client_->GetAttention(request).ok());

  // Fixes the request already uses are not offered again. (float16 with top_k 40 of 40 keys:
  // 3 x 4 x 40 x 40 x (2 + 4 bytes of indices) = 115200 bytes.)
  request.clear_layers();
  request.set_dtype(v1::DTYPE_FLOAT16);
  request.set_top_k(40);
  const absl::Status again = client_->GetAttention(request).status();
  ASSERT_EQ(again.code(), absl::StatusCode::kResourceExhausted) << again;
  EXPECT_THAT(std::string(again.message()), HasSubstr("StreamAttention"));
  EXPECT_THAT(std::string(again.message()), Not(HasSubstr("top_k")));
  EXPECT_THAT(std::string(again.message()), Not(HasSubstr("FLOAT16")));
}

// A call the server cannot answer within its deadline ends with DEADLINE_EXCEEDED. The tiny model
// answers some 1 ms calls in time on an idle machine, so each RPC is tried until one expires,
// and the others must have been answered in full.
TEST_F(BadInputTest, OneMillisecondDeadline) {
  v1::GetAttentionRequest request = Normal();
  request.set_text(BertWords(38));
  request.set_top_k(1);
  CallOptions call;
  call.timeout = absl::Milliseconds(1);
  for (const bool stream : {false, true}) {
    const std::string row = stream ? "StreamAttention 1 ms" : "GetAttention 1 ms";
    absl::Status status;
    for (int attempt = 0; attempt < 50; ++attempt) {
      status = stream ? client_->StreamAttention(request, call).status()
                      : client_->GetAttention(request, call).status();
      if (!status.ok()) break;
    }
    ExpectRow(row, status, absl::StatusCode::kDeadlineExceeded, {});
  }
}

TEST(ServerFlagsTest, ImpossibleValuesStopTheStartNamingTheFlag) {
  for (const std::string flag : {"--max_response_bytes=0", "--shutdown_grace_seconds=-1",
                                 "--max_concurrent_requests=-3", "--max_tokens=-1"}) {
    SCOPED_TRACE(flag);
    ServerProcess::Options options;
    options.models = {"bert=" + TinyBertDir()};
    options.extra_flags = {flag};
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
    ASSERT_FALSE(server.ok()) << "started with " << flag;
    EXPECT_THAT(std::string(server.status().message()), HasSubstr(flag.substr(0, flag.find('='))));
  }
}

TEST(ServerFlagsTest, TokenLimitShorterThanTheWarmUpTextStillStarts) {
  ServerProcess::Options options;
  options.models = {"bert=" + TinyBertDir()};
  options.max_tokens = 4;
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<Client> client = (*server)->NewClient();
  v1::GetAttentionRequest request;
  request.set_model("bert");
  request.set_text("paris");
  absl::StatusOr<AttentionResult> answer = client->GetAttention(request);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->tokens.tokens_size(), 3);
  request.set_text(BertWords(5));
  const absl::Status refused = client->GetAttention(request).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("at most 4 tokens"));
}

}  // namespace
}  // namespace attnscope::testing

// No call costs unbounded CPU: a call whose caller sets no deadline still ends at the server's
// ceiling (--max_call_seconds), and a call that asks for more work than --max_call_tokens allows
// (integrated-gradients steps x tokens, beams x new tokens, documents x tokens) is refused before
// its first pass, naming the flag.

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "attnscope/v1/attnscope.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/h2_flood_util.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

using ::testing::HasSubstr;

// The attnscope_requests_total samples with `labels`, scraped until there are at least `count`
// of them or `timeout` has passed.
std::vector<MetricSample> CountedRequests(const ServerProcess& server,
                                          const std::map<std::string, std::string>& labels,
                                          size_t count, absl::Duration timeout) {
  const absl::Time start = absl::Now();
  std::vector<MetricSample> samples;
  while (samples.size() < count && absl::Now() - start < timeout) {
    absl::SleepFor(absl::Milliseconds(100));
    absl::StatusOr<std::string> metrics = HttpGet(server.metrics_port(), "/metrics");
    if (!metrics.ok()) {
      ADD_FAILURE() << metrics.status();
      return {};
    }
    samples = FindSamples(ParseMetrics(*metrics), "attnscope_requests_total", labels);
  }
  return samples;
}

// A stub that takes answers of any size and whose channel keeps HTTP/2's window fixed at 64 KiB,
// so that an answer it does not read stays with the server: with its default bandwidth probe the
// client's transport grew the window and took a whole 32 MB answer on a fast machine, so the
// server's writes never blocked.
std::unique_ptr<v1::AttentionService::Stub> SmallWindowStubOf(const ServerProcess& server) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(-1);
  arguments.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  arguments.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 10);
  return v1::AttentionService::NewStub(
      grpc::CreateCustomChannel(server.address(), grpc::InsecureChannelCredentials(), arguments));
}

TEST(CallLimitsTest, ACallWithoutDeadlineEndsAtTheServersCeiling) {
  ServerProcess::Options options;
  options.models = {"llama=" + Stories260kDir()};
  options.extra_flags = {"--max_call_seconds=0.5"};
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<v1::AttentionService::Stub> stub = StubOf(**server);

  // 500 tokens, each with every layer's attention over its context: seconds of work, and the
  // client sets no deadline.
  v1::GenerateRequest request;
  request.set_prompt("Once upon a time");
  request.set_max_new_tokens(500);
  request.set_ignore_eos(true);
  request.set_output_attentions(true);
  request.set_method(v1::DECODING_METHOD_BEAM_SEARCH);
  request.set_num_beams(8);
  grpc::ClientContext context;
  const absl::Time start = absl::Now();
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub->Generate(&context, request);
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
  }
  const grpc::Status status = reader->Finish();
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("--max_call_seconds"));
  EXPECT_LT(took, absl::Seconds(5));
}

// A grpc-timeout past the year 2262 (2,070,000 hours, about what a client asking for the longest
// deadline sends) is no deadline: system_clock cannot hold it, and the call was taken as expired
// before it began.
TEST(CallLimitsTest, ADeadlineCenturiesAwayIsNoDeadline) {
  ServerProcess::Options options;
  options.models = {"default=" + TinyBertDir()};
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  for (const std::string timeout : {"2060000H", "2070000H", "99999999H"}) {
    const nlohmann::json call =
        RunH2Flood(GrpcPortOf(**server), {"--grpc_timeout", timeout, "--hold", "5"});
    EXPECT_TRUE(call.value("answered", false)) << timeout << ": " << call.dump();
  }
}

// A client that opens a stream and never reads it holds its call slot only until
// --write_timeout_seconds, on both transports: gRPC's blocked write had no deadline of its own, so
// 64 such streams held every slot past --max_call_seconds.
TEST(CallLimitsTest, StreamsNobodyReadsEndAtTheWriteTimeout) {
  ServerProcess::Options options;
  options.models = {"llama=" + Stories260kDir()};
  options.metrics_port = FreeTcpPort();
  // Both slots for the one test process: no per-client share.
  options.extra_flags = {"--write_timeout_seconds=1", "--max_concurrent_requests=2",
                         "--max_concurrent_requests_per_client=2"};
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<v1::AttentionService::Stub> stub = StubOf(**server);

  // Every layer's attention over about 450 tokens: 5 layers x 8 heads x 450^2 floats, 32 MB,
  // far more than the transports buffer.
  std::unique_ptr<v1::AttentionService::Stub> unread_stub = SmallWindowStubOf(**server);
  std::string text;
  for (int i = 0; i < 40; ++i) text += "Once upon a time there was a little girl. ";
  v1::GetAttentionRequest request;
  request.set_model("llama");
  request.set_text(text);
  grpc::ClientContext unread_context;
  std::unique_ptr<grpc::ClientReader<v1::StreamAttentionResponse>> unread =
      unread_stub->StreamAttention(&unread_context, request);
  absl::StatusOr<std::unique_ptr<RawConnection>> http_unread =
      RawConnection::Open((*server)->http_port());
  ASSERT_TRUE(http_unread.ok()) << http_unread.status();
  const std::string body = absl::StrCat(R"({"model": "llama", "text": ")", text, R"("})");
  ASSERT_TRUE((*http_unread)
                  ->Send(absl::StrCat("POST /attnscope.v1.AttentionService/StreamAttention "
                                      "HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                                      "application/json\r\nContent-Length: ",
                                      body.size(), "\r\n\r\n", body)));

  // Both streams end CANCELLED a write timeout after they stalled, and their slots serve others.
  // Waiting for a Tokenize call alone was not enough: one freed slot lets it through while the
  // other stream's write may still be within its timeout, and reading it then completed it.
  const std::vector<MetricSample> cancelled = CountedRequests(
      **server, {{"rpc", "StreamAttention"}, {"code", "CANCELLED"}}, 2, absl::Seconds(15));
  ASSERT_EQ(cancelled.size(), 2u) << (*server)->Log();
  for (const MetricSample& sample : cancelled)
    EXPECT_EQ(sample.value, 1) << sample.labels.at("transport");
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext context;
    v1::TokenizeRequest tokenize;
    tokenize.set_model("llama");
    tokenize.set_text("Once upon a time");
    v1::TokenizeResponse response;
    const grpc::Status status = stub->Tokenize(&context, tokenize, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
  }
  // What the transport took before the server gave up is still there to read, then the end.
  v1::StreamAttentionResponse message;
  while (unread->Read(&message)) {
  }
  EXPECT_EQ(unread->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

// An HTTP answer that its client does not read keeps its body, 43 MB of JSON here, for as long
// as the write lasts. The body holds its bytes of --max_answer_bytes_in_flight until written:
// before, the answer's reservation ended when the method returned, and 64 slow readers of such
// answers took the server to 3.5 GB.
TEST(CallLimitsTest, HttpAnswersBeingWrittenHoldTheAnswerBudget) {
  ServerProcess::Options options;
  options.models = {"llama=" + Stories260kDir()};
  options.metrics_port = FreeTcpPort();
  // One test process is one client: its share is the whole budget.
  options.extra_flags = {"--max_answer_bytes_in_flight=" + std::to_string(48 << 20),
                         "--max_answer_bytes_per_client=" + std::to_string(48 << 20),
                         "--write_timeout_seconds=20"};
  absl::StatusOr<std::unique_ptr<ServerProcess>> started = ServerProcess::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;
  // Every layer's attention over about 450 tokens: 32 MB of float32, 43 MB as JSON.
  std::string text;
  for (int i = 0; i < 40; ++i) text += "Once upon a time there was a little girl. ";
  const auto post = [](const std::string& body) {
    return absl::StrCat(
        "POST /attnscope.v1.AttentionService/GetAttention HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\nContent-Length: ",
        body.size(), "\r\n\r\n", body);
  };
  const std::string large = absl::StrCat(R"({"model": "llama", "text": ")", text, R"("})");
  absl::StatusOr<std::unique_ptr<RawConnection>> unread = RawConnection::Open(server.http_port());
  ASSERT_TRUE(unread.ok()) << unread.status();
  ASSERT_TRUE((*unread)->Send(post(large)));
  // The method has returned (its call is counted) and the body is being written.
  const std::vector<MetricSample> answered =
      CountedRequests(server, {{"rpc", "GetAttention"}, {"code", "OK"}}, 1, absl::Seconds(30));
  ASSERT_FALSE(answered.empty()) << server.Log();
  // The call is counted when its method returns; printing its 43 MB of JSON takes a moment more
  // (held from the budget too), then the body is written and held for up to 20 s.
  absl::SleepFor(absl::Seconds(3));

  // Another such answer would take the bytes held over the budget: refused before its pass.
  absl::StatusOr<std::unique_ptr<RawConnection>> second = RawConnection::Open(server.http_port());
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE((*second)->Send(post(large)));
  absl::StatusOr<RawResponse> refused = (*second)->ReadResponse(absl::Seconds(30));
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->status, 429) << refused->body.substr(0, 300);
  EXPECT_THAT(refused->body, HasSubstr("--max_answer_bytes_in_flight"));
  // A small answer still fits beside the one being written.
  absl::StatusOr<std::unique_ptr<RawConnection>> small = RawConnection::Open(server.http_port());
  ASSERT_TRUE(small.ok()) << small.status();
  ASSERT_TRUE((*small)->Send(post(R"({"model": "llama", "text": "Once upon a time"})")));
  absl::StatusOr<RawResponse> served = (*small)->ReadResponse(absl::Seconds(30));
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(served->status, 200) << served->body.substr(0, 300);
  // A mid-sized answer (3.4 MB) fits beside it, but not the 20 MB its JSON printing is held at:
  // refused after its method ran, and counted as refused. Before, it was counted OK.
  std::string mid_text;
  for (int i = 0; i < 12; ++i) mid_text += "Once upon a time there was a little girl. ";
  absl::StatusOr<std::unique_ptr<RawConnection>> mid = RawConnection::Open(server.http_port());
  ASSERT_TRUE(mid.ok()) << mid.status();
  ASSERT_TRUE(
      (*mid)->Send(post(absl::StrCat(R"({"model": "llama", "text": ")", mid_text, R"("})"))));
  absl::StatusOr<RawResponse> unprinted = (*mid)->ReadResponse(absl::Seconds(30));
  ASSERT_TRUE(unprinted.ok()) << unprinted.status();
  EXPECT_EQ(unprinted->status, 429) << unprinted->body.substr(0, 300);
  EXPECT_THAT(unprinted->body, HasSubstr("--max_answer_bytes_in_flight"));
  double refusals = 0;
  for (const MetricSample& sample :
       CountedRequests(server, {{"rpc", "GetAttention"}, {"code", "RESOURCE_EXHAUSTED"}}, 1,
                       absl::Seconds(10))) {
    refusals += sample.value;
  }
  EXPECT_EQ(refusals, 2);
  absl::StatusOr<std::string> metrics = HttpGet(server.metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const std::vector<MetricSample> limited =
      FindSamples(ParseMetrics(*metrics), "attnscope_rejected_requests_total",
                  {{"reason", "answer_bytes_limit"}});
  ASSERT_EQ(limited.size(), 1u);
  EXPECT_EQ(limited[0].value, 2);
  // Once the unread answer's connection is gone, its bytes are free again.
  (*unread)->Close();
  absl::StatusOr<RawResponse> after;
  const absl::Time closed = absl::Now();
  do {
    absl::SleepFor(absl::Milliseconds(200));
    absl::StatusOr<std::unique_ptr<RawConnection>> again = RawConnection::Open(server.http_port());
    ASSERT_TRUE(again.ok()) << again.status();
    ASSERT_TRUE((*again)->Send(post(large)));
    after = (*again)->ReadResponse(absl::Seconds(30));
    ASSERT_TRUE(after.ok()) << after.status();
  } while (after->status != 200 && absl::Now() - closed < absl::Seconds(25));
  EXPECT_EQ(after->status, 200) << after->body.substr(0, 300);
}

// The same on gRPC: a unary answer its client does not read holds its bytes of
// --max_answer_bytes_in_flight until written, and the call is cancelled at
// --write_timeout_seconds. Before, gRPC's synchronous server waited for the client without end,
// holding the answer and one of its threads.
TEST(CallLimitsTest, GrpcUnaryAnswersNobodyReadsHoldTheBudgetUntilTheWriteTimeout) {
  ServerProcess::Options options;
  options.models = {"llama=" + Stories260kDir()};
  options.metrics_port = FreeTcpPort();
  // One test process is one client: its share is the whole budget.
  options.extra_flags = {"--max_answer_bytes_in_flight=" + std::to_string(48 << 20),
                         "--max_answer_bytes_per_client=" + std::to_string(48 << 20),
                         "--write_timeout_seconds=3"};
  absl::StatusOr<std::unique_ptr<ServerProcess>> started = ServerProcess::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;
  grpc::ChannelArguments any_size;
  any_size.SetMaxReceiveMessageSize(-1);
  std::unique_ptr<v1::AttentionService::Stub> stub = v1::AttentionService::NewStub(
      grpc::CreateCustomChannel(server.address(), grpc::InsecureChannelCredentials(), any_size));
  // Every layer's attention over about 450 tokens: 32 MB of float32.
  std::string text;
  for (int i = 0; i < 40; ++i) text += "Once upon a time there was a little girl. ";
  v1::GetAttentionRequest large;
  large.set_model("llama");
  large.set_text(text);

  // The call is started and its answer not asked for.
  std::unique_ptr<v1::AttentionService::Stub> unread_stub = SmallWindowStubOf(server);
  grpc::CompletionQueue queue;
  grpc::ClientContext unread_context;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::GetAttentionResponse>> unread =
      unread_stub->AsyncGetAttention(&unread_context, large, &queue);
  // ReadInitialMetadata sends the request and asks for no message, so that the client's transport
  // grants no window beyond 64 KiB until Finish; polling the queue drives the call.
  int metadata_tag = 0;
  unread->ReadInitialMetadata(&metadata_tag);
  absl::Notification finished;
  std::thread poller([&queue, &finished, &unread_context] {
    void* tag = nullptr;
    bool ok = false;
    while (queue.Next(&tag, &ok)) {
      if (tag == &unread_context) finished.Notify();
    }
  });
  // The method has returned (its call is counted) and the answer is being written.
  const absl::Time start = absl::Now();
  const std::vector<MetricSample> answered =
      CountedRequests(server, {{"rpc", "GetAttention"}, {"code", "OK"}}, 1, absl::Seconds(30));
  ASSERT_FALSE(answered.empty()) << server.Log();

  // Another such answer would take the bytes held over the budget; a small one fits.
  {
    grpc::ClientContext context;
    v1::GetAttentionResponse response;
    const grpc::Status status = stub->GetAttention(&context, large, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("--max_answer_bytes_in_flight"));
  }
  {
    grpc::ClientContext context;
    v1::GetAttentionRequest small = large;
    small.set_text("Once upon a time");
    v1::GetAttentionResponse response;
    const grpc::Status status = stub->GetAttention(&context, small, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
  }

  // The unread answer ends at the write timeout, and its bytes are free again.
  grpc::Status status;
  do {
    absl::SleepFor(absl::Milliseconds(250));
    grpc::ClientContext context;
    v1::GetAttentionResponse response;
    status = stub->GetAttention(&context, large, &response);
  } while (!status.ok() && absl::Now() - start < absl::Seconds(20));
  EXPECT_TRUE(status.ok()) << status.error_message();
  grpc::Status unread_status;
  v1::GetAttentionResponse unread_response;
  unread->Finish(&unread_response, &unread_status, /*tag=*/&unread_context);
  finished.WaitForNotification();
  EXPECT_EQ(unread_status.error_code(), grpc::StatusCode::CANCELLED)
      << unread_status.error_message();
  queue.Shutdown();
  poller.join();
}

// One client's answers hold at most its share of --max_answer_bytes_in_flight (half, by
// default), so that another client's answer still finds room: before, 27 unread StreamAttention
// streams of one client, within its share of the calls, held all but 6 KB of the 512 MiB budget,
// and every other client's attention was refused until the streams' writes timed out.
TEST(CallLimitsTest, OneClientsUnreadStreamsHoldAtMostItsShareOfTheAnswerBudget) {
  ServerProcess::Options options;
  options.models = {"llama=" + Stories260kDir()};
  options.metrics_port = FreeTcpPort();
  options.extra_flags = {"--max_answer_bytes_in_flight=" + std::to_string(48 << 20),
                         "--write_timeout_seconds=60"};
  absl::StatusOr<std::unique_ptr<ServerProcess>> started = ServerProcess::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;
  // Every layer's attention over 242 tokens: 5 layers x 8 heads x 242^2 floats, 8.9 MiB; the
  // budget takes five such answers, a client's share (24 MiB) two.
  std::string text;
  for (int i = 0; i < 20; ++i) text += "Once upon a time there was a little girl. ";
  v1::GetAttentionRequest request;
  request.set_model("llama");
  request.set_text(text);

  // The busy client (127.0.0.1) starts streams and reads one message of each: a stream that
  // gives none was refused.
  std::unique_ptr<v1::AttentionService::Stub> unread_stub = SmallWindowStubOf(server);
  constexpr int kStreams = 6;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::StreamAttentionResponse>>> held;
  std::vector<grpc::Status> refusals;
  for (int i = 0; i < kStreams; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    std::unique_ptr<grpc::ClientReader<v1::StreamAttentionResponse>> stream =
        unread_stub->StreamAttention(contexts.back().get(), request);
    v1::StreamAttentionResponse message;
    if (stream->Read(&message)) {
      held.push_back(std::move(stream));
    } else {
      refusals.push_back(stream->Finish());
    }
  }
  EXPECT_EQ(held.size(), 2u);
  ASSERT_FALSE(refusals.empty());
  for (const grpc::Status& status : refusals) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_THAT(status.error_message(),
                HasSubstr("while this client's answers being computed or read hold"));
    EXPECT_THAT(status.error_message(), HasSubstr("(--max_answer_bytes_per_client, so that one "
                                                  "client cannot hold all of "
                                                  "--max_answer_bytes_in_flight)"));
  }

  // Another client (127.0.0.2, over HTTP) gets the same answer meanwhile.
  absl::StatusOr<std::unique_ptr<RawConnection>> other =
      RawConnection::Open(server.http_port(), "127.0.0.2");
  ASSERT_TRUE(other.ok()) << other.status();
  const std::string body = request.SerializeAsString();
  ASSERT_TRUE((*other)->Send(absl::StrCat(
      "POST /attnscope.v1.AttentionService/GetAttention HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Type: application/proto\r\nContent-Length: ",
      body.size(), "\r\n\r\n", body)));
  absl::StatusOr<RawResponse> answer = (*other)->ReadResponse(absl::Seconds(60));
  ASSERT_TRUE(answer.ok()) << answer.status();
  ASSERT_EQ(answer->status, 200) << answer->body.substr(0, 300);
  v1::GetAttentionResponse response;
  ASSERT_TRUE(response.ParseFromString(answer->body));
  EXPECT_EQ(response.layers_size(), 5);

  // Operators tell the share's refusals from the other limits by their reason.
  absl::StatusOr<std::string> metrics = HttpGet(server.metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const std::vector<MetricSample> samples = ParseMetrics(*metrics);
  for (const auto& [reason, count] :
       {std::pair<std::string, size_t>{"answer_bytes_client_limit", refusals.size()},
        {"answer_bytes_limit", 0}}) {
    const std::vector<MetricSample> found =
        FindSamples(samples, "attnscope_rejected_requests_total", {{"reason", reason}});
    ASSERT_EQ(found.size(), 1u) << reason;
    EXPECT_EQ(found[0].value, static_cast<double>(count)) << reason;
  }
  for (const std::unique_ptr<grpc::ClientContext>& context : contexts) context->TryCancel();
}

TEST(CallLimitsTest, WorkOverTheBoundIsRefusedBeforeTheFirstPass) {
  TempDir dir;
  BertShape shape;
  shape.layers = 2;
  shape.hidden = 64;
  shape.heads = 4;
  shape.intermediate = 128;
  shape.max_positions = 1100;
  shape.classifier = true;
  ASSERT_TRUE(WriteRandomBert(shape, dir.path()).ok());
  ServerProcess::Options options;
  options.models = {"bert=" + dir.path(), "llama=" + Stories260kDir()};
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<v1::AttentionService::Stub> stub = StubOf(**server);

  // With the default bound (2^20 token passes): 1000 integrated-gradients steps over a
  // 1050-token pair are refused at once.
  v1::AttributeRequest attribute;
  attribute.set_model("bert");
  attribute.set_text(RandomBertText(shape, 550));
  attribute.set_text_pair(RandomBertText(shape, 501));
  attribute.set_integrated_gradients_steps(1000);
  attribute.add_methods(v1::ATTRIBUTION_METHOD_INTEGRATED_GRADIENTS);
  {
    grpc::ClientContext context;
    v1::AttributeResponse response;
    const absl::Time start = absl::Now();
    const grpc::Status status = stub->Attribute(&context, attribute, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << status.error_message();
    EXPECT_THAT(status.error_message(),
                HasSubstr("Attribute: 1001 passes over 1050 tokens = 1051050 token passes"));
    EXPECT_THAT(status.error_message(), HasSubstr("--max_call_tokens"));
    EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  }
  // Two steps of the same pair are within it.
  attribute.set_integrated_gradients_steps(2);
  {
    grpc::ClientContext context;
    v1::AttributeResponse response;
    const grpc::Status status = stub->Attribute(&context, attribute, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
  }

  ServerProcess::Options tight = options;
  tight.extra_flags = {"--max_call_tokens=38"};
  absl::StatusOr<std::unique_ptr<ServerProcess>> bounded = ServerProcess::Start(tight);
  ASSERT_TRUE(bounded.ok()) << bounded.status();
  stub = StubOf(**bounded);
  v1::CrossAttentionRequest cross;
  cross.set_model("bert");
  cross.set_query(RandomBertText(shape, 5));
  for (int i = 0; i < 3; ++i) cross.add_documents(RandomBertText(shape, 10));
  {
    grpc::ClientContext context;
    v1::CrossAttentionResponse response;
    const grpc::Status status = stub->CrossAttention(&context, cross, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(status.error_message(),
                HasSubstr("CrossAttention: 3 documents, one pass each = 42 token passes"));
  }
  v1::EncodeRequest encode;
  encode.set_model("bert");
  for (int i = 0; i < 3; ++i) encode.add_inputs()->set_text(RandomBertText(shape, 14));
  {
    grpc::ClientContext context;
    v1::EncodeResponse response;
    const grpc::Status status = stub->Encode(&context, encode, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(status.error_message(),
                HasSubstr("Encode: 3 inputs, one pass each = 42 token passes"));
  }
  v1::GenerateRequest generate;
  generate.set_model("llama");
  generate.set_prompt("Once upon a time");
  generate.set_method(v1::DECODING_METHOD_BEAM_SEARCH);
  generate.set_num_beams(4);
  generate.set_max_new_tokens(8);
  {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
        stub->Generate(&context, generate);
    v1::GenerateResponse response;
    EXPECT_FALSE(reader->Read(&response)) << "the refusal comes before the header";
    const grpc::Status status = reader->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(status.error_message(), HasSubstr("Generate: 4 beams over"));
    EXPECT_THAT(status.error_message(), HasSubstr("--max_call_tokens"));
  }
  // One pass of a short text is within the bound.
  v1::GetAttentionRequest attention;
  attention.set_model("bert");
  attention.set_text(RandomBertText(shape, 10));
  grpc::ClientContext context;
  v1::GetAttentionResponse response;
  EXPECT_TRUE(stub->GetAttention(&context, attention, &response).ok());
}

}  // namespace
}  // namespace attnscope::testing

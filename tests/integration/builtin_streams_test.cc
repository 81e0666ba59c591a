// The streams of gRPC's own services that any client may keep open, API key or not, are bounded
// (server/builtin_streams.h): server reflection (what grpcurl and grpcui ask), each of whose
// streams holds a thread of the pool that StreamAttention and Generate run on, and health Watch,
// each of whose streams costs memory. Before, 80 idle reflection streams of one client had every
// other client's streams refused "Server Threadpool Exhausted", and 100,000 unread Watch streams
// took the server from 245 MB to 1.9 GB; both kinds held each shutdown past its grace.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "attnscope/v1/attnscope.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

using ::testing::HasSubstr;

// One stream, opened with a generic stub and left open after its first answer.
struct OpenStream {
  grpc::ClientContext context;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call;
  // Its first answer's bytes; empty when the server ended the stream instead.
  std::string answer;
  grpc::Status status;
};

// Waits for the completion of `tag`, the only operation pending on `queue`.
bool Await(grpc::CompletionQueue& queue, void* tag) {
  void* got = nullptr;
  bool ok = false;
  if (!queue.Next(&got, &ok)) return false;
  EXPECT_EQ(got, tag);
  return ok;
}

// Opens a stream of `method` on `stub`, sends `request` (a serialized message; the reflection
// and health protos are not installed with gRPC's headers, so the tests write them out by hand),
// half-closes it with `half_close` (a server stream), and reads the first answer.
std::unique_ptr<OpenStream> Open(grpc::GenericStub& stub, grpc::CompletionQueue& queue,
                                 const std::string& method, const std::string& request,
                                 bool half_close) {
  auto stream = std::make_unique<OpenStream>();
  stream->call = stub.PrepareCall(&stream->context, method, &queue);
  stream->call->StartCall(stream.get());
  if (!Await(queue, stream.get())) return stream;
  grpc::Slice slice(request);
  grpc::ByteBuffer message(&slice, 1);
  stream->call->Write(message, stream.get());
  if (!Await(queue, stream.get())) return stream;
  if (half_close) {
    stream->call->WritesDone(stream.get());
    if (!Await(queue, stream.get())) return stream;
  }
  grpc::ByteBuffer response;
  stream->call->Read(&response, stream.get());
  if (Await(queue, stream.get())) {
    std::vector<grpc::Slice> slices;
    EXPECT_TRUE(response.Dump(&slices).ok());
    for (const grpc::Slice& piece : slices) {
      stream->answer.append(reinterpret_cast<const char*>(piece.begin()), piece.size());
    }
    return stream;
  }
  stream->call->Finish(&stream->status, stream.get());
  Await(queue, stream.get());
  return stream;
}

// Opens `count` streams as Open does over four connections of one client, and checks what the
// bounds of the stream's service promise: `held` of them answered with `answer` in their first
// message, the others cancelled and counted under `reason`; another call of the same client
// served meanwhile; and SIGTERM ending the open streams instead of waiting for them until the
// grace's end. Ends `server`.
void CheckBounded(ServerProcess& server, const std::string& method, const std::string& request,
                  bool half_close, int count, int held, const std::string& answer,
                  const std::string& reason) {
  grpc::CompletionQueue queue;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  for (int i = 0; i < 4; ++i) {
    grpc::ChannelArguments arguments;
    arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    stubs.push_back(std::make_unique<grpc::GenericStub>(grpc::CreateCustomChannel(
        server.address(), grpc::InsecureChannelCredentials(), arguments)));
  }
  std::vector<std::unique_ptr<OpenStream>> streams;
  int answered = 0;
  for (int i = 0; i < count; ++i) {
    streams.push_back(Open(*stubs[i % stubs.size()], queue, method, request, half_close));
    const OpenStream& stream = *streams.back();
    if (!stream.answer.empty()) {
      ++answered;
      EXPECT_THAT(stream.answer, HasSubstr(answer));
    } else {
      EXPECT_EQ(stream.status.error_code(), grpc::StatusCode::CANCELLED)
          << stream.status.error_message();
    }
  }
  EXPECT_EQ(answered, held);

  std::unique_ptr<Client> client = server.NewClient();
  v1::GetAttentionRequest attention;
  attention.set_model("bert");
  attention.set_text("the cat sat on the mat");
  const absl::StatusOr<AttentionResult> streamed = client->StreamAttention(attention);
  EXPECT_TRUE(streamed.ok()) << streamed.status();

  absl::StatusOr<std::string> scrape = HttpGet(server.metrics_port(), "/metrics");
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  const std::vector<MetricSample> refused =
      FindSamples(ParseMetrics(*scrape), "attnscope_rejected_requests_total", {{"reason", reason}});
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].value, count - answered);

  const absl::Time signalled = absl::Now();
  server.Signal(SIGTERM);
  absl::StatusOr<int> exit_status = server.Wait(absl::Seconds(20));
  ASSERT_TRUE(exit_status.ok()) << exit_status.status();
  EXPECT_TRUE(WIFEXITED(*exit_status) && WEXITSTATUS(*exit_status) == 0) << *exit_status;
  EXPECT_LT(absl::Now() - signalled, absl::Seconds(10)) << server.Log();
  for (const std::unique_ptr<OpenStream>& stream : streams) stream->context.TryCancel();
  queue.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue.Next(&tag, &ok)) {
  }
}

std::unique_ptr<ServerProcess> StartServer() {
  ServerProcess::Options options;
  options.models = {"bert=" + TinyBertDir()};
  options.metrics_port = FreeTcpPort();
  absl::StatusOr<std::unique_ptr<ServerProcess>> started = ServerProcess::Start(options);
  EXPECT_TRUE(started.ok()) << started.status();
  return started.ok() ? *std::move(started) : nullptr;
}

// 100 reflection streams, more than the pool's 80 threads (--worker_threads): 2 held, as one
// address may hold.
TEST(BuiltinStreamsTest, ReflectionKeepsTwoStreamsOfAClientAndEveryOtherCallIsServed) {
  std::unique_ptr<ServerProcess> server = StartServer();
  ASSERT_NE(server, nullptr);
  // A ServerReflectionRequest asking for the services (field 7, list_services, empty).
  CheckBounded(*server, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
               std::string("\x3a\x00", 2), /*half_close=*/false, /*count=*/100, /*held=*/2,
               "attnscope.v1.AttentionService", "reflection_limit");
}

// 100 Watch streams of the whole server's health: 64 held, as one address may hold.
TEST(BuiltinStreamsTest, HealthWatchKeeps64StreamsOfAClient) {
  std::unique_ptr<ServerProcess> server = StartServer();
  ASSERT_NE(server, nullptr);
  // An empty HealthCheckRequest (the server as a whole); the answer is status SERVING (1).
  CheckBounded(*server, "/grpc.health.v1.Health/Watch", "", /*half_close=*/true, /*count=*/100,
               /*held=*/64, std::string("\x08\x01", 2), "health_watch_limit");
}

}  // namespace
}  // namespace attnscope::testing

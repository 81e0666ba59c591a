// gRPC server reflection (grpc.reflection.v1alpha.ServerReflection, what grpcurl and grpcui ask)
// answers without an API key, and its streams are bounded (server/reflection_streams.h): each
// holds a thread of gRPC's synchronous pool, which StreamAttention and Generate take theirs from.
// Before, 80 idle reflection streams of one client had every other client's streams refused
// "Server Threadpool Exhausted", counted nowhere, and held each shutdown for its whole grace.
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

constexpr char kReflectionInfo[] = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
// A ServerReflectionRequest asking for the services (field 7, list_services, an empty string),
// written out by hand: the reflection protos are not installed with gRPC's headers.
constexpr char kListServices[] = "\x3a\x00";

// One reflection stream, opened with a generic stub and left open after its first answer.
struct ReflectionStream {
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

// Opens a stream on `stub`, asks for the services and reads the first answer.
std::unique_ptr<ReflectionStream> OpenReflection(grpc::GenericStub& stub,
                                                 grpc::CompletionQueue& queue) {
  auto stream = std::make_unique<ReflectionStream>();
  stream->call = stub.PrepareCall(&stream->context, kReflectionInfo, &queue);
  stream->call->StartCall(stream.get());
  if (!Await(queue, stream.get())) return stream;
  grpc::Slice slice(kListServices, sizeof(kListServices) - 1);
  grpc::ByteBuffer request(&slice, 1);
  stream->call->Write(request, stream.get());
  if (!Await(queue, stream.get())) return stream;
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

TEST(ReflectionTest, OneClientHoldsTwoStreamsAndEveryOtherCallIsServed) {
  ServerProcess::Options options;
  options.models = {"bert=" + TinyBertDir()};
  options.metrics_port = FreeTcpPort();
  absl::StatusOr<std::unique_ptr<ServerProcess>> started = ServerProcess::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  ServerProcess& server = **started;

  // 100 streams over four connections, more than the pool's 80 threads (--worker_threads).
  grpc::CompletionQueue queue;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  for (int i = 0; i < 4; ++i) {
    grpc::ChannelArguments arguments;
    arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    stubs.push_back(std::make_unique<grpc::GenericStub>(grpc::CreateCustomChannel(
        server.address(), grpc::InsecureChannelCredentials(), arguments)));
  }
  std::vector<std::unique_ptr<ReflectionStream>> streams;
  int held = 0;
  for (int i = 0; i < 100; ++i) {
    streams.push_back(OpenReflection(*stubs[i % stubs.size()], queue));
    const ReflectionStream& stream = *streams.back();
    if (!stream.answer.empty()) {
      ++held;
      EXPECT_THAT(stream.answer, HasSubstr("attnscope.v1.AttentionService"));
    } else {
      EXPECT_EQ(stream.status.error_code(), grpc::StatusCode::CANCELLED)
          << stream.status.error_message();
    }
  }
  EXPECT_EQ(held, 2);

  // The same client's stream of attention is served meanwhile.
  std::unique_ptr<Client> client = server.NewClient();
  v1::GetAttentionRequest request;
  request.set_model("bert");
  request.set_text("the cat sat on the mat");
  const absl::StatusOr<AttentionResult> streamed = client->StreamAttention(request);
  EXPECT_TRUE(streamed.ok()) << streamed.status();

  absl::StatusOr<std::string> scrape = HttpGet(server.metrics_port(), "/metrics");
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  const std::vector<MetricSample> refused = FindSamples(
      ParseMetrics(*scrape), "attnscope_rejected_requests_total", {{"reason", "reflection_limit"}});
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].value, 100 - held);

  // SIGTERM ends the open reflection streams instead of waiting for them until the grace's end
  // (30 s by default).
  const absl::Time signalled = absl::Now();
  server.Signal(SIGTERM);
  absl::StatusOr<int> exit_status = server.Wait(absl::Seconds(20));
  ASSERT_TRUE(exit_status.ok()) << exit_status.status();
  EXPECT_TRUE(WIFEXITED(*exit_status) && WEXITSTATUS(*exit_status) == 0) << *exit_status;
  EXPECT_LT(absl::Now() - signalled, absl::Seconds(10)) << server.Log();
  for (const std::unique_ptr<ReflectionStream>& stream : streams) stream->context.TryCancel();
  queue.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue.Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace attnscope::testing

#include "tests/integration/h2_flood_util.h"

#include <chrono>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace attnscope::testing {

std::string GrpcPortOf(const ServerProcess& server) {
  return server.address().substr(server.address().rfind(':') + 1);
}

std::unique_ptr<v1::AttentionService::Stub> StubOf(const ServerProcess& server) {
  return v1::AttentionService::NewStub(
      grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
}

grpc::Status CallGetAttention(v1::AttentionService::Stub& stub, int seconds) {
  v1::GetAttentionRequest request;
  request.set_text("the capital of france is paris");
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  v1::GetAttentionResponse response;
  return stub.GetAttention(&context, request, &response);
}

nlohmann::json RunH2Flood(const std::string& port, const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {"/usr/bin/python3", ATTNSCOPE_H2_STREAM_FLOOD, "--port", port};
  argv.insert(argv.end(), flags.begin(), flags.end());
  const CommandResult result = RunCommand(argv, absl::Seconds(60));
  EXPECT_EQ(result.exit_code, 0) << result.stderr_text;
  return nlohmann::json::parse(result.stdout_text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace attnscope::testing

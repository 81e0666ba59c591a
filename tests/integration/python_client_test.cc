// A default-settings Python gRPC client (python3-grpcio, grpc.insecure_channel with no options)
// reads a 512-token float32 StreamAttention of a 12-layer, 12-head, 512-position model to the end:
// each layer is 12.6 MB, three times gRPC's default 4 MiB receive limit, so the server must send
// it in pieces. tests/integration/python_stream_client.py reassembles the layers and compares each
// with GetAttention's answer over a channel without the limit.
#include <gtest/gtest.h>

#include <iostream>

#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

TEST(PythonClientTest, DefaultChannelReadsA512TokenStreamOfA12By12Model) {
  // The geometry of BERT-base's attention with a narrow hidden size, to keep the forward pass and
  // the checkpoint small.
  BertShape shape;
  shape.hidden = 192;
  shape.intermediate = 768;
  TempDir dir;
  ASSERT_TRUE(WriteRandomBert(shape, dir.path()).ok());
  ServerProcess::Options options;
  options.models = {"big=" + dir.path()};
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();

  const CommandResult result = RunCommand(
      {"/usr/bin/python3", ATTNSCOPE_PYTHON_CLIENT, "--proto_dir", ATTNSCOPE_PYTHON_PROTO,
       "--address", (*server)->address(), "--model", "big", "--text", RandomBertText(shape, 512)},
      absl::Seconds(600));
  std::cout << result.stdout_text;
  EXPECT_EQ(result.exit_code, 0) << result.stdout_text << result.stderr_text << (*server)->Log();
  EXPECT_NE(result.stdout_text.find("\"layers\": 12"), std::string::npos);
  EXPECT_NE(result.stdout_text.find("\"tokens\": 512"), std::string::npos);
  EXPECT_NE(result.stdout_text.find("\"mismatched_layers\": []"), std::string::npos);
}

}  // namespace
}  // namespace attnscope::testing

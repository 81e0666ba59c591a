// A BERT-base-shaped random model (12 layers, hidden 768, 12 heads, intermediate 3072, 512
// positions) at 512 tokens: StreamAttention returns all 12 x 12 heads (151 MB of float32), while
// the unary call fails with RESOURCE_EXHAUSTED naming StreamAttention. The checkpoint is written at
// test time into a temporary directory.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "attnscope/v1/attnscope.grpc.pb.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"
#include "tests/integration/reference.h"

namespace attnscope::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(BigModelTest, StreamReturnsEveryLayerAndHeadWhereUnaryHitsTheCap) {
  TempDir dir;
  const BertShape shape;  // BERT-base sizes
  ASSERT_TRUE(WriteRandomBert(shape, dir.path()).ok());
  ServerProcess::Options options;
  options.models = {"base=" + dir.path()};
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<Client> client = (*server)->NewClient();

  v1::GetAttentionRequest request;
  request.set_model("base");
  request.set_text(RandomBertText(shape, 512));
  absl::StatusOr<AttentionResult> unary = client->GetAttention(request);
  EXPECT_EQ(unary.status().code(), absl::StatusCode::kResourceExhausted) << unary.status();
  EXPECT_THAT(unary.status().message(), HasSubstr("StreamAttention"));

  absl::StatusOr<AttentionResult> streamed = client->StreamAttention(request);
  ASSERT_TRUE(streamed.ok()) << streamed.status() << (*server)->Log();
  EXPECT_THAT(streamed->attentions.shape, ElementsAre(12, 12, 512, 512));
  EXPECT_EQ(streamed->tokens.tokens_size(), 512);
  EXPECT_EQ(streamed->layers.size(), 12u);
  EXPECT_EQ(streamed->heads.size(), 12u);
  // Every row of every layer and head is a distribution over the 512 keys.
  const std::vector<float>& values = streamed->attentions.values;
  int64_t bad_rows = 0;
  for (int64_t row = 0; row < 12 * 12 * 512; ++row) {
    double sum = 0;
    for (int64_t k = 0; k < 512; ++k) sum += values[row * 512 + k];
    if (std::fabs(sum - 1.0) > 1e-4) ++bad_rows;
  }
  EXPECT_EQ(bad_rows, 0);

  // The streamed values are the engine's, bit for bit, all 37.7 M of them.
  const Reference reference(dir.path());
  const ExpectedAttention expected = reference.Attention(request);
  ASSERT_TRUE(TensorNear(streamed->attentions, expected.attentions));
  // A client with gRPC's default 4 MiB receive limit reads streams too: the server cuts each
  // layer's 12 MB into pieces under its 1 MiB bound, which the client library reassembles.
  std::unique_ptr<Client> default_limit =
      (*server)->NewClient(/*max_response_bytes=*/(int64_t{4} << 20) - (int64_t{1} << 20));
  v1::GetAttentionRequest pieces = request;
  pieces.add_layers(0);
  pieces.add_layers(-1);
  pieces.set_include_scores(true);
  pieces.set_rollout(true);
  absl::StatusOr<AttentionResult> small_client = default_limit->StreamAttention(pieces);
  ASSERT_TRUE(small_client.ok()) << small_client.status();
  const ExpectedAttention expected_pieces = reference.Attention(pieces);
  EXPECT_TRUE(TensorNear(small_client->attentions, expected_pieces.attentions));
  ASSERT_TRUE(small_client->scores.has_value());
  EXPECT_TRUE(TensorNear(*small_client->scores, expected_pieces.scores));
  ASSERT_TRUE(small_client->rollout.has_value());
  EXPECT_TRUE(TensorNear(*small_client->rollout, expected_pieces.rollout, 1e-6, 1e-5));
  {
    std::unique_ptr<v1::AttentionService::Stub> stub = v1::AttentionService::NewStub(
        grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<v1::StreamAttentionResponse>> reader =
        stub->StreamAttention(&context, pieces);
    v1::StreamAttentionResponse message;
    size_t largest = 0;
    int messages = 0;
    while (reader->Read(&message)) {
      largest = std::max(largest, message.ByteSizeLong());
      ++messages;
    }
    EXPECT_TRUE(reader->Finish().ok());
    // Each layer: 12 heads x 512 rows x 512 keys x 8 bytes (attentions and scores) = 24 MiB in
    // 1 MiB pieces of 256 rows of one head, 24 pieces; the rollout's 1 MiB fits in one.
    EXPECT_EQ(messages, 1 + 2 * 24 + 1);
    EXPECT_LE(largest, (size_t{1} << 20) + 1024);
  }

  // After the failed unary call the server still answers a smaller one.
  request.add_layers(-1);
  request.add_heads(0);
  request.set_dtype(v1::DTYPE_FLOAT16);
  absl::StatusOr<AttentionResult> small = client->GetAttention(request);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_THAT(small->attentions.shape, ElementsAre(1, 1, 512, 512));
}

}  // namespace
}  // namespace attnscope::testing

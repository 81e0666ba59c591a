// A BERT-base-shaped random model (12 layers, hidden 768, 12 heads, intermediate 3072, 512
// positions) at 512 tokens: StreamAttention returns all 12 x 12 heads (151 MB of float32), while
// the unary call fails with RESOURCE_EXHAUSTED naming StreamAttention. The checkpoint is written at
// test time into a temporary directory.
#include <cmath>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
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

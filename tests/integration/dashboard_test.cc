// The web dashboard in a real browser. This starts attnscope-server with the default model,
// stories260K, a random 12-layer, 12-head BERT (for a 512-token input), an XLM-R cross-encoder,
// the translation model, tiny BART and T5 encoder-decoders and tiny DistilBERT, GPT-2, Qwen2, Qwen3
// and Mistral models, serving the built dashboard, plus a
// second server with the default model that takes API keys, and runs
// client/dashboard/test/browser_test.mjs under Node: headless Chromium (Debian's
// /usr/bin/chromium) driven by puppeteer-core, comparing every figure with the API's own answers.
// Screenshots of each view go to build/dashboard-screenshots/.
#include <fstream>
#include <iostream>
#include <string>

#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

TEST(DashboardTest, EveryViewInHeadlessChromium) {
  // 12 layers and 12 heads make a 512-token answer 151 MB in float32; a narrow hidden size keeps
  // the checkpoint at 20 MB and the forward pass short.
  BertShape shape;
  shape.hidden = 192;
  shape.intermediate = 768;
  TempDir big;
  ASSERT_TRUE(WriteRandomBert(shape, big.path()).ok());

  ServerProcess::Options options;
  options.models = {"default=" + DefaultModelDir(),
                    "llama=" + Stories260kDir(),
                    "big=" + big.path(),
                    "reranker=" + TestDataDir() + "/tiny-roberta",
                    "translation=" ATTNSCOPE_TRANSLATION_MODEL_DIR,
                    "bart=" + TestDataDir() + "/tiny-bart",
                    "t5=" + TestDataDir() + "/tiny-t5",
                    "distilbert=" + TestDataDir() + "/tiny-distilbert",
                    "gpt2=" + TestDataDir() + "/tiny-gpt2",
                    "qwen2=" + TestDataDir() + "/tiny-qwen2",
                    "qwen3=" + TestDataDir() + "/tiny-qwen3",
                    "mistral=" + TestDataDir() + "/tiny-mistral"};
  options.extra_flags = {"--dashboard_dir=" ATTNSCOPE_DASHBOARD_DIR};
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();

  // A second server that takes API keys.
  TempDir keys;
  const std::string key = "dashboard-test-key-9f31";
  std::ofstream(keys.path() + "/keys") << key << "\n";
  ServerProcess::Options keyed_options;
  keyed_options.models = {"default=" + DefaultModelDir()};
  keyed_options.extra_flags = {"--dashboard_dir=" ATTNSCOPE_DASHBOARD_DIR,
                               "--api_keys_file=" + keys.path() + "/keys"};
  absl::StatusOr<std::unique_ptr<ServerProcess>> keyed = ServerProcess::Start(keyed_options);
  ASSERT_TRUE(keyed.ok()) << keyed.status();

  const CommandResult result = RunCommand(
      {ATTNSCOPE_NODE, ATTNSCOPE_BROWSER_TEST, "--url",
       "http://127.0.0.1:" + std::to_string((*server)->http_port()) + "/", "--keyed-url",
       "http://127.0.0.1:" + std::to_string((*keyed)->http_port()) + "/", "--api-key", key,
       "--screenshots", ATTNSCOPE_SCREENSHOT_DIR, "--long-text", RandomBertText(shape, 512)},
      absl::Seconds(600));
  std::cout << result.stdout_text;
  EXPECT_EQ(result.exit_code, 0) << result.stderr_text << (*server)->Log();

  // Whatever the pages asked, the server is still serving.
  EXPECT_FALSE((*server)->Wait(absl::ZeroDuration()).ok()) << (*server)->Log();
  absl::StatusOr<ServingStatus> health = (*server)->NewClient()->Health();
  ASSERT_TRUE(health.ok()) << health.status() << (*server)->Log();
  EXPECT_EQ(*health, grpc::health::v1::HealthCheckResponse::SERVING);
}

}  // namespace
}  // namespace attnscope::testing

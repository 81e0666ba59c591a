// Reruns the first steps of the default model's training from the seed, on the examples those steps
// consumed (tests/data/default-model-first-steps.jsonl), and checks the losses recorded when the
// committed model was trained (models/default/training_record.json): same initial weights, same
// masking, same dropout, same updates.
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "models/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tools/train/bert_trainer.h"

namespace attnscope::train {
namespace {

TEST(TrainReproTest, FirstStepsGiveTheRecordedLosses) {
  const std::string source = ATTNSCOPE_SOURCE_DIR;
  const std::string model_dir = source + "/models/default";
  std::ifstream in(model_dir + "/training_record.json");
  ASSERT_TRUE(in.good()) << "no training record in " << model_dir;
  const nlohmann::json record = nlohmann::json::parse(in);
  absl::StatusOr<TrainConfig> config = TrainConfig::FromJson(record.at("config"));
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(model_dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<std::vector<Example>> examples =
      ReadExamples(source + "/tests/data/default-model-first-steps.jsonl");
  ASSERT_TRUE(examples.ok()) << examples.status();
  const nlohmann::json& steps = record.at("first_steps");
  ASSERT_EQ(examples->size(), steps.size() * static_cast<size_t>(config->batch_size));

  absl::StatusOr<std::unique_ptr<BertTrainer>> trainer =
      BertTrainer::Create(*config, **tokenizer, *std::move(examples));
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  for (const nlohmann::json& recorded : steps) {
    const StepStats stats = (*trainer)->Step();
    const double loss = recorded.at("loss").get<double>();
    // Same binary, same thread count: the sums split the same way, so only the last bits of
    // a float32 reduction may differ (e.g. with another CPU's vector width).
    EXPECT_NEAR(stats.loss, loss, 1e-5 * loss) << "step " << stats.step;
    EXPECT_NEAR(stats.mlm_loss, recorded.at("mlm_loss").get<double>(), 1e-5 * loss);
    EXPECT_NEAR(stats.relevance_loss, recorded.at("relevance_loss").get<double>(), 1e-5 * loss);
  }
}

}  // namespace
}  // namespace attnscope::train

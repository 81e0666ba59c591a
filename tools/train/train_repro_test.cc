// Reruns the first steps of the default model's training from the seed, on the examples those steps
// consumed (tests/data/default-model-first-steps.jsonl), and checks the losses recorded when the
// committed model was trained (checkpoints/default/training_record.json): same initial weights,
// same masking, same dropout, same updates. Then checks that the inference engine, loading what the
// trainer saves, computes the trainer's own relevance logits.
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "models/architectures/transformer.h"
#include "models/tokenizers/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tools/train/bert_trainer.h"

namespace attnscope::train {
namespace {

TEST(TrainReproTest, FirstStepsGiveTheRecordedLosses) {
  const std::string source = ATTNSCOPE_SOURCE_DIR;
  const std::string model_dir = source + "/checkpoints/default";
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

  // Two pairs of different lengths, so that padding is exercised too.
  EncodeOptions options;
  options.truncation = Truncation::kLongestFirst;
  options.max_length = config->max_positions;
  absl::StatusOr<Encoding> longer = (*tokenizer)->EncodePair(
      "Chèn bảng", "Để chèn một bảng mới vào tài liệu, hãy chọn Bảng - Chèn bảng.", options);
  ASSERT_TRUE(longer.ok()) << longer.status();
  options.pad_to = static_cast<int64_t>(longer->size());
  absl::StatusOr<Encoding> shorter = (*tokenizer)->EncodePair("행 높이", "사용할 행 높이를 입력합니다.", options);
  ASSERT_TRUE(shorter.ok()) << shorter.status();
  ForwardInput input;
  input.input_ids = torch::tensor(longer->input_ids).view({1, -1});
  input.token_type_ids = torch::tensor(longer->token_type_ids).view({1, -1});
  input.attention_mask = torch::tensor(longer->attention_mask).view({1, -1});
  input.input_ids = torch::cat({input.input_ids, torch::tensor(shorter->input_ids).view({1, -1})});
  input.token_type_ids =
      torch::cat({input.token_type_ids, torch::tensor(shorter->token_type_ids).view({1, -1})});
  input.attention_mask =
      torch::cat({input.attention_mask, torch::tensor(shorter->attention_mask).view({1, -1})});
  const torch::Tensor expected =
      (*trainer)->RelevanceLogits(input.input_ids, input.token_type_ids, input.attention_mask);

  const std::string saved = ::testing::TempDir() + "/train_repro_model";
  ASSERT_TRUE(std::filesystem::create_directories(saved) || std::filesystem::is_directory(saved));
  for (const char* file : {"vocab.txt", "tokenizer_config.json"}) {
    std::filesystem::copy_file(model_dir + "/" + file, saved + "/" + file,
                               std::filesystem::copy_options::overwrite_existing);
  }
  ASSERT_TRUE((*trainer)->Save(saved).ok());
  ModelOptions model_options;
  model_options.model_dir = saved;
  absl::StatusOr<std::unique_ptr<TransformerModel>> model = LoadTransformerModel(model_options);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE((*model)->has_classifier());
  ForwardOptions forward;
  forward.output_attentions = false;
  absl::StatusOr<ForwardOutput> output = (*model)->Forward(input, forward);
  ASSERT_TRUE(output.ok()) << output.status();
  const torch::Tensor logits = output->logits.select(1, 0);
  EXPECT_TRUE(torch::allclose(logits, expected, /*rtol=*/1e-4, /*atol=*/1e-5))
      << "engine " << logits << " trainer " << expected;
}

}  // namespace
}  // namespace attnscope::train

// Length bucketing of the trainer's batches (TrainConfig::length_bucket_batches).
#include "tools/train/bert_trainer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "models/tokenizers/tokenizer.h"

namespace attnscope::train {
namespace {

constexpr int64_t kBatchSize = 4;
constexpr int kExamples = 40;

// Example i is "the" repeated a length that is not monotonic in i.
std::vector<Example> MixedLengths() {
  std::vector<Example> examples;
  for (int i = 0; i < kExamples; ++i) {
    std::string text = "the";
    for (int w = 0; w < (i * 7) % 23; ++w) text += " the";
    examples.push_back({text, "", -1});
  }
  return examples;
}

std::unique_ptr<BertTrainer> MakeTrainer(const Tokenizer& tokenizer, int64_t bucket_batches) {
  TrainConfig config;
  config.batch_size = kBatchSize;
  config.hidden_size = 16;
  config.num_heads = 2;
  config.num_layers = 1;
  config.intermediate_size = 32;
  config.length_bucket_batches = bucket_batches;
  absl::StatusOr<std::unique_ptr<BertTrainer>> trainer =
      BertTrainer::Create(config, tokenizer, MixedLengths());
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

std::vector<size_t> WordCounts(const std::vector<Example>& examples) {
  std::vector<size_t> counts;
  for (const Example& e : examples) counts.push_back(std::count(e.a.begin(), e.a.end(), ' ') + 1);
  return counts;
}

class LengthBucketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
        LoadTokenizer(std::string(ATTNSCOPE_SOURCE_DIR) + "/checkpoints/default");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
  }
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(LengthBucketTest, OneWindowCutsTheSortedExamplesIntoBatches) {
  // A window of every example: each batch is a run of consecutive lengths.
  std::unique_ptr<BertTrainer> trainer = MakeTrainer(*tokenizer_, kExamples / kBatchSize);
  ASSERT_NE(trainer, nullptr);
  trainer->BucketRemainingByLength();
  const std::vector<size_t> order = WordCounts(trainer->UpcomingExamples(kExamples / kBatchSize));
  ASSERT_EQ(order.size(), static_cast<size_t>(kExamples));

  std::vector<size_t> expected = WordCounts(MixedLengths());
  std::vector<size_t> got = order;
  std::sort(expected.begin(), expected.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, expected) << "the batches are not a permutation of the examples";

  std::vector<std::pair<size_t, size_t>> ranges;  // (min, max) per batch
  for (size_t b = 0; b < order.size(); b += kBatchSize) {
    const auto [low, high] = std::minmax_element(order.begin() + b, order.begin() + b + kBatchSize);
    ranges.emplace_back(*low, *high);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    EXPECT_LE(ranges[i - 1].second, ranges[i].first) << "batches overlap in length";
  }
  // The batches themselves are shuffled, not served shortest first.
  EXPECT_FALSE(std::is_sorted(order.begin(), order.end()));
}

TEST_F(LengthBucketTest, SameSeedSameOrderAndOneBatchWindowKeepsTheGivenOrder) {
  std::unique_ptr<BertTrainer> first = MakeTrainer(*tokenizer_, /*bucket_batches=*/5);
  std::unique_ptr<BertTrainer> second = MakeTrainer(*tokenizer_, /*bucket_batches=*/5);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  first->BucketRemainingByLength();
  second->BucketRemainingByLength();
  const int64_t steps = kExamples / kBatchSize;
  EXPECT_EQ(WordCounts(first->UpcomingExamples(steps)),
            WordCounts(second->UpcomingExamples(steps)));

  std::unique_ptr<BertTrainer> unsorted = MakeTrainer(*tokenizer_, /*bucket_batches=*/1);
  ASSERT_NE(unsorted, nullptr);
  unsorted->BucketRemainingByLength();
  EXPECT_EQ(WordCounts(unsorted->UpcomingExamples(steps)), WordCounts(MixedLengths()));
}

// The learning rate of each step: warm-up to the peak, then the inverse square root or, with
// linear_decay, a line down to 0 at the last step.
TEST_F(LengthBucketTest, LearningRateSchedules) {
  for (const bool linear : {false, true}) {
    TrainConfig config;
    config.batch_size = kBatchSize;
    config.hidden_size = 16;
    config.num_heads = 2;
    config.num_layers = 1;
    config.intermediate_size = 32;
    config.steps = 10;
    config.warmup_steps = 2;
    config.peak_lr = 1e-3;
    config.linear_decay = linear;
    absl::StatusOr<std::unique_ptr<BertTrainer>> trainer =
        BertTrainer::Create(config, *tokenizer_, MixedLengths());
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    std::vector<double> rates;
    for (int step = 1; step <= 10; ++step) rates.push_back((*trainer)->Step().lr);
    EXPECT_DOUBLE_EQ(rates[0], 0.5e-3);
    EXPECT_DOUBLE_EQ(rates[1], 1e-3);
    if (linear) {
      EXPECT_DOUBLE_EQ(rates[5], 0.5e-3);  // step 6: (10 - 6) / (10 - 2)
      EXPECT_DOUBLE_EQ(rates[9], 0.0);
    } else {
      EXPECT_DOUBLE_EQ(rates[7], 0.5e-3);  // step 8: sqrt(2 / 8)
      EXPECT_DOUBLE_EQ(rates[9], 1e-3 * std::sqrt(0.2));
    }
    const nlohmann::json saved = (*trainer)->config().ToJson();
    absl::StatusOr<TrainConfig> read = TrainConfig::FromJson(saved);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->linear_decay, linear);
  }
}

}  // namespace
}  // namespace attnscope::train

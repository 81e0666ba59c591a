#include "models/config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/engine.h"
#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

using ::testing::HasSubstr;

TEST(ConfigTest, ReadsStoriesLlamaConfig) {
  auto config = LoadModelConfig(testing::SharedDir() + "/models/stories260K");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, Architecture::kLlama);
  EXPECT_EQ(config->hidden_size, 64);
  EXPECT_EQ(config->intermediate_size, 172);
  EXPECT_EQ(config->num_attention_heads, 8);
  EXPECT_EQ(config->num_key_value_heads, 4);
  EXPECT_EQ(config->num_queries_per_kv(), 2);
  EXPECT_EQ(config->head_dim, 8);
  EXPECT_DOUBLE_EQ(config->rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(config->rope_theta, 10000.0);
  EXPECT_TRUE(config->tie_word_embeddings);
  EXPECT_EQ(config->bos_token_id, 1);
  EXPECT_EQ(config->eos_token_id, 2);
}

TEST(ConfigTest, ReadsBertClassifierConfig) {
  auto config = LoadModelConfig(testing::TestDataDir() + "/tiny-bert");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, Architecture::kBert);
  EXPECT_EQ(config->num_key_value_heads, config->num_attention_heads);
  EXPECT_DOUBLE_EQ(config->layer_norm_eps, 1e-12);
  EXPECT_EQ(config->id2label.at(0), "LABEL_0");
  EXPECT_EQ(config->num_labels, 1);
  EXPECT_FALSE(config->tie_word_embeddings);
}

TEST(ConfigTest, RejectsUnsupportedAndInconsistentConfigs) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {R"({"model_type": "gpt2", "vocab_size": 5})",
       "field 'model_type': expected one of the supported architectures \"bert\", \"llama\", "
       "\"marian\", \"bart\", got "
       "\"gpt2\""},
      {"{not json", "malformed JSON"},
      {R"({"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 2,
           "num_attention_heads": 4, "intermediate_size": 8})",
       "field 'vocab_size': expected a positive integer, got nothing"},
      {R"({"model_type": "bert", "vocab_size": 10, "hidden_size": 30, "num_hidden_layers": 2,
           "num_attention_heads": 4, "intermediate_size": 8})",
       "field 'hidden_size': expected a multiple of num_attention_heads (4), got 30"},
      {R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 32, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 3, "intermediate_size": 8})",
       "field 'num_key_value_heads': expected a positive divisor of num_attention_heads (4), got "
       "3"},
      {R"({"model_type": "bert", "vocab_size": "many", "hidden_size": 32})",
       "field 'vocab_size': expected an integer, got \"many\""},
      {R"({"model_type": "bert", "vocab_size": 10, "hidden_size": 32, "num_hidden_layers": 2,
           "num_attention_heads": 4, "intermediate_size": 8, "hidden_act": "relu"})",
       "field 'hidden_act': expected \"gelu\", got \"relu\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.json);
    auto config = ParseModelConfig(c.json, "dir/config.json");
    ASSERT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(c.message));
    EXPECT_THAT(std::string(config.status().message()), HasSubstr("config 'dir/config.json'"));
  }
}

TEST(ConfigTest, RejectsJsonNestedDeeperThanTheLimit) {
  // 101 levels, one more than models/json_util.h allows; far deeper ones overflowed the stack.
  const std::string json =
      R"({"model_type": )" + std::string(100, '[') + std::string(100, ']') + "}";
  auto config = ParseModelConfig(json, "dir/config.json");
  ASSERT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("config 'dir/config.json': expected JSON nested at most 100 levels deep, "
                        "got 101"));
}

TEST(ConfigTest, MissingFileIsNotFound) {
  EXPECT_EQ(LoadModelConfig(testing::MakeTempDir()).status().code(), absl::StatusCode::kNotFound);
}

// A T5 checkpoint has spiece.model rather than a tokenizer LoadTokenizer knows: loading must
// name the unsupported architecture, not the missing tokenizer file.
TEST(ConfigTest, LoadingReportsTheArchitectureBeforeTheTokenizer) {
  for (const std::string model_type : {"t5", "gpt2"}) {
    const std::string dir = testing::MakeTempDir();
    testing::WriteFileBytes(dir + "/config.json",
                            R"({"model_type": ")" + model_type + R"(", "vocab_size": 10})");
    testing::WriteFileBytes(dir + "/spiece.model", "");
    LoadedModel::Options options;
    options.name = "mt";
    options.model_dir = dir;
    const absl::Status status = LoadedModel::Create(options).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << model_type;
    EXPECT_THAT(status.message(),
                HasSubstr("expected one of the supported architectures \"bert\", \"llama\", "
                          "\"marian\", \"bart\", got \"" +
                          model_type + "\""));
    EXPECT_THAT(status.message(), ::testing::Not(HasSubstr("tokenizer")));
  }
}

// A BART checkpoint loads with its byte-level BPE tokenizer (vocab.json + merges.txt), whose
// vocabulary is the model's.
TEST(ConfigTest, BartIsServed) {
  LoadedModel::Options options;
  options.name = "mt";
  options.model_dir = testing::TestDataDir() + "/tiny-bart";
  absl::StatusOr<std::unique_ptr<LoadedModel>> model = LoadedModel::Create(options);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE((*model)->model().config().is_encoder_decoder);
  EXPECT_EQ((*model)->tokenizer().kind(), TokenizerKind::kByteLevelBpe);
  EXPECT_EQ((*model)->tokenizer().vocab_size(), (*model)->model().config().vocab_size);
}

TEST(ConfigTest, MarianIsServed) {
  LoadedModel::Options options;
  options.name = "mt";
  options.model_dir = testing::TestDataDir() + "/tiny-marian";
  absl::StatusOr<std::unique_ptr<LoadedModel>> model = LoadedModel::Create(options);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE((*model)->model().config().is_encoder_decoder);
}

}  // namespace
}  // namespace attnscope

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
       "\"marian\", \"bart\", \"t5\", got \"gpt2\""},
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

// T5Config's names and defaults (transformers' configuration_t5.py) for what config.json omits.
TEST(ConfigTest, ReadsT5ConfigWithTransformersDefaults) {
  auto config = ParseModelConfig(
      R"({"model_type": "t5", "vocab_size": 32128, "d_model": 512, "d_kv": 64, "d_ff": 2048,
          "num_layers": 6, "num_heads": 8})",
      "t5/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, Architecture::kT5);
  EXPECT_EQ(ArchitectureName(config->architecture), "t5");
  EXPECT_TRUE(config->is_encoder_decoder);
  EXPECT_EQ(config->hidden_size, 512);
  EXPECT_EQ(config->head_dim, 64);
  EXPECT_EQ(config->intermediate_size, 2048);
  EXPECT_EQ(config->decoder_ffn_dim, 2048);
  EXPECT_EQ(config->num_hidden_layers, 6);
  EXPECT_EQ(config->decoder_layers, 6);  // num_decoder_layers defaults to num_layers
  EXPECT_EQ(config->num_attention_heads, 8);
  EXPECT_EQ(config->decoder_attention_heads, 8);
  EXPECT_EQ(config->num_key_value_heads, 8);
  EXPECT_EQ(config->relative_attention_num_buckets, 32);
  EXPECT_EQ(config->relative_attention_max_distance, 128);
  EXPECT_DOUBLE_EQ(config->rms_norm_eps, 1e-6);
  EXPECT_EQ(config->hidden_act, "relu");
  EXPECT_FALSE(config->gated_feed_forward);
  EXPECT_TRUE(config->tie_word_embeddings);
  EXPECT_EQ(config->pad_token_id, 0);
  EXPECT_EQ(config->eos_token_id, 1);
  EXPECT_EQ(config->decoder_start_token_id, 0);
  EXPECT_EQ(config->max_position_embeddings, 512);

  config = ParseModelConfig(
      R"({"model_type": "t5", "vocab_size": 100, "d_model": 32, "d_kv": 6, "d_ff": 48,
          "num_layers": 2, "num_decoder_layers": 3, "num_heads": 4,
          "relative_attention_num_buckets": 8, "relative_attention_max_distance": 12,
          "layer_norm_epsilon": 1e-5, "feed_forward_proj": "gated-gelu",
          "tie_word_embeddings": false, "pad_token_id": 5, "n_positions": 64})",
      "t5/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->head_dim * config->num_attention_heads, 24);  // != d_model
  EXPECT_EQ(config->decoder_layers, 3);
  EXPECT_EQ(config->relative_attention_num_buckets, 8);
  EXPECT_EQ(config->relative_attention_max_distance, 12);
  EXPECT_DOUBLE_EQ(config->rms_norm_eps, 1e-5);
  EXPECT_EQ(config->hidden_act, "gelu_new");
  EXPECT_TRUE(config->gated_feed_forward);
  EXPECT_FALSE(config->tie_word_embeddings);
  EXPECT_EQ(config->decoder_start_token_id, 5);  // pad_token_id when not set
  EXPECT_EQ(config->max_position_embeddings, 64);
}

TEST(ConfigTest, RejectsBadT5Configs) {
  const std::string base =
      R"("model_type": "t5", "vocab_size": 100, "d_model": 32, "d_kv": 8, "d_ff": 48,
         "num_layers": 2, "num_heads": 4)";
  struct Case {
    std::string extra;
    const char* message;
  };
  const Case cases[] = {
      {R"("feed_forward_proj": "gated-swish")",
       "field 'feed_forward_proj': expected \"relu\" or \"gated-gelu\", got \"gated-swish\""},
      {R"("feed_forward_proj": 3)", "field 'feed_forward_proj': expected a string, got 3"},
      {R"("num_decoder_layers": 0)",
       "field 'num_decoder_layers': expected a positive integer, got 0"},
      {R"("relative_attention_num_buckets": 2)",
       "field 'relative_attention_num_buckets': expected at least 4"},
      {R"("relative_attention_num_buckets": 8, "relative_attention_max_distance": 4)",
       "field 'relative_attention_max_distance': expected more than "
       "relative_attention_num_buckets / 2 (4, the exact buckets), got 4"},
      {R"("layer_norm_epsilon": 0)", "field 'layer_norm_epsilon': expected a positive number"},
      {R"("tie_word_embeddings": "yes")",
       "field 'tie_word_embeddings': expected true or false, got \"yes\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.extra);
    auto config = ParseModelConfig("{" + base + ", " + c.extra + "}", "t5/config.json");
    ASSERT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(c.message));
    EXPECT_THAT(std::string(config.status().message()), HasSubstr("config 't5/config.json'"));
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

// A checkpoint of an unsupported architecture (with a tokenizer file LoadTokenizer cannot read):
// loading must name the unsupported architecture, not the tokenizer file.
TEST(ConfigTest, LoadingReportsTheArchitectureBeforeTheTokenizer) {
  for (const std::string model_type : {"xlnet", "gpt2"}) {
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
                          "\"marian\", \"bart\", \"t5\", got \"" +
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

// A T5 checkpoint loads with its spiece.model tokenizer (T5Tokenizer, sentinels included), whose
// vocabulary is the model's.
TEST(ConfigTest, T5IsServed) {
  LoadedModel::Options options;
  options.name = "t5";
  options.model_dir = testing::TestDataDir() + "/tiny-t5";
  absl::StatusOr<std::unique_ptr<LoadedModel>> model = LoadedModel::Create(options);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE((*model)->model().config().is_encoder_decoder);
  EXPECT_EQ((*model)->model().config().architecture, Architecture::kT5);
  EXPECT_EQ((*model)->tokenizer().kind(), TokenizerKind::kSentencePiece);
  EXPECT_EQ((*model)->tokenizer().vocab_size(), (*model)->model().config().vocab_size);
  EXPECT_EQ((*model)->tokenizer().pad_token_id(), (*model)->model().config().pad_token_id);
}

}  // namespace
}  // namespace attnscope

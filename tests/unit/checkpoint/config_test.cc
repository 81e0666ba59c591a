#include "models/checkpoint/config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/engine.h"
#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

// tiny-bert's config.json with `patch` applied, parsed.
absl::StatusOr<ModelConfig> ParseBertWith(const Json& patch) {
  Json config =
      Json::parse(testing::ReadFileBytes(testing::TestDataDir() + "/tiny-bert/config.json"));
  for (const auto& [key, value] : patch.items()) config[key] = value;
  return ParseModelConfig(config.dump(), "dir/config.json");
}

// The status of `load`, or DeadlineExceeded when it has not returned within 5 s: a read that never
// ends must fail the test, not hang it. The thread is left behind then.
absl::Status WithinFiveSeconds(std::function<absl::Status()> load) {
  auto done = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> result = done->get_future();
  std::thread([done, load = std::move(load)] { done->set_value(load()); }).detach();
  if (result.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    return absl::DeadlineExceededError("still loading after 5 s");
  }
  return result.get();
}

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
      {R"({"model_type": "gptj", "vocab_size": 5})",
       "field 'model_type': expected one of the supported architectures \"bert\", \"roberta\", "
       "\"xlm-roberta\", \"llama\", \"qwen2\", \"qwen3\", \"mistral\", \"gemma\", "
       "\"gemma2\", \"gemma3_text\" (Gemma 3's text model, not the multimodal \"gemma3\"), "
       "\"phi3\", \"gpt2\", \"gpt_neox\", \"opt\", \"distilbert\", \"mpnet\", \"electra\", "
       "\"marian\", \"bart\", \"t5\", got \"gptj\""},
      {"{not json",
       "expected a JSON object, got malformed JSON (parse error at line 1, column 3: "
       "syntax error while parsing object key - invalid literal; last read: '{no'; "
       "expected string literal)"},
      {"{\n  \"vocab_size\": -1e999\n}",
       "expected a JSON object, got malformed JSON (number overflow parsing '-1e999')"},
      {"[[[1]]]", "expected a JSON object, got a JSON array"},
      {R"({"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 2,
           "num_attention_heads": 4, "intermediate_size": 8})",
       "field 'vocab_size': expected 1 to 16777216, got nothing (field missing)"},
      {R"({"model_type": "bert", "vocab_size": 10, "hidden_size": 30, "num_hidden_layers": 2,
           "num_attention_heads": 4, "intermediate_size": 8})",
       "field 'hidden_size': expected a multiple of num_attention_heads (4), got 30"},
      {R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 32, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 3, "intermediate_size": 8})",
       "field 'num_key_value_heads': expected a positive divisor of num_attention_heads (4), got "
       "3"},
      {R"({"model_type": "bert", "vocab_size": "many", "hidden_size": 32})",
       "field 'vocab_size': expected an integer, 1 to 16777216, got \"many\""},
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

// RobertaConfig and XLMRobertaConfig (transformers' configuration_roberta.py: BertConfig's fields
// with pad, bos and eos ids 1, 0 and 2) are one architecture; XLM-R's base checkpoint's config.
TEST(ConfigTest, RobertaAndXlmRobertaAreOneArchitecture) {
  const std::string xlmr = R"({"model_type": "xlm-roberta", "vocab_size": 250002,
      "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
      "intermediate_size": 3072, "max_position_embeddings": 514, "type_vocab_size": 1,
      "layer_norm_eps": 1e-05, "position_embedding_type": "absolute"})";
  for (const std::string model_type : {"roberta", "xlm-roberta"}) {
    SCOPED_TRACE(model_type);
    Json json = Json::parse(xlmr);
    json["model_type"] = model_type;
    auto config = ParseModelConfig(json.dump(), "dir/config.json");
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->architecture, Architecture::kRoberta);
    EXPECT_EQ(ArchitectureName(config->architecture), "roberta");
    EXPECT_EQ(config->model_type, model_type);
    EXPECT_EQ(config->pad_token_id, 1);
    EXPECT_EQ(config->bos_token_id, 0);
    EXPECT_EQ(config->eos_token_id, 2);
    EXPECT_EQ(config->type_vocab_size, 1);
    EXPECT_EQ(config->hidden_act, "gelu");
    EXPECT_DOUBLE_EQ(config->layer_norm_eps, 1e-5);
    EXPECT_EQ(config->max_position_embeddings, 514);
    // Positions 0 and 1 are the padding's and the one below it: 512 tokens.
    EXPECT_EQ(config->max_input_tokens(), 512);
  }
  // BERT's positions start at 0.
  auto bert = ParseBertWith({{"max_position_embeddings", 514}});
  ASSERT_TRUE(bert.ok()) << bert.status();
  EXPECT_EQ(bert->max_input_tokens(), 514);
}

// MPNetConfig (transformers' configuration_mpnet.py): BERT's names without type_vocab_size,
// RoBERTa's token ids and positions; all-mpnet-base-v2's config.json.
TEST(ConfigTest, ReadsMpnetConfig) {
  auto config = ParseModelConfig(R"({"model_type": "mpnet", "vocab_size": 30527,
      "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
      "intermediate_size": 3072, "max_position_embeddings": 514, "layer_norm_eps": 1e-05,
      "relative_attention_num_buckets": 32, "architectures": ["MPNetForMaskedLM"]})",
                                 "dir/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, Architecture::kMpnet);
  EXPECT_EQ(config->pad_token_id, 1);
  EXPECT_EQ(config->bos_token_id, 0);
  EXPECT_EQ(config->eos_token_id, 2);
  EXPECT_EQ(config->type_vocab_size, 0);
  EXPECT_EQ(config->head_dim, 64);
  EXPECT_EQ(config->relative_attention_num_buckets, 32);
  EXPECT_EQ(config->relative_attention_max_distance, 128);
  EXPECT_DOUBLE_EQ(config->layer_norm_eps, 1e-5);
  EXPECT_EQ(config->max_input_tokens(), 512);
  EXPECT_EQ(config->num_labels, 0);

  const Json base = Json::parse(R"({"model_type": "mpnet", "vocab_size": 100, "hidden_size": 32,
      "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
      "max_position_embeddings": 10})");
  const std::pair<Json, std::string> refused[] = {
      {{{"relative_attention_num_buckets", 31}},
       "field 'relative_attention_num_buckets': expected at least 32 (MPNet looks up 32 buckets "
       "in relative_attention_bias whatever this says), got 31"},
      {{{"pad_token_id", 9}},
       "field 'pad_token_id': expected an id in [0, 9) (MPNet numbers tokens from pad_token_id + "
       "1, below max_position_embeddings 10), got 9"},
      {{{"hidden_act", "gelu_new"}}, "field 'hidden_act': expected \"gelu\", got \"gelu_new\""},
      {{{"hidden_size", 30}},
       "field 'hidden_size': expected a multiple of num_attention_heads (4), got 30"},
  };
  for (const auto& [patch, message] : refused) {
    SCOPED_TRACE(patch.dump());
    Json json = base;
    json.merge_patch(patch);
    auto status = ParseModelConfig(json.dump(), "dir/config.json").status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr(message));
  }
}

// ElectraConfig (transformers' configuration_electra.py): BertConfig's fields and embedding_size;
// cross-encoder/ms-marco-electra-base's config.json, and ElectraConfig's default embedding_size.
TEST(ConfigTest, ReadsElectraConfig) {
  const Json base = Json::parse(R"({"model_type": "electra", "vocab_size": 30522,
      "embedding_size": 768, "hidden_size": 768, "num_hidden_layers": 12,
      "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 512,
      "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
      "architectures": ["ElectraForSequenceClassification"], "id2label": {"0": "LABEL_0"}})");
  auto config = ParseModelConfig(base.dump(), "dir/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, Architecture::kElectra);
  EXPECT_EQ(ArchitectureName(config->architecture), "electra");
  EXPECT_EQ(config->embedding_size, 768);
  EXPECT_EQ(config->type_vocab_size, 2);
  EXPECT_EQ(config->pad_token_id, 0);
  EXPECT_EQ(config->max_input_tokens(), 512);
  EXPECT_EQ(config->num_labels, 1);

  Json small = base;
  small.erase("embedding_size");
  config = ParseModelConfig(small.dump(), "dir/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->embedding_size, 128);

  small["hidden_act"] = "relu";
  EXPECT_THAT(std::string(ParseModelConfig(small.dump(), "dir/config.json").status().message()),
              HasSubstr("field 'hidden_act': expected \"gelu\", got \"relu\""));
  // BERT's configurations have no embedding_size: their embeddings are hidden_size wide.
  auto bert = ParseBertWith({{"embedding_size", 8}});
  ASSERT_TRUE(bert.ok()) << bert.status();
  EXPECT_EQ(bert->embedding_size, 0);
}

TEST(ConfigTest, RefusesRobertaWithoutRoomForPositions) {
  const Json base = Json::parse(R"({"model_type": "roberta", "vocab_size": 100,
      "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 64, "max_position_embeddings": 10})");
  struct Case {
    Json patch;
    std::string message;
  };
  const Case cases[] = {
      {{{"pad_token_id", -1}},
       "field 'pad_token_id': expected an id in [0, 9) (RoBERTa numbers tokens from pad_token_id + "
       "1, below max_position_embeddings 10), got -1"},
      {{{"pad_token_id", 9}}, "field 'pad_token_id': expected an id in [0, 9)"},
      {{{"position_embedding_type", "relative_key"}},
       "field 'position_embedding_type': expected \"absolute\" (relative position embeddings are "
       "not implemented), got \"relative_key\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.patch.dump());
    Json json = base;
    json.update(c.patch);
    auto config = ParseModelConfig(json.dump(), "dir/config.json");
    ASSERT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(c.message));
  }
  Json fits = base;
  fits["pad_token_id"] = 8;
  auto config = ParseModelConfig(fits.dump(), "dir/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->max_input_tokens(), 1);
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
      {R"("num_decoder_layers": 0)", "field 'num_decoder_layers': expected 1 to 1024, got 0"},
      {R"("relative_attention_num_buckets": 2)",
       "field 'relative_attention_num_buckets': expected 4 to 4096, got 2"},
      {R"("relative_attention_num_buckets": 8, "relative_attention_max_distance": 4)",
       "field 'relative_attention_max_distance': expected more than "
       "relative_attention_num_buckets / 2 (4, the exact buckets), got 4"},
      {R"("layer_norm_epsilon": 0)",
       "field 'layer_norm_epsilon': expected a finite number > 0, got 0"},
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
  // 101 levels, one more than common/json_util.h allows; far deeper ones overflowed the stack.
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
  for (const std::string model_type : {"xlnet", "gptj"}) {
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
                HasSubstr("expected one of the supported architectures \"bert\", \"roberta\", "
                          "\"xlm-roberta\", \"llama\", \"qwen2\", \"qwen3\", \"mistral\", "
                          "\"gemma\", \"gemma2\", \"gemma3_text\""));
    EXPECT_THAT(status.message(), HasSubstr("\"bart\", \"t5\", got \"" + model_type + "\""));
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

// Every size is bounded before anything is built from it: a config.json claiming 10^9 layers made
// the server build 10^9 x 16 tensor names (hung, past 5 GB); 10^12 Marian positions aborted it.
TEST(ConfigTest, RefusesSizesBeyondTheirBounds) {
  struct Case {
    Json patch;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{"num_hidden_layers", 1000000000}},
       "field 'num_hidden_layers': expected 1 to 1024, got 1000000000"},
      {{{"num_hidden_layers", 100000}},
       "field 'num_hidden_layers': expected 1 to 1024, got 100000"},
      {{{"max_position_embeddings", 10000000000}},
       "field 'max_position_embeddings': expected 1 to 1048576, got 10000000000"},
      {{{"vocab_size", 18446744073709551615ull}},
       "field 'vocab_size': expected 1 to 16777216, got 18446744073709551615"},
      {{{"vocab_size", -3}}, "field 'vocab_size': expected 1 to 16777216, got -3"},
      {{{"hidden_size", 1 << 20}}, "field 'hidden_size': expected 1 to 65536, got 1048576"},
      {{{"num_attention_heads", 4096}},
       "field 'num_attention_heads': expected 1 to 1024, got 4096"},
      {{{"intermediate_size", 1e12}},
       "field 'intermediate_size': expected an integer, 1 to 262144, got 1000000000000.0"},
      {{{"type_vocab_size", 0}}, "field 'type_vocab_size': expected 1 to 1024, got 0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.patch.dump());
    const absl::Status status = ParseBertWith(c.patch).status();
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_EQ(status.message(), "config 'dir/config.json': " + c.message);
  }
  auto marian = ParseModelConfig(
      R"({"model_type": "marian", "vocab_size": 10, "d_model": 8, "encoder_layers": 1,
          "decoder_layers": 1, "encoder_attention_heads": 2, "decoder_attention_heads": 2,
          "encoder_ffn_dim": 8, "decoder_ffn_dim": 8, "max_position_embeddings": 1000000000000})",
      "m/config.json");
  EXPECT_EQ(marian.status().message(),
            "config 'm/config.json': field 'max_position_embeddings': expected 1 to 1048576, got "
            "1000000000000");
}

TEST(ConfigTest, RefusesTokenIdsOutsideTheVocabulary) {
  struct Case {
    Json patch;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{"pad_token_id", 5000}},
       "field 'pad_token_id': expected an id in [0, 137) (vocab_size) or -1 for none, got 5000"},
      {{{"bos_token_id", -2}},
       "field 'bos_token_id': expected an id in [0, 137) (vocab_size) or -1 for none, got -2"},
      {{{"eos_token_id", {2, 137}}},
       "field 'eos_token_id': expected an id in [0, 137) (vocab_size) or -1 for none, got [2,137]"},
      {{{"eos_token_id", "[SEP]"}},
       "field 'eos_token_id': expected an id in [0, 137) (vocab_size) or -1 for none, got "
       "\"[SEP]\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.patch.dump());
    const absl::Status status = ParseBertWith(c.patch).status();
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_EQ(status.message(), "config 'dir/config.json': " + c.message);
  }
  // Llama 3 lists its end-of-sequence ids; the first is the one kept.
  auto listed = ParseBertWith({{"eos_token_id", {3, 2}}});
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ(listed->eos_token_id, 3);
  auto marian = ParseModelConfig(
      R"({"model_type": "marian", "vocab_size": 10, "d_model": 8, "encoder_layers": 1,
          "decoder_layers": 1, "encoder_attention_heads": 2, "decoder_attention_heads": 2,
          "encoder_ffn_dim": 8, "decoder_ffn_dim": 8, "pad_token_id": 9,
          "decoder_start_token_id": 10})",
      "m/config.json");
  EXPECT_EQ(marian.status().message(),
            "config 'm/config.json': field 'decoder_start_token_id': expected an id in [0, 10) "
            "(vocab_size), got 10");
  // The decoder cannot start without a token: -1 is not offered, and refused.
  auto none = ParseModelConfig(
      R"({"model_type": "bart", "vocab_size": 10, "d_model": 8, "encoder_layers": 1,
          "decoder_layers": 1, "encoder_attention_heads": 2, "decoder_attention_heads": 2,
          "encoder_ffn_dim": 8, "decoder_ffn_dim": 8, "decoder_start_token_id": -1})",
      "b/config.json");
  EXPECT_EQ(none.status().message(),
            "config 'b/config.json': field 'decoder_start_token_id': expected an id in [0, 10) "
            "(vocab_size), got -1");
}

TEST(ConfigTest, RefusesEpsilonsAndRopeBasesThatAreNotPositive) {
  const std::string llama =
      R"("model_type": "llama", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
         "num_attention_heads": 2, "intermediate_size": 8)";
  struct Case {
    std::string extra;
    std::string message;
  };
  const std::vector<Case> cases = {
      {R"("rope_theta": 0)", "field 'rope_theta': expected a finite number of at least 1, got 0"},
      {R"("rope_theta": -10000.0)",
       "field 'rope_theta': expected a finite number of at least 1, got -10000.0"},
      {R"("rms_norm_eps": 0.0)", "field 'rms_norm_eps': expected a finite number > 0, got 0.0"},
      {R"("rms_norm_eps": "1e-5")",
       "field 'rms_norm_eps': expected a finite number > 0, got \"1e-5\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.extra);
    const absl::Status status =
        ParseModelConfig("{" + llama + ", " + c.extra + "}", "l/config.json").status();
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_EQ(status.message(), "config 'l/config.json': " + c.message);
  }
  EXPECT_EQ(ParseBertWith({{"layer_norm_eps", -1e-12}}).status().message(),
            "config 'dir/config.json': field 'layer_norm_eps': expected a finite number > 0, got "
            "-1e-12");
}

// RoPE scaling other than "linear" (Llama 3's, YaRN, dynamic) is refused: plain RoPE would serve
// other attentions than transformers computes. null is what transformers writes for none.
TEST(ConfigTest, RefusesRopeScalingOtherThanLinear) {
  const std::string llama =
      R"({"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
          "num_attention_heads": 2, "intermediate_size": 8, "rope_scaling": )";
  for (const std::string scaling :
       {R"({"factor": 32.0, "rope_type": "llama3"})", R"({"type": "linear", "factor": -1})",
        R"({"type": "linear"})", R"("linear")"}) {
    SCOPED_TRACE(scaling);
    const absl::Status status = ParseModelConfig(llama + scaling + "}", "l/config.json").status();
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("config 'l/config.json': field 'rope_scaling': expected null or "
                          "{\"rope_type\": \"linear\", \"factor\": a number of at least 1}"));
  }
  absl::StatusOr<ModelConfig> plain = ParseModelConfig(llama + "null}", "l/config.json");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->rope_linear_factor, 1.0);
  // Older configs write "type" where newer ones write "rope_type".
  absl::StatusOr<ModelConfig> linear =
      ParseModelConfig(llama + R"({"type": "linear", "factor": 8.0}})", "l/config.json");
  ASSERT_TRUE(linear.ok()) << linear.status();
  EXPECT_EQ(linear->rope_linear_factor, 8.0);
}

// OPT's config.json as OPTConfig reads it: facebook/opt-125m's fields; opt-350m's layout (a
// projection around a narrower embedding, post-LayerNorm layers) is refused naming the field.
TEST(ConfigTest, ReadsOptConfigsAsOptConfig) {
  const Json opt_125m = Json::parse(
      R"({"_remove_final_layer_norm": false, "activation_dropout": 0.0,
          "activation_function": "relu", "architectures": ["OPTForCausalLM"],
          "attention_dropout": 0.0, "bos_token_id": 2, "do_layer_norm_before": true,
          "dropout": 0.1, "eos_token_id": 2, "ffn_dim": 3072, "hidden_size": 768,
          "init_std": 0.02, "layerdrop": 0.0, "max_position_embeddings": 2048,
          "model_type": "opt", "num_attention_heads": 12, "num_hidden_layers": 12,
          "pad_token_id": 1, "prefix": "</s>", "torch_dtype": "float16", "use_cache": true,
          "vocab_size": 50272, "word_embed_proj_dim": 768})");
  absl::StatusOr<ModelConfig> opt = ParseModelConfig(opt_125m.dump(), "opt-125m/config.json");
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ(opt->architecture, Architecture::kOpt);
  EXPECT_EQ(ArchitectureName(opt->architecture), "opt");
  EXPECT_EQ(opt->intermediate_size, 3072);
  EXPECT_EQ(opt->head_dim, 64);
  EXPECT_EQ(opt->num_key_value_heads, 12);
  EXPECT_EQ(opt->hidden_act, "relu");
  EXPECT_EQ(opt->layer_norm_eps, 1e-5);
  EXPECT_TRUE(opt->final_layer_norm);
  EXPECT_TRUE(opt->tie_word_embeddings);
  EXPECT_EQ(opt->bos_token_id, 2);
  EXPECT_EQ(opt->pad_token_id, 1);

  Json removed = opt_125m;
  removed["_remove_final_layer_norm"] = true;
  opt = ParseModelConfig(removed.dump(), "opt/config.json");
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_FALSE(opt->final_layer_norm);

  Json opt_350m = opt_125m;
  opt_350m["hidden_size"] = 1024;
  opt_350m["num_attention_heads"] = 16;
  opt_350m["word_embed_proj_dim"] = 512;
  opt_350m["do_layer_norm_before"] = false;
  EXPECT_THAT(
      std::string(ParseModelConfig(opt_350m.dump(), "opt-350m/config.json").status().message()),
      HasSubstr("field 'word_embed_proj_dim': expected hidden_size (1024; opt-350m's "
                "project_in / project_out are not implemented), got 512"));
  opt_350m["word_embed_proj_dim"] = 1024;
  EXPECT_THAT(
      std::string(ParseModelConfig(opt_350m.dump(), "opt-350m/config.json").status().message()),
      HasSubstr("field 'do_layer_norm_before': expected true"));
}

// Gemma 1's config.json as GemmaConfig and GemmaMLP read it: google/gemma-2b's fields, whose
// "hidden_act": "gelu" GemmaMLP ignores for hidden_activation (absent: the tanh approximation).
TEST(ConfigTest, ReadsGemmaOneConfigAsGemmaConfig) {
  absl::StatusOr<ModelConfig> gemma = ParseModelConfig(
      R"({"architectures": ["GemmaForCausalLM"], "attention_bias": false, "bos_token_id": 2,
          "eos_token_id": 1, "head_dim": 256, "hidden_act": "gelu", "hidden_size": 2048,
          "intermediate_size": 16384, "max_position_embeddings": 8192, "model_type": "gemma",
          "num_attention_heads": 8, "num_hidden_layers": 18, "num_key_value_heads": 1,
          "pad_token_id": 0, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 10000.0,
          "torch_dtype": "bfloat16", "vocab_size": 256000})",
      "gemma-2b/config.json");
  ASSERT_TRUE(gemma.ok()) << gemma.status();
  EXPECT_EQ(gemma->architecture, Architecture::kGemma);
  EXPECT_EQ(ArchitectureName(gemma->architecture), "gemma");
  EXPECT_TRUE(gemma->gemma_norms);
  EXPECT_FALSE(gemma->sandwich_norms);
  EXPECT_EQ(gemma->hidden_act, "gelu_pytorch_tanh");
  EXPECT_EQ(gemma->head_dim, 256);
  EXPECT_EQ(gemma->attention_scale, 0.0);  // head_dim^-1/2
  EXPECT_EQ(gemma->attn_logit_softcapping, 0.0);
  EXPECT_EQ(gemma->final_logit_softcapping, 0.0);
  EXPECT_EQ(gemma->layer_sliding_windows, std::vector<int64_t>(18, 0));
  EXPECT_TRUE(gemma->tie_word_embeddings);
  EXPECT_EQ(gemma->bos_token_id, 2);
  EXPECT_EQ(gemma->eos_token_id, 1);

  // GemmaConfig's default head_dim is 256, not hidden_size / num_attention_heads.
  const std::string small =
      R"("vocab_size": 300, "hidden_size": 30, "num_hidden_layers": 2, "num_attention_heads": 4,
         "intermediate_size": 64)";
  gemma = ParseModelConfig(R"({"model_type": "gemma", )" + small + "}", "g1/config.json");
  ASSERT_TRUE(gemma.ok()) << gemma.status();
  EXPECT_EQ(gemma->head_dim, 256);
  EXPECT_EQ(gemma->max_position_embeddings, 8192);

  gemma = ParseModelConfig(R"({"model_type": "gemma", "hidden_activation": "gelu", )" + small + "}",
                           "g1/config.json");
  ASSERT_FALSE(gemma.ok());
  EXPECT_THAT(gemma.status().message(), HasSubstr("hidden_activation"));
  EXPECT_THAT(gemma.status().message(), HasSubstr("gelu_pytorch_tanh"));
}

// Gemma 2 and Gemma 3's config.json as their configuration classes read it: the defaults of the
// fields a file omits, and the layers that have the sliding window without layer_types.
TEST(ConfigTest, ReadsGemmaConfigsWithTheirClassesDefaults) {
  const std::string common =
      R"("vocab_size": 300, "hidden_size": 32, "num_hidden_layers": 8, "num_attention_heads": 4,
         "num_key_value_heads": 1, "head_dim": 16, "intermediate_size": 64)";
  absl::StatusOr<ModelConfig> gemma2 =
      ParseModelConfig(R"({"model_type": "gemma2", )" + common + "}", "g2/config.json");
  ASSERT_TRUE(gemma2.ok()) << gemma2.status();
  EXPECT_EQ(gemma2->architecture, Architecture::kGemma2);
  EXPECT_TRUE(gemma2->gemma_norms && gemma2->sandwich_norms);
  EXPECT_FALSE(gemma2->qk_norm);
  EXPECT_EQ(gemma2->hidden_act, "gelu_pytorch_tanh");
  EXPECT_DOUBLE_EQ(gemma2->attention_scale, 1.0 / 16.0);  // query_pre_attn_scalar 256
  EXPECT_EQ(gemma2->attn_logit_softcapping, 50.0);
  EXPECT_EQ(gemma2->final_logit_softcapping, 30.0);
  EXPECT_EQ(gemma2->rope_theta, 10000.0);
  EXPECT_EQ(gemma2->rope_local_theta, 0.0);
  EXPECT_EQ(gemma2->max_position_embeddings, 8192);
  EXPECT_EQ(gemma2->layer_sliding_windows,
            (std::vector<int64_t>{4096, 0, 4096, 0, 4096, 0, 4096, 0}));
  EXPECT_EQ(gemma2->pad_token_id, 0);
  EXPECT_EQ(gemma2->bos_token_id, 2);
  EXPECT_EQ(gemma2->eos_token_id, 1);
  EXPECT_TRUE(gemma2->tie_word_embeddings);

  absl::StatusOr<ModelConfig> gemma3 = ParseModelConfig(
      R"({"model_type": "gemma3_text", "sliding_window": 512, "attn_logit_softcapping": null, )" +
          common + "}",
      "g3/config.json");
  ASSERT_TRUE(gemma3.ok()) << gemma3.status();
  EXPECT_EQ(gemma3->architecture, Architecture::kGemma3);
  EXPECT_EQ(ArchitectureName(gemma3->architecture), "gemma3_text");
  EXPECT_TRUE(gemma3->qk_norm);
  EXPECT_EQ(gemma3->attn_logit_softcapping, 0.0);
  EXPECT_EQ(gemma3->final_logit_softcapping, 0.0);
  EXPECT_EQ(gemma3->rope_theta, 1000000.0);
  EXPECT_EQ(gemma3->rope_local_theta, 10000.0);
  // Every sixth layer (sliding_window_pattern) sees the whole prefix.
  EXPECT_EQ(gemma3->layer_sliding_windows,
            (std::vector<int64_t>{512, 512, 512, 512, 512, 0, 512, 512}));

  // An explicit null window is none (the class keeps None), an absent one the class's default.
  gemma2 = ParseModelConfig(R"({"model_type": "gemma2", "sliding_window": null, )" + common + "}",
                            "g2/config.json");
  ASSERT_TRUE(gemma2.ok()) << gemma2.status();
  EXPECT_EQ(gemma2->layer_sliding_windows, std::vector<int64_t>(8, 0));
  absl::StatusOr<ModelConfig> qwen2 = ParseModelConfig(
      R"({"model_type": "qwen2", "use_sliding_window": true, "sliding_window": null, )" + common +
          "}",
      "q2/config.json");
  ASSERT_TRUE(qwen2.ok()) << qwen2.status();
  EXPECT_EQ(qwen2->layer_sliding_windows, std::vector<int64_t>(8, 0));

  // A null soft-cap is none even where the class has one; the activation is hidden_activation's.
  gemma2 = ParseModelConfig(
      R"({"model_type": "gemma2", "final_logit_softcapping": null, )" + common + "}",
      "g2/config.json");
  ASSERT_TRUE(gemma2.ok()) << gemma2.status();
  EXPECT_EQ(gemma2->final_logit_softcapping, 0.0);
  const absl::Status silu =
      ParseModelConfig(R"({"model_type": "gemma2", "hidden_activation": "silu", )" + common + "}",
                       "g2/config.json")
          .status();
  EXPECT_THAT(std::string(silu.message()),
              HasSubstr("field 'hidden_activation': expected \"gelu_pytorch_tanh\", got \"silu\""));
  // Instruction-tuned checkpoints list the end of a turn as a second end-of-sequence token.
  gemma2 = ParseModelConfig(R"({"model_type": "gemma2", "eos_token_id": [1, 107], )" + common + "}",
                            "g2/config.json");
  ASSERT_TRUE(gemma2.ok()) << gemma2.status();
  EXPECT_EQ(gemma2->eos_token_id, 1);
  EXPECT_EQ(gemma2->eos_token_ids, (std::vector<int64_t>{1, 107}));
  // The multimodal Gemma 3 is not served; the error says which model_type is.
  const absl::Status multimodal =
      ParseModelConfig(R"({"model_type": "gemma3", )" + common + "}", "g3/config.json").status();
  EXPECT_THAT(std::string(multimodal.message()),
              HasSubstr("\"gemma3_text\" (Gemma 3's text model"));
}

// Phi-3-mini-4k-instruct's config.json as published (sizes shrunk): Phi3Config's fields and
// defaults; then Phi-4-mini-instruct's partial rotary and LongRoPE.
TEST(ConfigTest, ReadsPhi3ConfigsWithTheirClassDefaults) {
  absl::StatusOr<ModelConfig> mini = ParseModelConfig(
      R"({"architectures": ["Phi3ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
          "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 96,
          "intermediate_size": 256, "max_position_embeddings": 4096, "model_type": "phi3",
          "num_attention_heads": 3, "num_hidden_layers": 2, "num_key_value_heads": 3,
          "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0,
          "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0,
          "sliding_window": 2047, "tie_word_embeddings": false, "vocab_size": 32064})",
      "phi3/config.json");
  ASSERT_TRUE(mini.ok()) << mini.status();
  EXPECT_EQ(mini->architecture, Architecture::kPhi3);
  EXPECT_EQ(ArchitectureName(mini->architecture), "phi3");
  EXPECT_TRUE(mini->fused_projections);
  EXPECT_FALSE(mini->qkv_bias || mini->o_proj_bias || mini->qk_norm);
  EXPECT_EQ(mini->head_dim, 32);
  EXPECT_EQ(mini->rotary_dim, 32);
  EXPECT_TRUE(mini->rope_short_factors.empty());
  EXPECT_EQ(mini->rope_attention_factor, 1.0);
  EXPECT_EQ(mini->layer_sliding_windows, (std::vector<int64_t>{2047, 2047}));
  EXPECT_EQ(mini->eos_token_id, 32000);
  EXPECT_FALSE(mini->tie_word_embeddings);

  std::vector<double> short_factors(48, 1.0);
  std::vector<double> long_factors(48, 2.0);
  Json phi4_mini = {
      {"model_type", "phi3"},
      {"vocab_size", 200064},
      {"hidden_size", 3072},
      {"intermediate_size", 8192},
      {"num_hidden_layers", 2},
      {"num_attention_heads", 24},
      {"num_key_value_heads", 8},
      {"partial_rotary_factor", 0.75},
      {"max_position_embeddings", 131072},
      {"original_max_position_embeddings", 4096},
      {"rope_scaling",
       {{"type", "longrope"}, {"short_factor", short_factors}, {"long_factor", long_factors}}},
      {"sliding_window", 262144},
      {"tie_word_embeddings", true},
      {"bos_token_id", 199999},
      {"eos_token_id", 199999},
      {"pad_token_id", 199999}};
  absl::StatusOr<ModelConfig> phi4 = ParseModelConfig(phi4_mini.dump(), "phi4/config.json");
  ASSERT_TRUE(phi4.ok()) << phi4.status();
  EXPECT_EQ(phi4->head_dim, 128);
  EXPECT_EQ(phi4->rotary_dim, 96);
  EXPECT_EQ(phi4->rope_short_factors, short_factors);
  EXPECT_EQ(phi4->rope_long_factors, long_factors);
  EXPECT_EQ(phi4->rope_original_max_positions, 4096);
  // sqrt(1 + ln(131072 / 4096) / ln(4096)) = sqrt(1 + 5 / 12).
  EXPECT_DOUBLE_EQ(phi4->rope_attention_factor, std::sqrt(1.0 + 5.0 / 12.0));
  EXPECT_TRUE(phi4->tie_word_embeddings);
  // rope_scaling's own attention_factor wins.
  phi4_mini["rope_scaling"]["attention_factor"] = 1.5;
  phi4 = ParseModelConfig(phi4_mini.dump(), "phi4/config.json");
  ASSERT_TRUE(phi4.ok()) << phi4.status();
  EXPECT_EQ(phi4->rope_attention_factor, 1.5);
}

// EleutherAI/pythia-70m's config.json as published: GPTNeoXConfig's older field names.
TEST(ConfigTest, ReadsPythiaConfigs) {
  const std::string pythia =
      R"({"architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0,
          "hidden_act": "gelu", "hidden_size": 512, "initializer_range": 0.02,
          "intermediate_size": 2048, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
          "model_type": "gpt_neox", "num_attention_heads": 8, "num_hidden_layers": 6,
          "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": false,
          "torch_dtype": "float16", "use_cache": true, "use_parallel_residual": true,
          "vocab_size": 50304})";
  absl::StatusOr<ModelConfig> config = ParseModelConfig(pythia, "pythia/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture, Architecture::kGptNeox);
  EXPECT_EQ(ArchitectureName(config->architecture), "gpt_neox");
  EXPECT_TRUE(IsDecoderOnly(config->architecture));
  EXPECT_EQ(config->head_dim, 64);
  EXPECT_EQ(config->num_key_value_heads, 8);
  EXPECT_EQ(config->rotary_dim, 16);
  EXPECT_EQ(config->rope_theta, 10000.0);
  EXPECT_TRUE(config->parallel_residual);
  EXPECT_TRUE(config->qkv_bias && config->o_proj_bias);
  EXPECT_EQ(config->eos_token_id, 0);
  EXPECT_EQ(config->max_position_embeddings, 2048);
  // Newer configs' names for the same fields; both given, they must agree (transformers
  // versions read different ones).
  Json renamed = Json::parse(pythia);
  renamed["partial_rotary_factor"] = 0.5;
  EXPECT_THAT(std::string(ParseModelConfig(renamed.dump(), "p/config.json").status().message()),
              HasSubstr("field 'partial_rotary_factor': expected rotary_pct's value 0.25 (both are "
                        "given; transformers versions read different ones), or only one of the "
                        "two, got 0.5"));
  renamed.erase("rotary_pct");
  renamed.erase("rotary_emb_base");
  renamed["rope_theta"] = 500000;
  renamed["attention_bias"] = false;
  config = ParseModelConfig(renamed.dump(), "pythia/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rotary_dim, 32);
  EXPECT_EQ(config->rope_theta, 500000.0);
  EXPECT_FALSE(config->qkv_bias || config->o_proj_bias);
  renamed["hidden_act"] = "gelu_fast";
  EXPECT_THAT(std::string(ParseModelConfig(renamed.dump(), "p/config.json").status().message()),
              HasSubstr("field 'hidden_act': expected \"gelu\", \"gelu_new\""));
}

// What an error quotes from the file is a short excerpt on one line, never the file's megabytes
// (the longest message, model_type's, lists every supported architecture before it).
TEST(ConfigTest, QuotesOnlyAShortExcerptOfWhatItRefuses) {
  const std::string huge(1 << 20, 'x');
  for (const Json& patch : {Json{{"hidden_act", huge + "\nsecond line"}},
                            Json{{"vocab_size", huge}}, Json{{"model_type", huge}}}) {
    const absl::Status status = ParseBertWith(patch).status();
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_LT(status.message().size(), 500u) << status.message().substr(0, 500);
    EXPECT_EQ(status.message().find('\n'), absl::string_view::npos);
  }
}

// config.json (and the tokenizer files beside it) must be regular files of bounded size: a FIFO
// hung the load, a symlink to /dev/zero was read without end.
TEST(ConfigTest, RefusesConfigFilesThatAreNotRegularFiles) {
  struct Case {
    std::string name;
    std::function<void(const std::string& path)> make;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"FIFO", [](const std::string& path) { ASSERT_EQ(mkfifo(path.c_str(), 0600), 0); },
       "expected a regular file, got a FIFO"},
      {"symlink to /dev/zero",
       [](const std::string& path) { ASSERT_EQ(symlink("/dev/zero", path.c_str()), 0); },
       "expected a regular file, got a character device"},
      {"directory", [](const std::string& path) { ASSERT_EQ(mkdir(path.c_str(), 0700), 0); },
       "expected a regular file, got a directory"},
      {"17 MB file",
       [](const std::string& path) {
         testing::WriteFileBytes(path, "{}");
         ASSERT_EQ(truncate(path.c_str(), 17 << 20), 0);  // sparse: no disk used
       },
       "expected at most 16777216 bytes, got 17825792"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = testing::CopyToTempDir(testing::TestDataDir() + "/tiny-bert");
    const std::string config = dir + "/config.json";
    std::filesystem::remove(config);
    c.make(config);
    const absl::Status status = WithinFiveSeconds([&] { return LoadModelConfig(dir).status(); });
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr("'" + config + "': " + c.message));
    // The tokenizer files are read the same way.
    const std::string tokenizer_config = dir + "/tokenizer_config.json";
    std::filesystem::remove(config);
    testing::WriteFileBytes(
        config, testing::ReadFileBytes(testing::TestDataDir() + "/tiny-bert/config.json"));
    std::filesystem::remove(tokenizer_config);
    c.make(tokenizer_config);
    const absl::Status tokenizer = WithinFiveSeconds([&] { return LoadTokenizer(dir).status(); });
    EXPECT_EQ(tokenizer.code(), absl::StatusCode::kInvalidArgument) << tokenizer;
    EXPECT_THAT(std::string(tokenizer.message()),
                HasSubstr("'" + tokenizer_config + "': " + c.message));
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace attnscope

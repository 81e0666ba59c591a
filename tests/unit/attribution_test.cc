// Token attributions against autograd on a PyTorch re-implementation from nn modules
// (tests/data/make_attribution_golden.py), plus the properties the methods promise: completeness of
// integrated gradients, word sums, independence of padding and batching.
#include "models/attribution.h"

#include <torch/types.h>
#include <torch/utils.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/architectures/transformer.h"
#include "models/tokenizers/tokenizer.h"
#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

using Json = nlohmann::json;
using ::testing::HasSubstr;

constexpr double kGoldenTolerance = 1e-4;
// tiny-bert's [MASK] and [PAD] ids (tests/data/make_tiny_bert.py).
constexpr int64_t kMaskId = 4;
constexpr int64_t kPadId = 0;

// [1, S] int64 from a list of ids.
torch::Tensor Row(const std::vector<int64_t>& values) {
  return torch::tensor(values, torch::kInt64).view({1, -1});
}
torch::Tensor Row(const Json& values) { return Row(values.get<std::vector<int64_t>>()); }

double MaxAbsDifference(const torch::Tensor& got, const Json& want) {
  const torch::Tensor expected = torch::tensor(want.get<std::vector<double>>(), torch::kFloat64);
  EXPECT_EQ(got.sizes(), expected.sizes());
  return (got.to(torch::kFloat64) - expected).abs().max().item<double>();
}

double Sum(const torch::Tensor& values) { return values.sum().item<double>(); }

// |sum of integrated gradients - (score - baseline score)| relative to that difference.
double CompletenessError(const Attributions& a) {
  const double difference = a.score - a.baseline_score;
  return std::abs(Sum(a.integrated_gradients) - difference) / std::abs(difference);
}

class AttributionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = testing::TestDataDir() + "/tiny-bert";
    auto model = LoadTransformerModel({.model_dir = dir});
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = model->release();
    golden_ = new Json(Json::parse(testing::ReadFileBytes(dir + "/attribution_golden.json")));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete golden_;
  }

  static const Json& Case(const char* name) { return (*golden_)[name]; }

  static AttributionInput InputOf(const Json& c) {
    return AttributionInput{Row(c["input_ids"]), Row(c["attention_mask"]), Row(c["token_type_ids"]),
                            Row(c["special_tokens_mask"])};
  }

  static AttributionOptions OptionsOf(const Json& c) {
    AttributionOptions options;
    options.target = c["target"];
    options.occlusion_token_id = kMaskId;
    options.baseline =
        c["baseline"] == "zero" ? AttributionBaseline::kZero : AttributionBaseline::kTokenEmbedding;
    options.integrated_gradients_steps = c["integrated_gradients_steps"];
    return options;
  }

  static Attributions Run(const AttributionInput& input, const AttributionOptions& options) {
    absl::StatusOr<Attributions> out = Attribute(*model_, input, options);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? *std::move(out) : Attributions();
  }

  static TransformerModel* model_;
  static Json* golden_;
};

TransformerModel* AttributionTest::model_ = nullptr;
Json* AttributionTest::golden_ = nullptr;

TEST_F(AttributionTest, MatchesPyTorchAutograd) {
  for (const char* name : {"pair", "padded", "zero_baseline"}) {
    SCOPED_TRACE(name);
    const Json& c = Case(name);
    const Json& expected = c["expected"];
    const Attributions out = Run(InputOf(c), OptionsOf(c));
    EXPECT_NEAR(out.score, expected["score"].get<double>(), 1e-5);
    EXPECT_NEAR(out.baseline_score, expected["baseline_score"].get<double>(), 1e-5);
    for (const auto& [method, values] :
         {std::pair{"occlusion", out.occlusion},
          std::pair{"gradient_x_input", out.gradient_x_input},
          std::pair{"integrated_gradients", out.integrated_gradients}}) {
      const double difference = MaxAbsDifference(values, expected[method]);
      std::printf("%s %s: max abs difference %.2e\n", name, method, difference);
      EXPECT_LE(difference, kGoldenTolerance) << method;
    }
  }
}

// The portable path scores as the served forward pass (the AVX-512 kernels where the CPU has them).
TEST_F(AttributionTest, ScoreIsTheServedLogit) {
  const Json& c = Case("padded");
  const AttributionInput input = InputOf(c);
  ForwardOptions forward;
  forward.output_attentions = false;
  ForwardInput forward_input;
  forward_input.input_ids = input.input_ids;
  forward_input.attention_mask = input.attention_mask;
  forward_input.token_type_ids = input.token_type_ids;
  absl::StatusOr<ForwardOutput> served = model_->Forward(forward_input, forward);
  ASSERT_TRUE(served.ok()) << served.status();
  const Attributions out = Run(input, OptionsOf(c));
  EXPECT_NEAR(out.score, served->logits[0][0].item<double>(), 1e-5);
}

TEST_F(AttributionTest, IntegratedGradientsCompleteAtDefaultSteps) {
  for (const char* name : {"pair", "padded", "zero_baseline"}) {
    SCOPED_TRACE(name);
    AttributionOptions options = OptionsOf(Case(name));
    options.integrated_gradients_steps = AttributionOptions().integrated_gradients_steps;
    const double error = CompletenessError(Run(InputOf(Case(name)), options));
    std::printf("%s: completeness error %.3f%% of score - baseline score\n", name, 100 * error);
    EXPECT_LE(error, 0.01);
  }
}

TEST_F(AttributionTest, WordSumsAddTheirTokens) {
  const Json& c = Case("pair");
  const Attributions out = Run(InputOf(c), OptionsOf(c));
  const std::vector<int64_t> word_ids = c["word_ids"];
  const std::vector<int64_t> sequence_ids = c["sequence_ids"];
  for (const torch::Tensor& values :
       {out.occlusion, out.gradient_x_input, out.integrated_gradients}) {
    absl::StatusOr<std::vector<WordValue>> words = WordSums(values, word_ids, sequence_ids);
    ASSERT_TRUE(words.ok()) << words.status();
    // "what is the capitals of france" and "paris is the capital city of france".
    ASSERT_EQ(words->size(), 13u);
    for (const WordValue& word : *words) {
      double tokens = 0.0;
      for (size_t i = 0; i < word_ids.size(); ++i) {
        if (word_ids[i] == word.word_id && sequence_ids[i] == word.sequence_id) {
          tokens += values[static_cast<int64_t>(i)].item<double>();
        }
      }
      EXPECT_NEAR(word.value, tokens, 1e-6) << word.sequence_id << "/" << word.word_id;
    }
    // "capital" "##s" (positions 4 and 5) are the first text's word 3.
    EXPECT_EQ((*words)[3].sequence_id, 0);
    EXPECT_EQ((*words)[3].word_id, 3);
    EXPECT_NEAR((*words)[3].value, values[4].item<double>() + values[5].item<double>(), 1e-6);
    // The second text's words restart at 0 and stay apart from the first text's.
    EXPECT_EQ((*words)[6].sequence_id, 1);
    EXPECT_EQ((*words)[6].word_id, 0);
  }
  EXPECT_EQ(WordSums(out.occlusion, {0, 1}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(AttributionTest, PaddingChangesNothing) {
  const Json& c = Case("pair");
  const AttributionInput input = InputOf(c);
  const int64_t length = input.input_ids.size(1);
  constexpr int64_t kPadding = 7;
  auto pad = [&](const torch::Tensor& row, int64_t value) {
    return torch::cat({row, torch::full({1, kPadding}, value, torch::kInt64)}, /*dim=*/1);
  };
  const AttributionInput padded{pad(input.input_ids, kPadId), pad(input.attention_mask, 0),
                                pad(input.token_type_ids, 0), pad(input.special_tokens_mask, 1)};
  const Attributions plain = Run(input, OptionsOf(c));
  const Attributions with_padding = Run(padded, OptionsOf(c));
  EXPECT_NEAR(plain.score, with_padding.score, 1e-5);
  EXPECT_NEAR(plain.baseline_score, with_padding.baseline_score, 1e-5);
  for (const auto& [a, b] :
       {std::pair{plain.occlusion, with_padding.occlusion},
        std::pair{plain.gradient_x_input, with_padding.gradient_x_input},
        std::pair{plain.integrated_gradients, with_padding.integrated_gradients}}) {
    ASSERT_EQ(b.size(0), length + kPadding);
    EXPECT_LE((a - b.narrow(0, 0, length)).abs().max().item<double>(), 1e-5);
    EXPECT_EQ(b.narrow(0, length, kPadding).abs().max().item<double>(), 0.0);
  }
}

TEST_F(AttributionTest, BatchingChangesNothing) {
  const Json& c = Case("padded");
  AttributionOptions one_pass_a_batch = OptionsOf(c);
  one_pass_a_batch.max_batch_tokens = 1;
  AttributionOptions one_batch = OptionsOf(c);
  one_batch.max_batch_tokens = 1 << 20;
  const Attributions a = Run(InputOf(c), one_pass_a_batch);
  const Attributions b = Run(InputOf(c), one_batch);
  EXPECT_LE((a.occlusion - b.occlusion).abs().max().item<double>(), 1e-5);
  EXPECT_LE((a.integrated_gradients - b.integrated_gradients).abs().max().item<double>(), 1e-5);
}

TEST_F(AttributionTest, ConcurrentCallsUnderInferenceModeAgree) {
  const Json& c = Case("padded");
  const Attributions reference = Run(InputOf(c), OptionsOf(c));
  constexpr int kThreads = 4;
  std::vector<Attributions> outputs(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    // As a serving thread: inference mode on, input tensors made under it.
    threads.emplace_back([&, i] {
      torch::InferenceMode guard;
      outputs[i] = Run(InputOf(c), OptionsOf(c));
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const Attributions& out : outputs) {
    ASSERT_TRUE(out.integrated_gradients.defined());
    EXPECT_LE((out.occlusion - reference.occlusion).abs().max().item<double>(), 1e-6);
    EXPECT_LE((out.gradient_x_input - reference.gradient_x_input).abs().max().item<double>(), 1e-6);
    EXPECT_LE(
        (out.integrated_gradients - reference.integrated_gradients).abs().max().item<double>(),
        1e-6);
  }
}

TEST_F(AttributionTest, RunsOnlyTheMethodsAsked) {
  const Json& c = Case("pair");
  AttributionOptions options = OptionsOf(c);
  options.occlusion = false;
  options.integrated_gradients = false;
  options.occlusion_token_id = -1;  // needed by occlusion only
  const Attributions out = Run(InputOf(c), options);
  EXPECT_FALSE(out.occlusion.defined());
  EXPECT_TRUE(out.gradient_x_input.defined());
  EXPECT_FALSE(out.integrated_gradients.defined());
}

TEST_F(AttributionTest, RefusesBadTarget) {
  const Json& c = Case("pair");
  for (int64_t target : {1, -1}) {
    AttributionOptions options = OptionsOf(c);
    options.target = target;
    const absl::Status status = Attribute(*model_, InputOf(c), options).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("option 'target': expected a classifier label index "
                                            "in [0, 1), got " +
                                            std::to_string(target)));
  }
}

TEST_F(AttributionTest, RefusesBadInputsAndOptions) {
  const Json& c = Case("pair");
  AttributionOptions no_mask_id = OptionsOf(c);
  no_mask_id.occlusion_token_id = -1;
  absl::Status status = Attribute(*model_, InputOf(c), no_mask_id).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("option 'occlusion_token_id'"));

  AttributionInput two_rows = InputOf(c);
  two_rows.input_ids = two_rows.input_ids.repeat({2, 1});
  two_rows.attention_mask = torch::Tensor();
  two_rows.token_type_ids = torch::Tensor();
  two_rows.special_tokens_mask = torch::Tensor();
  status = Attribute(*model_, two_rows, OptionsOf(c)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("input 'input_ids': expected batch size 1"));

  AttributionInput bad_special = InputOf(c);
  bad_special.special_tokens_mask = bad_special.special_tokens_mask * 2;
  status = Attribute(*model_, bad_special, OptionsOf(c)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("input 'special_tokens_mask'"));

  AttributionOptions no_steps = OptionsOf(c);
  no_steps.integrated_gradients_steps = 0;
  EXPECT_EQ(Attribute(*model_, InputOf(c), no_steps).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(AttributionTest, StopsWhenTheCallbackSaysSo) {
  const Json& c = Case("pair");
  AttributionOptions options = OptionsOf(c);
  options.max_batch_tokens = 1;
  int calls = 0;
  options.on_batch_done = [&calls] {
    ++calls;
    return absl::CancelledError("client went away");
  };
  EXPECT_EQ(Attribute(*model_, InputOf(c), options).status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(calls, 1);
}

// An XLM-R cross-encoder (tests/data/tiny-roberta, whose forward pass roberta_test checks against
// PyTorch modules): the score is the goldens' logit, RoBERTa's positions included (a pad id among
// the real tokens in "typed_pad"); occluding a token is the logit's drop when it becomes <mask>
// (the typed pad's too, which renumbers the tokens after it); integrated gradients complete.
TEST(AttributionRobertaTest, ScoresAndOccludesAsTheForwardPass) {
  const std::string dir = testing::TestDataDir() + "/tiny-roberta";
  auto model = LoadTransformerModel({.model_dir = dir});
  ASSERT_TRUE(model.ok()) << model.status();
  const Json golden = Json::parse(testing::ReadFileBytes(dir + "/golden.json"));
  constexpr int64_t kRobertaMaskId = 5001;  // <mask>, the last of tiny-xlmr-tokenizer's ids
  for (const char* name : {"pair", "typed_pad"}) {
    SCOPED_TRACE(name);
    const Json& c = golden[name];
    AttributionInput input;
    input.input_ids = Row(c["input_ids"][0]);
    input.attention_mask = Row(c["attention_mask"][0]);
    AttributionOptions options;
    options.occlusion_token_id = kRobertaMaskId;
    absl::StatusOr<Attributions> out = Attribute(**model, input, options);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_NEAR(out->score, c["logits"][0][0].get<double>(), 1e-5);
    const int64_t length = input.input_ids.size(1);
    ASSERT_EQ(out->occlusion.size(0), length);
    for (int64_t i = 0; i < length; ++i) {
      ForwardInput occluded;
      occluded.input_ids = input.input_ids.clone();
      occluded.input_ids[0][i] = kRobertaMaskId;
      absl::StatusOr<ForwardOutput> forward = (*model)->Forward(occluded, ForwardOptions());
      ASSERT_TRUE(forward.ok()) << forward.status();
      EXPECT_NEAR(out->occlusion[i].item<double>(),
                  out->score - forward->logits[0][0].item<double>(), 1e-5)
          << "token " << i;
    }
    EXPECT_LE(CompletenessError(*out), 0.01);
  }
}

// MPNet's and ELECTRA's cross-encoders (tests/data/tiny-mpnet and tiny-electra, whose forward
// passes mpnet_test and electra_test check against PyTorch modules): the score is the goldens'
// logit (MPNet's position bias, ELECTRA's projected embeddings and GELU head included), occluding
// a token is the logit's drop when it becomes the mask token, and integrated gradients complete.
TEST(AttributionFamiliesTest, MpnetAndElectraScoreAndOccludeAsTheForwardPass) {
  struct Family {
    const char* name;
    int64_t mask_id;
    int64_t target;
  };
  // tiny-mpnet's <mask> is its last id; tiny-electra has tiny-bert's [MASK].
  for (const Family& family : {Family{"mpnet", 141, 0}, Family{"electra", kMaskId, 1}}) {
    SCOPED_TRACE(family.name);
    const std::string dir = testing::TestDataDir() + "/tiny-" + family.name;
    auto model = LoadTransformerModel({.model_dir = dir});
    ASSERT_TRUE(model.ok()) << model.status();
    const Json golden = Json::parse(testing::ReadFileBytes(dir + "/golden.json"));
    const Json& c = golden["pair"];
    AttributionInput input;
    input.input_ids = Row(c["input_ids"][0]);
    input.attention_mask = Row(c["attention_mask"][0]);
    if (c.contains("token_type_ids")) input.token_type_ids = Row(c["token_type_ids"][0]);
    AttributionOptions options;
    options.target = family.target;
    options.occlusion_token_id = family.mask_id;
    absl::StatusOr<Attributions> out = Attribute(**model, input, options);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_NEAR(out->score, c["logits"][0][family.target].get<double>(), 1e-5);
    const int64_t length = input.input_ids.size(1);
    ASSERT_EQ(out->occlusion.size(0), length);
    for (int64_t i = 0; i < length; ++i) {
      ForwardInput occluded;
      occluded.input_ids = input.input_ids.clone();
      occluded.input_ids[0][i] = family.mask_id;
      occluded.token_type_ids = input.token_type_ids;
      absl::StatusOr<ForwardOutput> forward = (*model)->Forward(occluded, ForwardOptions());
      ASSERT_TRUE(forward.ok()) << forward.status();
      EXPECT_NEAR(out->occlusion[i].item<double>(),
                  out->score - forward->logits[0][family.target].item<double>(), 1e-5)
          << "token " << i;
    }
    EXPECT_LE(CompletenessError(*out), 0.01);
  }
}

TEST(AttributionArchitectureTest, LlamaIsNotSupportedYet) {
  const std::string dir = testing::SharedDir() + "/models/stories260K";
  if (!FileExists(JoinPath(dir, "model.safetensors"))) GTEST_SKIP() << dir << " is missing";
  auto model = LoadTransformerModel({.model_dir = dir});
  ASSERT_TRUE(model.ok()) << model.status();
  AttributionInput input;
  input.input_ids = Row(std::vector<int64_t>{1, 2, 3});
  const absl::Status status = Attribute(**model, input, AttributionOptions()).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(status.message(),
              HasSubstr("BERT, RoBERTa, DistilBERT, MPNet and ELECTRA cross-encoders"));
}

// The trained default model (checkpoints/default) on held-out query-document pairs in its three
// languages: completeness at the default step count holds on a real model too.
TEST(AttributionDefaultModelTest, IntegratedGradientsCompleteOnTrainedModel) {
  const std::string dir = testing::TestDataDir() + "/../../checkpoints/default";
  if (!FileExists(JoinPath(dir, "model.safetensors"))) GTEST_SKIP() << dir << " has no weights";
  auto model = LoadTransformerModel({.model_dir = dir});
  ASSERT_TRUE(model.ok()) << model.status();
  auto tokenizer = LoadTokenizer(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<Json> heldout =
      testing::ReadJsonLines(testing::TestDataDir() + "/default-model-heldout.jsonl");
  AttributionOptions options;
  options.occlusion = false;
  options.gradient_x_input = false;
  EncodeOptions truncating;
  truncating.truncation = Truncation::kLongestFirst;
  double worst = 0.0;
  int pairs = 0;
  for (const Json& item : heldout) {
    if (item["kind"] != "pair" || pairs >= 12) continue;
    for (const char* document : {"positive", "negative"}) {
      absl::StatusOr<Encoding> encoding =
          (*tokenizer)
              ->EncodePair(item["query"].get<std::string>(), item[document].get<std::string>(),
                           truncating);
      ASSERT_TRUE(encoding.ok()) << encoding.status();
      const AttributionInput input{Row(encoding->input_ids), Row(encoding->attention_mask),
                                   Row(encoding->token_type_ids),
                                   Row(encoding->special_tokens_mask)};
      absl::StatusOr<Attributions> out = Attribute(**model, input, options);
      ASSERT_TRUE(out.ok()) << out.status();
      // A score that barely moves from the baseline makes the relative error meaningless.
      if (std::abs(out->score - out->baseline_score) < 0.05) continue;
      worst = std::max(worst, CompletenessError(*out));
      ++pairs;
    }
  }
  std::printf("default model, %d pairs: worst completeness error %.3f%%\n", pairs, 100 * worst);
  EXPECT_GE(pairs, 8);
  EXPECT_LE(worst, 0.01);
}

}  // namespace
}  // namespace attnscope

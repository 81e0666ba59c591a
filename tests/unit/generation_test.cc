// Generation (models/generation.h) and the decoder's KV cache against independent references:
// ../shared/models/stories260K/expected_greedy.jsonl for greedy search on real weights, and
// tests/data/generation_golden.json (tests/data/make_generation_golden.py: a PyTorch Llama from
// nn modules, recomputing every step without a cache) for greedy search with its log-probabilities
// and attention, beam search and seeded sampling on stories260K and a random tiny Llama.
#include "models/generation.h"

#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/architectures/transformer.h"
#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

using Json = nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

class GenerationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    models_ = new std::map<std::string, std::unique_ptr<TransformerModel>>();
    for (const auto& [name, dir] : std::vector<std::pair<std::string, std::string>>{
             {"stories260K", testing::SharedDir() + "/models/stories260K"},
             {"tiny-llama", testing::TestDataDir() + "/tiny-llama"},
             {"tiny-bert", testing::TestDataDir() + "/tiny-bert"},
             {"tiny-marian", testing::TestDataDir() + "/tiny-marian"},
             {"tiny-bart", testing::TestDataDir() + "/tiny-bart"},
             {"tiny-t5", testing::TestDataDir() + "/tiny-t5"},
             {"tiny-t5/relu-tied", testing::TestDataDir() + "/tiny-t5/relu-tied"}}) {
      absl::StatusOr<std::unique_ptr<TransformerModel>> model =
          LoadTransformerModel({.model_dir = dir});
      ASSERT_TRUE(model.ok()) << model.status();
      (*models_)[name] = *std::move(model);
    }
    std::ifstream in(testing::TestDataDir() + "/generation_golden.json");
    golden_ = new Json(Json::parse(in));
  }
  static void TearDownTestSuite() {
    delete models_;
    delete golden_;
  }

  static const TransformerModel& Model(const std::string& name) { return *models_->at(name); }

  // Generates, collecting the tokens handed to on_token.
  static GenerationResult Run(const std::string& model, const std::vector<int64_t>& prompt,
                              const GenerationOptions& options,
                              std::vector<GeneratedToken>* streamed = nullptr) {
    std::vector<GeneratedToken> seen;
    absl::StatusOr<GenerationResult> result =
        Generate(Model(model), prompt, options, [&](const GeneratedToken& token) {
          seen.push_back(token);
          return absl::OkStatus();
        });
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return {};
    EXPECT_EQ(seen.size(), result->tokens.size());
    if (streamed != nullptr) *streamed = std::move(seen);
    return *std::move(result);
  }

  static std::vector<int64_t> Ids(const GenerationResult& result) {
    std::vector<int64_t> ids;
    for (const GeneratedToken& token : result.tokens) ids.push_back(token.id);
    return ids;
  }

  static GenerationOptions OptionsOf(const Json& c) {
    GenerationOptions options;
    options.max_new_tokens = c["max_new_tokens"];
    options.eos_token_ids = {c["eos_token_id"].get<int64_t>()};
    const std::string method = c["method"];
    if (method == "greedy") {
      options.method = DecodingMethod::kGreedy;
      options.output_attentions = true;
    } else if (method == "beam_search") {
      options.method = DecodingMethod::kBeamSearch;
      options.num_beams = c["num_beams"];
      options.length_penalty = c["length_penalty"];
    } else {
      options.method = DecodingMethod::kSampling;
      options.seed = c["seed"];
      options.temperature = c["temperature"];
      options.top_k = c["top_k"];
      options.top_p = c["top_p"];
    }
    return options;
  }

  // A golden token's attention rows, nested [layer][head][key], as a float32 tensor.
  static torch::Tensor Attention(const Json& rows) {
    std::vector<torch::Tensor> layers;
    for (const Json& layer : rows) {
      std::vector<torch::Tensor> heads;
      for (const Json& head : layer) {
        heads.push_back(torch::tensor(head.get<std::vector<double>>(), torch::kFloat32));
      }
      layers.push_back(torch::stack(heads));
    }
    return torch::stack(layers);
  }

  static double MaxDifference(const torch::Tensor& a, const torch::Tensor& b) {
    EXPECT_EQ(a.sizes(), b.sizes());
    return a.sizes() == b.sizes() ? (a - b).abs().max().item<double>() : 1e9;
  }
  // The largest difference relative to the largest magnitude of `b` (at least 1): logits in the
  // tens carry float32 rounding of a few 1e-6 whichever way the sums are split.
  static double MaxRelativeDifference(const torch::Tensor& a, const torch::Tensor& b) {
    return MaxDifference(a, b) / std::max(1.0, b.abs().max().item<double>());
  }

  static std::map<std::string, std::unique_ptr<TransformerModel>>* models_;
  static Json* golden_;
};

std::map<std::string, std::unique_ptr<TransformerModel>>* GenerationTest::models_ = nullptr;
Json* GenerationTest::golden_ = nullptr;

TEST_F(GenerationTest, StoriesGreedyEqualsTheSharedGolden) {
  const std::vector<Json> cases =
      testing::ReadJsonLines(testing::SharedDir() + "/models/stories260K/expected_greedy.jsonl");
  ASSERT_EQ(cases.size(), 2u);
  for (const Json& c : cases) {
    SCOPED_TRACE(c["prompt"].get<std::string>());
    const std::vector<int64_t> expected = c["greedy_ids"].get<std::vector<int64_t>>();
    GenerationOptions options;
    options.max_new_tokens = static_cast<int64_t>(expected.size());
    options.eos_token_ids = Model("stories260K").config().eos_token_ids;
    options.output_attentions = true;
    const GenerationResult result =
        Run("stories260K", c["input_ids"].get<std::vector<int64_t>>(), options);
    EXPECT_EQ(Ids(result), expected);
    EXPECT_EQ(result.finish_reason, FinishReason::kLength);
    ASSERT_FALSE(result.tokens.empty());
    // The first token was chosen by the prompt's last position: the golden's attention rows.
    const torch::Tensor& attention = result.tokens[0].attention;  // [layer, head, context]
    ASSERT_EQ(attention.sizes(),
              (std::vector<int64_t>{5, 8, static_cast<int64_t>(c["input_ids"].size())}));
    for (const auto& [layer, head, key] : std::vector<std::tuple<int, int, const char*>>{
             {0, 0, "attn_l0_h0_last_row"}, {4, 7, "attn_l4_h7_last_row"}}) {
      const torch::Tensor want = torch::tensor(c[key].get<std::vector<double>>(), torch::kFloat32);
      EXPECT_LE(MaxDifference(attention[layer][head], want), 1e-5) << key;
    }
  }
}

TEST_F(GenerationTest, MatchesTheReferenceGreedyBeamSearchAndSampling) {
  int beam_eos = 0;
  for (const Json& c : (*golden_)["cases"]) {
    const std::string method = c["method"];
    SCOPED_TRACE(c.dump().substr(0, 200));
    const GenerationResult result =
        Run(c["model"], c["prompt_ids"].get<std::vector<int64_t>>(), OptionsOf(c));
    if (method == "greedy") {
      const Json& tokens = c["tokens"];
      ASSERT_EQ(result.tokens.size(), tokens.size());
      for (size_t i = 0; i < tokens.size(); ++i) {
        EXPECT_EQ(result.tokens[i].id, tokens[i]["id"].get<int64_t>()) << "token " << i;
        EXPECT_NEAR(result.tokens[i].logprob, tokens[i]["logprob"].get<double>(), 1e-5);
        EXPECT_LE(MaxDifference(result.tokens[i].attention, Attention(tokens[i]["attention"])),
                  1e-5)
            << "token " << i;
      }
    } else if (method == "beam_search") {
      EXPECT_EQ(Ids(result), c["ids"].get<std::vector<int64_t>>());
      // float32 log-probabilities summed, then multiplied by a length power: relative error.
      const double score = c["score"].get<double>();
      EXPECT_NEAR(result.score, score, 1e-5 + 2e-6 * std::abs(score));
      const bool eos = c["finish_reason"] == "eos";
      EXPECT_EQ(result.finish_reason, eos ? FinishReason::kEos : FinishReason::kLength);
      beam_eos += eos;
    } else {
      EXPECT_EQ(Ids(result), c["ids"].get<std::vector<int64_t>>());
    }
  }
  // The golden exercises hypotheses that end with eos, not only ones cut at max_new_tokens.
  EXPECT_GE(beam_eos, 3);
}

// Encoder-decoders generate from the source: greedy search (ids, log-probabilities and each
// token's cross-attention over the source) and beam search against
// tests/data/make_encoder_decoder.py's reference, which reruns the whole decoder at every step;
// the cached path equals the recomputation.
TEST_F(GenerationTest, EncoderDecodersMatchTheReference) {
  for (const std::string model : {"tiny-marian", "tiny-bart", "tiny-t5", "tiny-t5/relu-tied"}) {
    std::ifstream in(testing::TestDataDir() + "/" + model + "/generation.json");
    const Json golden = Json::parse(in);
    // Three sources (four for tiny-marian and the T5s, whose fourth source is a tokenized text),
    // each searched greedily and by three beam searches.
    ASSERT_EQ(golden["cases"].size(), model == "tiny-bart" ? 12u : 16u) << model;
    for (const Json& c : golden["cases"]) {
      SCOPED_TRACE(model + " " + c.dump().substr(0, 120));
      GenerationOptions options;
      options.max_new_tokens = c["max_new_tokens"];
      options.eos_token_ids = Model(model).config().eos_token_ids;
      const std::vector<int64_t> source = c["source_ids"].get<std::vector<int64_t>>();
      if (c["method"] == "greedy") {
        options.output_attentions = true;
        const GenerationResult result = Run(model, source, options);
        const Json& tokens = c["tokens"];
        ASSERT_EQ(result.tokens.size(), tokens.size());
        for (size_t i = 0; i < tokens.size(); ++i) {
          EXPECT_EQ(result.tokens[i].id, tokens[i]["id"].get<int64_t>()) << i;
          EXPECT_NEAR(result.tokens[i].logprob, tokens[i]["logprob"].get<double>(), 1e-5) << i;
          // [layer, head, source token].
          EXPECT_LE(MaxDifference(result.tokens[i].attention, Attention(tokens[i]["attention"])),
                    1e-5)
              << i;
        }
        options.use_cache = false;
        const GenerationResult recomputed = Run(model, source, options);
        ASSERT_EQ(Ids(recomputed), Ids(result));
        for (size_t i = 0; i < result.tokens.size(); ++i) {
          EXPECT_LE(MaxDifference(result.tokens[i].attention, recomputed.tokens[i].attention),
                    1e-5);
        }
      } else {
        options.method = DecodingMethod::kBeamSearch;
        options.num_beams = c["num_beams"];
        options.length_penalty = c["length_penalty"];
        const GenerationResult result = Run(model, source, options);
        EXPECT_EQ(Ids(result), c["ids"].get<std::vector<int64_t>>());
        const double score = c["score"].get<double>();
        EXPECT_NEAR(result.score, score, 1e-5 + 2e-6 * std::abs(score));
        options.use_cache = false;
        EXPECT_EQ(Ids(Run(model, source, options)), Ids(result));
      }
    }
  }
}

TEST_F(GenerationTest, EncoderDecoderDecodeEqualsTheForwardPass) {
  const TransformerModel& model = Model("tiny-bart");
  ForwardInput input;
  input.input_ids = torch::tensor({{5, 9, 12, 7, 3, 2}, {8, 30, 2, 1, 1, 1}});
  input.attention_mask = torch::tensor({{1, 1, 1, 1, 1, 1}, {1, 1, 1, 0, 0, 0}});
  input.decoder_input_ids = torch::tensor({{1, 14, 6, 21, 17}, {1, 25, 4, 11, 33}});
  absl::StatusOr<ForwardOutput> full = model.Forward(input, ForwardOptions());
  ASSERT_TRUE(full.ok()) << full.status();
  absl::StatusOr<KvCache> cache = model.RunEncoder(input);
  ASSERT_TRUE(cache.ok()) << cache.status();
  for (int64_t position = 0; position < 5; ++position) {
    absl::StatusOr<DecodeOutput> step = model.Decode(input.decoder_input_ids.narrow(1, position, 1),
                                                     &*cache, /*output_attentions=*/true);
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_LE(MaxDifference(step->logits.select(1, 0), full->logits.select(1, position)), 1e-5);
    for (size_t layer = 0; layer < step->cross_attentions.size(); ++layer) {
      EXPECT_LE(MaxDifference(step->cross_attentions[layer].select(2, 0),
                              full->cross_attentions[layer].select(2, position)),
                1e-5);
      EXPECT_LE(MaxDifference(
                    step->attentions[layer].select(2, 0),
                    full->decoder_attentions[layer].select(2, position).narrow(2, 0, position + 1)),
                1e-5);
    }
  }
  // Decode without the encoder's part of the cache is refused.
  KvCache empty;
  EXPECT_THAT(
      model.Decode(input.decoder_input_ids, &empty, /*output_attentions=*/false).status().message(),
      HasSubstr("run Encode first"));
}

// T5's decoder adds a relative position bias that depends on each query's position: decoding
// several positions at once after cached ones (past > 0, T > 1) and one at a time must both give
// the full pass's logits, self-attention rows and cross-attention rows.
TEST_F(GenerationTest, T5DecodeOverTheCacheEqualsTheForwardPass) {
  for (const std::string name : {"tiny-t5", "tiny-t5/relu-tied"}) {
    SCOPED_TRACE(name);
    const TransformerModel& model = Model(name);
    ForwardInput input;
    input.input_ids = torch::tensor(
        {{5, 9, 12, 7, 3, 8, 30, 17, 4, 4, 26, 11, 9, 21, 40, 41, 42, 43, 44, 45, 46, 1},
         {8, 30, 2, 5, 9, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}});
    input.attention_mask = (input.input_ids != 0).to(torch::kInt64);
    input.attention_mask[0].fill_(1);
    input.decoder_input_ids = torch::tensor({{0, 14, 6, 21, 17, 36, 12, 13, 37, 6, 14, 11, 30, 6},
                                             {0, 25, 4, 11, 33, 44, 10, 20, 10, 59, 9, 3, 5, 17}});
    absl::StatusOr<ForwardOutput> full = model.Forward(input, ForwardOptions());
    ASSERT_TRUE(full.ok()) << full.status();
    const int64_t target = input.decoder_input_ids.size(1);
    for (const int64_t first_chunk : {int64_t{1}, int64_t{5}}) {
      absl::StatusOr<KvCache> cache = model.RunEncoder(input);
      ASSERT_TRUE(cache.ok()) << cache.status();
      // The first chunk in one pass, then chunks of 3 positions (the last one shorter).
      for (int64_t position = 0; position < target;) {
        const int64_t length =
            std::min(position == 0 ? first_chunk : int64_t{3}, target - position);
        absl::StatusOr<DecodeOutput> step =
            model.Decode(input.decoder_input_ids.narrow(1, position, length), &*cache,
                         /*output_attentions=*/true);
        ASSERT_TRUE(step.ok()) << step.status();
        EXPECT_EQ(cache->length(), position + length);
        EXPECT_LE(MaxRelativeDifference(step->logits, full->logits.narrow(1, position, length)),
                  1e-5)
            << position;
        for (size_t layer = 0; layer < step->attentions.size(); ++layer) {
          EXPECT_LE(MaxDifference(step->cross_attentions[layer],
                                  full->cross_attentions[layer].narrow(2, position, length)),
                    1e-5);
          EXPECT_LE(MaxDifference(step->attentions[layer], full->decoder_attentions[layer]
                                                               .narrow(2, position, length)
                                                               .narrow(3, 0, position + length)),
                    1e-5)
              << "layer " << layer << " position " << position;
        }
        position += length;
      }
    }
  }
}

TEST_F(GenerationTest, DecodeOverTheCacheEqualsTheFullForwardPass) {
  const TransformerModel& model = Model("stories260K");
  const std::vector<int64_t> ids = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315};
  ForwardInput input;
  input.input_ids = torch::tensor(ids, torch::kInt64).unsqueeze(0);
  absl::StatusOr<ForwardOutput> full = model.Forward(input, ForwardOptions());
  ASSERT_TRUE(full.ok()) << full.status();
  // A prompt of 4 in one pass, then one position at a time.
  KvCache cache;
  absl::StatusOr<DecodeOutput> first =
      model.Decode(input.input_ids.narrow(1, 0, 4), &cache, /*output_attentions=*/true);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(cache.length(), 4);
  EXPECT_LE(MaxRelativeDifference(first->logits[0], full->logits[0].narrow(0, 0, 4)), 1e-5);
  for (int64_t position = 4; position < static_cast<int64_t>(ids.size()); ++position) {
    absl::StatusOr<DecodeOutput> step =
        model.Decode(input.input_ids.narrow(1, position, 1), &cache, /*output_attentions=*/true);
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_EQ(cache.length(), position + 1);
    EXPECT_LE(MaxRelativeDifference(step->logits[0][0], full->logits[0][position]), 1e-5);
    for (size_t layer = 0; layer < step->attentions.size(); ++layer) {
      const torch::Tensor row =
          full->attentions[layer][0].select(1, position).narrow(1, 0, position + 1);
      EXPECT_LE(MaxDifference(step->attentions[layer][0].select(1, 0), row), 1e-5);
    }
  }
}

TEST_F(GenerationTest, AReservedCacheWritesEachPositionInPlace) {
  const TransformerModel& model = Model("stories260K");
  const std::vector<int64_t> ids = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315};
  const torch::Tensor input_ids = torch::tensor(ids, torch::kInt64).unsqueeze(0);
  KvCache grown;
  KvCache reserved;
  reserved.reserved_positions = static_cast<int64_t>(ids.size());
  ASSERT_TRUE(model.Decode(input_ids.narrow(1, 0, 3), &grown, false).ok());
  ASSERT_TRUE(model.Decode(input_ids.narrow(1, 0, 3), &reserved, false).ok());
  ASSERT_EQ(reserved.key_storage.size(), reserved.keys.size());
  const void* const room = reserved.key_storage.back().data_ptr();
  EXPECT_EQ(reserved.key_storage.back().size(2), static_cast<int64_t>(ids.size()));
  for (int64_t position = 3; position < static_cast<int64_t>(ids.size()); ++position) {
    absl::StatusOr<DecodeOutput> a = model.Decode(input_ids.narrow(1, position, 1), &grown, false);
    absl::StatusOr<DecodeOutput> b =
        model.Decode(input_ids.narrow(1, position, 1), &reserved, false);
    ASSERT_TRUE(a.ok() && b.ok());
    // The same arithmetic on the same values, whether the cache grew by doubling or not.
    EXPECT_TRUE(torch::equal(a->logits, b->logits)) << "position " << position;
    for (size_t layer = 0; layer < reserved.keys.size(); ++layer) {
      EXPECT_TRUE(torch::equal(reserved.keys[layer], grown.keys[layer]));
      EXPECT_TRUE(torch::equal(reserved.values[layer], grown.values[layer]));
    }
  }
  EXPECT_EQ(reserved.key_storage.back().data_ptr(), room) << "the reserved room was reallocated";
  EXPECT_GT(grown.key_storage.back().size(2), 3);

  // Greedy search's SelectRows(0) keeps the cache as it is; beam search's reorder copies rows.
  reserved.SelectRows(torch::zeros({1}, torch::kInt64));
  EXPECT_EQ(reserved.key_storage.back().data_ptr(), room);
  const torch::Tensor before = reserved.keys[0].clone();
  reserved.SelectRows(torch::zeros({3}, torch::kInt64));
  EXPECT_EQ(reserved.batch_size(), 3);
  EXPECT_EQ(reserved.length(), static_cast<int64_t>(ids.size()));
  for (int64_t row = 0; row < 3; ++row) {
    EXPECT_TRUE(torch::equal(reserved.keys[0][row], before[0]));
  }
}

TEST_F(GenerationTest, CachedGenerationEqualsRecomputation) {
  const std::vector<int64_t> prompt = {1, 403, 407, 261, 378};
  std::vector<GenerationOptions> variants(3);
  variants[0].max_new_tokens = 40;
  variants[1].method = DecodingMethod::kBeamSearch;
  variants[1].num_beams = 4;
  variants[1].max_new_tokens = 20;
  variants[2].method = DecodingMethod::kSampling;
  variants[2].seed = 11;
  variants[2].top_p = 0.9;
  variants[2].max_new_tokens = 40;
  for (GenerationOptions& options : variants) {
    options.output_attentions = true;
    options.eos_token_ids = {2};
    const GenerationResult cached = Run("stories260K", prompt, options);
    options.use_cache = false;
    const GenerationResult recomputed = Run("stories260K", prompt, options);
    ASSERT_EQ(Ids(cached), Ids(recomputed));
    // The score sums the tokens' log-probabilities, each within 1e-5 (the cached step and the
    // whole sequence run differently blocked float32 products).
    EXPECT_NEAR(cached.score, recomputed.score, 1e-5 * static_cast<double>(cached.tokens.size()));
    for (size_t i = 0; i < cached.tokens.size(); ++i) {
      EXPECT_NEAR(cached.tokens[i].logprob, recomputed.tokens[i].logprob, 1e-5) << i;
      EXPECT_EQ(cached.tokens[i].attention.size(2), static_cast<int64_t>(prompt.size() + i));
      EXPECT_LE(MaxDifference(cached.tokens[i].attention, recomputed.tokens[i].attention), 1e-5)
          << i;
    }
  }
}

// Generation stops at any of the end-of-sequence ids config.json lists (Gemma's instruction-tuned
// [<eos>, <end_of_turn>]), as transformers' generate does.
TEST_F(GenerationTest, AnyListedEndOfSequenceIdEndsGeneration) {
  const std::vector<int64_t> prompt = {1, 403, 407, 261, 378};
  GenerationOptions options;
  options.max_new_tokens = 12;
  const std::vector<int64_t> free = Ids(Run("stories260K", prompt, options));
  ASSERT_EQ(free.size(), 12u);
  const int64_t stop = free[5];
  const size_t first = std::find(free.begin(), free.end(), stop) - free.begin();
  options.eos_token_ids = {2, stop};
  const GenerationResult stopped = Run("stories260K", prompt, options);
  EXPECT_EQ(stopped.finish_reason, FinishReason::kEos);
  EXPECT_EQ(Ids(stopped), std::vector<int64_t>(free.begin(), free.begin() + first + 1));
}

TEST_F(GenerationTest, SamplingIsReproducibleForASeed) {
  const std::vector<int64_t> prompt = {1, 403, 407, 261, 378};
  GenerationOptions options;
  options.method = DecodingMethod::kSampling;
  options.max_new_tokens = 30;
  options.seed = 42;
  const std::vector<int64_t> first = Ids(Run("stories260K", prompt, options));
  EXPECT_EQ(Ids(Run("stories260K", prompt, options)), first);
  int differing = 0;
  for (uint64_t seed : {1, 2, 3}) {
    options.seed = seed;
    differing += Ids(Run("stories260K", prompt, options)) != first;
  }
  EXPECT_GE(differing, 2);
  // top_k 1 leaves one token: sampling becomes greedy search; so does a top_p too small for
  // float32, which keeps the most probable token only.
  options.top_k = 1;
  GenerationOptions greedy;
  greedy.max_new_tokens = 30;
  const std::vector<int64_t> greedy_ids = Ids(Run("stories260K", prompt, greedy));
  EXPECT_EQ(Ids(Run("stories260K", prompt, options)), greedy_ids);
  options.top_k = 0;
  options.top_p = 1e-300;
  EXPECT_EQ(Ids(Run("stories260K", prompt, options)), greedy_ids);
}

TEST_F(GenerationTest, RefusesBadOptionsNamingThem) {
  auto status_of = [](const std::string& model, const std::vector<int64_t>& prompt,
                      const GenerationOptions& options) {
    return Generate(Model(model), prompt, options,
                    [](const GeneratedToken&) { return absl::OkStatus(); })
        .status();
  };
  const std::vector<int64_t> prompt = {1, 5};
  GenerationOptions options;
  absl::Status status = status_of("tiny-bert", {2, 10, 3}, options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("encoder-only"));
  EXPECT_THAT(status_of("tiny-llama", {}, options).message(), HasSubstr("prompt"));

  for (int64_t bad : std::vector<int64_t>{0, -3, kMaxNewTokens + 1, 63}) {
    GenerationOptions o;
    o.max_new_tokens = bad;
    status = status_of("tiny-llama", prompt, o);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(status.message(), HasSubstr("max_new_tokens")) << bad;
  }
  GenerationOptions beams;
  beams.method = DecodingMethod::kBeamSearch;
  beams.num_beams = 25;
  status = status_of("tiny-llama", prompt, beams);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("num_beams: expected 1 to 24 (at most the vocabulary"));
  beams.num_beams = 0;
  EXPECT_THAT(status_of("tiny-llama", prompt, beams).message(), HasSubstr("num_beams"));
  beams.num_beams = 2;
  beams.length_penalty = 1e308;
  EXPECT_THAT(status_of("tiny-llama", prompt, beams).message(),
              HasSubstr("length_penalty: expected a number from -10 to 10"));
  GenerationOptions too_many;
  too_many.max_new_tokens = 64;
  EXPECT_THAT(status_of("tiny-llama", prompt, too_many).message(),
              HasSubstr("max_new_tokens: expected at most 62 after a prompt of 2 tokens "
                        "(max_position_embeddings 64), got 64; ask for fewer tokens or shorten"));
  // An encoder-decoder's source does not take the decoder's positions: the message does not
  // count it as a prompt, nor suggest shortening it.
  status = status_of("tiny-marian", prompt, too_many);
  EXPECT_THAT(status.message(),
              HasSubstr("max_new_tokens: expected at most 63 after the decoder's start token "
                        "(max_position_embeddings 64), got 64; ask for fewer tokens"));
  EXPECT_THAT(status.message(), Not(HasSubstr("prompt")));
  // A prompt that fills every position leaves no room for a token.
  status = status_of("tiny-llama", std::vector<int64_t>(64, 5), options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("prompt: expected fewer than 64 tokens"));

  GenerationOptions sampling;
  sampling.method = DecodingMethod::kSampling;
  for (const auto& [field, set] :
       std::vector<std::pair<std::string, std::function<void(GenerationOptions&)>>>{
           {"temperature", [](GenerationOptions& o) { o.temperature = 0; }},
           {"temperature", [](GenerationOptions& o) { o.temperature = -1; }},
           {"temperature", [](GenerationOptions& o) { o.temperature = 1e-300; }},
           {"top_k", [](GenerationOptions& o) { o.top_k = -1; }},
           {"top_p", [](GenerationOptions& o) { o.top_p = 0; }},
           {"top_p", [](GenerationOptions& o) { o.top_p = 1.5; }}}) {
    GenerationOptions o = sampling;
    set(o);
    status = status_of("tiny-llama", prompt, o);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(status.message(), HasSubstr(field));
  }
}

TEST_F(GenerationTest, StopsWhenTheCheckOrTheConsumerFails) {
  GenerationOptions options;
  options.max_new_tokens = 10;
  int steps = 0;
  options.check = [&]() {
    return ++steps > 3 ? absl::DeadlineExceededError("deadline exceeded") : absl::OkStatus();
  };
  int streamed = 0;
  absl::StatusOr<GenerationResult> result =
      Generate(Model("stories260K"), {1}, options, [&](const GeneratedToken&) {
        ++streamed;
        return absl::OkStatus();
      });
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(streamed, 3);

  options.check = nullptr;
  result = Generate(Model("stories260K"), {1}, options,
                    [](const GeneratedToken&) { return absl::CancelledError("client went away"); });
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace attnscope

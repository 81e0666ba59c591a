// The decoder-only families beside Llama (Qwen2, Qwen3, Mistral, Gemma 2, Gemma 3, Phi-3, GPT-2,
// GPT-NeoX) against goldens from PyTorch's own modules (tests/data/make_tiny_decoders.py):
// attentions, hidden states and logits of a single sequence and a right-padded batch (Phi-3: also
// sequences on either side of LongRoPE's original length, alone and batched together), greedy
// generation through the KV cache, causal masks and sliding windows that hide exactly what they
// should, and the checkpoints each refuses.
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/architectures/transformer.h"
#include "models/generation.h"
#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr double kTolerance = 1e-5;

struct Member {
  const char* name;  // tests/data/tiny-<name>
  Architecture architecture;
};

std::string ModelDir(const std::string& name) { return testing::TestDataDir() + "/tiny-" + name; }

double MaxDifference(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kFloat64) - want.to(torch::kFloat64)).abs().max().item<double>();
}

class DecoderFamilyTest : public ::testing::TestWithParam<Member> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<TransformerModel>> model =
        LoadTransformerModel({.model_dir = ModelDir(GetParam().name)});
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    golden_ = Json::parse(testing::ReadFileBytes(ModelDir(GetParam().name) + "/golden.json"));
  }

  // The largest difference from the golden over the rows of real (unpadded) queries, `got` and
  // the golden being [B, ..., S, ...] with S at `query_dim`; only the first `columns` of the last
  // dimension when given.
  static double DifferenceAtRealTokens(const torch::Tensor& got, const Json& want,
                                       const torch::Tensor& mask, int64_t query_dim,
                                       int64_t columns = -1) {
    torch::Tensor compared = got;
    if (columns > 0) compared = got.narrow(-1, 0, columns);
    const torch::Tensor expected = testing::TensorFromJson(want, torch::kFloat64);
    EXPECT_EQ(compared.sizes(), expected.sizes());
    if (compared.sizes() != expected.sizes()) return INFINITY;
    double worst = 0;
    for (int64_t b = 0; b < mask.size(0); ++b) {
      const int64_t real = mask[b].sum().item<int64_t>();
      worst = std::max(worst, MaxDifference(compared[b].narrow(query_dim - 1, 0, real),
                                            expected[b].narrow(query_dim - 1, 0, real)));
    }
    return worst;
  }

  std::unique_ptr<TransformerModel> model_;
  Json golden_;
};

TEST_P(DecoderFamilyTest, ReadsTheMembersConfig) {
  const ModelConfig& config = model_->config();
  EXPECT_EQ(config.architecture, GetParam().architecture);
  EXPECT_EQ(config.model_type, ArchitectureName(GetParam().architecture));
  EXPECT_TRUE(model_->is_decoder());
  const bool phi3 = config.architecture == Architecture::kPhi3;
  const bool neox = config.architecture == Architecture::kGptNeox;
  EXPECT_EQ(config.num_attention_heads, phi3 || neox ? 2 : 4);
  const bool multi_query = phi3 || config.architecture == Architecture::kGemma;
  const bool learned_positions =
      config.architecture == Architecture::kGpt2 || config.architecture == Architecture::kOpt;
  EXPECT_EQ(config.num_key_value_heads, learned_positions ? 4 : multi_query ? 1 : 2);
  if (!learned_positions) {
    EXPECT_EQ(config.rotary_dim, phi3 || neox ? 4 : config.head_dim);
  }
  switch (config.architecture) {
    case Architecture::kGptNeox:
      // rotary_pct 0.25 of head_dim 16; GPTNeoXConfig's use_parallel_residual and biases.
      EXPECT_EQ(config.head_dim, 16);
      EXPECT_TRUE(config.parallel_residual);
      EXPECT_TRUE(config.qkv_bias && config.o_proj_bias);
      EXPECT_EQ(config.hidden_act, "gelu");
      EXPECT_FALSE(config.tie_word_embeddings);
      EXPECT_TRUE(config.layer_sliding_windows.empty());
      break;
    case Architecture::kPhi3:
      EXPECT_TRUE(config.fused_projections);
      EXPECT_FALSE(config.qkv_bias);
      EXPECT_EQ(config.head_dim, 8);
      EXPECT_EQ(config.layer_sliding_windows, (std::vector<int64_t>{5, 5}));
      EXPECT_EQ(config.rope_short_factors, (std::vector<double>{1.0, 1.7}));
      EXPECT_EQ(config.rope_long_factors, (std::vector<double>{2.5, 6.0}));
      EXPECT_EQ(config.rope_original_max_positions, 6);
      // sqrt(1 + ln(64 / 6) / ln(6)).
      EXPECT_DOUBLE_EQ(config.rope_attention_factor,
                       std::sqrt(1.0 + std::log(64.0 / 6.0) / std::log(6.0)));
      break;
    case Architecture::kOpt:
      // OPTConfig's names: ffn_dim, activation_function; biases everywhere, LayerNorm at 1e-5.
      EXPECT_EQ(config.head_dim, 4);
      EXPECT_EQ(config.intermediate_size, 32);
      EXPECT_EQ(config.hidden_act, "relu");
      EXPECT_TRUE(config.qkv_bias && config.o_proj_bias);
      EXPECT_TRUE(config.final_layer_norm);
      EXPECT_EQ(config.layer_norm_eps, 1e-5);
      EXPECT_TRUE(config.tie_word_embeddings);
      EXPECT_EQ(config.pad_token_id, 1);
      EXPECT_TRUE(config.layer_sliding_windows.empty());
      break;
    case Architecture::kGpt2:
      // GPT2Config's names: n_embd, n_layer, n_head, n_inner null (4 * n_embd), n_positions.
      EXPECT_EQ(config.hidden_size, 16);
      EXPECT_EQ(config.num_hidden_layers, 2);
      EXPECT_EQ(config.head_dim, 4);
      EXPECT_EQ(config.intermediate_size, 64);
      EXPECT_EQ(config.max_position_embeddings, 64);
      EXPECT_EQ(config.hidden_act, "gelu_new");
      EXPECT_TRUE(config.layer_sliding_windows.empty());
      break;
    case Architecture::kQwen2:
      EXPECT_TRUE(config.qkv_bias);
      EXPECT_FALSE(config.o_proj_bias);
      EXPECT_FALSE(config.qk_norm);
      EXPECT_EQ(config.layer_sliding_windows, (std::vector<int64_t>{0, 4}));
      break;
    case Architecture::kQwen3:
      EXPECT_FALSE(config.qkv_bias);
      EXPECT_TRUE(config.qk_norm);
      // head_dim from config.json, twice hidden_size / num_attention_heads.
      EXPECT_EQ(config.head_dim, 8);
      EXPECT_EQ(config.layer_sliding_windows, (std::vector<int64_t>{0, 0}));
      break;
    case Architecture::kGemma:
      // Gemma 1: Gemma's norms and tanh-gated MLP (hidden_act "gelu" ignored, as GemmaMLP does)
      // on Llama's layers.
      EXPECT_TRUE(config.gemma_norms);
      EXPECT_FALSE(config.sandwich_norms);
      EXPECT_FALSE(config.qk_norm);
      EXPECT_EQ(config.hidden_act, "gelu_pytorch_tanh");
      EXPECT_EQ(config.attention_scale, 0.0);
      EXPECT_EQ(config.attn_logit_softcapping, 0.0);
      EXPECT_EQ(config.final_logit_softcapping, 0.0);
      EXPECT_EQ(config.layer_sliding_windows, (std::vector<int64_t>{0, 0}));
      break;
    case Architecture::kGemma2:
    case Architecture::kGemma3: {
      const bool gemma3 = config.architecture == Architecture::kGemma3;
      EXPECT_TRUE(config.gemma_norms);
      EXPECT_TRUE(config.sandwich_norms);
      EXPECT_EQ(config.qk_norm, gemma3);
      EXPECT_EQ(config.hidden_act, "gelu_pytorch_tanh");
      EXPECT_EQ(config.head_dim, 8);
      EXPECT_DOUBLE_EQ(config.attention_scale, 1.0 / std::sqrt(6.0));
      EXPECT_EQ(config.attn_logit_softcapping, gemma3 ? 0.0 : 4.0);
      EXPECT_EQ(config.final_logit_softcapping, gemma3 ? 0.0 : 2.5);
      EXPECT_EQ(config.rope_local_theta, gemma3 ? 10000.0 : 0.0);
      EXPECT_EQ(config.rope_linear_factor, gemma3 ? 4.0 : 1.0);
      // Layer 0 has the window, layer 1 (every second: Gemma 2's rule, Gemma 3's
      // sliding_window_pattern 2) the whole prefix.
      EXPECT_EQ(config.layer_sliding_windows, (std::vector<int64_t>{4, 0}));
      break;
    }
    default:
      EXPECT_FALSE(config.qkv_bias);
      EXPECT_FALSE(config.qk_norm);
      EXPECT_EQ(config.layer_sliding_windows, (std::vector<int64_t>{4, 4}));
  }
}

TEST_P(DecoderFamilyTest, MatchesPyTorchModules) {
  double worst_hidden = 0, worst_attention = 0, worst_logit = 0;
  for (const auto& [name, c] : golden_["forward"].items()) {
    SCOPED_TRACE(name);
    ForwardInput input;
    input.input_ids = testing::TensorFromJson(c["input_ids"], torch::kInt64);
    input.attention_mask = testing::TensorFromJson(c["attention_mask"], torch::kInt64);
    ForwardOptions options;
    options.output_hidden_states = true;
    absl::StatusOr<ForwardOutput> out = model_->Forward(input, options);
    ASSERT_TRUE(out.ok()) << out.status();
    const torch::Tensor& mask = input.attention_mask;
    worst_hidden = std::max(worst_hidden, DifferenceAtRealTokens(out->last_hidden_state,
                                                                 c["last_hidden_state"], mask, 1));
    ASSERT_EQ(out->hidden_states.size(), c["hidden_states"].size());
    for (size_t i = 0; i < out->hidden_states.size(); ++i) {
      worst_hidden = std::max(
          worst_hidden, DifferenceAtRealTokens(out->hidden_states[i], c["hidden_states"][i], mask,
                                               /*query_dim=*/1));
    }
    ASSERT_EQ(out->attentions.size(), c["attentions"].size());
    for (size_t i = 0; i < out->attentions.size(); ++i) {
      worst_attention = std::max(
          worst_attention,
          DifferenceAtRealTokens(out->attentions[i], c["attentions"][i], mask, /*query_dim=*/2));
    }
    const int64_t columns = static_cast<int64_t>(c["logits"][0][0].size());
    worst_logit = std::max(worst_logit, DifferenceAtRealTokens(out->logits, c["logits"], mask,
                                                               /*query_dim=*/1, columns));
  }
  EXPECT_LE(worst_hidden, kTolerance);
  EXPECT_LE(worst_attention, kTolerance);
  EXPECT_LE(worst_logit, kTolerance);
  std::printf(
      "%s: largest differences from the goldens: hidden states %.3g, attentions %.3g, "
      "logits %.3g\n",
      GetParam().name, worst_hidden, worst_attention, worst_logit);
}

TEST_P(DecoderFamilyTest, WindowsAndCausalityHideExactlyTheKeysOutside) {
  const Json& c = golden_["forward"]["single"];
  ForwardInput input;
  input.input_ids = testing::TensorFromJson(c["input_ids"], torch::kInt64);
  absl::StatusOr<ForwardOutput> out = model_->Forward(input, ForwardOptions());
  ASSERT_TRUE(out.ok()) << out.status();
  const int64_t length = input.input_ids.size(1);
  for (size_t layer = 0; layer < out->attentions.size(); ++layer) {
    const std::vector<int64_t>& windows = model_->config().layer_sliding_windows;
    const int64_t window = windows.empty() ? 0 : windows[layer];
    const torch::Tensor probs = out->attentions[layer][0];  // [N, S, S]
    for (int64_t query = 0; query < length; ++query) {
      for (int64_t key = 0; key < length; ++key) {
        const bool visible = key <= query && (window == 0 || key > query - window);
        const torch::Tensor column = probs.select(1, query).select(1, key);
        if (visible) {
          EXPECT_GT(column.min().item<double>(), 0.0)
              << "layer " << layer << " query " << query << " key " << key;
        } else {
          EXPECT_EQ(column.abs().max().item<double>(), 0.0)
              << "layer " << layer << " query " << query << " key " << key;
        }
      }
    }
  }
}

TEST_P(DecoderFamilyTest, GreedyGenerationThroughTheCacheMatchesTheReference) {
  ASSERT_FALSE(golden_["greedy"].empty());
  for (const Json& c : golden_["greedy"]) {
    const std::vector<int64_t> prompt = c["prompt_ids"].get<std::vector<int64_t>>();
    GenerationOptions options;
    options.max_new_tokens = c["max_new_tokens"];
    options.output_attentions = true;
    absl::StatusOr<GenerationResult> result =
        Generate(*model_, prompt, options, [](const GeneratedToken&) { return absl::OkStatus(); });
    ASSERT_TRUE(result.ok()) << result.status();
    const Json& want = c["tokens"];
    ASSERT_EQ(result->tokens.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "new token " << i);
      const GeneratedToken& token = result->tokens[i];
      EXPECT_EQ(token.id, want[i]["id"].get<int64_t>());
      EXPECT_NEAR(token.logprob, want[i]["logprob"].get<double>(), kTolerance);
      const torch::Tensor attention =
          testing::TensorFromJson(want[i]["attention"], torch::kFloat64);
      ASSERT_EQ(token.attention.sizes(), attention.sizes());
      EXPECT_LE(MaxDifference(token.attention, attention), kTolerance);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Members, DecoderFamilyTest,
                         ::testing::Values(Member{"qwen2", Architecture::kQwen2},
                                           Member{"qwen3", Architecture::kQwen3},
                                           Member{"mistral", Architecture::kMistral},
                                           Member{"gemma", Architecture::kGemma},
                                           Member{"gemma2", Architecture::kGemma2},
                                           Member{"gemma3", Architecture::kGemma3},
                                           Member{"phi3", Architecture::kPhi3},
                                           Member{"gpt2", Architecture::kGpt2},
                                           Member{"gpt-neox", Architecture::kGptNeox},
                                           Member{"opt", Architecture::kOpt}),
                         [](const ::testing::TestParamInfo<Member>& info) {
                           std::string name = info.param.name;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// A copy of tiny-<name> with `patch` merged into its config.json, loaded.
absl::Status LoadPatched(const std::string& name, const Json& patch) {
  const std::string dir = testing::CopyToTempDir(ModelDir(name));
  testing::PatchJsonFile(dir + "/config.json", patch);
  return LoadTransformerModel({.model_dir = dir}).status();
}

TEST(DecoderCheckpointTest, MissingMemberTensorsAreNamedInOneError) {
  std::map<std::string, torch::Tensor> tensors = testing::ReadCheckpointTensors(ModelDir("qwen3"));
  tensors.erase("model.layers.1.self_attn.k_norm.weight");
  const std::string qwen3 = testing::CopyToTempDir(ModelDir("qwen3"));
  testing::WriteSafetensors(qwen3 + "/model.safetensors", tensors);
  absl::Status status = LoadTransformerModel({.model_dir = qwen3}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("model.layers.1.self_attn.k_norm.weight"));

  tensors = testing::ReadCheckpointTensors(ModelDir("qwen2"));
  tensors.erase("model.layers.0.self_attn.q_proj.bias");
  tensors.erase("model.layers.1.self_attn.v_proj.bias");
  const std::string qwen2 = testing::CopyToTempDir(ModelDir("qwen2"));
  testing::WriteSafetensors(qwen2 + "/model.safetensors", tensors);
  status = LoadTransformerModel({.model_dir = qwen2}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_THAT(status.message(), HasSubstr("model.layers.1.self_attn.v_proj.bias"));
}

TEST(DecoderCheckpointTest, ConfigVariantsItCannotComputeAreRefusedNamingTheField) {
  absl::Status status = LoadPatched("mistral", {{"layer_types", {"full_attention"}}});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("field 'layer_types': expected a list of "
                                          "num_hidden_layers (2) entries"));
  status = LoadPatched("qwen2", {{"layer_types", {"full_attention", "chunked_attention"}}});
  EXPECT_THAT(status.message(), HasSubstr("got \"chunked_attention\""));
  status = LoadPatched("qwen3", {{"mlp_bias", true}});
  EXPECT_THAT(status.message(), HasSubstr("field 'mlp_bias': expected false"));
  status = LoadPatched("qwen2", {{"sliding_window", 0}});
  EXPECT_THAT(status.message(), HasSubstr("field 'sliding_window': expected 1 to"));
  status = LoadPatched("qwen3", {{"head_dim", 7}});
  EXPECT_THAT(status.message(), HasSubstr("field 'head_dim': expected an even number"));
  // Qwen3 with attention_bias has biases on q/k/v and o_proj, which this checkpoint lacks.
  status = LoadPatched("qwen3", {{"attention_bias", true}});
  EXPECT_THAT(status.message(), HasSubstr("model.layers.0.self_attn.o_proj.bias"));
}

// OPT with _remove_final_layer_norm has no final LayerNorm: the stored one is left unused, as
// transformers leaves it, and the last hidden state is the last layer's output.
TEST(DecoderCheckpointTest, OptWithoutItsFinalLayerNormIgnoresTheStoredOne) {
  const std::string dir = testing::CopyToTempDir(ModelDir("opt"));
  testing::PatchJsonFile(dir + "/config.json", {{"_remove_final_layer_norm", true}});
  absl::StatusOr<std::unique_ptr<TransformerModel>> model =
      LoadTransformerModel({.model_dir = dir});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_FALSE((*model)->config().final_layer_norm);
  ForwardInput input;
  input.input_ids = torch::tensor({{1, 5, 9}}, torch::kInt64);
  input.attention_mask = torch::ones({1, 3}, torch::kInt64);
  ForwardOptions options;
  options.output_hidden_states = true;
  absl::StatusOr<ForwardOutput> out = (*model)->Forward(input, options);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->hidden_states.size(), 3u);
  // The golden's final hidden state is the normed one: without the norm it differs.
  absl::StatusOr<std::unique_ptr<TransformerModel>> normed =
      LoadTransformerModel({.model_dir = ModelDir("opt")});
  ASSERT_TRUE(normed.ok()) << normed.status();
  absl::StatusOr<ForwardOutput> normed_out = (*normed)->Forward(input, options);
  ASSERT_TRUE(normed_out.ok()) << normed_out.status();
  EXPECT_FALSE(torch::allclose(normed_out->last_hidden_state, out->last_hidden_state));
  EXPECT_TRUE(torch::equal(normed_out->hidden_states[1], out->hidden_states[1]));
}

TEST(DecoderCheckpointTest, Phi3RefusesWhatPhi3ConfigRefuses) {
  // Phi3Config validates rope_scaling as "longrope" only, with a factor per rotated pair.
  absl::Status status =
      LoadPatched("phi3", {{"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}}});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("field 'rope_scaling': expected null or {\"type\": "
                                          "\"longrope\""));
  status = LoadPatched(
      "phi3",
      {{"rope_scaling",
        {{"type", "longrope"}, {"short_factor", {1.0, 1.0, 1.0}}, {"long_factor", {1.0, 1.0}}}}});
  EXPECT_THAT(status.message(),
              HasSubstr("expected rope_scaling's \"short_factor\" as a list of 2 finite numbers"));
  status = LoadPatched("phi3", {{"partial_rotary_factor", 0.375}});
  EXPECT_THAT(status.message(), HasSubstr("field 'partial_rotary_factor': expected a factor of at "
                                          "most 1 that rotates an even number"));
  // LongRoPE's attention factor divides by ln(original_max_position_embeddings), and a factor
  // too small for float32 gives RoPE infinite angles: both would serve NaN.
  status = LoadPatched("phi3", {{"original_max_position_embeddings", 1}});
  EXPECT_THAT(status.message(), HasSubstr("field 'original_max_position_embeddings': expected at "
                                          "least 2 with rope_scaling \"longrope\""));
  status = LoadPatched(
      "phi3",
      {{"rope_scaling",
        {{"type", "longrope"}, {"short_factor", {1.0, 1.0}}, {"long_factor", {1e-320, 1.0}}}}});
  EXPECT_THAT(status.message(), HasSubstr("expected rope_scaling's \"long_factor\" as a list of 2 "
                                          "finite numbers of at least 1e-30"));
  // The fused tensors are named when missing.
  std::map<std::string, torch::Tensor> tensors = testing::ReadCheckpointTensors(ModelDir("phi3"));
  tensors.erase("model.layers.1.mlp.gate_up_proj.weight");
  const std::string dir = testing::CopyToTempDir(ModelDir("phi3"));
  testing::WriteSafetensors(dir + "/model.safetensors", tensors);
  status = LoadTransformerModel({.model_dir = dir}).status();
  EXPECT_THAT(status.message(), HasSubstr("model.layers.1.mlp.gate_up_proj.weight"));
}

// Without use_parallel_residual the MLP reads the attention's sum (GPT-2's order): another model,
// whose attentions from layer 1 on, hidden states and logits all move.
TEST(DecoderCheckpointTest, GptNeoxSequentialResidualIsAnotherModel) {
  const std::string dir = testing::CopyToTempDir(ModelDir("gpt-neox"));
  testing::PatchJsonFile(dir + "/config.json", {{"use_parallel_residual", false}});
  absl::StatusOr<std::unique_ptr<TransformerModel>> sequential =
      LoadTransformerModel({.model_dir = dir});
  ASSERT_TRUE(sequential.ok()) << sequential.status();
  absl::StatusOr<std::unique_ptr<TransformerModel>> parallel =
      LoadTransformerModel({.model_dir = ModelDir("gpt-neox")});
  ASSERT_TRUE(parallel.ok()) << parallel.status();
  ForwardInput input;
  input.input_ids = torch::tensor({0, 50, 700, 3999, 12}, torch::kInt64).unsqueeze(0);
  absl::StatusOr<ForwardOutput> a = (*sequential)->Forward(input, ForwardOptions());
  absl::StatusOr<ForwardOutput> b = (*parallel)->Forward(input, ForwardOptions());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(torch::equal(a->attentions[0], b->attentions[0]));
  EXPECT_GT(MaxDifference(a->attentions[1], b->attentions[1]), 1e-3);
  EXPECT_GT(MaxDifference(a->logits, b->logits), 1e-2);

  // A rotary_pct that rotates an odd number of dimensions is refused.
  const absl::Status status = LoadPatched("gpt-neox", {{"rotary_pct", 0.2}});
  EXPECT_THAT(status.message(),
              HasSubstr("field 'rotary_pct': expected a fraction of at most 1 that "
                        "rotates an even number of the 16 dimensions of a head, got 0.2"));
}

// tie_word_embeddings true ties the output head to the input embeddings even where the file also
// stores a head of its own, as transformers ties it; false needs the stored one.
TEST(DecoderCheckpointTest, TiedHeadsAreTheEmbeddingsWhateverTheFileStores) {
  for (const auto& [name, embeddings, head] :
       {std::tuple<std::string, std::string, std::string>{"phi3", "model.embed_tokens.weight",
                                                          "lm_head.weight"},
        {"gpt-neox", "gpt_neox.embed_in.weight", "embed_out.weight"}}) {
    SCOPED_TRACE(name);
    const std::map<std::string, torch::Tensor> tensors =
        testing::ReadCheckpointTensors(ModelDir(name));
    ASSERT_TRUE(tensors.count(head) && tensors.count(embeddings));
    const std::string dir = testing::CopyToTempDir(ModelDir(name));
    testing::PatchJsonFile(dir + "/config.json", {{"tie_word_embeddings", true}});
    absl::StatusOr<std::unique_ptr<TransformerModel>> tied =
        LoadTransformerModel({.model_dir = dir});
    ASSERT_TRUE(tied.ok()) << tied.status();
    ForwardInput input;
    input.input_ids = torch::tensor({1, 50, 700, 3999, 12}, torch::kInt64).unsqueeze(0);
    absl::StatusOr<ForwardOutput> out = (*tied)->Forward(input, ForwardOptions());
    ASSERT_TRUE(out.ok()) << out.status();
    const torch::Tensor last = out->last_hidden_state.to(torch::kFloat64);
    EXPECT_LE(
        MaxDifference(out->logits, last.matmul(tensors.at(embeddings).to(torch::kFloat64).t())),
        1e-5);
    EXPECT_GT(MaxDifference(out->logits, last.matmul(tensors.at(head).to(torch::kFloat64).t())),
              1e-2);

    std::map<std::string, torch::Tensor> headless = tensors;
    headless.erase(head);
    const std::string untied = testing::CopyToTempDir(ModelDir(name));
    testing::WriteSafetensors(untied + "/model.safetensors", headless);
    const absl::Status status = LoadTransformerModel({.model_dir = untied}).status();
    EXPECT_THAT(status.message(), HasSubstr("tensor '" + head +
                                            "': expected (config.json has "
                                            "tie_word_embeddings false"));
  }
}

TEST(DecoderCheckpointTest, LayerTypesChooseTheWindowedLayers) {
  const std::string dir = testing::CopyToTempDir(ModelDir("qwen2"));
  testing::PatchJsonFile(dir + "/config.json",
                         {{"layer_types", {"sliding_attention", "full_attention"}}});
  absl::StatusOr<std::unique_ptr<TransformerModel>> model =
      LoadTransformerModel({.model_dir = dir});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->config().layer_sliding_windows, (std::vector<int64_t>{4, 0}));
  // Without use_sliding_window, Qwen2Config drops the window: every layer sees the whole prefix.
  testing::PatchJsonFile(dir + "/config.json", {{"use_sliding_window", false}});
  model = LoadTransformerModel({.model_dir = dir});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->config().layer_sliding_windows, (std::vector<int64_t>{0, 0}));
}

// A saved GPT2Model (the original "gpt2" checkpoint's layout) has no "transformer." prefix and no
// mask buffers: the same model.
TEST(DecoderCheckpointTest, Gpt2LoadsWithoutTheTransformerPrefix) {
  std::map<std::string, torch::Tensor> renamed;
  for (const auto& [name, tensor] : testing::ReadCheckpointTensors(ModelDir("gpt2"))) {
    if (absl::EndsWith(name, ".attn.bias")) continue;
    renamed[std::string(absl::StripPrefix(name, "transformer."))] = tensor;
  }
  ASSERT_TRUE(renamed.count("wte.weight"));
  const std::string dir = testing::CopyToTempDir(ModelDir("gpt2"));
  testing::WriteSafetensors(dir + "/model.safetensors", renamed);
  absl::StatusOr<std::unique_ptr<TransformerModel>> bare = LoadTransformerModel({.model_dir = dir});
  ASSERT_TRUE(bare.ok()) << bare.status();
  absl::StatusOr<std::unique_ptr<TransformerModel>> nested =
      LoadTransformerModel({.model_dir = ModelDir("gpt2")});
  ASSERT_TRUE(nested.ok()) << nested.status();
  ForwardInput input;
  input.input_ids = torch::tensor({1, 50, 700, 3999}, torch::kInt64).unsqueeze(0);
  absl::StatusOr<ForwardOutput> a = (*bare)->Forward(input, ForwardOptions());
  absl::StatusOr<ForwardOutput> b = (*nested)->Forward(input, ForwardOptions());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(torch::equal(a->logits, b->logits));

  // A Conv1D weight stored as nn.Linear's [out, in] is refused naming the tensor and both shapes.
  renamed["h.1.mlp.c_fc.weight"] = renamed["h.1.mlp.c_fc.weight"].t().contiguous();
  testing::WriteSafetensors(dir + "/model.safetensors", renamed);
  const absl::Status status = LoadTransformerModel({.model_dir = dir}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("h.1.mlp.c_fc.weight"));
}

}  // namespace
}  // namespace attnscope

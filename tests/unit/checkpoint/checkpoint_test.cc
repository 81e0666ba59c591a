// Whole-model loads of checkpoints that cannot be served as they are: config.json disagreeing with
// the weights, NaN or infinite weights, tokenizers with ids beyond the embedding matrix, tensors
// the architecture does not use. Each is refused at load on one bounded line naming the file and
// the field or tensor, or served without allocating anything config.json merely claims.
#include "models/checkpoint/checkpoint.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/architectures/transformer.h"
#include "models/engine.h"
#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

using Json = nlohmann::json;
using ::testing::HasSubstr;

// Peak resident memory (VmHWM) in MB since the last ResetPeakRss, so that a test measures its own
// peak, not one of an earlier test in the same process.
void ResetPeakRss() { std::ofstream("/proc/self/clear_refs") << "5"; }
int64_t PeakRssMb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) / 1024;
  }
  ADD_FAILURE() << "no VmHWM in /proc/self/status";
  return 0;
}

class CheckpointLoadTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::CopyToTempDir(testing::TestDataDir() + "/tiny-bert"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  absl::Status Load() const {
    LoadedModel::Options options;
    options.name = "m";
    options.model_dir = dir_;
    return LoadedModel::Create(options).status();
  }
  std::string Weights() const { return dir_ + "/model.safetensors"; }

  std::string dir_;
};

TEST_F(CheckpointLoadTest, RefusesNanAndInfiniteWeights) {
  const auto original = testing::ReadCheckpointTensors(dir_);
  struct Case {
    std::string name;
    std::function<void(std::map<std::string, torch::Tensor>&)> spoil;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"NaN in float32",
       [](auto& tensors) {
         tensors["bert.encoder.layer.1.attention.self.query.weight"].view(-1)[5] = NAN;
       },
       "tensor 'bert.encoder.layer.1.attention.self.query.weight' in '" + Weights() +
           "': expected finite values, got NaN at element 5 of 1024 (F32)"},
      {"inf in float16",
       [](auto& tensors) {
         for (auto& [name, tensor] : tensors) tensor = tensor.to(torch::kFloat16);
         tensors["bert.embeddings.word_embeddings.weight"].view(-1)[70] = INFINITY;
       },
       "tensor 'bert.embeddings.word_embeddings.weight' in '" + Weights() +
           "': expected finite values, got inf at element 70 of 4384 (F16)"},
      {"float64 beyond float32",
       [](auto& tensors) {
         torch::Tensor& bias = tensors["bert.pooler.dense.bias"];
         bias = bias.to(torch::kFloat64);
         bias[3] = -1e300;
       },
       "tensor 'bert.pooler.dense.bias' in '" + Weights() +
           "': expected finite values, got -inf at element 3 of 32 (F64)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::map<std::string, torch::Tensor> tensors;
    for (const auto& [name, tensor] : original) tensors[name] = tensor.clone();
    c.spoil(tensors);
    testing::WriteSafetensors(Weights(), tensors);
    const absl::Status status = Load();
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << status.ToString().substr(0, 500);
    EXPECT_THAT(std::string(status.message()).substr(0, 1000), HasSubstr(c.message));
  }
}

// config.json's counts and sizes are checked against the tensors' shapes before anything is built
// per layer, with a message naming the field rather than hundreds of missing tensors.
TEST_F(CheckpointLoadTest, ConfigMustAgreeWithTheWeights) {
  const std::string config = dir_ + "/config.json";
  const std::string original = testing::ReadFileBytes(config);
  struct Case {
    Json patch;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{"num_hidden_layers", 1000}},
       "field 'num_hidden_layers': expected 3 (the weights hold 3 under 'bert.encoder.layer.N.' "
       "in '" +
           Weights() + "'), got 1000"},
      {{{"vocab_size", 138}},
       "field 'vocab_size': expected 137 (tensor 'bert.embeddings.word_embeddings.weight' in '" +
           Weights() + "' has shape [137, 32]), got 138"},
      {{{"max_position_embeddings", 65}},
       "field 'max_position_embeddings': expected 64 (tensor "
       "'bert.embeddings.position_embeddings.weight' in '" +
           Weights() + "' has shape [64, 32]), got 65"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.patch.dump());
    testing::WriteFileBytes(config, original);
    testing::PatchJsonFile(config, c.patch);
    const absl::Status status = Load();
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << status.ToString().substr(0, 500);
    EXPECT_THAT(std::string(status.message()).substr(0, 1000),
                HasSubstr("config '" + config + "': " + c.message));
    EXPECT_LT(status.message().size(), 1000u);
  }
}

// Hundreds of unexpected tensors, one of them with a 100 KB name: a few are named, the rest
// counted, so the line stays short.
TEST_F(CheckpointLoadTest, ListsTheFirstProblemsAndCountsTheRest) {
  auto tensors = testing::ReadCheckpointTensors(dir_);
  for (int i = 0; i < 300; ++i) tensors["extra." + std::to_string(i)] = torch::zeros({1});
  tensors["extra." + std::string(100000, 'n')] = torch::zeros({1});
  testing::WriteSafetensors(Weights(), tensors);
  const absl::Status status = Load();
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status.ToString().substr(0, 500);
  const std::string message(status.message().substr(0, 4000));
  EXPECT_THAT(message, HasSubstr("does not match its config.json (301 problem(s)): "
                                 "unexpected tensor 'extra.0' in '" +
                                 Weights() + "': expected no such tensor for this architecture"));
  EXPECT_THAT(message, HasSubstr("; and 295 more"));
  EXPECT_LT(status.message().size(), 2000u);
}

// A tensor the architecture does not use is never converted: a 1 GB float16 one (the file is
// sparse, so it costs no disk) was widened to 2 GB of float32 before the load went on.
TEST_F(CheckpointLoadTest, ConvertsOnlyTheTensorsTheModelUses) {
  auto tensors = testing::ReadCheckpointTensors(dir_);
  tensors["cls.small"] = torch::tensor({1.5, -2.0}, torch::kFloat16);
  testing::WriteSafetensors(Weights(), tensors);
  // Grow the file by a tensor of 2^29 float16 zeros, "cls.unused", after the others: the header is
  // rewritten with one more entry and the data area extended as a hole.
  std::string bytes = testing::ReadFileBytes(Weights());
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | static_cast<uint8_t>(bytes[i]);
  Json header = Json::parse(bytes.substr(8, header_size));
  const std::string data = bytes.substr(8 + header_size);
  constexpr uint64_t kElements = 1ull << 29;
  header["cls.unused"] = {{"dtype", "F16"},
                          {"shape", {kElements}},
                          {"data_offsets", {data.size(), data.size() + 2 * kElements}}};
  const std::string text = header.dump();
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  testing::WriteFileBytes(Weights(), prefix + text + data);
  ASSERT_EQ(truncate(Weights().c_str(),
                     static_cast<off_t>(8 + text.size() + data.size() + 2 * kElements)),
            0);

  ResetPeakRss();
  const int64_t before = PeakRssMb();
  absl::StatusOr<std::unique_ptr<TransformerModel>> model =
      LoadTransformerModel(ModelOptions{dir_});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_LT(PeakRssMb() - before, 200) << "MB more at the peak";
  // An unused tensor is still there to look at, converted when asked for.
  const torch::Tensor small = (*model)->checkpoint()->Get("cls.small");
  ASSERT_TRUE(small.defined());
  EXPECT_TRUE(torch::equal(small, torch::tensor({1.5f, -2.0f})));
}

// A tokenizer whose ids go beyond the embedding matrix failed every request that met such a token:
// one far past it is another checkpoint's, refused at load.
TEST_F(CheckpointLoadTest, RefusesTokenizersFarLargerThanTheEmbeddings) {
  std::string vocab = testing::ReadFileBytes(dir_ + "/vocab.txt");
  for (int i = 0; i < 300; ++i) vocab += "extra" + std::to_string(i) + "\n";
  testing::WriteFileBytes(dir_ + "/vocab.txt", vocab);
  const absl::Status status = Load();
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("model 'm': tokenizer files in '" + dir_ +
                        "': expected at most 137 tokens (and up to 256 added ones past them), got "
                        "437; the tokenizer files must come from the same checkpoint as the "
                        "weights"));
}

// A few tokens past the matrix load (Gemma 3 1B's tokenizer adds <image_soft_token> after its
// model's 262,144 embeddings); a text that gives one is refused naming it, and the others run.
TEST_F(CheckpointLoadTest, TokensPastTheEmbeddingsAreRefusedInTexts) {
  std::string vocab = testing::ReadFileBytes(dir_ + "/vocab.txt");
  for (int i = 0; i < 10; ++i) vocab += "extra" + std::to_string(i) + "\n";
  testing::WriteFileBytes(dir_ + "/vocab.txt", vocab);
  LoadedModel::Options options;
  options.name = "m";
  options.model_dir = dir_;
  absl::StatusOr<std::unique_ptr<LoadedModel>> model = LoadedModel::Create(options);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->tokenizer().vocab_size(), 147);
  const absl::Status refused = (*model)->Tokenize("the extra3 word").status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message(),
            "text: token 'extra3' (id 140): expected a token of the model's 137 embeddings "
            "(config.json vocab_size), got one its tokenizer adds past them; remove it from the "
            "text");
  EXPECT_TRUE((*model)->Encode("the word", std::nullopt, TextOptions()).ok());
}

// Marian's sinusoidal positions are computed for the positions a pass reads: a config.json
// claiming a long context costs nothing (10^8 positions made a 12.8 GB table), and the values are
// those of the table.
TEST(MarianPositionsTest, AreComputedForThePositionsRead) {
  const std::string dir = testing::CopyToTempDir(testing::TestDataDir() + "/tiny-marian");
  testing::PatchJsonFile(dir + "/config.json", {{"max_position_embeddings", 1000000}});
  ResetPeakRss();
  const int64_t before = PeakRssMb();
  absl::StatusOr<std::unique_ptr<TransformerModel>> long_context =
      LoadTransformerModel(ModelOptions{dir});
  ASSERT_TRUE(long_context.ok()) << long_context.status();
  EXPECT_LT(PeakRssMb() - before, 100) << "MB more at the peak";
  auto stored = LoadTransformerModel(ModelOptions{testing::TestDataDir() + "/tiny-marian"});
  ASSERT_TRUE(stored.ok()) << stored.status();
  ForwardInput input;
  input.input_ids = torch::tensor({{5, 9, 17, 0}}, torch::kInt64);
  input.decoder_input_ids = torch::tensor({{125, 7, 3}}, torch::kInt64);
  auto a = (*long_context)->Forward(input, ForwardOptions());
  auto b = (*stored)->Forward(input, ForwardOptions());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(torch::equal(a->logits, b->logits));
  EXPECT_TRUE(torch::equal(a->cross_attentions.back(), b->cross_attentions.back()));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace attnscope

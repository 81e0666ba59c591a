// safetensors and checkpoint loading: zero-copy mapping, sharded and pickle checkpoints, and
// corrupt or mismatched files that must give a Status error rather than a crash.
#include "models/checkpoint/safetensors.h"

#include <sys/stat.h>
#include <torch/types.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/architectures/transformer.h"
#include "models/checkpoint/checkpoint.h"
#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

using Json = nlohmann::json;
using ::testing::HasSubstr;

// Builds safetensors bytes from a header and a data area, exactly as written (no validation), so
// tests can make files the reader must reject.
std::string SafetensorsBytes(const Json& header, const std::string& data) {
  const std::string text = header.dump();
  std::string bytes(8, '\0');
  uint64_t size = text.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((size >> (8 * i)) & 0xff);
  return bytes + text + data;
}

std::string FloatBytes(const std::vector<float>& values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::MakeTempDir(); }

  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    testing::WriteFileBytes(path, bytes);
    return path;
  }

  absl::Status OpenStatus(const std::string& bytes) {
    return SafetensorsFile::Open(Write("model.safetensors", bytes)).status();
  }

  std::string dir_;
};

TEST_F(SafetensorsTest, ReadsFloat32WithoutCopying) {
  const Json header = {{"w", {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}}},
                       {"__metadata__", {{"format", "pt"}}}};
  auto file = SafetensorsFile::Open(
      Write("a.safetensors", SafetensorsBytes(header, FloatBytes({1, 2, 3, 4}))));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  auto tensor = (*file)->LoadFloat("w");
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_TRUE(torch::equal(*tensor, torch::tensor({{1.f, 2.f}, {3.f, 4.f}})));
  auto again = (*file)->LoadFloat("w");
  ASSERT_TRUE(again.ok());
  // Two loads of a mapped tensor share storage: both are views of the mapping.
  EXPECT_EQ(tensor->data_ptr(), again->data_ptr());
  // The view keeps the mapping alive after the file object is gone.
  file->reset();
  EXPECT_EQ((*tensor)[1][1].item<float>(), 4.f);
}

TEST_F(SafetensorsTest, ConvertsHalfPrecisionOnce) {
  // 1.5 in float16 is 0x3E00; in bfloat16 it is 0x3FC0.
  const std::string data = std::string("\x00\x3e", 2) + std::string("\xc0\x3f", 2);
  const Json header = {{"h", {{"dtype", "F16"}, {"shape", {1}}, {"data_offsets", {0, 2}}}},
                       {"b", {{"dtype", "BF16"}, {"shape", {1}}, {"data_offsets", {2, 4}}}}};
  auto file = SafetensorsFile::Open(Write("h.safetensors", SafetensorsBytes(header, data)));
  ASSERT_TRUE(file.ok()) << file.status();
  for (const char* name : {"h", "b"}) {
    auto tensor = (*file)->LoadFloat(name);
    ASSERT_TRUE(tensor.ok()) << tensor.status();
    EXPECT_EQ(tensor->scalar_type(), torch::kFloat32);
    EXPECT_EQ((*tensor)[0].item<float>(), 1.5f) << name;
  }
}

TEST_F(SafetensorsTest, RejectsCorruptFiles) {
  const Json good = {{"w", {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}}}};
  const std::string data = FloatBytes({1, 2, 3, 4});
  const std::string whole = SafetensorsBytes(good, data);
  struct Case {
    std::string name;
    std::string bytes;
    std::string message;
  };
  std::string huge_header(8, '\xff');
  Json deep = Json::array();
  for (int i = 0; i < 100; ++i) deep = Json::array({deep});
  const std::vector<Case> cases = {
      {"empty file", "", "at least 8 bytes"},
      {"truncated data", whole.substr(0, whole.size() - 4), "data_offsets"},
      {"truncated header", whole.substr(0, 20), "header length"},
      {"header length beyond the file", huge_header + "{}", "header length"},
      {"malformed JSON", SafetensorsBytes(Json(), "").replace(8, 4, "{bad"), "malformed JSON"},
      {"unknown dtype",
       SafetensorsBytes({{"w", {{"dtype", "F8"}, {"shape", {4}}, {"data_offsets", {0, 4}}}}}, data),
       "dtype"},
      {"offsets beyond the data",
       SafetensorsBytes({{"w", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {8, 24}}}}},
                        data),
       "data_offsets"},
      {"offsets reversed",
       SafetensorsBytes({{"w", {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {8, 0}}}}},
                        data),
       "data_offsets"},
      {"size disagrees with shape",
       SafetensorsBytes({{"w", {{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 16}}}}},
                        data),
       "expected 12 bytes"},
      {"negative shape",
       SafetensorsBytes({{"w", {{"dtype", "F32"}, {"shape", {-4}}, {"data_offsets", {0, 16}}}}},
                        data),
       "shape"},
      {"overflowing shape",
       SafetensorsBytes(
           {{"w",
             {{"dtype", "F32"}, {"shape", {1ull << 40, 1ull << 40}}, {"data_offsets", {0, 16}}}}},
           data),
       "shape"},
      {"size of 2^63 after a zero size",
       SafetensorsBytes(
           {{"w", {{"dtype", "F32"}, {"shape", {0, 1ull << 63}}, {"data_offsets", {0, 0}}}}}, data),
       "shape: expected sizes below 2^63, got [0,9223372036854775808]"},
      {"entry not an object", SafetensorsBytes({{"w", 3}}, data), "header entry"},
      {"header nested too deeply", SafetensorsBytes({{"w", deep}}, data),
       "header: expected JSON nested at most 100 levels deep, got 102"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const absl::Status status = OpenStatus(c.bytes);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message));
    EXPECT_THAT(std::string(status.message()), HasSubstr("model.safetensors"));
  }
  EXPECT_EQ(SafetensorsFile::Open(dir_ + "/absent.safetensors").status().code(),
            absl::StatusCode::kNotFound);
}

// A header above 16 MB is refused before it is parsed: nlohmann's document of it takes about ten
// times its text.
TEST_F(SafetensorsTest, RefusesHeadersAboveSixteenMegabytes) {
  // Well-formed JSON, 70,000 empty tensors with long names.
  std::string text = "{";
  for (int i = 0; text.size() <= (16u << 20); ++i) {
    text += absl::StrCat(i == 0 ? "" : ",", "\"t", i, std::string(200, 'x'),
                         "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}");
  }
  text += "}";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  const absl::Status status = OpenStatus(bytes + text);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("header length: expected at most 16777216 bytes"));
}

// Opening a FIFO for reading waits for a writer: the file is checked before it is opened.
TEST_F(SafetensorsTest, RefusesFilesThatAreNotRegular) {
  const std::string fifo = dir_ + "/model.safetensors";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto opened = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> status = opened->get_future();
  std::thread([opened, fifo] { opened->set_value(SafetensorsFile::Open(fifo).status()); }).detach();
  ASSERT_EQ(status.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "still opening a FIFO after 5 s";
  const absl::Status result = status.get();
  EXPECT_EQ(result.code(), absl::StatusCode::kInvalidArgument) << result;
  EXPECT_THAT(std::string(result.message()),
              HasSubstr("'" + fifo + "': expected a regular file, got a FIFO"));
}

class CheckpointTest : public SafetensorsTest {
 protected:
  // Copies tiny-bert's config.json into the temp dir, with `weights` as its model.safetensors.
  void WriteBertCheckpoint(const std::map<std::string, torch::Tensor>& tensors) {
    Json header = Json::object();
    std::string data;
    for (const auto& [name, tensor] : tensors) {
      const torch::Tensor t = tensor.contiguous();
      const uint64_t begin = data.size();
      data.append(static_cast<const char*>(t.data_ptr()), t.numel() * sizeof(float));
      header[name] = {
          {"dtype", "F32"}, {"shape", t.sizes().vec()}, {"data_offsets", {begin, data.size()}}};
    }
    Write("model.safetensors", SafetensorsBytes(header, data));
    Write("config.json", testing::ReadFileBytes(TinyBert() + "/config.json"));
  }

  static std::string TinyBert() { return testing::TestDataDir() + "/tiny-bert"; }

  static std::map<std::string, torch::Tensor> TinyBertTensors() {
    auto checkpoint = Checkpoint::Open(TinyBert());
    EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
    std::map<std::string, torch::Tensor> tensors;
    for (const std::string& name : (*checkpoint)->Names()) tensors[name] = (*checkpoint)->Get(name);
    return tensors;
  }
};

TEST_F(CheckpointTest, ReportsEveryMismatchInOneError) {
  auto tensors = TinyBertTensors();
  tensors.erase("bert.encoder.layer.1.attention.self.key.weight");
  tensors["bert.encoder.layer.0.intermediate.dense.weight"] = torch::zeros({63, 32});
  tensors["bert.encoder.layer.0.surprise"] = torch::zeros({2});
  WriteBertCheckpoint(tensors);
  const absl::Status status = LoadTransformerModel({.model_dir = dir_}).status();
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  const std::string message(status.message());
  EXPECT_THAT(message, HasSubstr("3 problem(s)"));
  EXPECT_THAT(message, HasSubstr("missing tensor 'bert.encoder.layer.1.attention.self.key.weight': "
                                 "expected shape [32, 32], got nothing"));
  EXPECT_THAT(message,
              HasSubstr("tensor 'bert.encoder.layer.0.intermediate.dense.weight' in '" + dir_ +
                        "/model.safetensors': expected shape [64, 32], got [63, 32]"));
  EXPECT_THAT(message, HasSubstr("unexpected tensor 'bert.encoder.layer.0.surprise'"));
}

TEST_F(CheckpointTest, LoadsShardedCheckpoints) {
  const auto tensors = TinyBertTensors();
  Json weight_map = Json::object();
  std::map<std::string, torch::Tensor> shards[2];
  int i = 0;
  for (const auto& [name, tensor] : tensors) {
    const std::string shard =
        i % 2 == 0 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    shards[i % 2][name] = tensor;
    weight_map[name] = shard;
    ++i;
  }
  for (int s = 0; s < 2; ++s) {
    WriteBertCheckpoint(shards[s]);
    std::rename((dir_ + "/model.safetensors").c_str(),
                (dir_ + "/model-0000" + std::to_string(s + 1) + "-of-00002.safetensors").c_str());
  }
  Write("model.safetensors.index.json",
        Json({{"metadata", Json::object()}, {"weight_map", weight_map}}).dump());
  auto sharded = Checkpoint::Open(dir_);
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  for (const auto& [name, tensor] : tensors) {
    EXPECT_TRUE(torch::equal((*sharded)->Get(name), tensor)) << name;
  }
  EXPECT_TRUE(LoadTransformerModel({.model_dir = dir_}).ok());

  weight_map["bert.pooler.dense.bias"] = "../elsewhere.safetensors";
  Write("model.safetensors.index.json", Json({{"weight_map", weight_map}}).dump());
  EXPECT_EQ(Checkpoint::Open(dir_).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CheckpointTest, PickleCheckpointEqualsSafetensors) {
  auto pickle = Checkpoint::Open(testing::TestDataDir() + "/tiny-bert-pickle");
  ASSERT_TRUE(pickle.ok()) << pickle.status();
  const auto tensors = TinyBertTensors();
  ASSERT_EQ((*pickle)->Names().size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    EXPECT_TRUE(torch::equal((*pickle)->Get(name), tensor)) << name;
  }
}

TEST_F(CheckpointTest, CorruptPickleIsAnError) {
  Write("pytorch_model.bin", "PK\x03\x04 this is not a zip archive");
  const absl::Status status = Checkpoint::Open(dir_).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("pytorch_model.bin"));
}

TEST_F(CheckpointTest, MissingWeightsIsNotFound) {
  EXPECT_EQ(Checkpoint::Open(dir_).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace attnscope

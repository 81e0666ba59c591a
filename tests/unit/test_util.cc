#include "tests/unit/test_util.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>

#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"

namespace attnscope::testing {
namespace {

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : fallback;
}

// Removes the directories MakeTempDir made when the binary exits; a static object rather than a
// gtest Environment so that binaries with their own main() clean up too.
class TempDirRegistry {
 public:
  ~TempDirRegistry() {
    for (const std::string& dir : dirs_) {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  }
  void Add(const std::string& dir) {
    std::lock_guard<std::mutex> lock(mutex_);
    dirs_.push_back(dir);
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> dirs_;
};

TempDirRegistry& Registry() {
  static TempDirRegistry registry;
  return registry;
}

}  // namespace

std::string SharedDir() { return EnvOr("ATTNSCOPE_SHARED_DIR", ATTNSCOPE_DEFAULT_SHARED_DIR); }

std::string TestDataDir() { return EnvOr("ATTNSCOPE_TEST_DATA", ATTNSCOPE_DEFAULT_TEST_DATA); }

std::string MakeTempDir() {
  std::string pattern = ::testing::TempDir() + "attnscope_XXXXXX";
  char* made = mkdtemp(pattern.data());
  EXPECT_NE(made, nullptr) << "mkdtemp failed for " << pattern;
  if (made != nullptr) Registry().Add(pattern);
  return pattern;
}

std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

void WriteFileBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(out.good()) << "cannot write " << path;
}

std::string CopyToTempDir(const std::string& dir) {
  const std::string copy = MakeTempDir();
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::filesystem::copy_file(entry.path(), std::filesystem::path(copy) / entry.path().filename());
  }
  return copy;
}

void WriteSafetensors(const std::string& path,
                      const std::map<std::string, torch::Tensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& [name, tensor] : tensors) {
    const torch::Tensor t = tensor.contiguous();
    const char* dtype = t.scalar_type() == torch::kFloat16    ? "F16"
                        : t.scalar_type() == torch::kBFloat16 ? "BF16"
                        : t.scalar_type() == torch::kFloat64  ? "F64"
                                                              : "F32";
    const uint64_t begin = data.size();
    data.append(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
    header[name] = {
        {"dtype", dtype}, {"shape", t.sizes().vec()}, {"data_offsets", {begin, data.size()}}};
  }
  const std::string text = header.dump();
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  WriteFileBytes(path, bytes + text + data);
}

std::map<std::string, torch::Tensor> ReadCheckpointTensors(const std::string& dir) {
  auto checkpoint = Checkpoint::Open(dir);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  std::map<std::string, torch::Tensor> tensors;
  if (!checkpoint.ok()) return tensors;
  for (const std::string& name : (*checkpoint)->Names()) {
    const torch::Tensor tensor = (*checkpoint)->Get(name);
    if (tensor.defined()) tensors[name] = tensor.clone();
  }
  return tensors;
}

void PatchJsonFile(const std::string& path, const nlohmann::json& patch) {
  nlohmann::json json = nlohmann::json::parse(ReadFileBytes(path));
  for (const auto& [key, value] : patch.items()) {
    if (value.is_null()) {
      json.erase(key);
    } else {
      json[key] = value;
    }
  }
  WriteFileBytes(path, json.dump(2));
}

torch::Tensor TensorFromJson(const nlohmann::json& json, torch::ScalarType type) {
  std::vector<int64_t> shape;
  const nlohmann::json* level = &json;
  while (level->is_array()) {
    shape.push_back(static_cast<int64_t>(level->size()));
    if (level->empty()) break;
    level = &(*level)[0];
  }
  std::vector<double> values;
  std::function<void(const nlohmann::json&)> flatten = [&](const nlohmann::json& node) {
    if (node.is_array()) {
      for (const nlohmann::json& child : node) flatten(child);
    } else {
      values.push_back(node.get<double>());
    }
  };
  flatten(json);
  return torch::tensor(values, torch::kFloat64).view(shape).to(type);
}

std::vector<Offset> OffsetsFromJson(const nlohmann::json& spans) {
  std::vector<Offset> offsets;
  for (const nlohmann::json& span : spans) {
    offsets.push_back({span[0].get<int64_t>(), span[1].get<int64_t>()});
  }
  return offsets;
}

std::vector<int64_t> IdsOrMinusOne(const nlohmann::json& values) {
  std::vector<int64_t> ids;
  for (const nlohmann::json& value : values) {
    ids.push_back(value.is_null() ? -1 : value.get<int64_t>());
  }
  return ids;
}

}  // namespace attnscope::testing

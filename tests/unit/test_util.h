// Helpers shared by the unit tests: fixture paths, JSON-lines goldens, and checkpoints copied into
// temporary directories to be broken on purpose.
#ifndef ATTNSCOPE_TESTS_UNIT_TEST_UTIL_H_
#define ATTNSCOPE_TESTS_UNIT_TEST_UTIL_H_

#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

#include "models/tokenizers/tokenizer.h"
#include "nlohmann/json.hpp"

namespace attnscope::testing {

// ../shared, or ATTNSCOPE_SHARED_DIR when set; no trailing slash.
std::string SharedDir();
// tests/data, or ATTNSCOPE_TEST_DATA when set.
std::string TestDataDir();
// A fresh, empty directory under ::testing::TempDir(), removed with its contents when the test
// binary exits (a run of every test makes thousands of them).
std::string MakeTempDir();
// Every line of a JSON-lines file; fails the current test when the file cannot be read.
std::vector<nlohmann::json> ReadJsonLines(const std::string& path);
// The whole file as bytes; fails the current test when the file cannot be read.
std::string ReadFileBytes(const std::string& path);
void WriteFileBytes(const std::string& path, const std::string& bytes);
// A fresh temporary directory holding a copy of every file of `dir` (not recursive).
std::string CopyToTempDir(const std::string& dir);
// Writes `tensors` as a safetensors file, each in its own dtype (float32, float16, bfloat16 or
// float64), in name order.
void WriteSafetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors);
// Every floating-point tensor of the checkpoint in `dir`, as float32.
std::map<std::string, torch::Tensor> ReadCheckpointTensors(const std::string& dir);
// Nested JSON arrays of numbers as a tensor of their shape and of `type`.
torch::Tensor TensorFromJson(const nlohmann::json& json, torch::ScalarType type);
// Golden [[start, end], ...] spans as Offsets.
std::vector<Offset> OffsetsFromJson(const nlohmann::json& spans);
// Golden ids where null (no word or sequence: a special token) is -1, as Encoding has it.
std::vector<int64_t> IdsOrMinusOne(const nlohmann::json& values);
// Sets the top-level fields of `patch` in the JSON object of file `path` (null removes a field).
void PatchJsonFile(const std::string& path, const nlohmann::json& patch);

}  // namespace attnscope::testing

#endif  // ATTNSCOPE_TESTS_UNIT_TEST_UTIL_H_

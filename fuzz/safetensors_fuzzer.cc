// The safetensors reader on arbitrary bytes: SafetensorsFile::Open of a file holding them, then
// LoadFloat of every entry. An accepted header must describe tensors that lie inside the file with
// non-negative sizes; every loaded tensor is read through to its last element.
#include <cstddef>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_util.h"
#include "models/safetensors.h"

// Where the sums of the tensors' elements go, so that the reads are not optimized away.
volatile float g_sink;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string* const path =
      new std::string(attnscope::fuzz::ScratchDir() + "/model.safetensors");
  attnscope::fuzz::WriteFile(*path, attnscope::fuzz::AsText(data, size));
  auto file = attnscope::SafetensorsFile::Open(*path);
  if (!file.ok()) {
    ATTNSCOPE_FUZZ_CHECK(file.status().code() == absl::StatusCode::kInvalidArgument,
                         file.status().ToString());
    return 0;
  }
  for (const attnscope::SafetensorsEntry& entry : (*file)->entries()) {
    uint64_t elements = 1;
    for (const int64_t dim : entry.shape) {
      ATTNSCOPE_FUZZ_CHECK(
          dim >= 0, absl::StrCat("tensor '", entry.name, "': accepted a negative size ", dim));
      elements *= static_cast<uint64_t>(dim);
    }
    ATTNSCOPE_FUZZ_CHECK(
        entry.begin <= entry.end && entry.end <= size,
        absl::StrCat("tensor '", entry.name, "': accepted offsets outside the file"));
    auto tensor = (*file)->LoadFloat(entry.name);
    if (!tensor.ok()) {
      ATTNSCOPE_FUZZ_CHECK(tensor.status().code() == absl::StatusCode::kInvalidArgument,
                           tensor.status().ToString());
      continue;
    }
    ATTNSCOPE_FUZZ_CHECK(tensor->scalar_type() == torch::kFloat32 && tensor->is_contiguous() &&
                             static_cast<uint64_t>(tensor->numel()) == elements,
                         absl::StrCat("tensor '", entry.name, "': expected ", elements,
                                      " contiguous float32 elements"));
    // Reads every element in instrumented code, so that a view past the mapping faults here.
    const float* values = tensor->data_ptr<float>();
    float sum = 0;
    for (int64_t i = 0; i < tensor->numel(); ++i) sum += values[i];
    g_sink = sum;
  }
  return 0;
}

// The safetensors reader on arbitrary bytes: SafetensorsFile::Open of a file holding them, then
// LoadFloat of every entry, then the same file as a checkpoint whose every floating-point tensor is
// expected (Checkpoint::Load: shapes from the header, conversion, the finite-values check). An
// accepted header must describe tensors that lie inside the file with non-negative sizes; every
// loaded tensor is read through to its last element; a checkpoint that loads holds only finite
// values; every refusal is one line of under 1000 bytes.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_util.h"
#include "models/checkpoint/checkpoint.h"
#include "models/checkpoint/safetensors.h"

namespace {

// Where the sums of the tensors' elements go, so that the reads are not optimized away.
volatile float g_sink;

void CheckRefusal(const absl::Status& status) {
  ATTNSCOPE_FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument, status.ToString());
  ATTNSCOPE_FUZZ_CHECK(
      status.message().size() < 1000 && status.message().find('\n') == absl::string_view::npos,
      absl::StrCat("refusal: expected one line under 1000 bytes, got ", status.message().size(),
                   " bytes"));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string* const path =
      new std::string(attnscope::fuzz::ScratchDir() + "/model.safetensors");
  attnscope::fuzz::WriteFile(*path, attnscope::fuzz::AsText(data, size));
  auto file = attnscope::SafetensorsFile::Open(*path);
  if (!file.ok()) {
    CheckRefusal(file.status());
    return 0;
  }
  std::vector<attnscope::TensorSpec> floats;
  std::vector<std::string> others;
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
      CheckRefusal(tensor.status());
      others.push_back(entry.name);
      continue;
    }
    floats.push_back({entry.name, entry.shape});
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

  auto checkpoint = attnscope::Checkpoint::Open(attnscope::fuzz::ScratchDir());
  if (!checkpoint.ok()) {
    CheckRefusal(checkpoint.status());
    return 0;
  }
  // Integer tensors are ignored by their full names (Validate matches prefixes and suffixes).
  const absl::Status loaded = (*checkpoint)->Load(floats, others);
  if (!loaded.ok()) {
    CheckRefusal(loaded);
    return 0;
  }
  for (const attnscope::TensorSpec& spec : floats) {
    const torch::Tensor tensor = (*checkpoint)->Get(spec.name);
    ATTNSCOPE_FUZZ_CHECK(tensor.defined() && tensor.sizes().vec() == spec.shape,
                         absl::StrCat("tensor '", spec.name, "': loaded with another shape"));
    const float* values = tensor.data_ptr<float>();
    for (int64_t i = 0; i < tensor.numel(); ++i) {
      ATTNSCOPE_FUZZ_CHECK(
          std::isfinite(values[i]),
          absl::StrCat("tensor '", spec.name, "': loaded a non-finite element ", i));
    }
  }
  return 0;
}

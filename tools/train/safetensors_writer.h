// Files the trainers write next to a model: safetensors weights and plain files.
#ifndef ATTNSCOPE_TOOLS_TRAIN_SAFETENSORS_WRITER_H_
#define ATTNSCOPE_TOOLS_TRAIN_SAFETENSORS_WRITER_H_

#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace attnscope::train {

// Writes `bytes` to `path`, replacing it. Internal on I/O errors.
absl::Status WriteFile(const std::string& path, const std::string& bytes);

// Writes `tensors` (any float dtype, stored as F32, in name order) as a safetensors file (see
// models/checkpoint/safetensors.h): u64 little-endian header length, JSON header, data. The header
// is padded with spaces to a multiple of 8 bytes so that the engine can map the float32 data in
// place. Internal on I/O errors.
absl::Status WriteSafetensors(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                              const std::string& path);

}  // namespace attnscope::train

#endif  // ATTNSCOPE_TOOLS_TRAIN_SAFETENSORS_WRITER_H_

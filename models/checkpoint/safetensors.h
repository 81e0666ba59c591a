// Reader for the safetensors format (https://github.com/huggingface/safetensors, format described
// in its README): 8-byte little-endian header length N, N bytes of JSON header mapping tensor names
// to {dtype, shape, data_offsets}, then the data area. The file is memory-mapped; float32 tensors
// are views of the mapping, never copies.
#ifndef ATTNSCOPE_MODELS_SAFETENSORS_H_
#define ATTNSCOPE_MODELS_SAFETENSORS_H_

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace attnscope {

// Where one tensor lives in a safetensors file, as its header says.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // safetensors dtype name: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data area, [begin, end)
  uint64_t end = 0;
};

class SafetensorsFile {
 public:
  // Maps `path` and validates its header defensively: header length within the file, well-formed
  // JSON, known dtypes, non-negative shapes, offsets inside the data area and equal in size to
  // shape x dtype. Tensor data are not read.
  // NotFound: no such file. InvalidArgument: any of the checks above fails; the message names the
  // file, the tensor and the expected and found values. Internal: mmap failed.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // Entries in header order.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  // The optional "__metadata__" string map.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor `name` as float32 on CPU. F32 data that are 4-byte aligned are returned as a view of
  // the mapping that keeps it alive (no copy); F16, BF16 and F64 are converted once into a new
  // tensor. NotFound: no such tensor. InvalidArgument: the dtype is not a floating-point type.
  absl::StatusOr<torch::Tensor> LoadFloat(const std::string& name) const;

 private:
  struct Mapping;
  SafetensorsFile(std::string path, std::shared_ptr<Mapping> mapping, uint64_t data_start,
                  std::vector<SafetensorsEntry> entries,
                  std::map<std::string, std::string> metadata);

  std::string path_;
  std::shared_ptr<Mapping> mapping_;
  uint64_t data_start_;  // file offset of the data area: 8 + header length
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;  // name -> position in entries_
  std::map<std::string, std::string> metadata_;
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_SAFETENSORS_H_

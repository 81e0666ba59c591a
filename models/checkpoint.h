// The weights of a Hugging Face checkpoint directory: model.safetensors, a sharded
// model.safetensors.index.json, or pytorch_model.bin; checked against what an architecture expects.
#ifndef ATTNSCOPE_MODELS_CHECKPOINT_H_
#define ATTNSCOPE_MODELS_CHECKPOINT_H_

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/safetensors.h"

namespace attnscope {

// One tensor an architecture needs: its checkpoint name and shape.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

class Checkpoint {
 public:
  // Opens the weights of `model_dir`, preferring model.safetensors, then
  // model.safetensors.index.json (shards named by its "weight_map"), then pytorch_model.bin (read
  // with LibTorch's pickle loader, the format of torch.save). Every floating-point tensor becomes a
  // float32 CPU tensor: safetensors float32 data stay memory-mapped, other float dtypes are converted
  // once.
  // NotFound: no weights file in the directory. InvalidArgument: a malformed or corrupt file (the
  // message names the file and, where it applies, the tensor).
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& model_dir);

  // Checks the checkpoint against `expected`: every tensor present with its shape. Tensors in the
  // checkpoint that are neither expected nor matched by `ignored_prefixes` are unexpected.
  // InvalidArgument listing every missing, mis-shaped and unexpected tensor at once, each with the
  // file, the expected and the found shape.
  absl::Status Validate(const std::vector<TensorSpec>& expected,
                        const std::vector<std::string>& ignored_prefixes) const;

  bool Contains(const std::string& name) const { return tensors_.count(name) > 0; }
  // The float32 tensor `name`; an undefined tensor when absent (call Validate first).
  torch::Tensor Get(const std::string& name) const;
  // The file `name` came from, for messages.
  std::string FileOf(const std::string& name) const;
  std::vector<std::string> Names() const;
  // Sum of the tensors' float32 sizes in bytes.
  int64_t TotalBytes() const;
  const std::string& model_dir() const { return model_dir_; }

 private:
  struct Entry {
    torch::Tensor tensor;
    std::string file;
  };
  explicit Checkpoint(std::string model_dir) : model_dir_(std::move(model_dir)) {}
  absl::Status AddSafetensors(const std::string& path, const std::vector<std::string>* only);
  absl::Status AddPickle(const std::string& path);

  std::string model_dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Entry> tensors_;
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_CHECKPOINT_H_

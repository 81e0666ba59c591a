// The weights of a Hugging Face checkpoint directory: model.safetensors, a sharded
// model.safetensors.index.json, or pytorch_model.bin; checked against what an architecture expects
// before any tensor is converted, so that a file that does not fit costs no memory.
#ifndef ATTNSCOPE_MODELS_CHECKPOINT_H_
#define ATTNSCOPE_MODELS_CHECKPOINT_H_

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/checkpoint/safetensors.h"

namespace attnscope {

// One tensor an architecture needs: its checkpoint name and shape.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

class Checkpoint {
 public:
  // Opens the weights of `model_dir`, preferring model.safetensors, then
  // model.safetensors.index.json (shards named by its "weight_map"), then pytorch_model.bin (the
  // format of torch.save, read by TorchArchive without LibTorch's unpickler; a plain dict or an
  // OrderedDict as model.state_dict() gives).
  // Safetensors files are mapped and only their headers read; no tensor is converted until Load.
  // NotFound: no weights file in the directory. InvalidArgument: a malformed or corrupt file, or
  // one that is not a regular file (the message names the file and, where it applies, the tensor).
  // ResourceExhausted: a pytorch_model.bin storage that cannot be allocated.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& model_dir);

  // Checks the checkpoint against `expected` from the files' headers, reading no tensor data: every
  // tensor present, floating-point, with its shape. Tensors in the checkpoint that are neither
  // expected nor matched by `ignored_prefixes` (a prefix or a suffix of the name) are unexpected.
  // InvalidArgument on one line: how many tensors are missing, mis-shaped or unexpected, and the
  // first few of them with the file, the expected and the found shape.
  absl::Status Validate(const std::vector<TensorSpec>& expected,
                        const std::vector<std::string>& ignored_prefixes) const;

  // Validate, then makes each expected tensor float32 once (float32 safetensors data stay mapped,
  // F16, BF16 and F64 are converted) and checks that every value is finite; no other tensor is
  // converted. Call once, before the model is built. InvalidArgument: as Validate; a NaN or
  // infinite value, naming the tensor, its file and the first such element.
  absl::Status Load(const std::vector<TensorSpec>& expected,
                    const std::vector<std::string>& ignored_prefixes);

  // OK when config.json's `field`, whose value is `value`, equals the number of blocks the
  // checkpoint holds under `prefix` (tensors named prefix + N + ".", N = 0, 1, ...; e.g. the
  // layers under "bert.encoder.layer."), checked before anything is built per block.
  // InvalidArgument naming config.json, the field, the blocks found and the file.
  absl::Status CheckBlockCount(const char* field, int64_t value, const std::string& prefix) const;

  // OK when config.json's `field`, whose value is `value`, equals dimension `dim` of tensor
  // `tensor` minus `offset`, or when there is no such tensor of that rank (Validate reports it).
  // InvalidArgument naming config.json, the field, the tensor and its file.
  absl::Status CheckConfigSize(const char* field, int64_t value, const std::string& tensor, int dim,
                               int64_t offset = 0) const;

  bool Contains(const std::string& name) const { return entries_.count(name) > 0; }
  // The shape of tensor `name` as its file gives it; nullopt when absent.
  std::optional<std::vector<int64_t>> Shape(const std::string& name) const;
  // The float32 tensor `name`: the loaded one (see Load); any other floating-point tensor is
  // converted on the first call and kept. Undefined when absent, not floating-point, or
  // unreadable. Safe to call from many threads once Load has returned.
  torch::Tensor Get(const std::string& name) const;
  // The file `name` came from, for messages.
  std::string FileOf(const std::string& name) const;
  std::vector<std::string> Names() const;
  // Sum of the floating-point tensors' float32 sizes in bytes.
  int64_t TotalBytes() const;
  const std::string& model_dir() const { return model_dir_; }

 private:
  struct Entry {
    std::string file;
    std::string dtype;  // safetensors' dtype names (F32, F16, BF16, F64, I64, ...)
    std::vector<int64_t> shape;
    bool is_float = false;
    // Safetensors: the mapped file holding the data. Pickle: the tensor as stored, until Load.
    const SafetensorsFile* source = nullptr;
    torch::Tensor tensor;
    bool loaded = false;  // `tensor` is the float32 one, checked finite
  };
  explicit Checkpoint(std::string model_dir) : model_dir_(std::move(model_dir)) {}
  absl::Status AddSafetensors(const std::string& path, const std::vector<std::string>* only);
  absl::Status AddPickle(const std::string& path);
  // The float32 tensor of `entry` (a view of the mapping or a conversion).
  absl::StatusOr<torch::Tensor> ToFloat32(const std::string& name, const Entry& entry) const;

  std::string model_dir_;
  // The file Open chose (model.safetensors, the index or pytorch_model.bin), for messages.
  std::string weights_file_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Entry> entries_;
  // Tensors Get converted that Load did not (parameters looked at, not used by the model).
  mutable std::mutex converted_mutex_;
  mutable std::map<std::string, torch::Tensor> converted_;
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_CHECKPOINT_H_

// torch.save files (pytorch_model.bin), checked and read without LibTorch's unpickler. That loader
// (torch::pickle_load) trusts the file: a pickle nested 200,000 tuples deep overflows its
// stack (SIGSEGV), a string that claims 4 GB is allocated before it is read, a deflated entry
// inflates to whatever its header says, and a storage that claims more elements than its record
// holds is read past its end. These checks bound every one of those by the file's own size and
// sane limits, the way PyTorch's own restricted loader (torch.load(weights_only=True),
// torch/_weights_only_unpickler.py) allows only what a state dict needs.
#ifndef ATTNSCOPE_MODELS_CHECKPOINT_TORCH_ARCHIVE_H_
#define ATTNSCOPE_MODELS_CHECKPOINT_TORCH_ARCHIVE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

// libzip's archive (zip_t).
struct zip;

namespace attnscope {

// Bounds on what a state dict's pickle may ask LibTorch to build. Real checkpoints stay far below
// them: a state dict of 10,000 tensors pickles to about 2 MB, nests 4 deep and memoizes about
// 100,000 objects.
struct TorchPickleLimits {
  // Bytes of the pickle (the archive's data.pkl).
  uint64_t max_pickle_bytes = 32ull << 20;
  // Containers inside containers (a tensor's arguments count as one level).
  int max_nesting = 32;
  // Values on the unpickler's stack at once, and MARKs open at once.
  int64_t max_stack = 1 << 16;
  int64_t max_open_marks = 64;
  // Memo entries (BINPUT ids); ids must be given in order, as Python's pickler does.
  int64_t max_memo = 1 << 20;
  // Elements put into tuples, lists and dicts over the whole pickle.
  int64_t max_elements = 1 << 22;
};

// Checks `pickle`, the data.pkl of a torch.save archive, as LibTorch's unpickler would run it,
// without building anything: protocol 2 opcodes that LibTorch reads only; every length within the
// bytes that follow it; the limits above; globals only from the set a state dict uses
// (collections.OrderedDict, torch._utils._rebuild_tensor_v2, torch.<Type>Storage); each storage
// persistent id ("storage", type, key, location, numel) naming a record whose size `record_size`
// (of "data/<key>"; nullopt when absent) gives as at least numel elements of its type; each
// tensor's offset, sizes and strides inside its storage. InvalidArgument naming the byte offset
// and what is wrong, e.g. "pickle byte 1234: BINUNICODE of 4294967295 bytes: expected at most the
// 18 bytes left".
absl::Status CheckTorchPickle(
    absl::string_view pickle,
    const std::function<std::optional<uint64_t>(const std::string& key)>& record_size,
    const TorchPickleLimits& limits = {});

// One tensor of a state dict as torch.save stores it (torch/_utils.py, _rebuild_tensor_v2): a view
// of `sizes` and `strides` (elements) at `storage_offset` (elements) into a storage of
// `storage_numel` elements of `storage_type` (e.g. "FloatStorage", "BFloat16Storage"; `item_size`
// bytes each) held little-endian in the archive's record data/<storage_key>. Tensors may share a
// storage (tied weights).
struct TorchTensorRecord {
  std::string name;
  std::string storage_key;
  std::string storage_type;
  int64_t item_size = 0;
  int64_t storage_numel = 0;
  int64_t storage_offset = 0;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
};

// CheckTorchPickle, then the tensors of the state dict the pickle builds, in its order: the items
// of the top dict (dict or collections.OrderedDict, as a model's state_dict() is) whose key is a
// string and whose value is a tensor; other items (e.g. _metadata's) are left out. InvalidArgument
// as CheckTorchPickle's, or when the pickle builds something other than a dict.
absl::StatusOr<std::vector<TorchTensorRecord>> ReadTorchPickle(
    absl::string_view pickle,
    const std::function<std::optional<uint64_t>(const std::string& key)>& record_size,
    const TorchPickleLimits& limits = {});

// A torch.save file (a zip archive; PyTorch >= 1.6) read without LibTorch's unpickler, which in
// LibTorch 1.13 trusts the file (see above) and turns collections.OrderedDict into None, so that
// no model.state_dict() saved by PyTorch or transformers' save_pretrained(safe_serialization=False)
// loads through it.
class TorchArchive {
 public:
  // Opens `bytes`, the whole file at `path`, which must outlive the archive: a zip archive that
  // libzip reads with its consistency checks, its entries unencrypted and together at most twice
  // the file's size when inflated (torch.save stores them uncompressed), its byteorder record (when
  // present) "little", one <archive>/data.pkl that ReadTorchPickle accepts with the sizes of the
  // archive's data/ records. InvalidArgument naming `path` and what is wrong; nothing is inflated
  // beyond data.pkl.
  static absl::StatusOr<std::unique_ptr<TorchArchive>> Open(const std::string& path,
                                                            absl::string_view bytes,
                                                            const TorchPickleLimits& limits = {});

  // The state dict's tensors (ReadTorchPickle), each storage within its record.
  const std::vector<TorchTensorRecord>& tensors() const { return tensors_; }

  // Copies the first `size` bytes of record data/<key> to `out`. InvalidArgument naming the file
  // and the record when it is missing, shorter, or fails its CRC.
  absl::Status ReadRecord(const std::string& key, char* out, uint64_t size) const;

 private:
  struct ZipCloser {
    void operator()(zip* archive) const;
  };
  TorchArchive() = default;

  std::string path_;
  std::unique_ptr<zip, ZipCloser> archive_;
  std::map<std::string, uint64_t> record_index_;
  std::vector<TorchTensorRecord> tensors_;
};

// TorchArchive::Open's checks alone.
absl::Status CheckTorchArchive(const std::string& path, absl::string_view bytes,
                               const TorchPickleLimits& limits = {});

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_CHECKPOINT_TORCH_ARCHIVE_H_

// Checks for torch.save files (pytorch_model.bin) made before LibTorch reads them. LibTorch's
// loader (torch::pickle_load) trusts the file: a pickle nested 200,000 tuples deep overflows its
// stack (SIGSEGV), a string that claims 4 GB is allocated before it is read, a deflated entry
// inflates to whatever its header says, and a storage that claims more elements than its record
// holds is read past its end. These checks bound every one of those by the file's own size and
// sane limits, the way PyTorch's own restricted loader (torch.load(weights_only=True),
// torch/_weights_only_unpickler.py) allows only what a state dict needs.
#ifndef ATTNSCOPE_MODELS_CHECKPOINT_TORCH_ARCHIVE_H_
#define ATTNSCOPE_MODELS_CHECKPOINT_TORCH_ARCHIVE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

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

// Checks `bytes`, a whole torch.save file (a zip archive; PyTorch >= 1.6), before LibTorch reads
// it: a zip archive that libzip reads with its consistency checks, its entries unencrypted and
// together at most twice the file's size when inflated (torch.save stores them uncompressed), one
// <archive>/data.pkl, and that pickle passes CheckTorchPickle with the sizes of the archive's
// data/ records. InvalidArgument naming `path` and what is wrong; the file is never inflated
// beyond data.pkl.
absl::Status CheckTorchArchive(const std::string& path, absl::string_view bytes,
                               const TorchPickleLimits& limits = {});

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_CHECKPOINT_TORCH_ARCHIVE_H_

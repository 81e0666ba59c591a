#include "models/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/json_util.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace attnscope {
namespace {

using Json = nlohmann::json;

// The reference implementation refuses headers above 100 MB. nlohmann's document of a header takes
// about ten times its text, so this reader stops at 16 MB, before parsing: the headers of real
// checkpoints are under 1 MB (about 100 bytes a tensor).
constexpr uint64_t kMaxHeaderBytes = 16ull << 20;

struct DtypeInfo {
  const char* name;
  uint64_t item_size;
  bool is_float;
};

constexpr DtypeInfo kDtypes[] = {
    {"F64", 8, true},  {"F32", 4, true},  {"F16", 2, true}, {"BF16", 2, true}, {"I64", 8, false},
    {"I32", 4, false}, {"I16", 2, false}, {"I8", 1, false}, {"U8", 1, false},  {"BOOL", 1, false},
};

const DtypeInfo* FindDtype(const std::string& name) {
  for (const DtypeInfo& info : kDtypes) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

absl::Status Invalid(const std::string& path, absl::string_view detail) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors file '", path, "': ", detail));
}

absl::Status TensorError(const std::string& path, const std::string& tensor, absl::string_view what,
                         absl::string_view expected, absl::string_view got) {
  return Invalid(path, absl::StrCat("tensor '", Excerpt(tensor, 120), "': ", what, ": expected ",
                                    expected, ", got ", got));
}

// Validates one header entry against the data area of `data_size` bytes.
absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& path, const std::string& name,
                                            const Json& value, uint64_t data_size) {
  if (!value.is_object()) {
    return TensorError(path, name, "header entry", "an object", JsonExcerpt(value));
  }
  SafetensorsEntry entry;
  entry.name = name;
  auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string()) {
    return TensorError(path, name, "dtype", "a string",
                       dtype == value.end() ? "nothing" : JsonExcerpt(*dtype));
  }
  entry.dtype = dtype->get<std::string>();
  const DtypeInfo* info = FindDtype(entry.dtype);
  if (info == nullptr) {
    return TensorError(path, name, "dtype", "one of F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL",
                       Excerpt(entry.dtype));
  }
  auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array()) {
    return TensorError(path, name, "shape", "an array of sizes",
                       shape == value.end() ? "nothing" : JsonExcerpt(*shape));
  }
  uint64_t elements = 1;
  for (const Json& dim : *shape) {
    if (!dim.is_number_unsigned()) {
      return TensorError(path, name, "shape", "non-negative integer sizes", JsonExcerpt(*shape));
    }
    const uint64_t size = dim.get<uint64_t>();
    // Sizes become int64_t; the product check alone lets one through after a zero size.
    if (size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return TensorError(path, name, "shape", "sizes below 2^63", JsonExcerpt(*shape));
    }
    if (size != 0 && elements > std::numeric_limits<uint64_t>::max() / size / info->item_size) {
      return TensorError(path, name, "shape", "a size that fits in memory", JsonExcerpt(*shape));
    }
    elements *= size;
    entry.shape.push_back(static_cast<int64_t>(size));
  }
  auto offsets = value.find("data_offsets");
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
    return TensorError(path, name, "data_offsets", "[begin, end]",
                       offsets == value.end() ? "nothing" : JsonExcerpt(*offsets));
  }
  entry.begin = (*offsets)[0].get<uint64_t>();
  entry.end = (*offsets)[1].get<uint64_t>();
  if (entry.begin > entry.end || entry.end > data_size) {
    return TensorError(path, name, "data_offsets",
                       absl::StrCat("begin <= end <= ", data_size, " (the data area size)"),
                       JsonExcerpt(*offsets));
  }
  const uint64_t expected_bytes = elements * info->item_size;
  if (entry.end - entry.begin != expected_bytes) {
    return TensorError(path, name, "data size",
                       absl::StrCat(expected_bytes, " bytes (shape ", JsonExcerpt(*shape), " x ",
                                    info->item_size, " bytes of ", entry.dtype, ")"),
                       absl::StrCat(entry.end - entry.begin, " bytes"));
  }
  return entry;
}

}  // namespace

struct SafetensorsFile::Mapping {
  void* address = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (address != nullptr) munmap(address, size);
  }
};

SafetensorsFile::SafetensorsFile(std::string path, std::shared_ptr<Mapping> mapping,
                                 uint64_t data_start, std::vector<SafetensorsEntry> entries,
                                 std::map<std::string, std::string> metadata)
    : path_(std::move(path)),
      mapping_(std::move(mapping)),
      data_start_(data_start),
      entries_(std::move(entries)),
      metadata_(std::move(metadata)) {
  for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
}

SafetensorsFile::~SafetensorsFile() = default;

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  // stat before open: opening a FIFO for reading blocks until a writer comes. The file is mapped,
  // never read whole, so its size needs no bound here.
  ATTNSCOPE_RETURN_IF_ERROR(CheckRegularFile(path, std::numeric_limits<uint64_t>::max()));
  // O_NONBLOCK and a second check on the open file: it may have been swapped in between.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat("safetensors file '", path, "': does not exist"));
    }
    return Invalid(path, absl::StrCat("cannot open: ", std::strerror(errno),
                                      "; point it at a readable regular file"));
  }
  struct stat info;
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    close(fd);
    return Invalid(path, "expected a regular file");
  }
  const uint64_t file_size = static_cast<uint64_t>(info.st_size);
  if (file_size < 8) {
    close(fd);
    return Invalid(
        path,
        absl::StrCat("file size: expected at least 8 bytes (the header length), got ", file_size));
  }
  auto mapping = std::make_shared<Mapping>();
  // MAP_PRIVATE with write permission: weights are never written, but an accidental write would
  // only copy a page instead of faulting or changing the file.
  mapping->address = mmap(nullptr, file_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  close(fd);
  if (mapping->address == MAP_FAILED) {
    mapping->address = nullptr;
    return absl::InternalError(
        absl::StrCat("safetensors file '", path, "': mmap failed: ", std::strerror(errno)));
  }
  mapping->size = file_size;
  const auto* bytes = static_cast<const unsigned char*>(mapping->address);

  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | bytes[i];
  if (header_size > kMaxHeaderBytes || header_size > file_size - 8) {
    return Invalid(path, absl::StrCat("header length: expected at most ",
                                      std::min(kMaxHeaderBytes, file_size - 8),
                                      " bytes (the rest of the file), got ", header_size,
                                      "; the file is truncated or not safetensors"));
  }
  const uint64_t data_start = 8 + header_size;
  const uint64_t data_size = file_size - data_start;
  Json header = Json::parse(bytes + 8, bytes + data_start, /*cb=*/nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return Invalid(path, "header: expected a JSON object, got malformed JSON");
  }
  ATTNSCOPE_RETURN_IF_ERROR(
      CheckJsonDepth(header, absl::StrCat("safetensors file '", path, "': header")));

  std::vector<SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) return Invalid(path, "__metadata__: expected an object of strings");
      for (const auto& [key, text] : value.items()) {
        if (!text.is_string()) {
          return Invalid(path, absl::StrCat("__metadata__ '", Excerpt(key),
                                            "': expected a string, got ", JsonExcerpt(text)));
        }
        metadata[key] = text.get<std::string>();
      }
      continue;
    }
    auto entry = ParseEntry(path, name, value, data_size);
    if (!entry.ok()) return entry.status();
    entries.push_back(*std::move(entry));
  }
  // The format (and its reference reader, the safetensors crate's validate) lays the tensors end
  // to end over the whole data area: tensors that overlap would alias each other's bytes, and a
  // gap hides data nobody reads.
  std::vector<const SafetensorsEntry*> by_offset;
  for (const SafetensorsEntry& entry : entries) by_offset.push_back(&entry);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
              return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
            });
  uint64_t end = 0;
  for (const SafetensorsEntry* entry : by_offset) {
    if (entry->begin != end) {
      return TensorError(path, entry->name, "data_offsets",
                         absl::StrCat("to begin at ", end,
                                      ", where the tensor before it ends (tensors lie end to end, "
                                      "without overlaps or gaps)"),
                         absl::StrCat("[", entry->begin, ", ", entry->end, "]"));
    }
    end = entry->end;
  }
  if (end != data_size) {
    return Invalid(
        path, absl::StrCat("data area: expected ", end, " bytes (where the last tensor ends), got ",
                           data_size, "; the file has bytes no tensor covers"));
  }
  return std::unique_ptr<SafetensorsFile>(new SafetensorsFile(
      path, std::move(mapping), data_start, std::move(entries), std::move(metadata)));
}

absl::StatusOr<torch::Tensor> SafetensorsFile::LoadFloat(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(absl::StrCat("safetensors file '", path_, "': tensor '",
                                            Excerpt(name, 120), "': not in the file"));
  }
  const SafetensorsEntry& entry = entries_[it->second];
  torch::ScalarType type;
  if (entry.dtype == "F32") {
    type = torch::kFloat32;
  } else if (entry.dtype == "F16") {
    type = torch::kFloat16;
  } else if (entry.dtype == "BF16") {
    type = torch::kBFloat16;
  } else if (entry.dtype == "F64") {
    type = torch::kFloat64;
  } else {
    return TensorError(path_, name, "dtype", "a floating-point dtype (F32, F16, BF16, F64)",
                       entry.dtype);
  }
  char* data = static_cast<char*>(mapping_->address) + data_start_ + entry.begin;
  const int64_t item_size = static_cast<int64_t>(torch::elementSize(type));
  std::shared_ptr<Mapping> keep_alive = mapping_;
  try {
    torch::Tensor view = torch::from_blob(
        data, entry.shape, [keep_alive](void*) mutable { keep_alive.reset(); },
        torch::TensorOptions().dtype(type));
    if (type == torch::kFloat32 && reinterpret_cast<uintptr_t>(data) % item_size == 0) {
      return view;
    }
    // Half-precision weights are widened once here; misaligned float32 is copied so kernels never
    // read unaligned floats.
    return view.to(torch::kFloat32, /*non_blocking=*/false, /*copy=*/true);
  } catch (const c10::Error& error) {
    return absl::InternalError(absl::StrCat("safetensors file '", path_, "': tensor '",
                                            Excerpt(name, 120),
                                            "': ", Excerpt(error.what_without_backtrace(), 200)));
  } catch (const std::exception& error) {
    // std::bad_alloc converting a large half-precision tensor.
    return absl::ResourceExhaustedError(
        absl::StrCat("safetensors file '", path_, "': tensor '", Excerpt(name, 120),
                     "': cannot convert it: ", Excerpt(error.what(), 200)));
  }
}

}  // namespace attnscope

#include "models/checkpoint/checkpoint.h"

#include <ATen/Parallel.h>
#include <torch/types.h>

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/json_util.h"
#include "common/status_macros.h"
#include "models/checkpoint/torch_archive.h"
#include "nlohmann/json.hpp"

namespace attnscope {
namespace {

// Problems Validate lists by name; the rest are counted. A config.json that claims 100,000 layers
// otherwise made a 167 MB message of missing tensors.
constexpr size_t kMaxProblemsListed = 6;

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// A tensor name from a file header, as a message may quote it.
std::string Name(const std::string& name) { return Excerpt(name, 120); }

// The scalar type of a torch.<Type>Storage of a pickle (torch/storage.py), or nullopt.
std::optional<torch::ScalarType> StorageScalarType(const std::string& storage_type) {
  static const std::map<std::string, torch::ScalarType>* const kTypes =
      new std::map<std::string, torch::ScalarType>{{"FloatStorage", torch::kFloat32},
                                                   {"HalfStorage", torch::kFloat16},
                                                   {"BFloat16Storage", torch::kBFloat16},
                                                   {"DoubleStorage", torch::kFloat64},
                                                   {"LongStorage", torch::kInt64},
                                                   {"IntStorage", torch::kInt32},
                                                   {"ShortStorage", torch::kInt16},
                                                   {"CharStorage", torch::kInt8},
                                                   {"ByteStorage", torch::kUInt8},
                                                   {"BoolStorage", torch::kBool},
                                                   {"ComplexFloatStorage", torch::kComplexFloat},
                                                   {"ComplexDoubleStorage", torch::kComplexDouble}};
  const auto it = kTypes->find(storage_type);
  if (it == kTypes->end()) return std::nullopt;
  return it->second;
}

// The safetensors dtype name of a pickled tensor's type.
std::string DtypeName(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat32:
      return "F32";
    case torch::kFloat16:
      return "F16";
    case torch::kBFloat16:
      return "BF16";
    case torch::kFloat64:
      return "F64";
    default:
      return c10::toString(type);
  }
}

// The index of the first NaN or infinite value of `data`, or -1. Blocks are checked in parallel
// with a loop the compiler vectorizes; only a block with a bad value is searched element by
// element.
int64_t FirstNonFinite(const float* data, int64_t count) {
  constexpr int64_t kBlock = 1 << 16;
  const int64_t blocks = (count + kBlock - 1) / kBlock;
  std::vector<char> bad(static_cast<size_t>(blocks), 0);
  constexpr float kMax = std::numeric_limits<float>::max();
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const float* block = data + b * kBlock;
      const int64_t size = std::min(kBlock, count - b * kBlock);
      int any = 0;
      // NaN fails every comparison, so !(|x| <= max) holds exactly for NaN and +-inf.
      for (int64_t i = 0; i < size; ++i) any |= !(std::fabs(block[i]) <= kMax);
      bad[b] = static_cast<char>(any);
    }
  });
  for (int64_t b = 0; b < blocks; ++b) {
    if (bad[b] == 0) continue;
    for (int64_t i = b * kBlock; i < std::min(count, (b + 1) * kBlock); ++i) {
      if (!(std::fabs(data[i]) <= kMax)) return i;
    }
  }
  return -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& model_dir) {
  std::unique_ptr<Checkpoint> checkpoint(new Checkpoint(model_dir));
  const std::string single = JoinPath(model_dir, "model.safetensors");
  const std::string index = JoinPath(model_dir, "model.safetensors.index.json");
  const std::string pickle = JoinPath(model_dir, "pytorch_model.bin");
  ATTNSCOPE_ASSIGN_OR_RETURN(const bool has_single, OptionalFileExists(single));
  ATTNSCOPE_ASSIGN_OR_RETURN(const bool has_index, OptionalFileExists(index));
  ATTNSCOPE_ASSIGN_OR_RETURN(const bool has_pickle, OptionalFileExists(pickle));
  if (has_single) {
    checkpoint->weights_file_ = single;
    ATTNSCOPE_RETURN_IF_ERROR(checkpoint->AddSafetensors(single, /*only=*/nullptr));
  } else if (has_index) {
    checkpoint->weights_file_ = index;
    ATTNSCOPE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index, kMaxSettingsFileBytes));
    nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    ATTNSCOPE_RETURN_IF_ERROR(CheckJsonDepth(json, absl::StrCat("checkpoint index '", index, "'")));
    auto weight_map = json.is_object() ? json.find("weight_map") : json.end();
    if (!json.is_object() || weight_map == json.end() || !weight_map->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint index '", index, "': expected a JSON object with a \"weight_map\" object"));
    }
    std::map<std::string, std::vector<std::string>> names_by_shard;
    for (const auto& [name, shard] : weight_map->items()) {
      const std::string shard_name = shard.is_string() ? shard.get<std::string>() : "";
      if (shard_name.empty() || absl::StrContains(shard_name, "/")) {
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint index '", index, "': tensor '", Name(name),
            "': expected a shard file name in the same directory, got ", JsonExcerpt(shard)));
      }
      names_by_shard[shard_name].push_back(name);
    }
    for (const auto& [shard, names] : names_by_shard) {
      ATTNSCOPE_RETURN_IF_ERROR(checkpoint->AddSafetensors(JoinPath(model_dir, shard), &names));
    }
  } else if (has_pickle) {
    checkpoint->weights_file_ = pickle;
    ATTNSCOPE_RETURN_IF_ERROR(checkpoint->AddPickle(pickle));
  } else {
    return absl::NotFoundError(absl::StrCat(
        "checkpoint '", model_dir,
        "': expected model.safetensors, model.safetensors.index.json or pytorch_model.bin, got "
        "none of them"));
  }
  return checkpoint;
}

absl::Status Checkpoint::AddSafetensors(const std::string& path,
                                        const std::vector<std::string>* only) {
  ATTNSCOPE_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(path));
  std::set<std::string> wanted;
  if (only != nullptr) wanted.insert(only->begin(), only->end());
  for (const SafetensorsEntry& entry : file->entries()) {
    if (only != nullptr && wanted.erase(entry.name) == 0) continue;
    Entry& added = entries_[entry.name];
    added = Entry{};
    added.file = path;
    added.dtype = entry.dtype;
    added.shape = entry.shape;
    // Integer tensors in checkpoints are buffers such as position_ids; they stay listed so that
    // Validate can tell expected from unexpected, without data.
    added.is_float = entry.dtype == "F32" || entry.dtype == "F16" || entry.dtype == "BF16" ||
                     entry.dtype == "F64";
    added.source = file.get();
  }
  if (!wanted.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors file '", path, "': tensor '", Name(*wanted.begin()),
                     "': expected (the index's weight_map names it), got nothing in the shard"));
  }
  files_.push_back(std::move(file));
  return absl::OkStatus();
}

absl::Status Checkpoint::AddPickle(const std::string& path) {
  // A pickle cannot be read in part: the file is read whole, then each floating-point storage is
  // copied out of it once, tensors sharing a storage as views of one copy.
  ATTNSCOPE_ASSIGN_OR_RETURN(const std::string bytes,
                             ReadFileToString(path, std::numeric_limits<uint64_t>::max()));
  ATTNSCOPE_ASSIGN_OR_RETURN(const std::unique_ptr<TorchArchive> archive,
                             TorchArchive::Open(path, bytes));
  std::map<std::string, torch::Tensor> storages;
  for (const TorchTensorRecord& record : archive->tensors()) {
    const std::optional<torch::ScalarType> type = StorageScalarType(record.storage_type);
    Entry entry;
    entry.file = path;
    entry.dtype = type.has_value() ? DtypeName(*type) : record.storage_type;
    entry.shape = record.sizes;
    entry.is_float = type.has_value() && c10::isFloatingType(*type);
    if (entry.is_float) {
      auto it = storages.find(record.storage_key);
      if (it == storages.end()) {
        torch::Tensor storage;
        try {
          storage = torch::empty({record.storage_numel}, torch::TensorOptions().dtype(*type));
        } catch (const c10::Error& error) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "checkpoint '", path, "': storage '", Name(record.storage_key), "' of ",
              record.storage_numel,
              " elements cannot be allocated: ", Excerpt(error.what_without_backtrace(), 200)));
        }
        ATTNSCOPE_RETURN_IF_ERROR(
            archive->ReadRecord(record.storage_key, static_cast<char*>(storage.data_ptr()),
                                static_cast<uint64_t>(record.storage_numel) * record.item_size));
        it = storages.emplace(record.storage_key, std::move(storage)).first;
      }
      entry.tensor = it->second.as_strided(record.sizes, record.strides, record.storage_offset);
    }
    entries_[record.name] = std::move(entry);
  }
  return absl::OkStatus();
}

absl::Status Checkpoint::Validate(const std::vector<TensorSpec>& expected,
                                  const std::vector<std::string>& ignored_prefixes) const {
  std::vector<std::string> problems;
  size_t count = 0;
  const auto problem = [&](std::string text) {
    if (++count <= kMaxProblemsListed) problems.push_back(std::move(text));
  };
  std::set<std::string> seen;
  for (const TensorSpec& spec : expected) {
    seen.insert(spec.name);
    auto it = entries_.find(spec.name);
    if (it == entries_.end()) {
      problem(absl::StrCat("missing tensor '", spec.name, "': expected shape ",
                           ShapeString(spec.shape), ", got nothing"));
      continue;
    }
    const Entry& entry = it->second;
    if (!entry.is_float) {
      problem(absl::StrCat("tensor '", spec.name, "' in '", entry.file,
                           "': expected a floating-point tensor, got ", Excerpt(entry.dtype)));
      continue;
    }
    if (entry.shape != spec.shape) {
      problem(absl::StrCat("tensor '", spec.name, "' in '", entry.file, "': expected shape ",
                           ShapeString(spec.shape), ", got ", ShapeString(entry.shape)));
    }
  }
  for (const auto& [name, entry] : entries_) {
    if (seen.count(name) > 0) continue;
    bool ignored = false;
    for (const std::string& prefix : ignored_prefixes) {
      if (absl::StartsWith(name, prefix) || absl::EndsWith(name, prefix)) ignored = true;
    }
    if (!ignored) {
      problem(absl::StrCat("unexpected tensor '", Name(name), "' in '", entry.file,
                           "': expected no such tensor for this architecture"));
    }
  }
  if (count == 0) return absl::OkStatus();
  if (count > problems.size()) {
    problems.push_back(absl::StrCat("and ", count - problems.size(), " more"));
  }
  return absl::InvalidArgumentError(absl::StrCat("checkpoint '", model_dir_,
                                                 "' does not match its config.json (", count,
                                                 " problem(s)): ", absl::StrJoin(problems, "; ")));
}

absl::StatusOr<torch::Tensor> Checkpoint::ToFloat32(const std::string& name,
                                                    const Entry& entry) const {
  if (entry.source != nullptr) return entry.source->LoadFloat(name);
  try {
    return entry.tensor.to(torch::kFloat32).contiguous();
  } catch (const std::exception& error) {
    return absl::ResourceExhaustedError(
        absl::StrCat("tensor '", Name(name), "' in '", entry.file,
                     "': cannot convert it to float32: ", Excerpt(error.what(), 200)));
  }
}

absl::Status Checkpoint::Load(const std::vector<TensorSpec>& expected,
                              const std::vector<std::string>& ignored_prefixes) {
  ATTNSCOPE_RETURN_IF_ERROR(Validate(expected, ignored_prefixes));
  for (const TensorSpec& spec : expected) {
    Entry& entry = entries_.at(spec.name);
    if (entry.loaded) continue;
    ATTNSCOPE_ASSIGN_OR_RETURN(torch::Tensor tensor, ToFloat32(spec.name, entry));
    const int64_t bad = FirstNonFinite(tensor.data_ptr<float>(), tensor.numel());
    if (bad >= 0) {
      const float value = tensor.data_ptr<float>()[bad];
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", spec.name, "' in '", entry.file, "': expected finite values, got ",
          std::isnan(value) ? "NaN" : (value > 0 ? "inf" : "-inf"), " at element ", bad, " of ",
          tensor.numel(), " (", entry.dtype,
          "); the weights are corrupt or overflowed when saved: export them again"));
    }
    entry.tensor = std::move(tensor);
    entry.loaded = true;
  }
  return absl::OkStatus();
}

absl::Status Checkpoint::CheckBlockCount(const char* field, int64_t value,
                                         const std::string& prefix) const {
  std::set<int64_t> blocks;
  std::string file;
  for (auto it = entries_.lower_bound(prefix);
       it != entries_.end() && absl::StartsWith(it->first, prefix); ++it) {
    const absl::string_view rest = absl::string_view(it->first).substr(prefix.size());
    int64_t index = 0;
    if (absl::SimpleAtoi(rest.substr(0, rest.find('.')), &index) && index >= 0) {
      blocks.insert(index);
      file = it->second.file;
    }
  }
  const int64_t found = static_cast<int64_t>(blocks.size());
  if (found == value) return absl::OkStatus();
  const std::string where =
      found == 0 ? absl::StrCat("no tensors named '", prefix, "N.*' in '", weights_file_, "'")
                 : absl::StrCat(found, " under '", prefix, "N.' in '", file, "'");
  return absl::InvalidArgumentError(
      absl::StrCat("config '", JoinPath(model_dir_, "config.json"), "': field '", field,
                   "': expected ", found, " (the weights hold ", where, "), got ", value,
                   "; config.json must come from the same checkpoint as the weights"));
}

absl::Status Checkpoint::CheckConfigSize(const char* field, int64_t value,
                                         const std::string& tensor, int dim, int64_t offset) const {
  auto it = entries_.find(tensor);
  if (it == entries_.end() || static_cast<int>(it->second.shape.size()) <= dim) {
    return absl::OkStatus();
  }
  const int64_t found = it->second.shape[dim] - offset;
  if (found == value) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("config '", JoinPath(model_dir_, "config.json"), "': field '", field,
                   "': expected ", found, " (tensor '", tensor, "' in '", it->second.file,
                   "' has shape ", ShapeString(it->second.shape), "), got ", value,
                   "; config.json must come from the same checkpoint as the weights"));
}

std::optional<std::vector<int64_t>> Checkpoint::Shape(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) return std::nullopt;
  return it->second.shape;
}

torch::Tensor Checkpoint::Get(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end() || !it->second.is_float) return torch::Tensor();
  if (it->second.loaded) return it->second.tensor;
  std::lock_guard<std::mutex> lock(converted_mutex_);
  auto [converted, inserted] = converted_.try_emplace(name);
  if (inserted) {
    absl::StatusOr<torch::Tensor> tensor = ToFloat32(name, it->second);
    if (tensor.ok()) converted->second = *std::move(tensor);
  }
  return converted->second;
}

std::string Checkpoint::FileOf(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? std::string() : it->second.file;
}

std::vector<std::string> Checkpoint::Names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

int64_t Checkpoint::TotalBytes() const {
  int64_t total = 0;
  for (const auto& [name, entry] : entries_) {
    if (!entry.is_float) continue;
    int64_t elements = 1;
    for (const int64_t size : entry.shape) elements *= size;
    total += elements * 4;
  }
  return total;
}

}  // namespace attnscope

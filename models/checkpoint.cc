#include "models/checkpoint.h"

#include <torch/serialize.h>

#include <set>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "models/file_util.h"
#include "models/json_util.h"
#include "nlohmann/json.hpp"

namespace attnscope {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& model_dir) {
  std::unique_ptr<Checkpoint> checkpoint(new Checkpoint(model_dir));
  const std::string single = JoinPath(model_dir, "model.safetensors");
  const std::string index = JoinPath(model_dir, "model.safetensors.index.json");
  const std::string pickle = JoinPath(model_dir, "pytorch_model.bin");
  if (FileExists(single)) {
    ATTNSCOPE_RETURN_IF_ERROR(checkpoint->AddSafetensors(single, /*only=*/nullptr));
  } else if (FileExists(index)) {
    ATTNSCOPE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index));
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
            "checkpoint index '", index, "': tensor '", name,
            "': expected a shard file name in the same directory, got ", shard.dump()));
      }
      names_by_shard[shard_name].push_back(name);
    }
    for (const auto& [shard, names] : names_by_shard) {
      ATTNSCOPE_RETURN_IF_ERROR(checkpoint->AddSafetensors(JoinPath(model_dir, shard), &names));
    }
  } else if (FileExists(pickle)) {
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
    if (entry.dtype == "F32" || entry.dtype == "F16" || entry.dtype == "BF16" ||
        entry.dtype == "F64") {
      ATTNSCOPE_ASSIGN_OR_RETURN(torch::Tensor tensor, file->LoadFloat(entry.name));
      tensors_[entry.name] = Entry{std::move(tensor), path};
    } else {
      // Integer tensors in checkpoints are buffers such as position_ids; keep them listed so that
      // Validate can tell expected from unexpected, without data.
      tensors_[entry.name] = Entry{torch::Tensor(), path};
    }
  }
  if (!wanted.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors file '", path, "': tensor '", *wanted.begin(),
                     "': expected (the index's weight_map names it), got nothing in the shard"));
  }
  files_.push_back(std::move(file));
  return absl::OkStatus();
}

absl::Status Checkpoint::AddPickle(const std::string& path) {
  ATTNSCOPE_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  try {
    std::vector<char> data(bytes.begin(), bytes.end());
    bytes.clear();
    c10::IValue value = torch::pickle_load(data);
    if (!value.isGenericDict()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint '", path, "': expected a state dict (name -> tensor), got ",
                       value.tagKind()));
    }
    for (const auto& item : value.toGenericDict()) {
      if (!item.key().isString() || !item.value().isTensor()) continue;
      torch::Tensor tensor = item.value().toTensor();
      if (tensor.is_floating_point()) {
        tensor = tensor.to(torch::kFloat32).contiguous();
      } else {
        tensor = torch::Tensor();
      }
      tensors_[item.key().toStringRef()] = Entry{std::move(tensor), path};
    }
  } catch (const c10::Error& error) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint '", path,
                     "': not a readable torch.save file: ", error.what_without_backtrace()));
  } catch (const std::exception& error) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint '", path, "': not a readable torch.save file: ", error.what()));
  }
  return absl::OkStatus();
}

absl::Status Checkpoint::Validate(const std::vector<TensorSpec>& expected,
                                  const std::vector<std::string>& ignored_prefixes) const {
  std::vector<std::string> problems;
  std::set<std::string> seen;
  for (const TensorSpec& spec : expected) {
    seen.insert(spec.name);
    auto it = tensors_.find(spec.name);
    if (it == tensors_.end()) {
      problems.push_back(absl::StrCat("missing tensor '", spec.name, "': expected shape ",
                                      ShapeString(spec.shape), ", got nothing"));
      continue;
    }
    if (!it->second.tensor.defined()) {
      problems.push_back(absl::StrCat("tensor '", spec.name, "' in '", it->second.file,
                                      "': expected a floating-point tensor, got an integer one"));
      continue;
    }
    const std::vector<int64_t> shape = it->second.tensor.sizes().vec();
    if (shape != spec.shape) {
      problems.push_back(absl::StrCat("tensor '", spec.name, "' in '", it->second.file,
                                      "': expected shape ", ShapeString(spec.shape), ", got ",
                                      ShapeString(shape)));
    }
  }
  for (const auto& [name, entry] : tensors_) {
    if (seen.count(name) > 0) continue;
    bool ignored = false;
    for (const std::string& prefix : ignored_prefixes) {
      if (absl::StartsWith(name, prefix) || absl::EndsWith(name, prefix)) ignored = true;
    }
    if (!ignored) {
      problems.push_back(absl::StrCat("unexpected tensor '", name, "' in '", entry.file,
                                      "': expected no such tensor for this architecture"));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("checkpoint '", model_dir_, "' does not match its config.json (",
                   problems.size(), " problem(s)): ", absl::StrJoin(problems, "; ")));
}

torch::Tensor Checkpoint::Get(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? torch::Tensor() : it->second.tensor;
}

std::string Checkpoint::FileOf(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? std::string() : it->second.file;
}

std::vector<std::string> Checkpoint::Names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, entry] : tensors_) names.push_back(name);
  return names;
}

int64_t Checkpoint::TotalBytes() const {
  int64_t total = 0;
  for (const auto& [name, entry] : tensors_) {
    if (entry.tensor.defined()) total += entry.tensor.numel() * 4;
  }
  return total;
}

}  // namespace attnscope

#include "tools/train/safetensors_writer.h"

#include <cstdint>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace attnscope::train {

absl::Status WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write '", path, "'"));
  return absl::OkStatus();
}

absl::Status WriteSafetensors(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                              const std::string& path) {
  std::map<std::string, torch::Tensor> sorted(tensors.begin(), tensors.end());
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const auto& [name, tensor] : sorted) {
    const torch::Tensor values = tensor.detach().to(torch::kFloat32).contiguous();
    const size_t begin = data.size();
    data.append(static_cast<const char*>(values.data_ptr()), values.numel() * sizeof(float));
    header[name] = {
        {"dtype", "F32"}, {"shape", values.sizes().vec()}, {"data_offsets", {begin, data.size()}}};
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  uint64_t length = header_text.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return WriteFile(path, bytes + header_text + data);
}

}  // namespace attnscope::train

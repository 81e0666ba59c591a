#include "client/npy.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace attnscope {
namespace {

void AppendU32(uint32_t value, std::string& out) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

}  // namespace

std::string EncodeNpy(const DecodedTensor& tensor) {
  std::string shape = "(";
  for (size_t i = 0; i < tensor.shape.size(); ++i) {
    absl::StrAppend(&shape, i == 0 ? "" : ", ", tensor.shape[i]);
  }
  // A one-element tuple needs its trailing comma in Python syntax.
  absl::StrAppend(&shape, tensor.shape.size() == 1 ? ",)" : ")");
  std::string header = absl::StrCat("{'descr': '", tensor.is_int() ? "<i4" : "<f4",
                                    "', 'fortran_order': False, 'shape': ", shape, ", }");
  // magic (6) + version (2) + header length (2) + header, ending in '\n', padded so that the data
  // starts 64-byte aligned as numpy itself writes it.
  constexpr size_t kPrefix = 10;
  const size_t unpadded = kPrefix + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');

  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size() & 0xFF));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  const size_t count = tensor.is_int() ? tensor.int_values.size() : tensor.values.size();
  out.reserve(out.size() + 4 * count);
  for (size_t i = 0; i < count; ++i) {
    uint32_t bits;
    if (tensor.is_int()) {
      bits = static_cast<uint32_t>(tensor.int_values[i]);
    } else {
      std::memcpy(&bits, &tensor.values[i], sizeof(bits));
    }
    AppendU32(bits, out);
  }
  return out;
}

absl::Status WriteNpy(const DecodedTensor& tensor, const std::string& path) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (file) {
    const std::string bytes = EncodeNpy(tensor);
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    file.close();
  }
  if (!file) {
    return absl::InternalError(absl::StrCat("cannot write '", path, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace attnscope

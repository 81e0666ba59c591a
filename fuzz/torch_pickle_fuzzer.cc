// pytorch_model.bin on arbitrary pickles: the input is the data.pkl of a torch.save archive whose
// other records are fixed (data/0: 48 bytes, data/1: 8 bytes, version), written with libzip into a
// checkpoint folder and opened with Checkpoint::Open, which checks the archive and builds the
// tensors from its records (TorchArchive). What the checks let through must be safe to build: no
// crash, no hang, no allocation beyond the file's bounds (libFuzzer's -rss_limit_mb), and every
// tensor that loads is read through to its last element. Every refusal is one line of under 1000
// bytes.
#include <zip.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_util.h"
#include "models/checkpoint/checkpoint.h"

namespace {

volatile float g_sink;

// Writes the archive: data.pkl from the input, then the records, all stored uncompressed as
// torch.save stores them.
void WriteArchive(const std::string& path, std::string_view pickle) {
  static const std::string kRecord0(48, '\x01');
  static const std::string kRecord1(8, '\x02');
  static const std::string kVersion = "3\n";
  int error = 0;
  zip_t* archive = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
  ATTNSCOPE_FUZZ_CHECK(archive != nullptr, "zip_open: cannot write the scratch archive");
  const std::pair<const char*, std::string_view> entries[] = {{"archive/data.pkl", pickle},
                                                              {"archive/data/0", kRecord0},
                                                              {"archive/data/1", kRecord1},
                                                              {"archive/version", kVersion}};
  for (const auto& [name, bytes] : entries) {
    zip_source_t* source = zip_source_buffer(archive, bytes.data(), bytes.size(), /*freep=*/0);
    const zip_int64_t index = zip_file_add(archive, name, source, ZIP_FL_OVERWRITE);
    ATTNSCOPE_FUZZ_CHECK(source != nullptr && index >= 0, "zip_file_add failed");
    zip_set_file_compression(archive, static_cast<zip_uint64_t>(index), ZIP_CM_STORE, 0);
  }
  ATTNSCOPE_FUZZ_CHECK(zip_close(archive) == 0, "zip_close: cannot write the scratch archive");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string* const path =
      new std::string(attnscope::fuzz::ScratchDir() + "/pytorch_model.bin");
  WriteArchive(*path, attnscope::fuzz::AsText(data, size));
  auto checkpoint = attnscope::Checkpoint::Open(attnscope::fuzz::ScratchDir());
  if (!checkpoint.ok()) {
    const absl::Status& status = checkpoint.status();
    ATTNSCOPE_FUZZ_CHECK(status.code() == absl::StatusCode::kInvalidArgument, status.ToString());
    ATTNSCOPE_FUZZ_CHECK(
        status.message().size() < 1000 && status.message().find('\n') == absl::string_view::npos,
        absl::StrCat("refusal: expected one line under 1000 bytes, got ", status.message().size(),
                     " bytes"));
    return 0;
  }
  for (const std::string& name : (*checkpoint)->Names()) {
    const torch::Tensor tensor = (*checkpoint)->Get(name);
    if (!tensor.defined()) continue;
    // Through every element in instrumented code: a view past its storage faults here.
    const torch::Tensor values = tensor.contiguous();
    const float* begin = values.data_ptr<float>();
    float sum = 0;
    for (int64_t i = 0; i < values.numel(); ++i) sum += begin[i];
    g_sink = sum;
  }
  return 0;
}

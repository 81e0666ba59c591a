#include "tests/unit/requests/request_test_util.h"

#include <filesystem>
#include <utility>

#include "gtest/gtest.h"
#include "tests/unit/test_util.h"

namespace attnscope::testing {

std::string LlamaDir() {
  static const std::string* dir = [] {
    auto* made = new std::string(MakeTempDir());
    const std::string llama = SharedDir() + "/models/stories260K";
    for (const char* file : {"config.json", "model.safetensors"}) {
      std::filesystem::create_symlink(llama + "/" + file, *made + "/" + file);
    }
    std::filesystem::copy_file(TestDataDir() + "/tiny-bert/vocab.txt", *made + "/vocab.txt");
    return made;
  }();
  return *dir;
}

std::unique_ptr<LoadedModel> LoadModel(const std::string& name, const std::string& dir) {
  LoadedModel::Options options;
  options.name = name;
  options.model_dir = dir;
  absl::StatusOr<std::unique_ptr<LoadedModel>> model = LoadedModel::Create(options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

std::unique_ptr<RequestRunner> NewRunner(const RequestRunner::Options& options,
                                         RequestObserver* observer) {
  std::vector<std::unique_ptr<LoadedModel>> models;
  models.push_back(LoadModel("bert", TestDataDir() + "/tiny-bert"));
  models.push_back(LoadModel("llama", LlamaDir()));
  models.push_back(LoadModel("bart", TestDataDir() + "/tiny-bart"));
  return std::make_unique<RequestRunner>(options, std::move(models), observer);
}

CallCheck NoCheck() {
  return [](absl::string_view) { return absl::OkStatus(); };
}

int64_t BytesOf(const std::vector<torch::Tensor>& tensors, int64_t bytes_per_element) {
  int64_t bytes = 0;
  for (const torch::Tensor& tensor : tensors) bytes += tensor.numel() * bytes_per_element;
  return bytes;
}

}  // namespace attnscope::testing

// tokenizer_config.json and config.json as LoadTokenizer reads them
// (models/tokenizers/tokenizer_loader.cc: special tokens, lower-casing, model_max_length, BOS/EOS
// and pad ids), on arbitrary bytes. The input is tokenizer_config.json, then optionally a NUL byte
// and config.json. Both files go next to a vocab.txt (tests/data/tiny-bert's) and next to a
// tokenizer.model (stories260K's), and each tokenizer that loads encodes a fixed text through the
// checks of tokenizer_checks.h; a refusal is one line of under 1000 bytes.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "fuzz/tokenizer_checks.h"
#include "models/tokenizers/tokenizer.h"

namespace attnscope::fuzz {
namespace {

using std::string_view_literals::operator""sv;

// Every special token BERT and Llama name, a Korean word and an emoji, as a pair.
constexpr std::string_view kText =
    "[CLS] the capital [MASK] of france<s> is paris. [SEP][UNK] </s> 나는 🙂\0what is [PAD]"sv;

struct ModelDir {
  std::string path;
  bool wordpiece;
};

const ModelDir* Dirs() {
  static const ModelDir* const dirs = [] {
    const std::string vocab = ReadFixture(TestDataDir() + "/tiny-bert/vocab.txt");
    const std::string model = ReadFixture(SharedDir() + "/models/stories260K/tokenizer.model");
    auto* made = new ModelDir[2]{{ScratchDir() + "/wordpiece", true},
                                 {ScratchDir() + "/sentencepiece", false}};
    for (int i = 0; i < 2; ++i) {
      std::filesystem::create_directory(made[i].path);
      WriteFile(made[i].path + (made[i].wordpiece ? "/vocab.txt" : "/tokenizer.model"),
                made[i].wordpiece ? vocab : model);
    }
    return made;
  }();
  return dirs;
}

}  // namespace
}  // namespace attnscope::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  attnscope::fuzz::Dirs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using attnscope::fuzz::WriteFile;
  const std::string_view input = attnscope::fuzz::AsText(data, size);
  const size_t nul = input.find('\0');
  for (int i = 0; i < 2; ++i) {
    const attnscope::fuzz::ModelDir& dir = attnscope::fuzz::Dirs()[i];
    WriteFile(dir.path + "/tokenizer_config.json", input.substr(0, nul));
    const std::string config_path = dir.path + "/config.json";
    if (nul == std::string_view::npos) {
      std::filesystem::remove(config_path);
    } else {
      WriteFile(config_path, input.substr(nul + 1));
    }
    auto tokenizer = attnscope::LoadTokenizer(dir.path);
    if (!tokenizer.ok()) {
      const absl::string_view message = tokenizer.status().message();
      ATTNSCOPE_FUZZ_CHECK(tokenizer.status().code() == absl::StatusCode::kInvalidArgument,
                           tokenizer.status().ToString());
      ATTNSCOPE_FUZZ_CHECK(message.size() < 1000 && message.find('\n') == absl::string_view::npos,
                           "refusal: expected one line under 1000 bytes");
      continue;
    }
    ATTNSCOPE_FUZZ_CHECK((*tokenizer)->model_max_length() > 0,
                         "model_max_length: expected positive");
    attnscope::fuzz::ExerciseTokenizer(**tokenizer, attnscope::fuzz::kText,
                                       /*tokens_are_vocabulary=*/dir.wordpiece);
  }
  return 0;
}

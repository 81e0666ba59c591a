// Hugging Face tokenizer.json loading (LoadTokenizer of a folder holding only tokenizer.json, which
// reads it with WordPieceTokenizer::FromTokenizerJson) on arbitrary bytes. Each tokenizer that
// loads encodes a fixed text through the checks of tokenizer_checks.h.
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

// BERT's special tokens, text the corpus vocabularies know, accents, CJK and an emoji, as a pair.
constexpr std::string_view kText =
    "[CLS] The capital [MASK] of France is Paris.[SEP] Tôi yêu 北京 🙂\0what is [UNK][PAD]"sv;

}  // namespace
}  // namespace attnscope::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string* const dir = [] {
    auto* made = new std::string(attnscope::fuzz::ScratchDir() + "/tokenizer_json");
    std::filesystem::create_directory(*made);
    return made;
  }();
  attnscope::fuzz::WriteFile(*dir + "/tokenizer.json", attnscope::fuzz::AsText(data, size));
  auto tokenizer = attnscope::LoadTokenizer(*dir);
  if (!tokenizer.ok()) {
    ATTNSCOPE_FUZZ_CHECK(tokenizer.status().code() == absl::StatusCode::kInvalidArgument,
                         tokenizer.status().ToString());
    return 0;
  }
  attnscope::fuzz::ExerciseTokenizer(**tokenizer, attnscope::fuzz::kText,
                                     /*tokens_are_vocabulary=*/true);
  return 0;
}

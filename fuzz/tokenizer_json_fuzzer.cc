// Hugging Face tokenizer.json loading (LoadTokenizer of a folder holding only tokenizer.json, which
// reads it with WordPieceTokenizer::FromTokenizerJson, BpeTokenizer::FromTokenizerJson or
// UnigramTokenizer::FromTokenizerJson) on arbitrary bytes. Each tokenizer that
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

// BERT's and RoBERTa's special tokens, text the corpus vocabularies know, accents (one in NFD),
// CJK, an emoji and runs of whitespace, as a pair.
constexpr std::string_view kText =
    "[CLS] The capital [MASK] of France is Paris.[SEP] Tôi yêu 北京 🙂  <mask> "
    "Vie\u0302\u0323t"
    "\0what is [UNK][PAD] I'LL 2026\n\n  </s>"sv;

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
  // A byte-level BPE token of an added token with lstrip or rstrip is the text it matched, spaces
  // included (" <mask>"), as the library shows it, not its vocabulary entry.
  attnscope::fuzz::ExerciseTokenizer(
      **tokenizer, attnscope::fuzz::kText,
      /*tokens_are_vocabulary=*/(*tokenizer)->kind() == attnscope::TokenizerKind::kWordPiece);
  return 0;
}

// The SentencePiece tokenizer on arbitrary bytes, with stories260K's real tokenizer.model (a
// 512-piece Llama 2 style model with byte fallback), once with LlamaTokenizerFast's defaults and
// once with BOS and EOS around every text and a 16-token model limit.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "fuzz/tokenizer_checks.h"
#include "models/tokenizers/sentencepiece_tokenizer.h"

namespace attnscope::fuzz {
namespace {

std::unique_ptr<SentencePieceTokenizer> Load(const SentencePieceOptions& options) {
  const std::string path = SharedDir() + "/models/stories260K/tokenizer.model";
  ReadFixture(path);  // exits naming the path when the fixture is missing
  auto tokenizer = SentencePieceTokenizer::Load(path, options);
  ATTNSCOPE_FUZZ_CHECK(tokenizer.ok(), tokenizer.status().ToString());
  return *std::move(tokenizer);
}

const std::vector<std::unique_ptr<SentencePieceTokenizer>>& Tokenizers() {
  static const auto* const tokenizers = [] {
    auto* made = new std::vector<std::unique_ptr<SentencePieceTokenizer>>;
    made->push_back(Load(SentencePieceOptions()));
    SentencePieceOptions both;
    both.add_eos_token = true;
    both.pad_token_id = 0;
    both.model_max_length = 16;
    made->push_back(Load(both));
    return made;
  }();
  return *tokenizers;
}

}  // namespace
}  // namespace attnscope::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  attnscope::fuzz::Tokenizers();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  for (const auto& tokenizer : attnscope::fuzz::Tokenizers()) {
    attnscope::fuzz::ExerciseTokenizer(*tokenizer, attnscope::fuzz::AsText(data, size),
                                       /*tokens_are_vocabulary=*/false);
  }
  return 0;
}

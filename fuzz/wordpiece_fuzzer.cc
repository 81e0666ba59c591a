// The WordPiece tokenizer on arbitrary bytes, with the real bert-base vocabularies: BERT's uncased
// and cased settings, plus one without text cleaning and Chinese-character splitting whose words
// longer than 8 characters become [UNK], and extra special tokens that overlap.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "fuzz/tokenizer_checks.h"
#include "models/tokenizers/wordpiece_tokenizer.h"

namespace attnscope::fuzz {
namespace {

std::unique_ptr<WordPieceTokenizer> Load(const char* vocab, WordPieceOptions options) {
  const std::string path = SharedDir() + "/vocab/" + vocab + "/vocab.txt";
  ReadFixture(path);  // exits naming the path when the fixture is missing
  auto tokenizer = WordPieceTokenizer::FromVocabFile(path, std::move(options));
  ATTNSCOPE_FUZZ_CHECK(tokenizer.ok(), tokenizer.status().ToString());
  return *std::move(tokenizer);
}

const std::vector<std::unique_ptr<WordPieceTokenizer>>& Tokenizers() {
  static const auto* const tokenizers = [] {
    auto* made = new std::vector<std::unique_ptr<WordPieceTokenizer>>;
    WordPieceOptions uncased;
    uncased.additional_special_tokens = {"<ent>", "<ent2>", "[MASK]x"};
    made->push_back(Load("bert-base-uncased", uncased));
    WordPieceOptions cased;
    cased.lowercase = false;
    made->push_back(Load("bert-base-cased", cased));
    WordPieceOptions raw;
    raw.clean_text = false;
    raw.handle_chinese_chars = false;
    raw.strip_accents = true;
    raw.max_input_chars_per_word = 8;
    raw.model_max_length = 16;
    made->push_back(Load("bert-base-uncased", raw));
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
                                       /*tokens_are_vocabulary=*/true);
  }
  return 0;
}

// What every tokenizer promises about its output (models/tokenizers/tokenizer.h), checked on
// whatever text a fuzz target makes: spans inside the text and on character boundaries, ids inside
// the vocabulary, truncation and padding as asked, errors only for invalid UTF-8 or budgets that
// cannot fit.
#ifndef ATTNSCOPE_FUZZ_TOKENIZER_CHECKS_H_
#define ATTNSCOPE_FUZZ_TOKENIZER_CHECKS_H_

#include <string_view>

#include "models/tokenizers/tokenizer.h"

namespace attnscope::fuzz {

// Tokenizes `input`, encodes it alone and, when it holds a NUL byte, as the pair of the text
// before and after that byte, with options derived from the input's length (so that one input
// always replays the same calls), decodes the ids back, and aborts on any broken promise.
// `tokens_are_vocabulary`: every token string is IdToToken of its id (WordPiece; SentencePiece
// reports unknown pieces by their text instead).
void ExerciseTokenizer(const Tokenizer& tokenizer, std::string_view input,
                       bool tokens_are_vocabulary);

}  // namespace attnscope::fuzz

#endif  // ATTNSCOPE_FUZZ_TOKENIZER_CHECKS_H_

// bert-base-uncased's tokenizer.json (BertNormalizer, BertPreTokenizer, WordPiece and BERT's
// template, as make_tokenizer_json.py writes it from the vocabulary) read by LoadTokenizer, against
// Hugging Face tokenizers' own output on every text of the multilingual corpus
// (tokenizer_json_goldens.h): its decomposed Vietnamese and its control and format characters show
// where the offsets of the characters the normalizer drops go. Decode is compared as transformers'
// BertTokenizerFast.decode gives it, the library's decoder then transformers' clean-up. MPNet's
// layout of the same vocabulary (<s> <pad> </s> <unk> before it, <mask> after, [UNK] for unknown
// words, <s> A </s> </s> B </s>) the same way: its specials are not BERT's bracketed ones.
#include "gtest/gtest.h"
#include "models/tokenizers/tokenizer.h"
#include "tests/unit/tokenizers/tokenizer_json_goldens.h"

namespace attnscope {
namespace {

TEST(TokenizerJsonWordPieceTest, BertBaseUncasedMatchesTheLibraryOnEveryCorpusLine) {
  ::attnscope::testing::ExpectMatchesTheLibraryOnEveryCorpusLine(
      "bert-base-uncased", TokenizerKind::kWordPiece, ::attnscope::testing::TransformersCleanUp);
}

TEST(TokenizerJsonWordPieceTest, MpnetMatchesTheLibraryOnEveryCorpusLine) {
  ::attnscope::testing::ExpectMatchesTheLibraryOnEveryCorpusLine(
      "mpnet", TokenizerKind::kWordPiece, ::attnscope::testing::TransformersCleanUp);
}

}  // namespace
}  // namespace attnscope

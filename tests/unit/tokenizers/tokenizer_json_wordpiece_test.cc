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

// BertNormalizer's clean_text removes the characters of the library's is_control, general
// category Cc, Cf, Co or Cs in its tables: never an unassigned code point (UnicodeData.txt lists
// none as Cn), nor one assigned after its tables' Unicode version. Expected: the library's
// encoding of this text (tokenizers 0.23.2, make_all.sh's node_modules).
TEST(TokenizerJsonWordPieceTest, UnassignedCodePointsStayAsTheLibraryKeepsThem) {
  ::attnscope::testing::ExpectEncodes("bert-base-uncased", "a\u0378 \uFFFE b\U0001FA89 \U0010FFFFc",
                                      {"[CLS]", "[UNK]", "[UNK]", "[UNK]", "[UNK]", "[SEP]"},
                                      {{0, 0}, {0, 2}, {3, 4}, {5, 7}, {8, 10}, {0, 0}});
}

}  // namespace
}  // namespace attnscope

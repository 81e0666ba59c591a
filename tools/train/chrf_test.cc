// chrF against values worked out by hand from the definition (see chrf.h).
#include "tools/train/chrf.h"

#include "gtest/gtest.h"

namespace attnscope::train {
namespace {

double Chrf(std::string_view hypothesis, std::string_view reference) {
  ChrfScorer scorer;
  EXPECT_TRUE(scorer.Add(hypothesis, reference).ok());
  return scorer.Score();
}

TEST(ChrfTest, IdenticalTextsScore100AndWhitespaceDoesNotCount) {
  EXPECT_DOUBLE_EQ(Chrf("Chèn bảng", "Chèn bảng"), 100);
  EXPECT_DOUBLE_EQ(Chrf("a b\tc", "abc"), 100);
  EXPECT_DOUBLE_EQ(Chrf("xyz", "abc"), 0);
}

TEST(ChrfTest, PrecisionAndRecallAveragedOverTheOrdersBothSidesHave) {
  // "abc" against "abd": unigrams 2 of 3 match, bigrams 1 of 2 (ab), the trigram none; orders
  // 4-6 exist on neither side. Precision = recall = (2/3 + 1/2 + 0) / 3 = 7/18.
  EXPECT_NEAR(Chrf("abc", "abd"), 100.0 * 7 / 18, 1e-12);
  // "a" against "ab": unigram precision 1, recall 1/2; bigrams only in the reference, so that
  // order is left out. F2 = 5 * 1 * 0.5 / (4 * 1 + 0.5) = 5/9.
  EXPECT_NEAR(Chrf("a", "ab"), 100.0 * 5 / 9, 1e-12);
  // The other way round recall is 1, precision 1/2: F2 = 5 * 0.5 / (4 * 0.5 + 1) = 5/6; recall
  // weighs more.
  EXPECT_NEAR(Chrf("ab", "a"), 100.0 * 5 / 6, 1e-12);
}

TEST(ChrfTest, CodePointsNotBytesAndCountsClipped) {
  // "한" is three bytes but one character: "한한" against "한" has unigram precision 1/2 (the
  // second "한" is not matched twice), recall 1; the bigram is missing from the reference.
  EXPECT_NEAR(Chrf("한한", "한"), 100.0 * 5 / 6, 1e-12);
}

TEST(ChrfTest, CorpusScoreSumsCountsBeforeDividing) {
  // "a"/"a" and "b"/"c": unigrams 1 match of 2 on each side, 50. With "ab"/"ab" too: unigrams 3
  // of 4 and bigrams 1 of 1, (3/4 + 1) / 2 = 7/8, where the mean of the three sentence scores
  // would be 200/3.
  ChrfScorer scorer;
  ASSERT_TRUE(scorer.Add("a", "a").ok());
  ASSERT_TRUE(scorer.Add("b", "c").ok());
  EXPECT_DOUBLE_EQ(scorer.Score(), 50);
  ASSERT_TRUE(scorer.Add("ab", "ab").ok());
  EXPECT_NEAR(scorer.Score(), 100.0 * 7 / 8, 1e-12);
}

TEST(ChrfTest, MatchesSacreBleuOnItsDocumentedExamples) {
  // The examples of the chrF metric card of Hugging Face datasets (metrics/chrf/README.md),
  // whose scores sacreBLEU's CHRF() computed.
  EXPECT_NEAR(Chrf("The relationship between Obama and Netanyahu is not exactly friendly.",
                   "The ties between Obama and Netanyahu are not particularly friendly."),
              61.576379378113785, 1e-9);
  ChrfScorer scorer;
  ASSERT_TRUE(scorer
                  .Add("The relationship between cats and dogs is not exactly friendly.",
                       "The relationship between dogs and cats is not exactly friendly.")
                  .ok());
  ASSERT_TRUE(scorer
                  .Add("a good bookshop is just a genteel black hole that knows how to read.",
                       "A good bookshop is just a genteel Black Hole that knows how to read.")
                  .ok());
  EXPECT_NEAR(scorer.Score(), 84.64214891738334, 1e-9);
}

TEST(ChrfTest, InvalidUtf8IsRefused) {
  ChrfScorer scorer;
  EXPECT_EQ(scorer.Add("\xff", "a").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_DOUBLE_EQ(scorer.Score(), 0);
}

}  // namespace
}  // namespace attnscope::train

// PlanStreamPieces: how StreamAttention cuts a layer's [head, query, key] slice into messages.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "server/proto_convert.h"

namespace attnscope::server {
namespace {

// Every element of the slice once, in row-major order, each piece one contiguous run.
void ExpectTilesInOrder(const std::vector<StreamPiece>& pieces, int64_t heads, int64_t rows) {
  int64_t next = 0;
  for (const StreamPiece& piece : pieces) {
    EXPECT_EQ(piece.head_offset * rows + piece.query_offset, next);
    EXPECT_TRUE(piece.rows == rows || piece.heads == 1) << "not contiguous";
    next += piece.heads * piece.rows;
  }
  EXPECT_EQ(next, heads * rows);
}

TEST(StreamPiecesTest, ALayerThatFitsIsOnePiece) {
  const std::vector<StreamPiece> pieces = PlanStreamPieces(12, 128, 512, 1 << 20);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].heads, 12);
  EXPECT_EQ(pieces[0].rows, 128);
}

TEST(StreamPiecesTest, ALargerLayerIsCutIntoWholeHeads) {
  // 300 rows of 2 KB: 600 KB per head, one head per 1 MiB piece; 5 heads in 2 MB pieces.
  std::vector<StreamPiece> pieces = PlanStreamPieces(12, 300, 2048, 1 << 20);
  ASSERT_EQ(pieces.size(), 12u);
  ExpectTilesInOrder(pieces, 12, 300);
  pieces = PlanStreamPieces(12, 300, 2048, 3 << 20);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].heads, 5);
  EXPECT_EQ(pieces[2].heads, 2);
  ExpectTilesInOrder(pieces, 12, 300);
}

TEST(StreamPiecesTest, AHeadOverTheBoundIsCutIntoRows) {
  // 512 rows of 4 KB (float32 attentions and scores): 2 MiB per head, 256 rows per piece.
  const std::vector<StreamPiece> pieces = PlanStreamPieces(12, 512, 4096, 1 << 20);
  ASSERT_EQ(pieces.size(), 24u);
  for (const StreamPiece& piece : pieces) {
    EXPECT_EQ(piece.heads, 1);
    EXPECT_EQ(piece.rows, 256);
  }
  ExpectTilesInOrder(pieces, 12, 512);
}

TEST(StreamPiecesTest, ARowOverTheBoundStillTravels) {
  const std::vector<StreamPiece> pieces = PlanStreamPieces(2, 3, 5000, 1000);
  ASSERT_EQ(pieces.size(), 6u);
  ExpectTilesInOrder(pieces, 2, 3);
}

}  // namespace
}  // namespace attnscope::server

// BlockClaims and ParallelClaims (models/kernels/parallel.h): every index claimed exactly once, in
// order, in blocks of the grain, and shorter blocks near the end when a tail grain is given.
#include "models/kernels/parallel.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

namespace attnscope {
namespace {

std::vector<std::pair<int64_t, int64_t>> ClaimAll(BlockClaims& claims) {
  std::vector<std::pair<int64_t, int64_t>> blocks;
  int64_t begin = 0;
  int64_t end = 0;
  while (claims.Next(&begin, &end)) blocks.emplace_back(begin, end);
  return blocks;
}

TEST(BlockClaimsTest, FixedGrainGivesWholeBlocksAndAShortLastOne) {
  BlockClaims claims(/*n=*/100, /*grain=*/48);
  EXPECT_EQ(ClaimAll(claims),
            (std::vector<std::pair<int64_t, int64_t>>{{0, 48}, {48, 96}, {96, 100}}));
}

TEST(BlockClaimsTest, TailGrainShortensTheBlocksNearTheEnd) {
  // 768 columns, blocks of 48, two threads: a block is at most a quarter of what is left, rounded
  // up to 12, once that is under 48.
  BlockClaims claims(/*n=*/768, /*grain=*/48, /*tail_grain=*/12, /*threads=*/2);
  const std::vector<std::pair<int64_t, int64_t>> blocks = ClaimAll(claims);
  std::vector<int64_t> sizes;
  int64_t next = 0;
  for (const auto& [begin, end] : blocks) {
    EXPECT_EQ(begin, next);
    sizes.push_back(end - begin);
    next = end;
  }
  EXPECT_EQ(next, 768);
  // Left 192: 48; 144: 36; 108: 36 (27 rounded up); 72: 24 (18); 48: 12; 36: 12; 24: 12; 12: 12.
  const std::vector<int64_t> tail(sizes.end() - 8, sizes.end());
  EXPECT_EQ(tail, (std::vector<int64_t>{48, 36, 36, 24, 12, 12, 12, 12}));
  for (size_t i = 0; i + 8 < sizes.size(); ++i) EXPECT_EQ(sizes[i], 48) << "block " << i;
}

TEST(BlockClaimsTest, TailGrainNeverGoesPastTheEnd) {
  BlockClaims claims(/*n=*/7, /*grain=*/48, /*tail_grain=*/12, /*threads=*/2);
  EXPECT_EQ(ClaimAll(claims), (std::vector<std::pair<int64_t, int64_t>>{{0, 7}}));
}

TEST(ParallelClaimsTest, EveryIndexIsClaimedOnceAcrossThreads) {
  at::set_num_threads(2);
  for (const int64_t tail_grain : {0, 12}) {
    std::vector<int> claimed(1000, 0);
    std::mutex mutex;
    ParallelClaims(
        /*n=*/1000, /*grain=*/48,
        [&](BlockClaims& claims) {
          int64_t begin = 0;
          int64_t end = 0;
          while (claims.Next(&begin, &end)) {
            std::lock_guard<std::mutex> lock(mutex);
            for (int64_t i = begin; i < end; ++i) ++claimed[static_cast<size_t>(i)];
          }
        },
        tail_grain);
    for (size_t i = 0; i < claimed.size(); ++i) {
      ASSERT_EQ(claimed[i], 1) << "index " << i << ", tail grain " << tail_grain;
    }
  }
}

}  // namespace
}  // namespace attnscope

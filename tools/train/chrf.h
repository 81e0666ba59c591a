// chrF (Popović 2015, "chrF: character n-gram F-score for automatic MT evaluation"), computed as
// sacreBLEU's CHRF with its defaults (chrF2): character n-grams of orders 1 to 6 over each text
// with its whitespace removed, counts summed over the whole corpus, precision and recall averaged
// over the orders that occur on both sides, then F-beta with beta 2 (recall weighs twice as much
// as precision), times 100.
#ifndef ATTNSCOPE_TOOLS_TRAIN_CHRF_H_
#define ATTNSCOPE_TOOLS_TRAIN_CHRF_H_

#include <array>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace attnscope::train {

class ChrfScorer {
 public:
  static constexpr int kOrder = 6;
  static constexpr double kBeta = 2.0;

  // Adds one hypothesis and its reference (UTF-8; n-grams are of Unicode code points, as Python
  // strings, with White_Space characters removed as str.split() does). InvalidArgument: invalid
  // UTF-8, naming the side and the byte offset.
  absl::Status Add(std::string_view hypothesis, std::string_view reference);

  // The corpus chrF in [0, 100]; 0 before anything was added.
  double Score() const;

 private:
  struct Counts {
    int64_t hypothesis = 0;
    int64_t reference = 0;
    int64_t matches = 0;
  };
  std::array<Counts, kOrder> counts_;
};

}  // namespace attnscope::train

#endif  // ATTNSCOPE_TOOLS_TRAIN_CHRF_H_

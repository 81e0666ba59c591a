// Timing and flag helpers shared by the benchmark tools.
#ifndef ATTNSCOPE_BENCH_BENCH_UTIL_H_
#define ATTNSCOPE_BENCH_BENCH_UTIL_H_

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace attnscope::bench {

inline double Seconds(std::chrono::steady_clock::duration duration) {
  return std::chrono::duration<double>(duration).count();
}

inline double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Parses "--flag value" pairs, calling the setter registered for each flag. Returns false (after
// printing the flag) for an unknown flag or a missing value.
inline bool ParseFlags(int argc, char** argv,
                       const std::map<std::string, std::function<void(const std::string&)>>& setters) {
  for (int i = 1; i < argc; i += 2) {
    auto it = setters.find(argv[i]);
    if (it == setters.end() || i + 1 >= argc) {
      std::fprintf(stderr, "unknown flag or missing value: %s\n", argv[i]);
      return false;
    }
    it->second(argv[i + 1]);
  }
  return true;
}

}  // namespace attnscope::bench

#endif  // ATTNSCOPE_BENCH_BENCH_UTIL_H_

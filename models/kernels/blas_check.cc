#include "models/kernels/blas_check.h"

#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>

namespace attnscope {

double MeasureMatmulGflops(int64_t n, int repeats) {
  torch::InferenceMode guard;
  torch::manual_seed(0);
  torch::Tensor a = torch::randn({n, n});
  torch::Tensor b = torch::randn({n, n});
  torch::Tensor c = torch::mm(a, b);
  double best_seconds = 1e30;
  for (int i = 0; i < std::max(repeats, 1); ++i) {
    const auto start = std::chrono::steady_clock::now();
    torch::mm_out(c, a, b);
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    best_seconds = std::min(best_seconds, elapsed.count());
  }
  const double flops =
      2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  return flops / best_seconds / 1e9;
}

double CheckBlasSpeedOnce() {
  static std::once_flag once;
  static double gflops = 0;
  std::call_once(once, [] {
    gflops = MeasureMatmulGflops(/*n=*/768, /*repeats=*/5);
    if (gflops < kMinExpectedGflops) {
      std::fprintf(stderr,
                   "WARNING: float32 matmul runs at %.1f GFLOP/s, expected at least %.0f: LibTorch "
                   "is on the reference BLAS and every request will be very slow. Install "
                   "libopenblas0-pthread (scripts/install-deps.sh does) so that libblas.so.3 "
                   "points to OpenBLAS.\n",
                   gflops, kMinExpectedGflops);
    } else {
      std::fprintf(stderr, "attnscope: float32 matmul (768x768) at %.1f GFLOP/s\n", gflops);
    }
  });
  return gflops;
}

}  // namespace attnscope

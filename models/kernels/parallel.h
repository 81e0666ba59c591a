// Work shared out on LibTorch's intra-op threads a block at a time, for the regions of a forward
// pass whose threads would otherwise each take a fixed share.
//
// Why: at::parallel_for gives each thread an equal contiguous share, so a region lasts as long as
// its slowest thread. The cores of a virtual machine are not equal: on this project's 2-core VM
// (AMD EPYC, Zen 5) one vCPU ran the row kernel at 228 GFLOP/s and the other at 150-164 GFLOP/s
// at the same time, alone or together, and a thread also starts late when it has to be woken
// (OMP_WAIT_POLICY=PASSIVE). Handing out small blocks in order, each to whichever thread is free,
// lets the faster thread take more of them (a work queue, as ONNX Runtime's thread pool and
// OpenMP's schedule(dynamic) do).
#ifndef ATTNSCOPE_MODELS_KERNELS_PARALLEL_H_
#define ATTNSCOPE_MODELS_KERNELS_PARALLEL_H_

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace attnscope {

// Blocks of [0, n) handed out in order to the threads that ask, each block once: `grain` long, or
// with a `tail_grain` below `grain`, shorter near the end (as OpenMP's schedule(guided)): a block
// is then at most a 1 / (2 * threads) share of what is left, rounded up to a multiple of
// tail_grain, so the threads finish within a short block of each other. Thread-safe.
class BlockClaims {
 public:
  BlockClaims(int64_t n, int64_t grain, int64_t tail_grain = 0, int64_t threads = 1)
      : n_(n),
        grain_(std::max<int64_t>(1, grain)),
        tail_grain_(tail_grain > 0 ? std::min(tail_grain, grain_) : grain_),
        shares_(2 * std::max<int64_t>(1, threads)) {}

  // Sets [*begin, *end) to the next unclaimed block; false when every block has been claimed.
  bool Next(int64_t* begin, int64_t* end) {
    int64_t first = next_.load(std::memory_order_relaxed);
    int64_t size = grain_;
    do {
      if (first >= n_) return false;
      if (tail_grain_ < grain_) {
        const int64_t share = (n_ - first + shares_ - 1) / shares_;
        size =
            std::clamp((share + tail_grain_ - 1) / tail_grain_ * tail_grain_, tail_grain_, grain_);
      }
    } while (!next_.compare_exchange_weak(first, first + size, std::memory_order_relaxed));
    *begin = first;
    *end = std::min(n_, first + size);
    return true;
  }

 private:
  const int64_t n_;
  const int64_t grain_;
  const int64_t tail_grain_;
  const int64_t shares_;
  std::atomic<int64_t> next_{0};
};

// Calls worker(claims) once on each of LibTorch's intra-op threads, all drawing on one BlockClaims
// over [0, n) in blocks of `grain` (shorter near the end down to `tail_grain`, if given); a worker
// sets up what its thread needs (scratch, a packed input) once and then takes blocks until none is
// left. Runs worker once on the calling thread when there is one thread, inside a parallel region,
// or when [0, n) is one block. An exception from a worker propagates to the caller (as from
// at::parallel_for).
template <typename Worker>
void ParallelClaims(int64_t n, int64_t grain, const Worker& worker, int64_t tail_grain = 0) {
  const int64_t threads = at::get_num_threads();
  BlockClaims claims(n, grain, tail_grain, threads);
  if (threads == 1 || at::in_parallel_region() || n <= grain) {
    worker(claims);
    return;
  }
  at::parallel_for(0, threads, /*grain_size=*/1, [&](int64_t, int64_t) { worker(claims); });
}

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_KERNELS_PARALLEL_H_

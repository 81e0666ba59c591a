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

// The blocks [0, grain), [grain, 2 * grain), ... of [0, n), handed out in order to the threads
// that ask, each block once. Thread-safe.
class BlockClaims {
 public:
  BlockClaims(int64_t n, int64_t grain) : n_(n), grain_(std::max<int64_t>(1, grain)) {}

  // Sets [*begin, *end) to the next unclaimed block; false when every block has been claimed.
  bool Next(int64_t* begin, int64_t* end) {
    const int64_t first = next_.fetch_add(grain_, std::memory_order_relaxed);
    if (first >= n_) return false;
    *begin = first;
    *end = std::min(n_, first + grain_);
    return true;
  }

 private:
  const int64_t n_;
  const int64_t grain_;
  std::atomic<int64_t> next_{0};
};

// Calls worker(claims) once on each of LibTorch's intra-op threads, all drawing on one BlockClaims
// over [0, n) in blocks of `grain`; a worker sets up what its thread needs (scratch, a packed
// input) once and then takes blocks until none is left. Runs worker once on the calling thread
// when there is one thread, inside a parallel region, or when [0, n) is one block. An exception
// from a worker propagates to the caller (as from at::parallel_for).
template <typename Worker>
void ParallelClaims(int64_t n, int64_t grain, const Worker& worker) {
  BlockClaims claims(n, grain);
  const int64_t threads = at::get_num_threads();
  if (threads == 1 || at::in_parallel_region() || n <= grain) {
    worker(claims);
    return;
  }
  at::parallel_for(0, threads, /*grain_size=*/1, [&](int64_t, int64_t) { worker(claims); });
}

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_KERNELS_PARALLEL_H_

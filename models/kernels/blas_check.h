// Start-up check that LibTorch's matrix multiply runs on a fast BLAS. Debian's libtorch falls back
// to the reference BLAS (libblas3) unless libopenblas0-pthread provides libblas.so.3, which makes
// every GEMM about 60 times slower on a 2-core machine.
#ifndef ATTNSCOPE_MODELS_BLAS_CHECK_H_
#define ATTNSCOPE_MODELS_BLAS_CHECK_H_

#include <cstdint>
#include <string>

namespace attnscope {

// Below this a 768x768 float32 matmul is on the reference BLAS (about 2-3 GFLOP/s here), not
// OpenBLAS (about 150 GFLOP/s).
constexpr double kMinExpectedGflops = 50.0;

// Measured float32 GEMM rate in GFLOP/s: the best of `repeats` timed torch::mm calls of n x n
// matrices after a warm-up call. Takes a few milliseconds on a fast BLAS.
double MeasureMatmulGflops(int64_t n, int repeats);

// The file of the libblas.so.3 this process has loaded, symbolic links resolved (Debian's
// alternatives: .../openblas-pthread/libblas.so.3 for OpenBLAS, .../blas/libblas.so.3 for the
// reference BLAS), or "" when none is loaded.
std::string LoadedBlasLibrary();

// Measures a 768x768 matmul once per process and writes the rate to stderr. Under
// kMinExpectedGflops it warns: with the fix (install libopenblas0-pthread) when the loaded
// libblas.so.3 is not OpenBLAS, and otherwise that the CPU is busy or capped, since a timing alone
// cannot tell a slow library from a shared CPU. Returns the rate.
double CheckBlasSpeedOnce();

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_BLAS_CHECK_H_

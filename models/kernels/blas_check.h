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

// The core OpenBLAS chose for this CPU at load time (openblas_get_corename(), e.g. "SkylakeX",
// "Haswell", "Zen"), or "" when no OpenBLAS is loaded.
std::string OpenBlasCoreName();

// The OPENBLAS_CORETYPE that undoes OpenBLAS's fall-back on a CPU it does not recognise, or ""
// when none is needed. OpenBLAS 0.3.21 (Debian 12) takes CPUs newer than it for its oldest x86-64
// core: on an Intel Xeon of family 6 model 207 (Emerald Rapids) it picks "Prescott", SSE3
// kernels, and LibTorch's float32 products (T5, BART and Marian layers, language-model heads)
// ran at 88 GFLOP/s on two cores instead of 387 with "SkylakeX" (2026-12-07). So: a core without
// AVX2 kernels (`core_name` one of Prescott, Core2, Penryn, Dunnington, Nehalem, Atom, Sandybridge,
// the generic ones or AMD's before Bulldozer) on a CPU with AVX2 and FMA gives "SkylakeX" where the
// CPU has AVX-512 F, CD, BW, DQ and VL, else "Haswell"; any other core is left as OpenBLAS chose
// it.
std::string OpenBlasCoreTypeFor(const std::string& core_name, bool has_avx2_fma,
                                bool has_avx512_skylake);

// OpenBlasCoreTypeFor this process's OpenBLAS core and CPU, or "" when OPENBLAS_CORETYPE is
// already set or no OpenBLAS is loaded. OpenBLAS reads OPENBLAS_CORETYPE once, when it is loaded:
// ReexecWithRuntimeEnvironment (gemm.h) sets it and re-executes.
std::string OpenBlasCoreTypeOverride();

// Measures a 768x768 matmul once per process and writes the rate to stderr. Under
// kMinExpectedGflops it warns: with the fix (install libopenblas0-pthread) when the loaded
// libblas.so.3 is not OpenBLAS; naming the core and what to set when OpenBLAS runs kernels made for
// older CPUs (an OPENBLAS_CORETYPE set by hand); and otherwise that the CPU is busy or capped,
// since a timing alone cannot tell a slow library from a shared CPU. Returns the rate.
double CheckBlasSpeedOnce();

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_BLAS_CHECK_H_

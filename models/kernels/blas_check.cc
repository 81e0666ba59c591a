#include "models/kernels/blas_check.h"

#include <dlfcn.h>
#include <link.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>

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

std::string LoadedBlasLibrary() {
  std::string loaded;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        if (info->dlpi_name == nullptr || std::strstr(info->dlpi_name, "/libblas.so") == nullptr) {
          return 0;
        }
        *static_cast<std::string*>(data) = info->dlpi_name;
        return 1;
      },
      &loaded);
  if (loaded.empty()) return loaded;
  std::error_code error;
  const std::filesystem::path resolved = std::filesystem::canonical(loaded, error);
  return error ? loaded : resolved.string();
}

std::string OpenBlasCoreName() {
  using CoreNameFn = char* (*)();
  const auto core_name = reinterpret_cast<CoreNameFn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (core_name == nullptr) return "";
  const char* name = core_name();
  return name != nullptr ? name : "";
}

std::string OpenBlasCoreTypeFor(const std::string& core_name, bool has_avx2_fma,
                                bool has_avx512_skylake) {
  // The cores OpenBLAS's dynamic x86-64 build falls back to: none has AVX2 kernels.
  static constexpr std::array<const char*, 15> kFallbackCores = {
      "Prescott", "Core2",       "Penryn",  "Dunnington", "Nehalem",
      "Atom",     "Sandybridge", "Unknown", "generic",    "Opteron_SSE3",
      "Opteron",  "Athlon",      "Bobcat",  "Barcelona",  "Nano"};
  const bool fell_back = std::any_of(kFallbackCores.begin(), kFallbackCores.end(),
                                     [&](const char* core) { return core_name == core; });
  if (!fell_back || !has_avx2_fma) return "";
  return has_avx512_skylake ? "SkylakeX" : "Haswell";
}

namespace {

// OpenBlasCoreTypeFor `core` on this CPU.
std::string CoreTypeForThisCpu(const std::string& core) {
  if (core.empty()) return "";
  __builtin_cpu_init();
  const bool has_avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool has_avx512_skylake =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl");
  return OpenBlasCoreTypeFor(core, has_avx2_fma, has_avx512_skylake);
}

}  // namespace

std::string OpenBlasCoreTypeOverride() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return "";
  return CoreTypeForThisCpu(OpenBlasCoreName());
}

double CheckBlasSpeedOnce() {
  static std::once_flag once;
  static double gflops = 0;
  std::call_once(once, [] {
    gflops = MeasureMatmulGflops(/*n=*/768, /*repeats=*/5);
    const std::string core = OpenBlasCoreName();
    // Kernels older than the CPU are worth a warning at any speed: only an OPENBLAS_CORETYPE set
    // by hand keeps them (ReexecWithRuntimeEnvironment replaces OpenBLAS's own fall-back).
    const std::string better = CoreTypeForThisCpu(core);
    if (!better.empty()) {
      const char* core_type = std::getenv("OPENBLAS_CORETYPE");
      std::fprintf(stderr,
                   "WARNING: float32 matmul (768x768) runs at %.1f GFLOP/s on OpenBLAS's '%s' "
                   "kernels, made for older CPUs than this one%s%s%s: unset OPENBLAS_CORETYPE or "
                   "set it to %s.\n",
                   gflops, core.c_str(), core_type != nullptr ? " (OPENBLAS_CORETYPE=" : "",
                   core_type != nullptr ? core_type : "", core_type != nullptr ? ")" : "",
                   better.c_str());
      return;
    }
    if (gflops >= kMinExpectedGflops) {
      std::fprintf(stderr, "attnscope: float32 matmul (768x768) at %.1f GFLOP/s%s\n", gflops,
                   core.empty() ? "" : (" (OpenBLAS core " + core + ")").c_str());
      return;
    }
    const std::string library = LoadedBlasLibrary();
    if (library.find("openblas") != std::string::npos) {
      std::fprintf(stderr,
                   "WARNING: float32 matmul runs at %.1f GFLOP/s, expected at least %.0f, on "
                   "OpenBLAS (%s, core %s): the CPU is busy with other work or capped (a "
                   "container's CPU limit), and requests will be slower than this machine "
                   "allows.\n",
                   gflops, kMinExpectedGflops, library.c_str(), core.c_str());
    } else {
      std::fprintf(stderr,
                   "WARNING: float32 matmul runs at %.1f GFLOP/s, expected at least %.0f: LibTorch "
                   "is on %s, not OpenBLAS, and every request will be very slow. Install "
                   "libopenblas0-pthread (scripts/install-deps.sh does) so that libblas.so.3 "
                   "points to OpenBLAS.\n",
                   gflops, kMinExpectedGflops,
                   library.empty() ? "no libblas.so.3" : ("'" + library + "'").c_str());
    }
  });
  return gflops;
}

}  // namespace attnscope

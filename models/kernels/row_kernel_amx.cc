// The row kernel's bfloat16 products on AMX (row_kernel_isa.h): Intel's tile registers and
// TDPBF16PS, where the CPU has them (Sapphire Rapids and later). On an Intel Xeon of family 6
// model 207 (Emerald Rapids) the AVX512_BF16 kernel ran BERT-base's bfloat16 forward in 1.7 times
// float32's time, as VDPBF16PS multiplies no faster than float32's FMAs there; one TDPBF16PS
// multiplies a 16 x 32 block of weights with 32 x 16 inputs.
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

#include "models/kernels/fused_ops.h"
#include "models/kernels/row_kernel_isa.h"

namespace attnscope::row_kernel_internal {
namespace {

// Linux's permission request for a process's AMX tile data (arch/x86/include/uapi/asm/prctl.h,
// Documentation/arch/x86/xstate.rst): without it the first tile instruction faults.
constexpr int kArchRequestXcompPermission = 0x1023;
constexpr int kXfeatureTileData = 18;

// LDTILECFG's 64-byte operand (Intel SDM, "Tile Configuration"), palette 1: eight tiles of 16
// rows of 64 bytes each.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

const TileConfig kTileConfig;

}  // namespace

#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16,avx512f")
namespace on_amx {

bool Available() {
  static const bool available = [] {
    if (DisabledByEnvironment("ATTNSCOPE_DISABLE_AMX") || !HasAvx512()) return false;
    if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16")) return false;
    return syscall(SYS_arch_prctl, kArchRequestXcompPermission, kXfeatureTileData) == 0;
  }();
  return available;
}

// Tiles: sums 0-3 ([rows 0-15 | 16-31] x [tokens 0-15 | 16-31]), weights 4-5 (16 rows x 32
// inputs each), inputs 6-7 (16 pairs x 16 tokens each).
void Multiply32x32(const uint16_t* weight, int64_t in, int64_t depth, const uint32_t* packed,
                   float* sums, int64_t sums_stride, bool accumulate, const uint16_t* prefetch) {
  // The configuration is per thread and other code on the thread may use the tiles too: loaded
  // for each call, as oneDNN's AMX kernels do for each of theirs.
  _tile_loadconfig(&kTileConfig);
  const int64_t sums_bytes = sums_stride * static_cast<int64_t>(sizeof(float));
  float* lower = sums + 16 * sums_stride;
  if (accumulate) {
    _tile_loadd(0, sums, sums_bytes);
    _tile_loadd(1, sums + 16, sums_bytes);
    _tile_loadd(2, lower, sums_bytes);
    _tile_loadd(3, lower + 16, sums_bytes);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  const int64_t weight_bytes = in * static_cast<int64_t>(sizeof(uint16_t));
  constexpr int64_t kPairBytes = kTileTokens * sizeof(uint32_t);
  for (int64_t k = 0; k < depth; k += 32) {
    if (prefetch != nullptr) {
      // The next call's weight rows come from memory: one line of each per step.
      for (int i = 0; i < 32; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(prefetch + i * in + k), _MM_HINT_T1);
      }
    }
    _tile_loadd(4, weight + k, weight_bytes);
    _tile_loadd(5, weight + 16 * in + k, weight_bytes);
    _tile_loadd(6, packed + k / 2 * kTileTokens, kPairBytes);
    _tile_loadd(7, packed + k / 2 * kTileTokens + 16, kPairBytes);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, sums, sums_bytes);
  _tile_stored(1, sums + 16, sums_bytes);
  _tile_stored(2, lower, sums_bytes);
  _tile_stored(3, lower + 16, sums_bytes);
  _tile_release();
}

}  // namespace on_amx
#pragma GCC pop_options

}  // namespace attnscope::row_kernel_internal

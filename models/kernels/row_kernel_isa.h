// The halves of the row kernel (row_kernel.h) for each instruction set, which row_kernel.cc's
// driver calls: row_kernel_avx512.cc (AVX-512, and AVX512_BF16 for bfloat16 weights) and
// row_kernel_avx2.cc (AVX2 and FMA), each compiled for its own instructions and called only after
// the runtime check (HasAvx512(), HasAvx2()). Internal to models/kernels.
#ifndef ATTNSCOPE_MODELS_ROW_KERNEL_ISA_H_
#define ATTNSCOPE_MODELS_ROW_KERNEL_ISA_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "models/kernels/row_kernel.h"

namespace attnscope::row_kernel_internal {

constexpr int64_t kTileTokens = 64;   // tokens per tile of the transposed input
constexpr int kWeightRows = 6;        // weight rows per kernel call
constexpr int64_t kDepthBlock = 256;  // inputs summed in registers before joining the total

// The signature of every float32 kernel instance (Kernel in on_avx512 and on_avx2):
// sums[i][vector j] (+)= sum over k < depth of weight[i * in + k] * tokens[k][vector j] for a
// group's weight rows and vectors of tokens, tokens[k] at packed + k * packed_stride, prefetching
// the rows at `prefetch` (row stride `in`; none if nullptr) into L2 as it goes.
using Float32KernelFn = void (*)(const float* weight, int64_t in, int64_t depth,
                                 const float* packed, int64_t packed_stride, float* sums,
                                 int64_t sums_stride, bool accumulate, const float* prefetch);

// table[nr - 1][tv - 1] = Instance<nr, tv>::kFn for up to kWeightRows weight rows and TV vectors
// of tokens: the kernel instance for a group's actual shape (the last rows of a share and the last
// tile may be smaller), looked up at run time.
template <template <int, int> class Instance, int NR, int... TV>
constexpr auto KernelRow(std::integer_sequence<int, TV...>) {
  return std::array{Instance<NR, TV + 1>::kFn...};
}

template <template <int, int> class Instance, int TV, int... NR>
constexpr auto KernelTable(std::integer_sequence<int, NR...>) {
  return std::array{KernelRow<Instance, NR + 1>(std::make_integer_sequence<int, TV>{})...};
}

template <template <int, int> class Instance, int TV>
auto KernelFor(int weight_rows, int tile_vectors) {
  static constexpr auto kTable =
      KernelTable<Instance, TV>(std::make_integer_sequence<int, kWeightRows>{});
  return kTable[weight_rows - 1][tile_vectors - 1];
}

// RowKernelLinearBf16's kernel instances: sums[i][vector j] (+)= sum over k < depth of
// weight[i * in + k] * x[k][vector j] on bfloat16 pairs (packed: [depth / 2][kTileTokens] uint32),
// prefetching as Float32KernelFn.
using Bf16KernelFn = void (*)(const uint16_t* weight, int64_t in, int64_t depth,
                              const uint32_t* packed, float* sums, int64_t sums_stride,
                              bool accumulate, const uint16_t* prefetch);

// Every function below takes the layouts of row_kernel.cc's workspace: packed[tile][k][j] =
// x[tile * kTileTokens + j][first + k], sums [columns][padded tokens].
namespace on_avx512 {

// packed[tile][k][j] = x[tile * kTileTokens + j][first + k] for k < depth, zero for rows past
// `rows` (up to the next multiple of 16).
void PackInput(const float* x, int64_t rows, int64_t in, int64_t first, int64_t depth,
               float* packed);
// The instance for NR weight rows and TV vectors of 16 tokens (up to 4, a tile).
Float32KernelFn Float32KernelFor(int weight_rows, int tile_vectors);
// PackInput as bfloat16 pairs: packed[tile][p][j] = (x[t][first + 2p], x[t][first + 2p + 1]).
void PackInputBf16(const float* x, int64_t rows, int64_t in, int64_t first, int64_t depth,
                   uint32_t* packed);
Bf16KernelFn Bf16KernelFor(int weight_rows, int tile_vectors);
// result[t][first + n] = activation(sums[n][t] + bias + residual) for n < count, every row t, in
// streaming stores where whole aligned lines (the caller fences them).
void WriteResult(const float* sums, int64_t sums_stride, int64_t rows, int64_t first, int64_t count,
                 const RowKernelColumns& c);
// The feature-major result (RowKernelLayout), float32 or bfloat16 pairs.
void FinishFeatureMajor(const float* sums, int64_t sums_stride, int64_t rows, int64_t first,
                        int64_t count, const RowKernelColumns& c);
void FinishFeatureMajorPairs(const float* sums, int64_t sums_stride, int64_t rows, int64_t first,
                             int64_t count, const RowKernelColumns& c);
// packed[i] *= scale for i < count (a multiple of 16).
void ScaleInPlace(float* packed, size_t count, float scale);

}  // namespace on_avx512

// The same on vectors of 8 tokens (Float32KernelFor: up to 8 vectors, a tile; PackInput's
// zeros up to the next multiple of 8; ScaleInPlace's count a multiple of 8; WriteResult in normal
// stores).
namespace on_avx2 {

void PackInput(const float* x, int64_t rows, int64_t in, int64_t first, int64_t depth,
               float* packed);
Float32KernelFn Float32KernelFor(int weight_rows, int tile_vectors);
void WriteResult(const float* sums, int64_t sums_stride, int64_t rows, int64_t first, int64_t count,
                 const RowKernelColumns& c);
void FinishFeatureMajor(const float* sums, int64_t sums_stride, int64_t rows, int64_t first,
                        int64_t count, const RowKernelColumns& c);
void ScaleInPlace(float* packed, size_t count, float scale);

}  // namespace on_avx2

// The bfloat16 products on AMX (row_kernel_amx.cc).
namespace on_amx {

// Rows of weights and tokens of one Multiply32x32 call.
constexpr int kGroupRows = 32;

// Whether the CPU has AMX-TILE and AMX-BF16 (and HasAvx512()), Linux grants this process the tile
// data (asked once, here) and ATTNSCOPE_DISABLE_AMX is not set.
bool Available();
// sums[i][j] (+)= sum over k < depth of weight[i * in + k] * x[k][j] for i < 32 and j < 32, x the
// bfloat16 pairs at `packed` (PackInputBf16's layout: pair p of token j at packed[p * kTileTokens
// + j]), `depth` a multiple of 32, sums' rows `sums_stride` floats apart; prefetches the 32 rows
// at `prefetch` (row stride `in`; none if nullptr) into L2 as it goes. Requires Available().
void Multiply32x32(const uint16_t* weight, int64_t in, int64_t depth, const uint32_t* packed,
                   float* sums, int64_t sums_stride, bool accumulate, const uint16_t* prefetch);

}  // namespace on_amx
}  // namespace attnscope::row_kernel_internal

#endif  // ATTNSCOPE_MODELS_ROW_KERNEL_ISA_H_

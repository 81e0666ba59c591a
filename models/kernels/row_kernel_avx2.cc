// The row kernel on AVX2 and FMA (row_kernel_isa.h): packing, the micro-kernel and the result
// writes for CPUs without AVX-512.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "models/kernels/avx2_math.h"
#include "models/kernels/row_kernel_isa.h"

namespace attnscope::row_kernel_internal {

// The same kernels on AVX2 and FMA, for CPUs without AVX-512: the same tiles of 64 tokens, as 8
// vectors of 8, and the same order of sums, so that both paths give the same bits.
#pragma GCC push_options
#pragma GCC target("avx2,fma,prfchw")
namespace on_avx2 {

// PackInput of on_avx512 in 8 x 8 blocks: packed[tile][k][j] = x[tile * kTileTokens + j][first +
// k] for k < depth (a multiple of 8), zero for rows past `rows` (up to the next multiple of 8).
void PackInput(const float* x, int64_t rows, int64_t in, int64_t first, int64_t depth,
               float* packed) {
  for (int64_t t0 = 0; t0 < rows; t0 += 8) {
    const int64_t tile = t0 / kTileTokens;
    const int64_t lane = t0 % kTileTokens;
    const int64_t valid = std::min<int64_t>(8, rows - t0);
    for (int64_t k0 = 0; k0 < depth; k0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) {
        r[i] = i < valid ? _mm256_loadu_ps(x + (t0 + i) * in + first + k0) : _mm256_setzero_ps();
      }
      avx2::Transpose8(r);
      for (int i = 0; i < 8; ++i) {
        _mm256_storeu_ps(packed + (tile * depth + k0 + i) * kTileTokens + lane, r[i]);
      }
    }
  }
}

// Inputs [k0, k1) of one depth block for NR weight rows and SV vectors of 8 tokens: NR x SV
// accumulators, SV token vectors and the broadcast weight in AVX2's 16 registers (15 at NR = 6,
// SV = 2). Stores the block's sums to `sums`, or adds them where `add`.
template <int NR, int SV>
__attribute__((always_inline)) inline void Pass(const float* weight, int64_t in, int64_t k0,
                                                int64_t k1, const float* packed,
                                                int64_t packed_stride, float* sums,
                                                int64_t sums_stride, bool add,
                                                const float* prefetch) {
  __m256 acc[NR][SV];
  for (int i = 0; i < NR; ++i) {
    for (int j = 0; j < SV; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  for (int64_t line = k0; line < k1; line += 16) {
    if (prefetch != nullptr) {
      for (int i = 0; i < NR; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(prefetch + i * in + line), _MM_HINT_T1);
      }
    }
    const int64_t line_end = std::min(k1, line + 16);
    // Unrolled: without it, a BERT-base forward at 128 tokens took 162-166 ms instead of 146-148
    // (two runs of each build in turn, 2026-12-06, AMD EPYC Zen 3); the loop's own instructions
    // (a pointer per weight row, the count) compete with the FMAs for dispatch.
#pragma GCC unroll 4
    for (int64_t k = line; k < line_end; ++k) {
      __m256 tokens[SV];
      for (int j = 0; j < SV; ++j) tokens[j] = _mm256_loadu_ps(packed + k * packed_stride + 8 * j);
      for (int i = 0; i < NR; ++i) {
        const __m256 w = _mm256_broadcast_ss(weight + i * in + k);
        for (int j = 0; j < SV; ++j) acc[i][j] = _mm256_fmadd_ps(w, tokens[j], acc[i][j]);
      }
    }
  }
  for (int i = 0; i < NR; ++i) {
    for (int j = 0; j < SV; ++j) {
      float* p = sums + i * sums_stride + 8 * j;
      _mm256_storeu_ps(p, add ? _mm256_add_ps(_mm256_loadu_ps(p), acc[i][j]) : acc[i][j]);
    }
  }
}

// on_avx512's Kernel for TV vectors of 8 tokens (up to 8, a tile), two vectors at a time. Each
// pass reads the block's weight rows again, from L1 (6 rows of 256 inputs, 6 KB); the next group's
// rows are prefetched in the first.
template <int NR, int TV>
void Kernel(const float* weight, int64_t in, int64_t depth, const float* packed,
            int64_t packed_stride, float* sums, int64_t sums_stride, bool accumulate,
            const float* prefetch) {
  for (int64_t k0 = 0; k0 < depth; k0 += kDepthBlock) {
    const int64_t k1 = std::min(depth, k0 + kDepthBlock);
    const bool add = k0 > 0 || accumulate;
    for (int j = 0; j + 2 <= TV; j += 2) {
      Pass<NR, 2>(weight, in, k0, k1, packed + 8 * j, packed_stride, sums + 8 * j, sums_stride, add,
                  j == 0 ? prefetch : nullptr);
    }
    if (TV % 2 != 0) {
      Pass<NR, 1>(weight, in, k0, k1, packed + 8 * (TV - 1), packed_stride, sums + 8 * (TV - 1),
                  sums_stride, add, TV == 1 ? prefetch : nullptr);
    }
  }
}

template <int NR, int TV>
struct Float32Kernel {
  static constexpr auto kFn = &Kernel<NR, TV>;
};

// The instance for NR weight rows and TV vectors of 8 tokens (up to 8, a tile).
Float32KernelFn Float32KernelFor(int weight_rows, int tile_vectors) {
  return KernelFor<Float32Kernel, /*TV=*/8>(weight_rows, tile_vectors);
}

// on_avx512's WriteResult in 8 x 8 blocks, in normal stores: the next stage (attention, LayerNorm)
// reads the result from cache, and a BERT-base forward at 128 tokens took 1-2% less time than with
// on_avx512's streaming stores (three runs of each build in turn, 2026-12-07, AMD EPYC Zen 3).
// Only a row's last, partial vector is masked (avx2::Store).
void WriteResult(const float* sums, int64_t sums_stride, int64_t rows, int64_t first, int64_t count,
                 const RowKernelColumns& c) {
  for (int64_t t0 = 0; t0 < rows; t0 += 8) {
    const int64_t valid = std::min<int64_t>(8, rows - t0);
    for (int64_t n0 = 0; n0 < count; n0 += 8) {
      const int64_t width = std::min<int64_t>(8, count - n0);
      const int64_t column = first + n0;
      const __m256 bias =
          c.bias != nullptr ? avx2::Load(c.bias + column, width) : _mm256_setzero_ps();
      __m256 r[8];
      for (int i = 0; i < 8; ++i) {
        r[i] =
            i < width ? _mm256_loadu_ps(sums + (n0 + i) * sums_stride + t0) : _mm256_setzero_ps();
      }
      avx2::Transpose8(r);
      for (int64_t i = 0; i < valid; ++i) {
        __m256 v = _mm256_add_ps(r[i], bias);
        const int64_t offset = (t0 + i) * c.out + column;
        if (c.residual != nullptr) v = _mm256_add_ps(v, avx2::Load(c.residual + offset, width));
        if (c.activation == Activation::kGelu) {
          v = avx2::GeluErf(v);
        } else if (c.activation == Activation::kGeluTanh) {
          v = avx2::GeluTanh(v);
        }
        avx2::Store(c.result + offset, width, v);
      }
    }
  }
}

// on_avx512's FinishFeatureMajor on vectors of 8 tokens: the tokens of every vector of 8 that holds
// one of `rows`.
void FinishFeatureMajor(const float* sums, int64_t sums_stride, int64_t rows, int64_t first,
                        int64_t count, const RowKernelColumns& c) {
  const int64_t vectors = (rows + 7) / 8;
  for (int64_t n = 0; n < count; ++n) {
    const __m256 bias = _mm256_set1_ps(c.bias != nullptr ? c.bias[first + n] : 0.0f);
    for (int64_t v = 0; v < vectors; ++v) {
      __m256 x = _mm256_add_ps(_mm256_loadu_ps(sums + n * sums_stride + 8 * v), bias);
      if (c.activation == Activation::kGelu) {
        x = avx2::GeluErf(x);
      } else if (c.activation == Activation::kGeluTanh) {
        x = avx2::GeluTanh(x);
      }
      const int64_t tile = 8 * v / kTileTokens;
      _mm256_storeu_ps(
          c.result + (tile * c.out + first + n) * kTileTokens + 8 * v - tile * kTileTokens, x);
    }
  }
}

// packed[i] *= scale for i < count (a multiple of 8).
void ScaleInPlace(float* packed, size_t count, float scale) {
  const __m256 factor = _mm256_set1_ps(scale);
  for (size_t i = 0; i < count; i += 8) {
    _mm256_storeu_ps(packed + i, _mm256_mul_ps(_mm256_loadu_ps(packed + i), factor));
  }
}

}  // namespace on_avx2
#pragma GCC pop_options

}  // namespace attnscope::row_kernel_internal

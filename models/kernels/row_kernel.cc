#include "models/kernels/row_kernel.h"

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "models/kernels/avx512_math.h"
#include "models/kernels/fused_ops.h"

namespace attnscope {
namespace {

constexpr int kTileVectors = 4;                     // AVX-512 vectors of tokens per tile
constexpr int64_t kTileTokens = 16 * kTileVectors;  // tokens per tile of the transposed input
constexpr int kWeightRows = 6;  // weight rows per kernel call: 6 x 4 accumulators of 32 registers
constexpr int64_t kDepthBlock = 256;  // inputs summed in registers before joining the total
// Depth of the transposed input kept at once, and weight rows per chunk of [out, rows] sums: for
// 128 rows 384 KB and 192 KB, which fit the 1 MB L2 cache of each core with the weight rows.
constexpr int64_t kPackDepthSmall = 768;
constexpr int64_t kChunkRowsSmall = 384;

struct Workspace {
  std::vector<float> packed;  // [tile][depth][kTileTokens]
  std::vector<float> sums;    // [chunk rows][padded tokens]
};

Workspace& ThreadWorkspace() {
  static thread_local Workspace workspace;
  return workspace;
}

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,prfchw")
// GCC 12's AVX-512 headers trip its own -Wmaybe-uninitialized (the self-initialised "undefined"
// vectors behind set1 and masked loads, GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// packed[tile][k][j] = x[tile * kTileTokens + j][first + k] for k < depth, zero for rows past
// `rows` (up to the next multiple of 16).
void PackInput(const float* x, int64_t rows, int64_t in, int64_t first, int64_t depth,
               float* packed) {
  for (int64_t t0 = 0; t0 < rows; t0 += 16) {
    const int64_t tile = t0 / kTileTokens;
    const int64_t lane = t0 % kTileTokens;
    const int64_t valid = std::min<int64_t>(16, rows - t0);
    for (int64_t k0 = 0; k0 < depth; k0 += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        r[i] = i < valid ? _mm512_loadu_ps(x + (t0 + i) * in + first + k0) : _mm512_setzero_ps();
      }
      avx512::Transpose16(r);
      for (int i = 0; i < 16; ++i) {
        _mm512_storeu_ps(packed + (tile * depth + k0 + i) * kTileTokens + lane, r[i]);
      }
    }
  }
}

// sums[i][16 * j ...] (+)= sum over k < depth of weight[i][k] * packed[k][16 * j ...], for
// NR weight rows (row stride `in`) and TV vectors of tokens. Prefetches the next NR weight rows
// into L2 as it goes: they come from memory, and the next call needs them.
template <int NR, int TV>
void Kernel(const float* weight, int64_t in, int64_t depth, const float* packed, float* sums,
            int64_t sums_stride, bool accumulate) {
  for (int64_t k0 = 0; k0 < depth; k0 += kDepthBlock) {
    __m512 acc[NR][TV];
    for (int i = 0; i < NR; ++i) {
      for (int j = 0; j < TV; ++j) acc[i][j] = _mm512_setzero_ps();
    }
    const int64_t k1 = std::min(depth, k0 + kDepthBlock);
    for (int64_t k = k0; k < k1; ++k) {
      if ((k & 15) == 0) {
        for (int i = 0; i < NR; ++i) {
          _mm_prefetch(reinterpret_cast<const char*>(weight + (i + NR) * in + k), _MM_HINT_T1);
        }
      }
      __m512 tokens[TV];
      for (int j = 0; j < TV; ++j) tokens[j] = _mm512_loadu_ps(packed + k * kTileTokens + 16 * j);
      for (int i = 0; i < NR; ++i) {
        const __m512 w = _mm512_set1_ps(weight[i * in + k]);
        for (int j = 0; j < TV; ++j) acc[i][j] = _mm512_fmadd_ps(w, tokens[j], acc[i][j]);
      }
    }
    for (int i = 0; i < NR; ++i) {
      for (int j = 0; j < TV; ++j) {
        float* p = sums + i * sums_stride + 16 * j;
        _mm512_storeu_ps(
            p, k0 == 0 && !accumulate ? acc[i][j] : _mm512_add_ps(_mm512_loadu_ps(p), acc[i][j]));
      }
    }
  }
}

using KernelFn = void (*)(const float*, int64_t, int64_t, const float*, float*, int64_t, bool);

template <int NR>
KernelFn KernelFor(int tile_vectors) {
  switch (tile_vectors) {
    case 1:
      return &Kernel<NR, 1>;
    case 2:
      return &Kernel<NR, 2>;
    case 3:
      return &Kernel<NR, 3>;
    default:
      return &Kernel<NR, 4>;
  }
}

KernelFn KernelFor(int weight_rows, int tile_vectors) {
  switch (weight_rows) {
    case 1:
      return KernelFor<1>(tile_vectors);
    case 2:
      return KernelFor<2>(tile_vectors);
    case 3:
      return KernelFor<3>(tile_vectors);
    case 4:
      return KernelFor<4>(tile_vectors);
    case 5:
      return KernelFor<5>(tile_vectors);
    default:
      return KernelFor<6>(tile_vectors);
  }
}

// result[t][first + n] = sums[n][t] + bias + residual, or GELU of that, for n < count, every row t.
void WriteResult(const float* sums, int64_t sums_stride, int64_t rows, int64_t first, int64_t count,
                 const RowKernelColumns& c) {
  // Row blocks outermost: each result row is written as one run of consecutive lines.
  for (int64_t t0 = 0; t0 < rows; t0 += 16) {
    const int64_t valid = std::min<int64_t>(16, rows - t0);
    for (int64_t n0 = 0; n0 < count; n0 += 16) {
      const int64_t width = std::min<int64_t>(16, count - n0);
      const __mmask16 mask = avx512::TailMask(width);
      const int64_t column = first + n0;
      const __m512 bias =
          c.bias != nullptr ? _mm512_maskz_loadu_ps(mask, c.bias + column) : _mm512_setzero_ps();
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        r[i] =
            i < width ? _mm512_loadu_ps(sums + (n0 + i) * sums_stride + t0) : _mm512_setzero_ps();
      }
      avx512::Transpose16(r);
      for (int64_t i = 0; i < valid; ++i) {
        __m512 v = _mm512_add_ps(r[i], bias);
        const int64_t offset = (t0 + i) * c.out + column;
        if (c.residual != nullptr) {
          v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, c.residual + offset));
        }
        if (c.activation == Activation::kGelu) {
          v = avx512::GeluErf(v);
        } else if (c.activation == Activation::kGeluTanh) {
          v = avx512::GeluTanh(v);
        }
        _mm512_mask_storeu_ps(c.result + offset, mask, v);
      }
    }
  }
}

}  // namespace

void RowKernelLinear(const float* x, int64_t rows, int64_t in,
                     absl::Span<const RowKernelColumns> columns) {
  const int64_t tiles = (rows + kTileTokens - 1) / kTileTokens;
  const int64_t padded = tiles * kTileTokens;
  // Twice the rows, half the depth and chunk: the same cache footprint.
  const int64_t pack_depth = rows <= 128 ? kPackDepthSmall : kPackDepthSmall / 2;
  const int64_t chunk_rows = rows <= 128 ? kChunkRowsSmall : kChunkRowsSmall / 2;
  const bool pack_once = in <= pack_depth;
  Workspace& workspace = ThreadWorkspace();
  workspace.packed.resize(static_cast<size_t>(tiles * std::min(in, pack_depth) * kTileTokens));
  workspace.sums.resize(static_cast<size_t>(chunk_rows * padded));
  float* packed = workspace.packed.data();
  float* sums = workspace.sums.data();
  if (pack_once) PackInput(x, rows, in, /*first=*/0, /*depth=*/in, packed);
  for (const RowKernelColumns& c : columns) {
    for (int64_t chunk = c.begin; chunk < c.end; chunk += chunk_rows) {
      const int64_t chunk_end = std::min(c.end, chunk + chunk_rows);
      for (int64_t first = 0; first < in; first += pack_depth) {
        const int64_t depth = std::min(pack_depth, in - first);
        if (!pack_once) PackInput(x, rows, in, first, depth, packed);
        for (int64_t n = chunk; n < chunk_end; n += kWeightRows) {
          const int weight_rows = static_cast<int>(std::min<int64_t>(kWeightRows, chunk_end - n));
          for (int64_t tile = 0; tile < tiles; ++tile) {
            const int tile_vectors =
                static_cast<int>((std::min(kTileTokens, rows - tile * kTileTokens) + 15) / 16);
            KernelFor(weight_rows, tile_vectors)(
                c.weight + n * in + first, in, depth, packed + tile * depth * kTileTokens,
                sums + (n - chunk) * padded + tile * kTileTokens, padded,
                /*accumulate=*/first > 0);
          }
        }
      }
      WriteResult(sums, padded, rows, chunk, chunk_end - chunk, c);
    }
  }
}

#pragma GCC diagnostic pop
#pragma GCC pop_options

bool RowKernelApplies(int64_t rows, int64_t in) {
  return HasAvx512() && rows > 0 && rows <= kRowKernelMaxRows && in > 0 && in % 16 == 0;
}

}  // namespace attnscope

// The row kernel on AVX-512 (row_kernel_isa.h): packing, the float32 and bfloat16 micro-kernels
// and the result writes.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "models/kernels/avx512_math.h"
#include "models/kernels/row_kernel_isa.h"

namespace attnscope::row_kernel_internal {

#pragma GCC push_options
// avx512bf16 only for the bfloat16 kernel's intrinsics: no float32 code compiles to its
// instructions, and RowKernelLinearBf16 runs only where HasAvx512Bf16().
#pragma GCC target("avx512f,avx512vl,avx512bf16,prfchw")
// GCC 12's AVX-512 headers trip its own -Wmaybe-uninitialized (the self-initialised "undefined"
// vectors behind set1 and masked loads, GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace on_avx512 {

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

// sums[i][16 * j ...] (+)= sum over k < depth of weight[i][k] * tokens[k][16 * j ...], for
// NR weight rows (row stride `in`) and TV vectors of tokens, tokens[k] at packed + k *
// packed_stride. Prefetches NR rows of `depth` inputs at `prefetch` (row stride `in`; none if
// nullptr) into L2 as it goes: the next call's weight rows, which come from memory.
template <int NR, int TV>
void Kernel(const float* weight, int64_t in, int64_t depth, const float* packed,
            int64_t packed_stride, float* sums, int64_t sums_stride, bool accumulate,
            const float* prefetch) {
  for (int64_t k0 = 0; k0 < depth; k0 += kDepthBlock) {
    __m512 acc[NR][TV];
    for (int i = 0; i < NR; ++i) {
      for (int j = 0; j < TV; ++j) acc[i][j] = _mm512_setzero_ps();
    }
    const int64_t k1 = std::min(depth, k0 + kDepthBlock);
    for (int64_t k = k0; k < k1; ++k) {
      if ((k & 15) == 0 && prefetch != nullptr) {
        for (int i = 0; i < NR; ++i) {
          _mm_prefetch(reinterpret_cast<const char*>(prefetch + i * in + k), _MM_HINT_T1);
        }
      }
      __m512 tokens[TV];
      for (int j = 0; j < TV; ++j) tokens[j] = _mm512_loadu_ps(packed + k * packed_stride + 16 * j);
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

template <int NR, int TV>
struct Float32Kernel {
  static constexpr auto kFn = &Kernel<NR, TV>;
};

// The instance for NR weight rows and TV vectors of 16 tokens (up to 4, a tile).
Float32KernelFn Float32KernelFor(int weight_rows, int tile_vectors) {
  return KernelFor<Float32Kernel, /*TV=*/4>(weight_rows, tile_vectors);
}

// packed[tile][p][j] = the bfloat16 pair (x[t][first + 2p], x[t][first + 2p + 1]) of token
// t = tile * kTileTokens + j, as one 32-bit lane (lower half the even input), for 2p < depth (a
// multiple of 32); zero for rows past `rows`. Each token's 32 inputs become one vector of 16 pairs
// and 16 tokens' vectors are transposed as 32-bit lanes, the layout VDPBF16PS multiplies.
void PackInputBf16(const float* x, int64_t rows, int64_t in, int64_t first, int64_t depth,
                   uint32_t* packed) {
  const int64_t pairs = depth / 2;
  for (int64_t t0 = 0; t0 < rows; t0 += 16) {
    const int64_t tile = t0 / kTileTokens;
    const int64_t lane = t0 % kTileTokens;
    const int64_t valid = std::min<int64_t>(16, rows - t0);
    for (int64_t k0 = 0; k0 < depth; k0 += 32) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        if (i < valid) {
          const float* row = x + (t0 + i) * in + first + k0;
          r[i] = _mm512_castsi512_ps(reinterpret_cast<__m512i>(
              _mm512_cvtne2ps_pbh(_mm512_loadu_ps(row + 16), _mm512_loadu_ps(row))));
        } else {
          r[i] = _mm512_setzero_ps();
        }
      }
      avx512::Transpose16(r);
      for (int i = 0; i < 16; ++i) {
        _mm512_storeu_ps(
            reinterpret_cast<float*>(packed + (tile * pairs + k0 / 2 + i) * kTileTokens + lane),
            r[i]);
      }
    }
  }
}

// Kernel on bfloat16 pairs: sums[i][16 * j ...] (+)= sum over k < depth of weight[i][k] *
// x[k][16 * j ...], for NR weight rows and TV vectors of tokens, one VDPBF16PS per pair of inputs,
// prefetching as Kernel.
template <int NR, int TV>
void KernelBf16(const uint16_t* weight, int64_t in, int64_t depth, const uint32_t* packed,
                float* sums, int64_t sums_stride, bool accumulate, const uint16_t* prefetch) {
  for (int64_t k0 = 0; k0 < depth; k0 += kDepthBlock) {
    __m512 acc[NR][TV];
    for (int i = 0; i < NR; ++i) {
      for (int j = 0; j < TV; ++j) acc[i][j] = _mm512_setzero_ps();
    }
    const int64_t k1 = std::min(depth, k0 + kDepthBlock);
    for (int64_t k = k0; k < k1; k += 2) {
      if ((k & 31) == 0 && prefetch != nullptr) {
        for (int i = 0; i < NR; ++i) {
          _mm_prefetch(reinterpret_cast<const char*>(prefetch + i * in + k), _MM_HINT_T1);
        }
      }
      __m512bh tokens[TV];
      for (int j = 0; j < TV; ++j) {
        tokens[j] =
            reinterpret_cast<__m512bh>(_mm512_loadu_si512(packed + (k / 2) * kTileTokens + 16 * j));
      }
      for (int i = 0; i < NR; ++i) {
        int32_t pair;
        std::memcpy(&pair, weight + i * in + k, sizeof(pair));
        const __m512bh w = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
        for (int j = 0; j < TV; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], w, tokens[j]);
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

template <int NR, int TV>
struct Bf16Kernel {
  static constexpr auto kFn = &KernelBf16<NR, TV>;
};

// The instance for NR weight rows and TV vectors of 16 tokens (up to 4, a tile).
Bf16KernelFn Bf16KernelFor(int weight_rows, int tile_vectors) {
  return KernelFor<Bf16Kernel, /*TV=*/4>(weight_rows, tile_vectors);
}

// result[t][first + n] = sums[n][t] + bias + residual, or GELU of that, for n < count, every row t.
// Whole aligned lines go out as streaming stores: the result is read next by another stage, after
// the weights streamed through the cache have evicted it anyway, and a normal store first reads
// each line from memory (the forward took about 1% less time in passes alternating inside one
// process). The caller fences them (_mm_sfence) before the result is read.
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
        if (width == 16 && reinterpret_cast<uintptr_t>(c.result + offset) % 64 == 0) {
          _mm512_stream_ps(c.result + offset, v);
        } else {
          _mm512_mask_storeu_ps(c.result + offset, mask, v);
        }
      }
    }
  }
}

// result[tile][first + n][j] = activation(sums[n][tile * kTileTokens + j] + bias), the
// feature-major result, for n < count and the tokens of every vector of 16 that holds one of
// `rows`.
void FinishFeatureMajor(const float* sums, int64_t sums_stride, int64_t rows, int64_t first,
                        int64_t count, const RowKernelColumns& c) {
  const int64_t vectors = (rows + 15) / 16;
  for (int64_t n = 0; n < count; ++n) {
    const __m512 bias = _mm512_set1_ps(c.bias != nullptr ? c.bias[first + n] : 0.0f);
    for (int64_t v = 0; v < vectors; ++v) {
      __m512 x = _mm512_add_ps(_mm512_loadu_ps(sums + n * sums_stride + 16 * v), bias);
      if (c.activation == Activation::kGelu) {
        x = avx512::GeluErf(x);
      } else if (c.activation == Activation::kGeluTanh) {
        x = avx512::GeluTanh(x);
      }
      const int64_t tile = 16 * v / kTileTokens;
      _mm512_storeu_ps(
          c.result + (tile * c.out + first + n) * kTileTokens + 16 * v - tile * kTileTokens, x);
    }
  }
}

// FinishFeatureMajor for RowKernelLinearBf16: result[tile][(first + n) / 2][j] = the bfloat16 pair
// (features first + n and first + n + 1, each activation(sums + bias) rounded to nearest even) of
// token tile * kTileTokens + j, as PackInputBf16 lays out its input; `first` and `count` even.
void FinishFeatureMajorPairs(const float* sums, int64_t sums_stride, int64_t rows, int64_t first,
                             int64_t count, const RowKernelColumns& c) {
  const int64_t vectors = (rows + 15) / 16;
  auto* pairs = reinterpret_cast<uint32_t*>(c.result);
  auto finish = [&](int64_t n, int64_t v) {
    __m512 x = _mm512_add_ps(_mm512_loadu_ps(sums + n * sums_stride + 16 * v),
                             _mm512_set1_ps(c.bias != nullptr ? c.bias[first + n] : 0.0f));
    if (c.activation == Activation::kGelu) {
      x = avx512::GeluErf(x);
    } else if (c.activation == Activation::kGeluTanh) {
      x = avx512::GeluTanh(x);
    }
    // maskz: the unmasked form trips GCC 12's -Wuninitialized under the sanitizers (bug 105593).
    return _mm512_maskz_cvtepu16_epi32(/*k=*/0xFFFF,
                                       reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x)));
  };
  for (int64_t n = 0; n < count; n += 2) {
    for (int64_t v = 0; v < vectors; ++v) {
      const __m512i pair = _mm512_or_si512(finish(n, v), _mm512_slli_epi32(finish(n + 1, v), 16));
      const int64_t tile = 16 * v / kTileTokens;
      _mm512_storeu_si512(
          pairs + (tile * c.out / 2 + (first + n) / 2) * kTileTokens + 16 * v - tile * kTileTokens,
          pair);
    }
  }
}

// packed[i] *= scale for i < count (a multiple of 16).
void ScaleInPlace(float* packed, size_t count, float scale) {
  const __m512 factor = _mm512_set1_ps(scale);
  for (size_t i = 0; i < count; i += 16) {
    _mm512_storeu_ps(packed + i, _mm512_mul_ps(_mm512_loadu_ps(packed + i), factor));
  }
}

}  // namespace on_avx512
#pragma GCC diagnostic pop
#pragma GCC pop_options

}  // namespace attnscope::row_kernel_internal

#include "models/kernels/row_kernel.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "models/kernels/avx2_math.h"
#include "models/kernels/avx512_math.h"
#include "models/kernels/fused_ops.h"
#include "models/kernels/parallel.h"

namespace attnscope {
namespace {

constexpr int64_t kTileTokens = 64;   // tokens per tile of the transposed input
constexpr int kWeightRows = 6;        // weight rows per kernel call
constexpr int64_t kDepthBlock = 256;  // inputs summed in registers before joining the total
// Depth of the transposed input kept at once, and weight rows per chunk of [out, rows] sums: for
// 128 rows 384 KB and 192 KB, which fit the 1 MB L2 cache of each core with the weight rows. Both
// depths are whole kDepthBlocks (see DriveRowKernel).
constexpr int64_t kPackDepthSmall = 768;
constexpr int64_t kChunkRowsSmall = 384;
// Output columns per block handed to a thread where the input is packed once per thread: 8 groups
// of kWeightRows, whole AVX-512 vectors of the result, and 16 blocks of a 768-wide product, so
// that threads of unequal speed still finish close together.
constexpr int64_t kBlockColumns = 48;

// Allocates on cache-line boundaries. The kernels read each depth's vectors of tokens from the
// workspace: on malloc's 16-byte boundary, every other 32-byte vector straddled two cache lines,
// and the AVX2 kernel ran BERT-base's 768 x 768 product at 65-70 GFLOP/s on one thread instead of
// 89-92 (a microbenchmark, 2026-12-06, AMD EPYC Zen 3).
template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{64};
  CacheLineAllocator() = default;
  template <typename U>
  explicit CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlignment)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlignment); }
  bool operator==(const CacheLineAllocator&) const { return true; }
  bool operator!=(const CacheLineAllocator&) const { return false; }
};

template <typename T>
using CacheLineVector = std::vector<T, CacheLineAllocator<T>>;

struct Workspace {
  CacheLineVector<float> packed;           // [tile][depth][kTileTokens]
  CacheLineVector<uint32_t> packed_pairs;  // [tile][depth / 2][kTileTokens] pairs of bfloat16
  CacheLineVector<float> sums;             // [chunk rows][padded tokens]
  CacheLineVector<float> packed_keys;      // [tile][head_dim][kTileTokens], scaled
};

Workspace& ThreadWorkspace() {
  static thread_local Workspace workspace;
  return workspace;
}

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

// A group of weight rows the kernel will multiply next: rows [n, n + kWeightRows) of `c`, inputs
// from `first`. Its rows are prefetched into L2 while the group before it runs: they come from
// memory.
struct NextGroup {
  const RowKernelColumns* c = nullptr;  // nullptr: none
  int64_t n = 0;
  int64_t first = 0;
};

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
auto Bf16KernelFor(int weight_rows, int tile_vectors) {
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

// on_avx512's WriteResult in 8 x 8 blocks. Only a row's last, partial vector is masked
// (avx2::Store).
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
        if (width == 8 && reinterpret_cast<uintptr_t>(c.result + offset) % 32 == 0) {
          _mm256_stream_ps(c.result + offset, v);
        } else {
          avx2::Store(c.result + offset, width, v);
        }
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

// The float32 kernels of one instruction set, for the drivers below (compiled for the baseline
// x86-64: they only call into the target-specific code).
struct Avx512Kernels {
  static constexpr int64_t kVectorTokens = 16;
  static constexpr auto PackInput = &on_avx512::PackInput;
  static constexpr auto KernelFor = &on_avx512::Float32KernelFor;
  static constexpr auto WriteResult = &on_avx512::WriteResult;
  static constexpr auto FinishFeatureMajor = &on_avx512::FinishFeatureMajor;
  static constexpr auto ScaleInPlace = &on_avx512::ScaleInPlace;
};

struct Avx2Kernels {
  static constexpr int64_t kVectorTokens = 8;
  static constexpr auto PackInput = &on_avx2::PackInput;
  static constexpr auto KernelFor = &on_avx2::Float32KernelFor;
  static constexpr auto WriteResult = &on_avx2::WriteResult;
  static constexpr auto FinishFeatureMajor = &on_avx2::FinishFeatureMajor;
  static constexpr auto ScaleInPlace = &on_avx2::ScaleInPlace;
};

// The blocking shared by every kernel, on LibTorch's intra-op threads: input tiles of kTileTokens
// tokens packed `pack_depth` inputs at a time, weight rows in chunks whose [rows, chunk] sums stay
// in L2, written out per chunk. The products' concatenated columns are handed out in blocks to
// whichever thread is free (ParallelClaims): kBlockColumns where a thread packs its input once,
// a whole chunk where each chunk packs its own. A thread claims its next block as it starts the
// last group of weight rows of the current one, so that the next block's first rows are
// prefetched too (without it, one group in eight waited on memory). pack(first, depth, tiles)
// packs inputs [first, first + depth) of every tile into the calling thread's workspace (a no-op
// for a feature-major input, `packs_input` false); multiply(c, n, weight_rows, first, depth, tile,
// sums, padded, accumulate, next) adds one tile's products with weight rows [n, n + weight_rows)
// of `c` to `sums`, prefetching the rows of `next`; finish(c, sums, padded, first, count) writes
// the finished [count, padded] sums of columns [first, first + count) of `c` to its result. `bf16`:
// the inputs are packed as bfloat16 pairs.
template <typename Pack, typename Multiply, typename Finish>
void DriveRowKernel(int64_t rows, int64_t in, bool bf16, bool packs_input,
                    absl::Span<const RowKernelColumns> columns, const Pack& pack,
                    const Multiply& multiply, const Finish& finish) {
  // A pair of bfloat16 takes the bytes of one float: twice the depth in the same cache footprint.
  const int64_t pack_depth_scale = bf16 ? 2 : 1;
  const int64_t tiles = (rows + kTileTokens - 1) / kTileTokens;
  const int64_t padded = tiles * kTileTokens;
  // Twice the rows, half the depth and chunk: the same cache footprint. The depth rounded down to
  // whole kDepthBlocks, so that every row count sums each output in the same order, over the same
  // blocks of 256 inputs: a row's result does not depend on the rows beside it (a call batched with
  // others gets the bits it gets alone).
  const int64_t pack_depth =
      rows <= 128 ? kPackDepthSmall * pack_depth_scale
                  : kPackDepthSmall / 2 * pack_depth_scale / kDepthBlock * kDepthBlock;
  const int64_t chunk_rows = rows <= 128 ? kChunkRowsSmall : kChunkRowsSmall / 2;
  const bool pack_once = in <= pack_depth;
  // The first group of the concatenated columns [begin, ...).
  auto group_at = [&](int64_t begin) {
    int64_t offset = 0;
    for (const RowKernelColumns& c : columns) {
      const int64_t width = c.end - c.begin;
      if (begin < offset + width) return NextGroup{&c, c.begin + begin - offset, /*first=*/0};
      offset += width;
    }
    return NextGroup{};
  };
  // Columns [begin, end) of `c`, at most chunk_rows of them; after_chunk() is the group that
  // follows them.
  auto run_chunk = [&](const RowKernelColumns& c, int64_t begin, int64_t end,
                       const auto& after_chunk) {
    // In the thread's workspace, which stays in cache, for either layout of the result: summing
    // a feature-major result where it lies made the kernel's stores miss the cache.
    CacheLineVector<float>& sums_storage = ThreadWorkspace().sums;
    sums_storage.resize(static_cast<size_t>(chunk_rows * padded));
    float* sums = sums_storage.data();
    for (int64_t first = 0; first < in; first += pack_depth) {
      const int64_t depth = std::min(pack_depth, in - first);
      if (!pack_once) pack(first, depth, tiles);
      for (int64_t n = begin; n < end; n += kWeightRows) {
        const int weight_rows = static_cast<int>(std::min<int64_t>(kWeightRows, end - n));
        NextGroup next{&c, n + kWeightRows, first};
        if (n + kWeightRows >= end) {
          next = first + pack_depth < in ? NextGroup{&c, begin, first + pack_depth} : after_chunk();
        }
        for (int64_t tile = 0; tile < tiles; ++tile) {
          multiply(c, n, weight_rows, first, depth, tile,
                   sums + (n - begin) * padded + tile * kTileTokens, padded,
                   /*accumulate=*/first > 0, tile == 0 ? next : NextGroup{});
        }
      }
    }
    finish(c, sums, padded, begin, end - begin);
  };
  int64_t total = 0;
  for (const RowKernelColumns& c : columns) total += c.end - c.begin;
  const int64_t block = pack_once || !packs_input ? kBlockColumns : chunk_rows;
  ParallelClaims(
      total, block,
      [&](BlockClaims& claims) {
        int64_t begin = 0;
        int64_t end = 0;
        if (!claims.Next(&begin, &end)) return;
        if (pack_once) pack(/*first=*/0, /*depth=*/in, tiles);
        while (true) {
          int64_t next_begin = 0;
          int64_t next_end = 0;
          bool claimed = false;
          bool has_next = false;
          auto claim_next = [&] {
            if (!claimed) {
              claimed = true;
              has_next = claims.Next(&next_begin, &next_end);
            }
            return has_next ? group_at(next_begin) : NextGroup{};
          };
          int64_t offset = 0;  // of `c` in the concatenated columns
          for (const RowKernelColumns& c : columns) {
            const int64_t width = c.end - c.begin;
            const int64_t from = std::max(begin, offset) - offset;
            const int64_t to = std::min(end, offset + width) - offset;
            if (from < to) {
              // A block may end in the next product's columns.
              const int64_t after = offset + to;
              run_chunk(c, c.begin + from, c.begin + to,
                        [&] { return after < end ? group_at(after) : claim_next(); });
            }
            offset += width;
          }
          claim_next();
          if (!has_next) {
            // The results' streaming stores are weakly ordered: make them visible before the
            // region ends and another thread reads the result.
            _mm_sfence();
            return;
          }
          begin = next_begin;
          end = next_end;
        }
      },
      // Near the end, blocks of two groups: the threads finish within a few microseconds of each
      // other.
      /*tail_grain=*/block == kBlockColumns ? 2 * kWeightRows : 0);
}

// Vectors of `vector_tokens` tokens in the tile of `tile` (the last tile may hold fewer than
// kTileTokens).
int TileVectors(int64_t rows, int64_t tile, int64_t vector_tokens) {
  return static_cast<int>((std::min(kTileTokens, rows - tile * kTileTokens) + vector_tokens - 1) /
                          vector_tokens);
}

template <typename Kernels>
void LinearOn(const float* x, RowKernelLayout x_layout, int64_t rows, int64_t in,
              absl::Span<const RowKernelColumns> columns) {
  const bool feature_major = x_layout == RowKernelLayout::kFeatureMajor;
  // A feature-major input is already the transposed input the kernel reads.
  DriveRowKernel(
      rows, in, /*bf16=*/false, /*packs_input=*/!feature_major, columns,
      [&](int64_t first, int64_t depth, int64_t tiles) {
        if (feature_major) return;
        CacheLineVector<float>& packed = ThreadWorkspace().packed;
        packed.resize(static_cast<size_t>(tiles * depth * kTileTokens));
        Kernels::PackInput(x, rows, in, first, depth, packed.data());
      },
      [&](const RowKernelColumns& c, int64_t n, int weight_rows, int64_t first, int64_t depth,
          int64_t tile, float* sums, int64_t sums_stride, bool accumulate, NextGroup next) {
        const float* tokens = feature_major
                                  ? x + (tile * in + first) * kTileTokens
                                  : ThreadWorkspace().packed.data() + tile * depth * kTileTokens;
        Kernels::KernelFor(weight_rows, TileVectors(rows, tile, Kernels::kVectorTokens))(
            c.weight + n * in + first, in, depth, tokens,
            /*packed_stride=*/kTileTokens, sums, sums_stride, accumulate,
            next.c == nullptr ? nullptr : next.c->weight + next.n * in + next.first);
      },
      [&](const RowKernelColumns& c, const float* sums, int64_t padded, int64_t first,
          int64_t count) {
        if (c.feature_major_result) {
          Kernels::FinishFeatureMajor(sums, padded, rows, first, count, c);
        } else {
          Kernels::WriteResult(sums, padded, rows, first, count, c);
        }
      });
}

template <typename Kernels>
void ScoresOn(const float* query, int64_t query_stride, const float* key, int64_t key_stride,
              int64_t queries, int64_t keys, int64_t head_dim, float scale, float* scores,
              int64_t scores_stride) {
  // The keys are the kernel's tokens (transposed once, 64 at a time, scale folded in) and each
  // query row its weight row: the sums come out as [query, key], the layout softmax reads.
  const int64_t tiles = (keys + kTileTokens - 1) / kTileTokens;
  CacheLineVector<float>& packed = ThreadWorkspace().packed_keys;
  packed.resize(static_cast<size_t>(tiles * head_dim * kTileTokens));
  Kernels::PackInput(key, keys, key_stride, /*first=*/0, /*depth=*/head_dim, packed.data());
  Kernels::ScaleInPlace(packed.data(), packed.size(), scale);
  for (int64_t q = 0; q < queries; q += kWeightRows) {
    const int weight_rows = static_cast<int>(std::min<int64_t>(kWeightRows, queries - q));
    for (int64_t tile = 0; tile < tiles; ++tile) {
      Kernels::KernelFor(weight_rows, TileVectors(keys, tile, Kernels::kVectorTokens))(
          query + q * query_stride, query_stride, head_dim,
          packed.data() + tile * head_dim * kTileTokens, /*packed_stride=*/kTileTokens,
          scores + q * scores_stride + tile * kTileTokens, scores_stride, /*accumulate=*/false,
          /*prefetch=*/query + (q + kWeightRows) * query_stride);
    }
  }
}

template <typename Kernels>
void ContextOn(const float* probs, int64_t probs_stride, const float* value, int64_t value_stride,
               int64_t queries, int64_t keys, int64_t head_dim, float* context,
               int64_t context_stride) {
  // The value rows are already the kernel's transposed input ([key][head_dim], head_dim the
  // tokens' place) and each query's probabilities its weight row: no packing, and the sums are
  // the context rows where they belong.
  const int64_t tiles = (head_dim + kTileTokens - 1) / kTileTokens;
  for (int64_t q = 0; q < queries; q += kWeightRows) {
    const int weight_rows = static_cast<int>(std::min<int64_t>(kWeightRows, queries - q));
    for (int64_t tile = 0; tile < tiles; ++tile) {
      Kernels::KernelFor(weight_rows, TileVectors(head_dim, tile, Kernels::kVectorTokens))(
          probs + q * probs_stride, probs_stride, keys, value + tile * kTileTokens, value_stride,
          context + q * context_stride + tile * kTileTokens, context_stride,
          /*accumulate=*/false, /*prefetch=*/probs + (q + kWeightRows) * probs_stride);
    }
  }
}

}  // namespace

void RowKernelLinear(const float* x, RowKernelLayout x_layout, int64_t rows, int64_t in,
                     absl::Span<const RowKernelColumns> columns) {
  if (HasAvx512()) {
    LinearOn<Avx512Kernels>(x, x_layout, rows, in, columns);
  } else {
    LinearOn<Avx2Kernels>(x, x_layout, rows, in, columns);
  }
}

void RowKernelLinearBf16(const void* x, RowKernelLayout x_layout, int64_t rows, int64_t in,
                         absl::Span<const RowKernelColumns> columns) {
  const bool feature_major = x_layout == RowKernelLayout::kFeatureMajor;
  DriveRowKernel(
      rows, in, /*bf16=*/true, /*packs_input=*/!feature_major, columns,
      [&](int64_t first, int64_t depth, int64_t tiles) {
        if (feature_major) return;
        CacheLineVector<uint32_t>& packed = ThreadWorkspace().packed_pairs;
        packed.resize(static_cast<size_t>(tiles * depth / 2 * kTileTokens));
        on_avx512::PackInputBf16(static_cast<const float*>(x), rows, in, first, depth,
                                 packed.data());
      },
      [&](const RowKernelColumns& c, int64_t n, int weight_rows, int64_t first, int64_t depth,
          int64_t tile, float* sums, int64_t padded, bool accumulate, NextGroup next) {
        const uint32_t* pairs =
            feature_major ? static_cast<const uint32_t*>(x) + (tile * in + first) / 2 * kTileTokens
                          : ThreadWorkspace().packed_pairs.data() + tile * depth / 2 * kTileTokens;
        on_avx512::Bf16KernelFor(weight_rows, TileVectors(rows, tile, /*vector_tokens=*/16))(
            c.weight_bf16 + n * in + first, in, depth, pairs, sums, padded, accumulate,
            next.c == nullptr ? nullptr : next.c->weight_bf16 + next.n * in + next.first);
      },
      [&](const RowKernelColumns& c, const float* sums, int64_t padded, int64_t first,
          int64_t count) {
        if (c.feature_major_result) {
          on_avx512::FinishFeatureMajorPairs(sums, padded, rows, first, count, c);
        } else {
          on_avx512::WriteResult(sums, padded, rows, first, count, c);
        }
      });
}

void RowKernelScores(const float* query, int64_t query_stride, const float* key, int64_t key_stride,
                     int64_t queries, int64_t keys, int64_t head_dim, float scale, float* scores,
                     int64_t scores_stride) {
  if (HasAvx512()) {
    ScoresOn<Avx512Kernels>(query, query_stride, key, key_stride, queries, keys, head_dim, scale,
                            scores, scores_stride);
  } else {
    ScoresOn<Avx2Kernels>(query, query_stride, key, key_stride, queries, keys, head_dim, scale,
                          scores, scores_stride);
  }
}

void RowKernelContext(const float* probs, int64_t probs_stride, const float* value,
                      int64_t value_stride, int64_t queries, int64_t keys, int64_t head_dim,
                      float* context, int64_t context_stride) {
  if (HasAvx512()) {
    ContextOn<Avx512Kernels>(probs, probs_stride, value, value_stride, queries, keys, head_dim,
                             context, context_stride);
  } else {
    ContextOn<Avx2Kernels>(probs, probs_stride, value, value_stride, queries, keys, head_dim,
                           context, context_stride);
  }
}

bool RowKernelAttentionApplies(int64_t head_dim) {
  return HasAvx2() && head_dim > 0 && head_dim % 16 == 0;
}

int64_t RowKernelPaddedRows(int64_t rows) {
  return (rows + kTileTokens - 1) / kTileTokens * kTileTokens;
}

bool RowKernelApplies(int64_t rows, int64_t in) {
  return HasAvx2() && rows > 0 && rows <= kRowKernelMaxRows && in > 0 && in % 16 == 0;
}

bool HasAvx512Bf16() {
  static const bool has = HasAvx512() && __builtin_cpu_supports("avx512bf16");
  return has;
}

bool RowKernelBf16Applies(int64_t rows, int64_t in) {
  return HasAvx512Bf16() && rows > 0 && rows <= kRowKernelMaxRows && in > 0 && in % 32 == 0;
}

}  // namespace attnscope

#include "models/kernels/row_kernel.h"

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "models/kernels/fused_ops.h"
#include "models/kernels/parallel.h"
#include "models/kernels/row_kernel_isa.h"

namespace attnscope {
namespace {

using row_kernel_internal::kDepthBlock;
using row_kernel_internal::kTileTokens;
using row_kernel_internal::kWeightRows;
namespace on_avx2 = row_kernel_internal::on_avx2;
namespace on_avx512 = row_kernel_internal::on_avx512;
namespace on_amx = row_kernel_internal::on_amx;

// Depth of the transposed input kept at once, and weight rows per chunk of [out, rows] sums: for
// 128 rows 384 KB and 192 KB, which fit the 1 MB L2 cache of each core with the weight rows. Both
// depths are whole kDepthBlocks (see DriveRowKernel).
constexpr int64_t kPackDepthSmall = 768;
constexpr int64_t kChunkRowsSmall = 384;
// Output columns per block handed to a thread where the input is packed once per thread: 8 groups
// of kWeightRows, whole AVX-512 vectors of the result, and 16 blocks of a 768-wide product, so
// that threads of unequal speed still finish close together.
constexpr int64_t kBlockColumns = 48;
// The same for AMX's groups of 32 weight rows.
constexpr int64_t kAmxBlockColumns = 64;

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

// A group of weight rows the kernel will multiply next: rows [n, n + kWeightRows) of `c`, inputs
// from `first`. Its rows are prefetched into L2 while the group before it runs: they come from
// memory.
struct NextGroup {
  const RowKernelColumns* c = nullptr;  // nullptr: none
  int64_t n = 0;
  int64_t first = 0;
};

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
// the inputs are packed as bfloat16 pairs. `group_rows`: the weight rows of one multiply() (at
// most; fewer at the end of a product), `block_columns` the columns handed out at once where a
// thread packs its input once, a multiple of group_rows.
template <typename Pack, typename Multiply, typename Finish>
void DriveRowKernel(int64_t rows, int64_t in, bool bf16, bool packs_input, int64_t group_rows,
                    int64_t block_columns, absl::Span<const RowKernelColumns> columns,
                    const Pack& pack, const Multiply& multiply, const Finish& finish) {
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
      for (int64_t n = begin; n < end; n += group_rows) {
        const int weight_rows = static_cast<int>(std::min<int64_t>(group_rows, end - n));
        NextGroup next{&c, n + group_rows, first};
        if (n + group_rows >= end) {
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
  const int64_t block = pack_once || !packs_input ? block_columns : chunk_rows;
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
            // The results' streaming stores (AVX-512) are weakly ordered: make them visible before
            // the region ends and another thread reads the result.
            _mm_sfence();
            return;
          }
          begin = next_begin;
          end = next_end;
        }
      },
      // Near the end, blocks of two groups: the threads finish within a few microseconds of each
      // other.
      /*tail_grain=*/block == block_columns ? 2 * group_rows : 0);
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
      rows, in, /*bf16=*/false, /*packs_input=*/!feature_major, /*group_rows=*/kWeightRows,
      /*block_columns=*/kBlockColumns, columns,
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
  const bool amx = on_amx::Available();
  DriveRowKernel(
      rows, in, /*bf16=*/true, /*packs_input=*/!feature_major,
      /*group_rows=*/amx ? on_amx::kGroupRows : kWeightRows,
      /*block_columns=*/amx ? kAmxBlockColumns : kBlockColumns, columns,
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
        const uint16_t* weight = c.weight_bf16 + n * in + first;
        const uint16_t* prefetch =
            next.c == nullptr ? nullptr : next.c->weight_bf16 + next.n * in + next.first;
        const int vectors = TileVectors(rows, tile, Avx512Kernels::kVectorTokens);
        if (amx && weight_rows == on_amx::kGroupRows) {
          // Halves of 32 tokens; the weights are fetched for the first.
          for (int half = 0; 2 * half < vectors; ++half) {
            on_amx::Multiply32x32(weight, in, depth, pairs + 32 * half, sums + 32 * half, padded,
                                  accumulate, half == 0 ? prefetch : nullptr);
          }
          return;
        }
        // The last rows of a product whose width is no multiple of 32 (on AMX), or every group.
        for (int r = 0; r < weight_rows; r += kWeightRows) {
          on_avx512::Bf16KernelFor(std::min(kWeightRows, weight_rows - r), vectors)(
              weight + r * in, in, depth, pairs, sums + r * padded, padded, accumulate,
              r == 0 ? prefetch : nullptr);
        }
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

const char* Bf16KernelsName() {
  if (!HasAvx512Bf16()) return "none";
  return on_amx::Available() ? "amx" : "avx512_bf16";
}

bool RowKernelBf16Applies(int64_t rows, int64_t in) {
  return HasAvx512Bf16() && rows > 0 && rows <= kRowKernelMaxRows && in > 0 && in % 32 == 0;
}

}  // namespace attnscope

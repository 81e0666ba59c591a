// A float32 x * weight^T kernel for the few rows of one request (up to kRowKernelMaxRows tokens),
// on AVX-512, or on AVX2 and FMA where the CPU has no AVX-512, that reads the checkpoint's
// [out, in] weights where they lie.
//
// Why not oneDNN's sgemm: at 128 rows it repacks every weight matrix on every call (about a quarter
// of its time here), because its kernels want the weights column-interleaved; keeping a packed
// copy would double the model's memory. This kernel instead transposes the small input once per
// call ([rows, in] -> [in, rows], in tiles of 64 tokens) and broadcasts each weight element across
// 64 tokens, so every weight row is read straight from the mapped file in order. Each thread's
// [out, rows] sums are transposed back into the row-major result in blocks of 16 x 16, adding the
// bias, the residual and GELU on the way. At BERT-base's shapes and 128 tokens, Linear ran 13-19%
// faster on it than on oneDNN on this machine (bench/engine_bench reports the forward pass).
//
// The AVX2 kernel is the same kernel on vectors of 8 tokens: the same tiles of 64 tokens, each
// multiplied by a group of weight rows two vectors at a time (12 sums in AVX2's 16 registers), and
// the same order of sums, so that it gives the AVX-512 kernel's bits.
//
// Sums run over depth blocks of 256 inputs, each added to the running total, which keeps float32
// rounding at the level of a blocked BLAS (about 1e-6 on BERT-base against PyTorch). The order is
// the same for every number of rows, so a row's result does not depend on the rows beside it: a
// request batched with others gets the bits it gets alone.
//
// RowKernelLinearBf16 is the same kernel for bfloat16 weights (--compute_dtype=bfloat16): the
// input is rounded to bfloat16 as it is packed, and each VDPBF16PS (AVX512_BF16) multiplies two
// inputs by two weights for 16 tokens and adds both products to float32 sums: twice the
// multiply-adds of an FMA per instruction, and half the weight bytes to read. Its results are those
// of float32 products of the bfloat16-rounded operands, up to float32 summation order (transformers
// with torch_dtype=torch.bfloat16 rounds every activation too; here only the products' operands
// are rounded, and LayerNorm, softmax and the residual stream stay float32).
#ifndef ATTNSCOPE_MODELS_ROW_KERNEL_H_
#define ATTNSCOPE_MODELS_ROW_KERNEL_H_

#include <cstdint>

#include "absl/types/span.h"
#include "models/kernels/activation.h"

namespace attnscope {

// How a matrix of a request's rows (tokens) lies in memory: token-major [rows, n] (row-major, as
// LibTorch's [..., n] tensors), or feature-major in tiles of 64 tokens, [RowKernelPaddedRows(rows)
// / 64, n, 64]: element (t, k) at ((t / 64) * n + k) * 64 + t % 64, RowKernelPaddedRows(rows) * n
// floats in all. Feature-major is the transposed input the kernel multiplies and the [out, rows]
// sums it makes, so a product whose result feeds only another product (the feed-forward block's
// inner activations) skips both the transposition back and the one in.
enum class RowKernelLayout { kTokenMajor, kFeatureMajor };

// The most rows one call takes: beyond them the transposed input no longer stays in the core's L2
// cache.
inline constexpr int64_t kRowKernelMaxRows = 256;

// Where a request has more than kRowKernelMaxRows rows, Linear and FeedForward (gemm.h) call
// RowKernelLinear on blocks of this many, each reading the weights again (RowKernelLinearBf16 on
// blocks of kRowKernelMaxRows). A BERT-base forward at 512 tokens took 2.5-4.8% less time so than
// with oneDNN's packed kernels, and 3.7% less than with blocks of 256 rows; blocks of 64 or 192
// rows were slower (bench/README.md). A row's result is the same in any block.
inline constexpr int64_t kRowKernelBlockRows = 128;

// Output columns [begin, end) of one product: result[t, n] = sum_k x[t, k] * weight[n, k]
// + bias[n] + residual[t, n] for every row t, then `activation`.
struct RowKernelColumns {
  const float* weight;    // [out, in], row-major; RowKernelLinearBf16 reads weight_bf16 instead
  const float* bias;      // [out], or nullptr
  const float* residual;  // [rows, out], or nullptr
  float* result;          // [rows, out]
  int64_t out;            // row length of result and residual
  int64_t begin;
  int64_t end;
  Activation activation = Activation::kNone;  // applied to the result
  const uint16_t* weight_bf16 = nullptr;      // [out, in] bfloat16 bits, row-major
  // Result laid out feature-major (RowKernelLayout, n = out); then residual must be nullptr. Only
  // the tokens of the kernel's whole vectors (16 tokens on AVX-512, 8 on AVX2) that hold one of
  // the rows are written (the others of those vectors hold activation(bias)); the rest of each
  // tile's rows is left as is. From
  // RowKernelLinearBf16 the feature-major result is its own input's layout, bfloat16 pairs:
  // `result` points to [RowKernelPaddedRows(rows) / 64, out / 2, 64] uint32, element (t, p) the
  // pair of features 2p (lower half) and 2p + 1 of token t, each rounded to nearest even (`out`,
  // `begin` and `end` even).
  bool feature_major_result = false;
};

// `rows` rounded up to the kernel's tile of 64 tokens: a feature-major matrix of n features holds
// RowKernelPaddedRows(rows) * n floats.
int64_t RowKernelPaddedRows(int64_t rows);

// Whether RowKernelLinear runs on this CPU (HasAvx2(): the AVX-512 kernel where HasAvx512(), the
// AVX2 one elsewhere) for this many rows of `in` inputs (a multiple of 16, at most
// kRowKernelMaxRows rows).
bool RowKernelApplies(int64_t rows, int64_t in);

// Computes `columns` for x of `rows` tokens and `in` inputs, contiguous in `x_layout` (a
// feature-major x is read up to the kernel's whole vector that holds its last row), on LibTorch's
// intra-op threads: the columns' blocks go to whichever thread is free (models/kernels/
// parallel.h), and each thread packs the input into its own thread-local workspace. Inside a
// parallel region, on the calling thread alone. Requires RowKernelApplies(rows, in).
void RowKernelLinear(const float* x, RowKernelLayout x_layout, int64_t rows, int64_t in,
                     absl::Span<const RowKernelColumns> columns);

// Whether the CPU has AVX512_BF16 (and HasAvx512()): RowKernelLinearBf16 runs on it, and
// --compute_dtype=bfloat16 is accepted.
bool HasAvx512Bf16();

// Where RowKernelLinearBf16 multiplies: "amx" (AMX's tiles, TDPBF16PS, in groups of 32 weight
// rows and 32 tokens: Intel Sapphire Rapids and later, unless ATTNSCOPE_DISABLE_AMX is set; the
// last rows of a product whose width is no multiple of 32 on VDPBF16PS), "avx512_bf16"
// (VDPBF16PS) or "none" (!HasAvx512Bf16()). Both sum each output in float32 over its bfloat16
// products, in their own orders.
const char* Bf16KernelsName();

// Whether RowKernelLinearBf16 runs for this many rows of `in` inputs: HasAvx512Bf16(), `in` a
// multiple of 32, at most kRowKernelMaxRows rows.
bool RowKernelBf16Applies(int64_t rows, int64_t in);

// RowKernelLinear with each column's weight_bf16 in place of its weight; float32 sums, bias,
// residual and activation. x is token-major float32 [rows, in], rounded to bfloat16 (round to
// nearest even) on the way in, or feature-major: the bfloat16 pairs a feature_major_result of this
// function writes ([RowKernelPaddedRows(rows) / 64, in / 2, 64] uint32), multiplied as they are.
// Requires RowKernelBf16Applies(rows, in).
void RowKernelLinearBf16(const void* x, RowKernelLayout x_layout, int64_t rows, int64_t in,
                         absl::Span<const RowKernelColumns> columns);

// Whether RowKernelScores and RowKernelContext run on this CPU (HasAvx2(), as RowKernelApplies)
// for heads of `head_dim` (a multiple of 16).
bool RowKernelAttentionApplies(int64_t head_dim);

// One attention head's scaled dot products, scores[q * scores_stride + j] = sum over d <
// head_dim of query[q * query_stride + d] * (scale * key[j * key_stride + d]), for q < queries and
// j < keys, on the calling thread. The scale is folded into the keys: exact for a power of two
// such as 1/sqrt(64), otherwise within one rounding of scaling the sum. Writes each row up to the
// kernel's whole vector that holds its last key (16 keys on AVX-512, 8 on AVX2; zeros past it):
// scores_stride at least keys rounded up to 16. Requires RowKernelAttentionApplies(head_dim).
void RowKernelScores(const float* query, int64_t query_stride, const float* key, int64_t key_stride,
                     int64_t queries, int64_t keys, int64_t head_dim, float scale, float* scores,
                     int64_t scores_stride);

// One attention head's context, context[q * context_stride + d] = sum over j < keys of
// probs[q * probs_stride + j] * value[j * value_stride + d], for q < queries and d < head_dim, on
// the calling thread. Requires RowKernelAttentionApplies(head_dim).
void RowKernelContext(const float* probs, int64_t probs_stride, const float* value,
                      int64_t value_stride, int64_t queries, int64_t keys, int64_t head_dim,
                      float* context, int64_t context_stride);

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_ROW_KERNEL_H_

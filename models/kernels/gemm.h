// Float32 matrix products of the forward passes. Sgemm is oneDNN's sgemm (dnnl_sgemm, the library
// LibTorch itself links): it reads row-major operands with arbitrary leading dimensions, so
// attention heads are multiplied in place inside the [token, hidden] projections without permute
// copies, and its AVX-512 kernels outrun the AVX2 OpenBLAS kernels that torch::mm reaches. Linear
// runs the projections on models/kernels/row_kernel.h where the CPU has AVX2 (its AVX-512 kernel
// where it has AVX-512; up to 256 rows in one call, blocks of 128 beyond), which reads the weights
// without repacking them, and on oneDNN otherwise.
#ifndef ATTNSCOPE_MODELS_GEMM_H_
#define ATTNSCOPE_MODELS_GEMM_H_

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "models/kernels/activation.h"

namespace attnscope {

// C = alpha * op(A) * op(B) + beta * C for row-major float32 matrices, op(X) = X or X^T; C is
// [m, n], op(A) [m, k], op(B) [k, n]. Throws c10::Error when oneDNN reports a failure (callers in
// models/ catch it at their Forward boundary).
void Sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc);

// nn.Linear: x [..., in] times weight [out, in] transposed, plus bias [out] (may be undefined),
// plus `residual` [..., out] when defined, then `activation`. float32, contiguous x; returns a new
// contiguous [..., out] float32 tensor. The weight is float32, or bfloat16 (--compute_dtype=
// bfloat16): then x is rounded to bfloat16 too and the products summed in float32
// (RowKernelLinearBf16 in row_kernel.h where the CPU has AVX512_BF16; elsewhere the same rounding
// on oneDNN's float32 kernels, slower).
torch::Tensor Linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                     const torch::Tensor& residual = torch::Tensor(),
                     Activation activation = Activation::kNone);

// A transformer layer's feed-forward block, Linear(act(Linear(x, up_weight, up_bias)),
// down_weight, down_bias, residual) with act = `activation` (BERT's and GPT-2's MLP): x [..., in],
// up_weight [inner, in], down_weight [out, inner], biases [inner] and [out] (either may be
// undefined), residual [..., out] or undefined; returns a new [..., out] float32 tensor. Where the
// row kernel runs both products (float32 weights with in and inner multiples of 16, or bfloat16
// weights with multiples of 32 where RowKernelBf16Applies), it runs both on each block of rows it
// takes in one call (all rows up to kRowKernelMaxRows, kRowKernelBlockRows beyond), and the
// block's [inner, rows] activations between them stay in its feature-major layout (bfloat16 pairs
// for bfloat16 weights, rounded as the second product would round them), which skips transposing
// them out of the first product and back into the second; otherwise it is the two Linear calls.
// The same bits as the two calls either way.
torch::Tensor FeedForward(const torch::Tensor& x, const torch::Tensor& up_weight,
                          const torch::Tensor& up_bias, Activation activation,
                          const torch::Tensor& down_weight, const torch::Tensor& down_bias,
                          const torch::Tensor& residual);

// Linear for several weights of one input at once (the query, key and value projections):
// returns x * weights[i]^T + biases[i] for each i, [..., out_i]. A bias may be an undefined tensor;
// `biases` has one entry per weight; the weights share one dtype (float32 or bfloat16, as Linear).
// The products share one split of their output columns across threads, which is faster than
// separate calls for small products.
std::vector<torch::Tensor> LinearGroup(const torch::Tensor& x,
                                       absl::Span<const torch::Tensor> weights,
                                       absl::Span<const torch::Tensor> biases);

// Re-executes the running program (/proc/self/exe, same argv) with the environment LibTorch's
// libraries read only when they are loaded, before main(): OMP_WAIT_POLICY=PASSIVE unless the
// environment sets OMP_WAIT_POLICY, and OPENBLAS_CORETYPE where OpenBlasCoreTypeOverride()
// (blas_check.h) names one. Returns only when it does not re-execute (nothing to set, or exec
// failed). Call first thing in main().
//
// Why OMP_WAIT_POLICY: libgomp's default lets idle OpenMP threads spin between parallel regions.
// When the cores are shared (other requests, other processes, replicas on one host), a thread
// spinning at a barrier burns the time slice its partner needs, and a BERT-base forward pass
// measured 3-4 times slower here. Why OPENBLAS_CORETYPE: see OpenBlasCoreTypeFor.
void ReexecWithRuntimeEnvironment(char** argv);

// Makes glibc malloc keep freed memory for reuse instead of returning it to the kernel: blocks are
// served from the heap at any size (no mmap per block) and the heap is never trimmed. Call first
// thing in main(), in processes that run forward passes over and over.
//
// Why: a forward pass allocates the same few MB of activations every time. With glibc's defaults
// large blocks are mapped and unmapped per call (and the top of the heap trimmed), so every call
// page-faults all of them in again; on the virtual machines this runs on a page fault costs several
// microseconds, and this made a BERT-base GetAttention 15-20 ms (about 10%) slower. The cost is
// that the process keeps its peak heap size, as servers with tcmalloc or jemalloc do; in two
// arenas, so that the threads that take turns at the passes do not each keep a peak of their own.
void RetainFreedHeapMemory();

// Sets the number of threads LibTorch's and oneDNN's OpenMP regions use (0 = every core), once
// per process; later calls do nothing. Returns the number in effect.
int ConfigureIntraOpThreads(int num_threads);

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_GEMM_H_

// Float32 LayerNorm, attention softmax and the element-wise end of a product for the forward
// passes, on AVX-512 where the CPU has it, on AVX2 and FMA where it has those, and on LibTorch's
// own kernels otherwise.
//
// Why our own: at BERT-base's 128 tokens LibTorch's layer_norm and softmax cost 50 and 100 us a
// call here, mostly dispatch, allocation and a parallel region each, against 10-20 us of work;
// these run inside the regions the forward pass already has (softmax on each head right after its
// scores, while they are in cache).
#ifndef ATTNSCOPE_MODELS_FUSED_OPS_H_
#define ATTNSCOPE_MODELS_FUSED_OPS_H_

#include <torch/types.h>

#include <cstdint>

#include "models/kernels/activation.h"

namespace attnscope {

// Whether the environment variable `name` switches something off: set to any value but "" and
// "0" (so that ATTNSCOPE_DISABLE_AVX512=0 leaves AVX-512 on).
bool DisabledByEnvironment(const char* name);

// Whether the CPU has AVX-512F and neither ATTNSCOPE_DISABLE_AVX512 nor ATTNSCOPE_DISABLE_AVX2
// disables it (DisabledByEnvironment): the switch for models/'s AVX-512 kernels. Read once per
// process; tests set the variable to run the portable path.
bool HasAvx512();

// Whether the CPU has AVX2 and FMA and ATTNSCOPE_DISABLE_AVX2 does not disable it: the switch for
// the AVX2 kernels that CPUs without AVX-512 run (where HasAvx512(), its kernels run instead).
// ATTNSCOPE_DISABLE_AVX2 also turns HasAvx512() off, so that tests reach LibTorch's own
// operations, the path of CPUs with neither.
bool HasAvx2();

// The kernels the forward passes run on, as HasAvx512() and HasAvx2() choose: "avx512", "avx2" or
// "libtorch" (products on oneDNN without AVX2). For the server's start-up log and its
// attnscope_kernels_info metric.
const char* KernelsName();

// result[t][n] = activation(result[t][n] + bias[n] + residual[t][n]) for t < rows, n < columns,
// with `stride` floats between rows of result and residual; bias or residual may be null (nothing
// added). The end of a product that oneDNN computed without them. Single-threaded. Requires
// HasAvx2().
void BiasResidualActivation(int64_t rows, int64_t columns, int64_t stride, const float* bias,
                            const float* residual, Activation activation, float* result);

// torch.nn.functional.layer_norm over the last dimension: (x - mean) / sqrt(var + eps) * weight +
// bias, with the biased variance. x float32 [..., hidden], contiguous; weight and bias [hidden].
// Returns a new tensor shaped like x. Parallel over rows unless called inside a parallel region.
torch::Tensor LayerNorm(const torch::Tensor& x, const torch::Tensor& weight,
                        const torch::Tensor& bias, double eps);

// Softmax of each of `rows` rows of `columns` scores (row-major, row stride `columns`), after
// adding `additive_mask` [columns] to every row when it is not null, written to `probs` (same
// layout; may not alias `scores`). Keys masked with float32's lowest value get exactly 0, as in
// torch.softmax. Single-threaded: call it from inside a parallel region, one head per call.
void SoftmaxRows(const float* scores, const float* additive_mask, int64_t rows, int64_t columns,
                 float* probs);

// Copies `count` floats to `destination` with non-temporal (streaming) stores where the CPU has
// AVX-512 (or AVX2) and `destination` is 64-byte (32-byte) aligned, a plain copy otherwise. For
// results that are written once and not read back soon (attention probabilities kept for the
// caller): the stores skip the cache, so they neither read the destination's lines first nor evict
// the working set.
void CopyToOutput(const float* source, int64_t count, float* destination);

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_FUSED_OPS_H_

// The activations the products of models/kernels apply to their results in the same pass that
// writes them (gemm.h's Linear, row_kernel.h's RowKernelLinear).
#ifndef ATTNSCOPE_MODELS_KERNELS_ACTIVATION_H_
#define ATTNSCOPE_MODELS_KERNELS_ACTIVATION_H_

namespace attnscope {

enum class Activation {
  kNone,
  // Exact-erf GELU, 0.5 x (1 + erf(x / sqrt(2))): BERT's "gelu", torch.nn.GELU()
  // (avx512::GeluErf).
  kGelu,
  // The tanh approximation, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) (Hendrycks and
  // Gimpel 2016): GPT-2's "gelu_new", "gelu_pytorch_tanh", torch.nn.GELU(approximate="tanh")
  // (avx512::GeluTanh).
  kGeluTanh,
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_KERNELS_ACTIVATION_H_

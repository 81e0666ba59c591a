#include "models/kernels/gemm.h"

#include <ATen/Parallel.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <thread>

#include "dnnl.h"
#include "models/kernels/blas_check.h"
#include "models/kernels/fused_ops.h"
#include "models/kernels/row_kernel.h"

namespace attnscope {
namespace {

// Column blocks of Linear's per-thread products: whole AVX-512 vectors, and not so narrow that a
// thread's product is dominated by its packing overhead.
constexpr int64_t kColumnAlignment = 16;
constexpr int64_t kMinColumnsPerThread = 64;
// glibc's cap on M_MMAP_THRESHOLD (HEAP_MAX_SIZE / 2 on 64-bit): larger blocks are mapped anyway.
constexpr int kLargestHeapBlock = 32 * 1024 * 1024;
// Each arena keeps its own peak, and glibc gives threads up to 8 arenas per core: 64 server
// threads that had each run a batch of attribution passes, one at a time, grew the server by
// 145 MB in 16 arenas, by 75 MB in two. Two: the passes run on two threads at once at most (the
// ForwardBatcher's and the one whose ComputeGate turn it is).
constexpr int kHeapArenas = 2;

// One x * weight^T (+ bias, + residual) product of a group.
struct Product {
  torch::Tensor weight;    // [out, in]
  torch::Tensor bias;      // [out], or undefined
  torch::Tensor residual;  // [..., out] like the result, or undefined
  torch::Tensor result;    // [..., out], uninitialised until RunProducts
  Activation activation;
};

void CheckWeight(const torch::Tensor& weight, int64_t in) {
  TORCH_CHECK(
      weight.is_contiguous() && weight.dim() == 2 && weight.size(1) == in &&
          (weight.scalar_type() == torch::kFloat32 || weight.scalar_type() == torch::kBFloat16),
      "Linear needs a contiguous float32 or bfloat16 [out, ", in, "] weight");
}

// The product of an input of `x_sizes` [..., in] (and x's dtype and device in `options`).
Product MakeProduct(at::IntArrayRef x_sizes, const torch::TensorOptions& options,
                    const torch::Tensor& weight, const torch::Tensor& bias,
                    const torch::Tensor& residual, Activation activation) {
  CheckWeight(weight, x_sizes.back());
  std::vector<int64_t> shape = x_sizes.vec();
  shape.back() = weight.size(0);
  return {weight, bias, residual.defined() ? residual.contiguous() : residual,
          torch::empty(shape, options), activation};
}

Product MakeProduct(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                    const torch::Tensor& residual, Activation activation) {
  return MakeProduct(x.sizes(), x.options(), weight, bias, residual, activation);
}

// Calls body(begin, end) once per thread, each with an equal share of `columns` concatenated output
// columns (whole AVX-512 vectors), or once on the calling thread with all of them where there are
// no threads to spare or the products are too narrow to split.
//
// Why split columns: oneDNN splits a product over its m and n blocks only, and with the few rows of
// one sequence it ran [128, 3072] x [3072, 768] on one thread, and [128, 768] x [768, 768] at
// 70-80% of two threads' rate. A column share is contiguous rows of the weights, and a group shares
// one parallel region, so its small products do not each pay a fork and join.
template <typename Body>
void SplitColumns(int64_t columns, const Body& body) {
  const int64_t threads = at::get_num_threads();
  if (threads == 1 || at::in_parallel_region() || columns < kMinColumnsPerThread * 2) {
    body(0, columns);
    return;
  }
  const int64_t share = (columns + threads - 1) / threads;
  const int64_t grain = (share + kColumnAlignment - 1) / kColumnAlignment * kColumnAlignment;
  at::parallel_for(0, columns, grain, body);
}

int64_t TotalColumns(const std::vector<Product>& products) {
  int64_t columns = 0;
  for (const Product& p : products) columns += p.weight.size(0);
  return columns;
}

// Calls share(i, from, to) for each product i with output columns [from, to) of its own inside
// [begin, end) of the products' concatenated columns.
template <typename Share>
void ForEachShare(const std::vector<Product>& products, int64_t begin, int64_t end,
                  const Share& share) {
  int64_t first_column = 0;  // of product i in the concatenation
  for (size_t i = 0; i < products.size(); ++i) {
    const int64_t out = products[i].weight.size(0);
    const int64_t from = std::max(begin, first_column) - first_column;
    const int64_t to = std::min(end, first_column + out) - first_column;
    if (from < to) share(i, from, to);
    first_column += out;
  }
}

// The rows of `rows` that the row kernel takes in one call: all of them up to kRowKernelMaxRows,
// blocks of kRowKernelBlockRows beyond (of kRowKernelMaxRows for bfloat16 weights, which are half
// the bytes to read again: blocks of 128 rows were no faster at 512 tokens).
int64_t RowBlock(int64_t rows, bool bf16) {
  if (rows <= kRowKernelMaxRows) return rows;
  return bf16 ? kRowKernelMaxRows : kRowKernelBlockRows;
}

// Calls run(first_row, block_rows) for consecutive blocks of RowBlock(rows, bf16) rows.
template <typename Run>
void ForEachRowBlock(int64_t rows, bool bf16, const Run& run) {
  const int64_t block = RowBlock(rows, bf16);
  for (int64_t first_row = 0; first_row < rows; first_row += block) {
    run(first_row, std::min(block, rows - first_row));
  }
}

// Runs the products of rows [first_row, first_row + rows) of x [..., in] on RowKernelLinear, or on
// RowKernelLinearBf16 when the weights are bfloat16, into the same rows of each result (adding the
// same rows of each residual). A feature-major x or result (RowKernelLayout; bfloat16 pairs for
// bfloat16 weights) holds only those rows, from its start.
void RunOnRowKernel(const torch::Tensor& x, int64_t first_row, int64_t rows, int64_t in,
                    const std::vector<Product>& products,
                    RowKernelLayout x_layout = RowKernelLayout::kTokenMajor,
                    RowKernelLayout result_layout = RowKernelLayout::kTokenMajor) {
  const bool bf16 = products[0].weight.scalar_type() == torch::kBFloat16;
  const bool feature_major_result = result_layout == RowKernelLayout::kFeatureMajor;
  std::vector<RowKernelColumns> all;
  for (const Product& p : products) {
    const int64_t out = p.weight.size(0);
    const int64_t offset = first_row * out;
    RowKernelColumns c{bf16 ? nullptr : p.weight.data_ptr<float>(),
                       p.bias.defined() ? p.bias.data_ptr<float>() : nullptr,
                       p.residual.defined() ? p.residual.data_ptr<float>() + offset : nullptr,
                       p.result.data_ptr<float>() + (feature_major_result ? 0 : offset),
                       out,
                       /*begin=*/0,
                       /*end=*/out,
                       p.activation};
    c.feature_major_result = feature_major_result;
    if (bf16) {
      c.weight_bf16 = reinterpret_cast<const uint16_t*>(p.weight.data_ptr<at::BFloat16>());
    }
    all.push_back(c);
  }
  const float* x_data =
      x.data_ptr<float>() + (x_layout == RowKernelLayout::kTokenMajor ? first_row * in : 0);
  if (bf16) {
    RowKernelLinearBf16(x_data, x_layout, rows, in, all);
  } else {
    RowKernelLinear(x_data, x_layout, rows, in, all);
  }
}

// Runs the products of one input x [rows, in] on oneDNN. Where the CPU has AVX2, each thread then
// adds the bias and residual and applies the activation to its own columns while they are in cache
// (BiasResidualActivation); elsewhere oneDNN accumulates onto a copy of the bias and residual, and
// LibTorch applies the activation. Unsplit (one call per product), oneDNN uses its own threads.
void RunOnOneDnn(const torch::Tensor& x, int64_t rows, int64_t in,
                 const std::vector<Product>& products) {
  const bool fused_end = HasAvx2();
  std::vector<float> betas;
  for (const Product& p : products) {
    if (fused_end) {
      betas.push_back(0.0f);
      continue;
    }
    if (p.residual.defined()) {
      if (p.bias.defined()) {
        torch::Tensor result = p.result;  // add_out takes a mutable handle
        torch::add_out(result, p.residual, p.bias);
      } else {
        p.result.copy_(p.residual);
      }
    } else if (p.bias.defined()) {
      p.result.copy_(p.bias.expand_as(p.result));
    }
    betas.push_back(p.residual.defined() || p.bias.defined() ? 1.0f : 0.0f);
  }
  const float* x_data = x.data_ptr<float>();
  SplitColumns(TotalColumns(products), [&](int64_t begin, int64_t end) {
    ForEachShare(products, begin, end, [&](size_t i, int64_t from, int64_t to) {
      const Product& p = products[i];
      const int64_t out = p.weight.size(0);
      float* result = p.result.data_ptr<float>() + from;
      Sgemm(/*transpose_a=*/false, /*transpose_b=*/true, rows, to - from, in, /*alpha=*/1.0f,
            x_data, in, p.weight.data_ptr<float>() + from * in, in, betas[i], result, out);
      if (fused_end) {
        BiasResidualActivation(rows, to - from, /*stride=*/out,
                               p.bias.defined() ? p.bias.data_ptr<float>() + from : nullptr,
                               p.residual.defined() ? p.residual.data_ptr<float>() + from : nullptr,
                               p.activation, result);
      }
    });
  });
  if (fused_end) return;
  for (const Product& p : products) {
    torch::Tensor result = p.result;  // gelu_ takes a mutable handle
    if (p.activation == Activation::kGelu) {
      torch::gelu_(result);
    } else if (p.activation == Activation::kGeluTanh) {
      torch::gelu_(result, "tanh");
    }
  }
}

// bfloat16 weights: the row kernel (in blocks, ForEachRowBlock). Where it does not apply (an input
// width that is no multiple of 32), the same arithmetic in float32 on oneDNN: the input and the
// weights rounded to bfloat16, then multiplied exactly.
void RunBf16Products(const torch::Tensor& x, int64_t rows, int64_t in,
                     const std::vector<Product>& products) {
  if (RowKernelBf16Applies(RowBlock(rows, /*bf16=*/true), in)) {
    ForEachRowBlock(rows, /*bf16=*/true, [&](int64_t first_row, int64_t block_rows) {
      RunOnRowKernel(x, first_row, block_rows, in, products);
    });
    return;
  }
  std::vector<Product> widened = products;
  for (Product& p : widened) p.weight = p.weight.to(torch::kFloat32);
  RunOnOneDnn(x.to(torch::kBFloat16).to(torch::kFloat32), rows, in, widened);
}

void RunProducts(const torch::Tensor& x, const std::vector<Product>& products) {
  TORCH_CHECK(x.is_contiguous(), "Linear needs a contiguous input");
  const int64_t in = x.size(-1);
  const int64_t rows = x.numel() / in;
  if (rows == 0) return;
  const torch::ScalarType dtype = products[0].weight.scalar_type();
  for (const Product& p : products) {
    TORCH_CHECK(p.weight.scalar_type() == dtype, "LinearGroup needs weights of one dtype");
  }
  if (dtype == torch::kBFloat16) {
    RunBf16Products(x, rows, in, products);
  } else if (RowKernelApplies(RowBlock(rows, /*bf16=*/false), in)) {
    ForEachRowBlock(rows, /*bf16=*/false, [&](int64_t first_row, int64_t block_rows) {
      RunOnRowKernel(x, first_row, block_rows, in, products);
    });
  } else {
    RunOnOneDnn(x, rows, in, products);
  }
}

}  // namespace

void Sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc) {
  const dnnl_status_t status = dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k,
                                          alpha, a, lda, b, ldb, beta, c, ldc);
  TORCH_CHECK(status == dnnl_success, "dnnl_sgemm failed with status ", static_cast<int>(status),
              " for m=", m, " n=", n, " k=", k);
}

torch::Tensor Linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                     const torch::Tensor& residual, Activation activation) {
  const std::vector<Product> products = {MakeProduct(x, weight, bias, residual, activation)};
  RunProducts(x, products);
  return products[0].result;
}

torch::Tensor FeedForward(const torch::Tensor& x, const torch::Tensor& up_weight,
                          const torch::Tensor& up_bias, Activation activation,
                          const torch::Tensor& down_weight, const torch::Tensor& down_bias,
                          const torch::Tensor& residual) {
  const int64_t in = x.size(-1);
  const int64_t rows = in > 0 ? x.numel() / in : 0;
  const int64_t inner = up_weight.size(0);
  const torch::ScalarType dtype = up_weight.scalar_type();
  const bool bf16 = dtype == torch::kBFloat16;
  const int64_t block = RowBlock(rows, bf16);
  const bool fused =
      x.is_contiguous() && down_weight.scalar_type() == dtype &&
      (dtype == torch::kFloat32 ? RowKernelApplies(block, in) && RowKernelApplies(block, inner)
       : dtype == torch::kBFloat16
           ? RowKernelBf16Applies(block, in) && RowKernelBf16Applies(block, inner)
           : false);
  if (!fused) {
    return Linear(Linear(x, up_weight, up_bias, /*residual=*/torch::Tensor(), activation),
                  down_weight, down_bias, residual);
  }
  // The inner activations of a block of rows stay in the kernel's own feature-major layout between
  // the two products (in bfloat16 pairs for bfloat16 weights: half the floats, each holding two).
  CheckWeight(up_weight, in);
  const int64_t inner_floats = dtype == torch::kBFloat16 ? inner / 2 : inner;
  const std::vector<Product> up = {
      {up_weight, up_bias, /*residual=*/torch::Tensor(),
       torch::empty({RowKernelPaddedRows(block) * inner_floats}, x.options()), activation}};
  std::vector<int64_t> inner_sizes = x.sizes().vec();
  inner_sizes.back() = inner;
  const std::vector<Product> down = {
      MakeProduct(inner_sizes, x.options(), down_weight, down_bias, residual, Activation::kNone)};
  ForEachRowBlock(rows, bf16, [&](int64_t first_row, int64_t block_rows) {
    RunOnRowKernel(x, first_row, block_rows, in, up, RowKernelLayout::kTokenMajor,
                   /*result_layout=*/RowKernelLayout::kFeatureMajor);
    RunOnRowKernel(up[0].result, first_row, block_rows, inner, down,
                   /*x_layout=*/RowKernelLayout::kFeatureMajor);
  });
  return down[0].result;
}

std::vector<torch::Tensor> LinearGroup(const torch::Tensor& x,
                                       absl::Span<const torch::Tensor> weights,
                                       absl::Span<const torch::Tensor> biases) {
  TORCH_CHECK(biases.size() == weights.size(), "LinearGroup needs one bias per weight");
  std::vector<Product> products;
  for (size_t i = 0; i < weights.size(); ++i) {
    products.push_back(
        MakeProduct(x, weights[i], biases[i], /*residual=*/torch::Tensor(), Activation::kNone));
  }
  RunProducts(x, products);
  std::vector<torch::Tensor> results;
  for (const Product& p : products) results.push_back(p.result);
  return results;
}

void ReexecWithRuntimeEnvironment(char** argv) {
  bool changed = false;
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/1);
    changed = true;
  }
  if (const std::string core_type = OpenBlasCoreTypeOverride(); !core_type.empty()) {
    setenv("OPENBLAS_CORETYPE", core_type.c_str(), /*overwrite=*/1);
    changed = true;
  }
  if (!changed) return;
  execv("/proc/self/exe", argv);
  // exec failed: carry on with the libraries' defaults rather than not starting at all.
  std::fprintf(
      stderr,
      "attnscope: could not re-execute with OMP_WAIT_POLICY and OPENBLAS_CORETYPE set: %s\n",
      std::strerror(errno));
}

void RetainFreedHeapMemory() {
  // Fixed values also switch off glibc's dynamic mmap threshold.
  mallopt(M_MMAP_THRESHOLD, kLargestHeapBlock);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  mallopt(M_ARENA_MAX, kHeapArenas);
}

int ConfigureIntraOpThreads(int num_threads) {
  static std::once_flag once;
  std::call_once(once, [num_threads] {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    at::set_num_threads(num_threads > 0 ? num_threads : cores);
  });
  return at::get_num_threads();
}

}  // namespace attnscope

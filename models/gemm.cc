#include "models/gemm.h"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>

#include "dnnl.h"

namespace attnscope {
namespace {

// Column blocks of Linear's per-thread products: whole AVX-512 vectors, and not so narrow that a
// thread's product is dominated by its packing overhead.
constexpr int64_t kColumnAlignment = 16;
constexpr int64_t kMinColumnsPerThread = 64;
// glibc's cap on M_MMAP_THRESHOLD (HEAP_MAX_SIZE / 2 on 64-bit): larger blocks are mapped anyway.
constexpr int kLargestHeapBlock = 32 * 1024 * 1024;

// One x * weight^T product of a group, accumulated onto `result` (beta 1) or written (beta 0).
struct Product {
  const float* weight;  // [out, in]
  float* result;        // [rows, out]
  int64_t out;
  float beta;
};

// The output buffer of one product, holding the bias (and residual) that the product accumulates
// onto, or uninitialised.
torch::Tensor InitialOutput(const torch::Tensor& x, const torch::Tensor& weight,
                            const torch::Tensor& bias, const torch::Tensor& residual,
                            std::vector<Product>* products) {
  TORCH_CHECK(weight.is_contiguous() && weight.dim() == 2 && weight.size(1) == x.size(-1),
              "Linear needs a contiguous [out, ", x.size(-1), "] weight");
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = weight.size(0);
  torch::Tensor result;
  if (residual.defined()) {
    result = bias.defined() ? residual + bias : residual.clone();
  } else if (bias.defined()) {
    // A fresh buffer: expand(...).contiguous() would alias the bias itself when there is one row.
    result = torch::empty(shape, x.options()).copy_(bias.expand(shape));
  } else {
    result = torch::empty(shape, x.options());
  }
  products->push_back({weight.data_ptr<float>(), result.data_ptr<float>(), weight.size(0),
                       residual.defined() || bias.defined() ? 1.0f : 0.0f});
  return result;
}

// Runs the products of one input x [rows, in].
//
// oneDNN splits a product over its m and n blocks only: with the few rows of one sequence it ran
// [128, 3072] x [3072, 768] on one thread, and [128, 768] x [768, 768] at 70-80% of two threads'
// rate. So each thread here takes an equal share of the concatenated output columns (contiguous
// rows of the weights) and runs one-thread products on them (oneDNN does not nest inside an
// OpenMP region); a group shares one parallel region, so its small products do not each pay a
// fork and join.
void RunProducts(const torch::Tensor& x, const std::vector<Product>& products) {
  TORCH_CHECK(x.is_contiguous(), "Linear needs a contiguous input");
  const int64_t in = x.size(-1);
  const int64_t rows = x.numel() / in;
  const float* x_data = x.data_ptr<float>();
  int64_t columns = 0;
  for (const Product& p : products) columns += p.out;
  const int64_t threads = at::get_num_threads();
  if (threads == 1 || at::in_parallel_region() || columns < kMinColumnsPerThread * 2) {
    // oneDNN's own threading, where there are threads to spare.
    for (const Product& p : products) {
      Sgemm(/*transpose_a=*/false, /*transpose_b=*/true, rows, p.out, in, /*alpha=*/1.0f, x_data,
            in, p.weight, in, p.beta, p.result, p.out);
    }
    return;
  }
  const int64_t share = (columns + threads - 1) / threads;
  const int64_t grain = (share + kColumnAlignment - 1) / kColumnAlignment * kColumnAlignment;
  at::parallel_for(0, columns, grain, [&](int64_t begin, int64_t end) {
    int64_t first_column = 0;  // of product p in the concatenation
    for (const Product& p : products) {
      const int64_t from = std::max(begin, first_column) - first_column;
      const int64_t to = std::min(end, first_column + p.out) - first_column;
      if (from < to) {
        Sgemm(/*transpose_a=*/false, /*transpose_b=*/true, rows, to - from, in, /*alpha=*/1.0f,
              x_data, in, p.weight + from * in, in, p.beta, p.result + from, p.out);
      }
      first_column += p.out;
    }
  });
}

}  // namespace

void Sgemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc) {
  const dnnl_status_t status = dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n,
                                          k, alpha, a, lda, b, ldb, beta, c, ldc);
  TORCH_CHECK(status == dnnl_success, "dnnl_sgemm failed with status ", static_cast<int>(status),
              " for m=", m, " n=", n, " k=", k);
}

torch::Tensor Linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                     const torch::Tensor& residual) {
  std::vector<Product> products;
  torch::Tensor result = InitialOutput(x, weight, bias, residual, &products);
  RunProducts(x, products);
  return result;
}

std::vector<torch::Tensor> LinearGroup(const torch::Tensor& x,
                                       absl::Span<const torch::Tensor> weights,
                                       absl::Span<const torch::Tensor> biases) {
  TORCH_CHECK(biases.size() == weights.size(), "LinearGroup needs one bias per weight");
  std::vector<Product> products;
  std::vector<torch::Tensor> results;
  for (size_t i = 0; i < weights.size(); ++i) {
    results.push_back(InitialOutput(x, weights[i], biases[i], /*residual=*/torch::Tensor(), &products));
  }
  RunProducts(x, products);
  return results;
}

void ReexecWithPassiveOpenMpWait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/1);
  execv("/proc/self/exe", argv);
  // exec failed: carry on with the default policy rather than not starting at all.
  std::fprintf(stderr, "attnscope: could not re-execute with OMP_WAIT_POLICY=PASSIVE: %s\n",
               std::strerror(errno));
}

void RetainFreedHeapMemory() {
  // Fixed values also switch off glibc's dynamic mmap threshold.
  mallopt(M_MMAP_THRESHOLD, kLargestHeapBlock);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
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

#include "models/gemm.h"

#include <malloc.h>
#include <unistd.h>

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
  TORCH_CHECK(x.is_contiguous() && weight.is_contiguous(), "Linear needs contiguous operands");
  const int64_t in = weight.size(1);
  const int64_t out = weight.size(0);
  const int64_t rows = x.numel() / in;
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = out;
  torch::Tensor result;
  float beta = 0.0f;
  if (residual.defined()) {
    result = bias.defined() ? residual + bias : residual.clone();
    beta = 1.0f;
  } else if (bias.defined()) {
    // A fresh buffer: expand(...).contiguous() would alias the bias itself when there is one row.
    result = torch::empty(shape, x.options()).copy_(bias.expand(shape));
    beta = 1.0f;
  } else {
    result = torch::empty(shape, x.options());
  }
  const float* x_data = x.data_ptr<float>();
  const float* weight_data = weight.data_ptr<float>();
  float* result_data = result.data_ptr<float>();
  // oneDNN splits a product over its m and n blocks only: with the few rows of one sequence it
  // ran [128, 3072] x [3072, 768] on one thread, and the other products at 70-80% of two threads'
  // rate. Each thread here takes whole output columns (contiguous rows of `weight`) and runs a
  // one-thread product on them (oneDNN does not nest inside an OpenMP region).
  const int64_t threads = at::get_num_threads();
  const int64_t columns = (out + threads - 1) / threads;
  const int64_t grain = threads > 1 && !at::in_parallel_region() && out >= kMinColumnsPerThread * 2
                            ? (columns + kColumnAlignment - 1) / kColumnAlignment * kColumnAlignment
                            : out;
  at::parallel_for(0, out, grain, [&](int64_t begin, int64_t end) {
    Sgemm(/*transpose_a=*/false, /*transpose_b=*/true, rows, end - begin, in, /*alpha=*/1.0f,
          x_data, in, weight_data + begin * in, in, beta, result_data + begin, out);
  });
  return result;
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

#include "models/gemm.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "dnnl.h"

namespace attnscope {

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
  Sgemm(/*transpose_a=*/false, /*transpose_b=*/true, rows, out, in, /*alpha=*/1.0f,
        x.data_ptr<float>(), in, weight.data_ptr<float>(), in, beta, result.data_ptr<float>(), out);
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

int ConfigureIntraOpThreads(int num_threads) {
  static std::once_flag once;
  std::call_once(once, [num_threads] {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    at::set_num_threads(num_threads > 0 ? num_threads : cores);
  });
  return at::get_num_threads();
}

}  // namespace attnscope

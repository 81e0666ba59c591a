#include "models/kernels/fused_ops.h"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "models/kernels/avx512_math.h"

namespace attnscope {
namespace {

// Below this many elements a LayerNorm runs on the calling thread: waking the other threads costs
// more (about 16 us per parallel region here, against about 10 us for BERT-base's 128 x 768).
constexpr int64_t kParallelLayerNormElements = int64_t{1} << 18;
constexpr int64_t kLayerNormRowsPerTask = 16;

#pragma GCC push_options
#pragma GCC target("avx512f")
// GCC 12's AVX-512 headers trip its own -Wmaybe-uninitialized (the self-initialised "undefined"
// vectors behind set1 and masked loads, GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Two passes for the moments (mean, then the mean square deviation), as exact as torch's Welford
// rows at this width, then one for the output.
void LayerNormRowsAvx512(const float* x, int64_t rows, int64_t hidden, const float* weight,
                         const float* bias, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * hidden;
    float* out = y + r * hidden;
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < hidden; j += 16) {
      sum = _mm512_add_ps(sum, _mm512_maskz_loadu_ps(avx512::TailMask(hidden - j), in + j));
    }
    const float mean = _mm512_reduce_add_ps(sum) / static_cast<float>(hidden);
    const __m512 mean_v = _mm512_set1_ps(mean);
    __m512 squares = _mm512_setzero_ps();
    for (int64_t j = 0; j < hidden; j += 16) {
      const __mmask16 mask = avx512::TailMask(hidden - j);
      const __m512 d = _mm512_maskz_sub_ps(mask, _mm512_maskz_loadu_ps(mask, in + j), mean_v);
      squares = _mm512_fmadd_ps(d, d, squares);
    }
    const double variance = _mm512_reduce_add_ps(squares) / static_cast<double>(hidden);
    const __m512 rstd = _mm512_set1_ps(static_cast<float>(1.0 / std::sqrt(variance + eps)));
    for (int64_t j = 0; j < hidden; j += 16) {
      const __mmask16 mask = avx512::TailMask(hidden - j);
      const __m512 normalized =
          _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, in + j), mean_v), rstd);
      _mm512_mask_storeu_ps(out + j, mask,
                            _mm512_fmadd_ps(normalized, _mm512_maskz_loadu_ps(mask, weight + j),
                                            _mm512_maskz_loadu_ps(mask, bias + j)));
    }
  }
}

void SoftmaxRowsAvx512(const float* scores, const float* additive_mask, int64_t rows,
                       int64_t columns, float* probs) {
  const __m512 lowest = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = scores + r * columns;
    float* out = probs + r * columns;
    __m512 max = lowest;
    for (int64_t j = 0; j < columns; j += 16) {
      const __mmask16 mask = avx512::TailMask(columns - j);
      __m512 v = _mm512_mask_loadu_ps(lowest, mask, in + j);
      if (additive_mask != nullptr) {
        v = _mm512_mask_add_ps(v, mask, v, _mm512_maskz_loadu_ps(mask, additive_mask + j));
      }
      _mm512_mask_storeu_ps(out + j, mask, v);
      max = _mm512_max_ps(max, v);
    }
    const __m512 row_max = _mm512_set1_ps(_mm512_reduce_max_ps(max));
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < columns; j += 16) {
      const __mmask16 mask = avx512::TailMask(columns - j);
      const __m512 e = avx512::Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, out + j), row_max));
      _mm512_mask_storeu_ps(out + j, mask, e);
      sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(mask, e));
    }
    const __m512 inverse = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (int64_t j = 0; j < columns; j += 16) {
      const __mmask16 mask = avx512::TailMask(columns - j);
      _mm512_mask_storeu_ps(out + j, mask,
                            _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, out + j), inverse));
    }
  }
}

void StreamCopyAvx512(const float* source, int64_t count, float* destination) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    _mm512_stream_ps(destination + i, _mm512_loadu_ps(source + i));
  }
  for (; i < count; ++i) destination[i] = source[i];
  // Streaming stores are weakly ordered: make them visible before whoever reads the result next.
  _mm_sfence();
}

#pragma GCC diagnostic pop
#pragma GCC pop_options

}  // namespace

bool HasAvx512() {
  static const bool has =
      __builtin_cpu_supports("avx512f") && std::getenv("ATTNSCOPE_DISABLE_AVX512") == nullptr;
  return has;
}

torch::Tensor LayerNorm(const torch::Tensor& x, const torch::Tensor& weight,
                        const torch::Tensor& bias, double eps) {
  const int64_t hidden = x.size(-1);
  if (!HasAvx512()) return torch::layer_norm(x, {hidden}, weight, bias, eps);
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32 && weight.is_contiguous() &&
                  bias.is_contiguous() && weight.numel() == hidden && bias.numel() == hidden,
              "LayerNorm needs a contiguous float32 input and [", hidden, "] weight and bias");
  torch::Tensor y = torch::empty_like(x);
  const int64_t rows = x.numel() / hidden;
  const float* x_data = x.data_ptr<float>();
  float* y_data = y.data_ptr<float>();
  auto run = [&](int64_t begin, int64_t end) {
    LayerNormRowsAvx512(x_data + begin * hidden, end - begin, hidden, weight.data_ptr<float>(),
                        bias.data_ptr<float>(), static_cast<float>(eps), y_data + begin * hidden);
  };
  if (x.numel() < kParallelLayerNormElements) {
    run(0, rows);
  } else {
    at::parallel_for(0, rows, kLayerNormRowsPerTask, run);
  }
  return y;
}

void SoftmaxRows(const float* scores, const float* additive_mask, int64_t rows, int64_t columns,
                 float* probs) {
  if (HasAvx512()) {
    SoftmaxRowsAvx512(scores, additive_mask, rows, columns, probs);
    return;
  }
  const auto options = torch::TensorOptions().dtype(torch::kFloat32);
  // from_blob never frees or writes these buffers; const_cast only to build the view.
  const torch::Tensor in = torch::from_blob(const_cast<float*>(scores), {rows, columns}, options);
  torch::Tensor out = torch::from_blob(probs, {rows, columns}, options);
  if (additive_mask == nullptr) {
    torch::softmax_out(out, in, /*dim=*/-1);
  } else {
    const torch::Tensor mask =
        torch::from_blob(const_cast<float*>(additive_mask), {columns}, options);
    torch::softmax_out(out, in + mask, /*dim=*/-1);
  }
}

void CopyToOutput(const float* source, int64_t count, float* destination) {
  if (HasAvx512() && reinterpret_cast<std::uintptr_t>(destination) % 64 == 0) {
    StreamCopyAvx512(source, count, destination);
  } else {
    std::memcpy(destination, source, static_cast<size_t>(count) * sizeof(float));
  }
}

}  // namespace attnscope

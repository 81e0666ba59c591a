#include "models/kernels/fused_ops.h"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "models/kernels/avx2_math.h"
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

#pragma GCC push_options
#pragma GCC target("avx2,fma")

// The AVX-512 kernels above on 8-lane vectors.
void LayerNormRowsAvx2(const float* x, int64_t rows, int64_t hidden, const float* weight,
                       const float* bias, float eps, float* y) {
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * hidden;
    float* out = y + r * hidden;
    __m256 sum = zero;
    for (int64_t j = 0; j < hidden; j += 8) {
      sum = _mm256_add_ps(sum, avx2::Load(in + j, hidden - j));
    }
    const float mean = avx2::ReduceAdd(sum) / static_cast<float>(hidden);
    const __m256 mean_v = _mm256_set1_ps(mean);
    __m256 squares = zero;
    for (int64_t j = 0; j < hidden; j += 8) {
      const __m256 d =
          avx2::KeepLanes(_mm256_sub_ps(avx2::Load(in + j, hidden - j), mean_v), hidden - j, zero);
      squares = _mm256_fmadd_ps(d, d, squares);
    }
    const double variance = avx2::ReduceAdd(squares) / static_cast<double>(hidden);
    const __m256 rstd = _mm256_set1_ps(static_cast<float>(1.0 / std::sqrt(variance + eps)));
    for (int64_t j = 0; j < hidden; j += 8) {
      const int64_t remaining = hidden - j;
      const __m256 normalized =
          _mm256_mul_ps(_mm256_sub_ps(avx2::Load(in + j, remaining), mean_v), rstd);
      avx2::Store(out + j, remaining,
                  _mm256_fmadd_ps(normalized, avx2::Load(weight + j, remaining),
                                  avx2::Load(bias + j, remaining)));
    }
  }
}

void SoftmaxRowsAvx2(const float* scores, const float* additive_mask, int64_t rows, int64_t columns,
                     float* probs) {
  const __m256 lowest = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = scores + r * columns;
    float* out = probs + r * columns;
    __m256 max = lowest;
    for (int64_t j = 0; j < columns; j += 8) {
      const int64_t remaining = columns - j;
      __m256 v = avx2::Load(in + j, remaining);
      if (additive_mask != nullptr) v = _mm256_add_ps(v, avx2::Load(additive_mask + j, remaining));
      avx2::Store(out + j, remaining, v);
      max = _mm256_max_ps(max, avx2::KeepLanes(v, remaining, lowest));
    }
    const __m256 row_max = _mm256_set1_ps(avx2::ReduceMax(max));
    __m256 sum = zero;
    for (int64_t j = 0; j < columns; j += 8) {
      const int64_t remaining = columns - j;
      const __m256 e = avx2::Exp(_mm256_sub_ps(avx2::Load(out + j, remaining), row_max));
      avx2::Store(out + j, remaining, e);
      sum = _mm256_add_ps(sum, avx2::KeepLanes(e, remaining, zero));
    }
    const __m256 inverse = _mm256_set1_ps(1.0f / avx2::ReduceAdd(sum));
    for (int64_t j = 0; j < columns; j += 8) {
      const int64_t remaining = columns - j;
      avx2::Store(out + j, remaining, _mm256_mul_ps(avx2::Load(out + j, remaining), inverse));
    }
  }
}

void StreamCopyAvx2(const float* source, int64_t count, float* destination) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_stream_ps(destination + i, _mm256_loadu_ps(source + i));
  }
  for (; i < count; ++i) destination[i] = source[i];
  _mm_sfence();
}

template <Activation kActivation>
void BiasResidualActivationAvx2(int64_t rows, int64_t columns, int64_t stride, const float* bias,
                                const float* residual, float* result) {
  for (int64_t t = 0; t < rows; ++t) {
    float* row = result + t * stride;
    const float* residual_row = residual != nullptr ? residual + t * stride : nullptr;
    for (int64_t n = 0; n < columns; n += 8) {
      const int64_t remaining = columns - n;
      __m256 v = avx2::Load(row + n, remaining);
      if (bias != nullptr) v = _mm256_add_ps(v, avx2::Load(bias + n, remaining));
      if (residual_row != nullptr) v = _mm256_add_ps(v, avx2::Load(residual_row + n, remaining));
      if constexpr (kActivation == Activation::kGelu) {
        v = avx2::GeluErf(v);
      } else if constexpr (kActivation == Activation::kGeluTanh) {
        v = avx2::GeluTanh(v);
      }
      avx2::Store(row + n, remaining, v);
    }
  }
}

#pragma GCC pop_options

}  // namespace

bool DisabledByEnvironment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::strcmp(value, "") != 0 && std::strcmp(value, "0") != 0;
}

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          !DisabledByEnvironment("ATTNSCOPE_DISABLE_AVX2");
  return has;
}

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f") &&
                          !DisabledByEnvironment("ATTNSCOPE_DISABLE_AVX512") &&
                          !DisabledByEnvironment("ATTNSCOPE_DISABLE_AVX2");
  return has;
}

const char* KernelsName() {
  if (HasAvx512()) return "avx512";
  return HasAvx2() ? "avx2" : "libtorch";
}

void BiasResidualActivation(int64_t rows, int64_t columns, int64_t stride, const float* bias,
                            const float* residual, Activation activation, float* result) {
  TORCH_CHECK(HasAvx2(), "BiasResidualActivation needs AVX2 and FMA");
  switch (activation) {
    case Activation::kNone:
      BiasResidualActivationAvx2<Activation::kNone>(rows, columns, stride, bias, residual, result);
      break;
    case Activation::kGelu:
      BiasResidualActivationAvx2<Activation::kGelu>(rows, columns, stride, bias, residual, result);
      break;
    case Activation::kGeluTanh:
      BiasResidualActivationAvx2<Activation::kGeluTanh>(rows, columns, stride, bias, residual,
                                                        result);
      break;
  }
}

torch::Tensor LayerNorm(const torch::Tensor& x, const torch::Tensor& weight,
                        const torch::Tensor& bias, double eps) {
  const int64_t hidden = x.size(-1);
  if (!HasAvx2()) return torch::layer_norm(x, {hidden}, weight, bias, eps);
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32 && weight.is_contiguous() &&
                  bias.is_contiguous() && weight.numel() == hidden && bias.numel() == hidden,
              "LayerNorm needs a contiguous float32 input and [", hidden, "] weight and bias");
  torch::Tensor y = torch::empty_like(x);
  const int64_t rows = x.numel() / hidden;
  const float* x_data = x.data_ptr<float>();
  float* y_data = y.data_ptr<float>();
  auto run = [&](int64_t begin, int64_t end) {
    const auto rows_kernel = HasAvx512() ? &LayerNormRowsAvx512 : &LayerNormRowsAvx2;
    rows_kernel(x_data + begin * hidden, end - begin, hidden, weight.data_ptr<float>(),
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
  if (HasAvx2()) {
    SoftmaxRowsAvx2(scores, additive_mask, rows, columns, probs);
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
  } else if (HasAvx2() && reinterpret_cast<std::uintptr_t>(destination) % 32 == 0) {
    StreamCopyAvx2(source, count, destination);
  } else {
    std::memcpy(destination, source, static_cast<size_t>(count) * sizeof(float));
  }
}

}  // namespace attnscope

#include "models/kernels/decode_attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "models/kernels/fused_ops.h"

namespace attnscope {
namespace {

constexpr int64_t kLanes = 8;

#pragma GCC push_options
#pragma GCC target("avx2,fma")

// Lane t of the result is the sum of the 8 lanes of v[t].
inline __m256 LaneSums(const __m256 v[kLanes]) {
  // hadd pairs neighbours within each 128-bit half: two rounds leave, per half, one partial sum of
  // each of four vectors; the halves then add across.
  const __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20),
                       _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

// scores[j] = scale * dot(q, keys[j]) for j < length; rows of `keys` are `row_stride` apart.
void Scores(const float* q, const float* keys, int64_t row_stride, int64_t length, int64_t head_dim,
            float scale, float* scores) {
  const __m256 scale_v = _mm256_set1_ps(scale);
  for (int64_t j0 = 0; j0 < length; j0 += kLanes) {
    const int64_t count = std::min(kLanes, length - j0);
    __m256 sums[kLanes];
    for (int64_t t = 0; t < kLanes; ++t) sums[t] = _mm256_setzero_ps();
    for (int64_t d = 0; d < head_dim; d += kLanes) {
      const __m256 q_v = _mm256_loadu_ps(q + d);
      for (int64_t t = 0; t < count; ++t) {
        sums[t] = _mm256_fmadd_ps(q_v, _mm256_loadu_ps(keys + (j0 + t) * row_stride + d), sums[t]);
      }
    }
    const __m256 dots = _mm256_mul_ps(LaneSums(sums), scale_v);
    if (count == kLanes) {
      _mm256_storeu_ps(scores + j0, dots);
    } else {
      alignas(32) float tail[kLanes];
      _mm256_store_ps(tail, dots);
      std::copy(tail, tail + count, scores + j0);
    }
  }
}

// context = sum_j probs[j] * values[j].
void WeightedValues(const float* probs, const float* values, int64_t row_stride, int64_t length,
                    int64_t head_dim, float* context) {
  // Four keys at a time into sums of their own: one running sum would make every FMA wait for the
  // previous one's result (4 cycles), which at stories260K's 8-wide heads was most of the step's
  // attention. Two vectors of the context per pass keep the 8 sums in registers.
  constexpr int64_t kKeys = 4;
  constexpr int64_t kVectors = 2;
  for (int64_t d0 = 0; d0 < head_dim; d0 += kVectors * kLanes) {
    const int64_t vectors = std::min(kVectors, (head_dim - d0) / kLanes);
    __m256 sums[kKeys][kVectors];
    for (int64_t u = 0; u < kKeys; ++u) {
      for (int64_t v = 0; v < kVectors; ++v) sums[u][v] = _mm256_setzero_ps();
    }
    int64_t j = 0;
    for (; j + kKeys <= length; j += kKeys) {
      for (int64_t u = 0; u < kKeys; ++u) {
        const __m256 p = _mm256_broadcast_ss(probs + j + u);
        const float* row = values + (j + u) * row_stride + d0;
        for (int64_t v = 0; v < vectors; ++v) {
          sums[u][v] = _mm256_fmadd_ps(p, _mm256_loadu_ps(row + v * kLanes), sums[u][v]);
        }
      }
    }
    for (; j < length; ++j) {
      const __m256 p = _mm256_broadcast_ss(probs + j);
      const float* row = values + j * row_stride + d0;
      for (int64_t v = 0; v < vectors; ++v) {
        sums[0][v] = _mm256_fmadd_ps(p, _mm256_loadu_ps(row + v * kLanes), sums[0][v]);
      }
    }
    for (int64_t v = 0; v < vectors; ++v) {
      _mm256_storeu_ps(context + d0 + v * kLanes,
                       _mm256_add_ps(_mm256_add_ps(sums[0][v], sums[1][v]),
                                     _mm256_add_ps(sums[2][v], sums[3][v])));
    }
  }
}

#pragma GCC pop_options

}  // namespace

bool DecodeAttentionApplies(const torch::Tensor& query, const torch::Tensor& keys,
                            const torch::Tensor& values) {
  if (!HasAvx2() || keys.dim() != 4 || values.sizes() != keys.sizes() || query.dim() != 3) {
    return false;
  }
  const int64_t head_dim = keys.size(3);
  const int64_t kv_heads = keys.size(1);
  return head_dim % kLanes == 0 && query.size(0) == keys.size(0) && query.size(1) == 1 &&
         query.size(2) % (kv_heads * head_dim) == 0 && query.is_contiguous() &&
         query.scalar_type() == torch::kFloat32 && keys.scalar_type() == torch::kFloat32 &&
         values.scalar_type() == torch::kFloat32 && keys.stride(3) == 1 && values.stride(3) == 1;
}

DecodeAttentionOutput DecodeAttention(const torch::Tensor& query, const torch::Tensor& keys,
                                      const torch::Tensor& values, float scale) {
  const int64_t batch = keys.size(0);
  const int64_t kv_heads = keys.size(1);
  const int64_t length = keys.size(2);
  const int64_t head_dim = keys.size(3);
  const int64_t heads = query.size(2) / head_dim;
  const int64_t group = heads / kv_heads;
  DecodeAttentionOutput out;
  out.probs = torch::empty({batch, heads, 1, length}, torch::kFloat32);
  out.context = torch::empty({batch, 1, heads * head_dim}, torch::kFloat32);
  const float* q_data = query.data_ptr<float>();
  const float* k_data = keys.data_ptr<float>();
  const float* v_data = values.data_ptr<float>();
  float* probs = out.probs.data_ptr<float>();
  float* context = out.context.data_ptr<float>();
  // SoftmaxRows may not write over its input.
  std::vector<float> scores(static_cast<size_t>(group * length));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t k = 0; k < kv_heads; ++k) {
      const float* head_keys = k_data + b * keys.stride(0) + k * keys.stride(1);
      const float* head_values = v_data + b * values.stride(0) + k * values.stride(1);
      const int64_t first = b * heads + k * group;  // the group's first query head, over the batch
      for (int64_t g = 0; g < group; ++g) {
        Scores(q_data + (first + g) * head_dim, head_keys, keys.stride(2), length, head_dim, scale,
               scores.data() + g * length);
      }
      float* group_probs = probs + first * length;
      SoftmaxRows(scores.data(), /*additive_mask=*/nullptr, group, length, group_probs);
      for (int64_t g = 0; g < group; ++g) {
        WeightedValues(group_probs + g * length, head_values, values.stride(2), length, head_dim,
                       context + (first + g) * head_dim);
      }
    }
  }
  return out;
}

}  // namespace attnscope

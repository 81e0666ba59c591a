// AVX2 and FMA building blocks of models/'s float32 kernels for CPUs without AVX-512
// (fused_ops.cc): the same formulas as avx512_math.h on 8-lane vectors. Include only from code
// compiled for AVX2 (inside #pragma GCC target("avx2,fma")) and reached only after a runtime check
// that the CPU has it (HasAvx2()).
#ifndef ATTNSCOPE_MODELS_AVX2_MATH_H_
#define ATTNSCOPE_MODELS_AVX2_MATH_H_

#include <immintrin.h>

#include <cstdint>

namespace attnscope {
namespace avx2 {

#define ATTNSCOPE_AVX2_INLINE __attribute__((always_inline, target("avx2,fma"))) inline

// The lane mask of the first min(remaining, 8) lanes (all bits set in each), for
// _mm256_maskload_ps and _mm256_maskstore_ps on the last, partial vector of a row.
ATTNSCOPE_AVX2_INLINE __m256i TailMask(int64_t remaining) {
  const int lanes = remaining >= 8 ? 8 : static_cast<int>(remaining);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Loads and stores of the 8 floats at p, or of the first `remaining` of them (zeros in the other
// lanes on load, untouched memory on store) where fewer remain. Only the tail is masked: AMD's
// VMASKMOVPS store is microcoded and an order of magnitude slower than VMOVUPS.
ATTNSCOPE_AVX2_INLINE __m256 Load(const float* p, int64_t remaining) {
  return remaining >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, TailMask(remaining));
}

ATTNSCOPE_AVX2_INLINE void Store(float* p, int64_t remaining, __m256 v) {
  if (remaining >= 8) {
    _mm256_storeu_ps(p, v);
  } else {
    _mm256_maskstore_ps(p, TailMask(remaining), v);
  }
}

// v with its lanes from `remaining` on set to `fill`.
ATTNSCOPE_AVX2_INLINE __m256 KeepLanes(__m256 v, int64_t remaining, __m256 fill) {
  return remaining >= 8 ? v : _mm256_blendv_ps(fill, v, _mm256_castsi256_ps(TailMask(remaining)));
}

ATTNSCOPE_AVX2_INLINE float ReduceAdd(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

ATTNSCOPE_AVX2_INLINE float ReduceMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Transposes the 8 x 8 matrix of r's lanes in place: r[i][j] becomes r[j][i].
ATTNSCOPE_AVX2_INLINE void Transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]);
  const __m256 t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]);
  const __m256 t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]);
  const __m256 t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]);
  const __m256 t7 = _mm256_unpackhi_ps(r[6], r[7]);
  // Columns j and j + 4 of rows 0-3 (s0-s3) and of rows 4-7 (s4-s7), one per 128-bit half.
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// p * 2^n for integral n in [-217, 128] (Exp's range), as two factors of about 2^(n/2), each a
// normal float32: AVX2 has no vscalefps, and one factor alone would leave float32's normal range
// below 2^-126. The result rounds once, where it is subnormal, as vscalefps's does.
ATTNSCOPE_AVX2_INLINE __m256 Scale(__m256 p, __m256 n) {
  const __m256i whole = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(whole, 1);
  const __m256i rest = _mm256_sub_epi32(whole, half);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 first = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
  const __m256 second = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(rest, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, first), second);
}

// e^x as avx512::Exp: x = n ln2 + r with Cody and Waite's two-part ln2, e^r by its Taylor series
// to degree 7, times 2^n. Exactly 0 below -150, +inf above 89, NaN stays NaN.
ATTNSCOPE_AVX2_INLINE __m256 Exp(__m256 x) {
  // max/min return their second operand when either is NaN: x second keeps a NaN.
  x = _mm256_min_ps(_mm256_set1_ps(89.0f), _mm256_max_ps(_mm256_set1_ps(-150.0f), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  return Scale(p, n);
}

// Exact-erf GELU as avx512::GeluErf (erf by Abramowitz and Stegun 7.1.26).
ATTNSCOPE_AVX2_INLINE __m256 GeluErf(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256 z = _mm256_mul_ps(x, _mm256_set1_ps(0.707106781186547524f));
  const __m256 abs_z = _mm256_andnot_ps(sign_bit, z);
  const __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), abs_z, one));
  __m256 poly = _mm256_set1_ps(1.061405429f);
  poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(-1.453152027f));
  poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(1.421413741f));
  poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(-0.284496736f));
  poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(0.254829592f));
  poly = _mm256_mul_ps(poly, t);
  const __m256 neg_z2 = _mm256_mul_ps(_mm256_sub_ps(_mm256_setzero_ps(), abs_z), abs_z);
  const __m256 erf_abs = _mm256_fnmadd_ps(poly, Exp(neg_z2), one);
  const __m256 erf = _mm256_or_ps(erf_abs, _mm256_and_ps(sign_bit, z));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(one, erf));
}

// GELU's tanh approximation as avx512::GeluTanh: x - x / (e^(2u) + 1).
ATTNSCOPE_AVX2_INLINE __m256 GeluTanh(__m256 x) {
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  const __m256 u = _mm256_mul_ps(_mm256_set1_ps(0.797884560802865356f),
                                 _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
  const __m256 e = Exp(_mm256_add_ps(u, u));
  return _mm256_sub_ps(x, _mm256_div_ps(x, _mm256_add_ps(e, _mm256_set1_ps(1.0f))));
}

#undef ATTNSCOPE_AVX2_INLINE

}  // namespace avx2
}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_AVX2_MATH_H_

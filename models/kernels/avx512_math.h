// AVX-512 building blocks of models/'s own float32 kernels (row_kernel_avx512.cc, fused_ops.cc). Include
// only from code compiled for AVX-512 (inside #pragma GCC target("avx512f,...")) and reached only
// after a runtime check that the CPU has it (HasAvx512()).
#ifndef ATTNSCOPE_MODELS_AVX512_MATH_H_
#define ATTNSCOPE_MODELS_AVX512_MATH_H_

#include <immintrin.h>

#include <cstdint>

namespace attnscope {
namespace avx512 {

// The mask of the first min(remaining, 16) lanes, for the last, partial vector of a row.
__attribute__((always_inline, target("avx512f"))) inline __mmask16 TailMask(int64_t remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xFFFF)
                         : static_cast<__mmask16>((1u << remaining) - 1);
}

// r[i] holds row i of a 16 x 16 block on entry and column i on exit.
__attribute__((always_inline, target("avx512f"))) inline void Transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m512 u[16];
  for (int g = 0; g < 4; ++g) {
    u[4 * g] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
    u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512 x0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
    const __m512 x1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
    const __m512 x2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
    const __m512 x3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_f32x4(x0, x2, 0x88);
    r[c + 4] = _mm512_shuffle_f32x4(x0, x2, 0xDD);
    r[c + 8] = _mm512_shuffle_f32x4(x1, x3, 0x88);
    r[c + 12] = _mm512_shuffle_f32x4(x1, x3, 0xDD);
  }
}

// e^x within 2 ulp: x = n ln2 + r with |r| <= ln2 / 2 (Cody and Waite's two-part ln2, as in
// Cephes' expf), e^r by its Taylor series to degree 7 (remainder under 6e-9 relative), and 2^n
// applied by vscalefps. Exactly 0 below -150 (where float32's e^x is 0 or subnormal), so that
// masked attention scores of float32's lowest value give exactly 0 as in PyTorch; +inf above 89;
// NaN stays NaN.
__attribute__((always_inline, target("avx512f"))) inline __m512 Exp(__m512 x) {
  // max/min return their second operand when either is NaN: x second keeps a NaN.
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-150.0f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// GELU with the exact erf, 0.5 x (1 + erf(x / sqrt(2))) (BERT's "gelu", torch.nn.GELU()), with erf
// by Abramowitz and Stegun 7.1.26 (absolute error under 1.5e-7), the approximation ATen's own
// vectorised CPU kernel uses.
__attribute__((always_inline, target("avx512f"))) inline __m512 GeluErf(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 z = _mm512_mul_ps(x, _mm512_set1_ps(0.707106781186547524f));
  const __m512i sign_bit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512i z_bits = _mm512_castps_si512(z);
  const __m512 abs_z = _mm512_castsi512_ps(_mm512_andnot_si512(sign_bit, z_bits));
  const __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f), abs_z, one));
  __m512 poly = _mm512_set1_ps(1.061405429f);
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(-1.453152027f));
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(1.421413741f));
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(-0.284496736f));
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(0.254829592f));
  poly = _mm512_mul_ps(poly, t);
  const __m512 neg_z2 = _mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), abs_z), abs_z);
  const __m512 erf_abs = _mm512_fnmadd_ps(poly, Exp(neg_z2), one);
  const __m512 erf = _mm512_castsi512_ps(
      _mm512_or_si512(_mm512_castps_si512(erf_abs), _mm512_and_si512(sign_bit, z_bits)));
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(one, erf));
}

// GELU's tanh approximation, 0.5 x (1 + tanh(u)) with u = sqrt(2 / pi) (x + 0.044715 x^3)
// (GPT-2's "gelu_new"), written as x - x / (e^(2u) + 1), which is exact at both ends: e^(2u)
// overflows to +inf for large u (giving x) and is 0 for very negative u (giving 0).
__attribute__((always_inline, target("avx512f"))) inline __m512 GeluTanh(__m512 x) {
  const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
  const __m512 u = _mm512_mul_ps(_mm512_set1_ps(0.797884560802865356f),
                                 _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), x3, x));
  const __m512 e = Exp(_mm512_add_ps(u, u));
  return _mm512_sub_ps(x, _mm512_div_ps(x, _mm512_add_ps(e, _mm512_set1_ps(1.0f))));
}

}  // namespace avx512
}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_AVX512_MATH_H_

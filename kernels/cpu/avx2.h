// Private AVX2/FMA/F16C helpers of the CPU kernels: weights of any dtype loaded as fp32
// lanes, horizontal sums, and vector exp/tanh. Tested through tests/cpu_kernels_test.cc.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/base.h"

namespace tpserve::cpu::avx2 {

// Distinct element types for the two 16-bit formats so kernels can be templated on them.
struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};

inline float ToF32(float v) { return v; }
inline float ToF32(Bf16 v) { return Bf16ToF32(v.bits); }
inline float ToF32(F16 v) { return _cvtsh_ss(v.bits); }

// 8 consecutive elements as fp32 lanes; no alignment needed.
inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const Bf16* p) {
  // bf16 is the top half of an fp32: widen and shift into place.
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 Load8(const F16* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float HorizontalMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The largest of x[0, n), NaN ignored (-inf when there is none), and in *has_nan whether any
// element is NaN: one pass for callers that treat NaN rows apart (Argmax, LogSumExp).
inline float MaxNoticingNan(const float* x, int64_t n, bool* has_nan) {
  __m256 vmax = _mm256_set1_ps(-__builtin_inff());
  __m256 vnan = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    vmax = _mm256_max_ps(v, vmax);  // the second operand when either is NaN: NaN never enters
    vnan = _mm256_or_ps(vnan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  float max = HorizontalMax(vmax);
  bool nan = _mm256_movemask_ps(vnan) != 0;
  for (; i < n; ++i) {
    nan = nan || x[i] != x[i];
    if (x[i] > max) max = x[i];
  }
  *has_nan = nan;
  return max;
}

// Lane mask selecting the first `count` (0..8) lanes, for maskload/maskstore tails.
inline __m256i TailMask(int64_t count) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), lane);
}

// e^x with Cephes' expf polynomial: within ~2 ulp of expf over [-87, 88]. Results that
// would be subnormal (x < ~-87.3) may flush to 0, and x > 88.02 saturates at ~1.7e38 so
// that 2^n stays finite; softmax and the activations need neither extreme.
inline __m256 Exp(__m256 x) {
  // x as the second operand so that a NaN propagates instead of being clamped away.
  x = _mm256_min_ps(_mm256_set1_ps(88.02f), x);
  x = _mm256_max_ps(_mm256_set1_ps(-88.3762626647949f), x);
  // n = round(x / ln2), then r = x - n*ln2 with ln2 split in two for exactness.
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n via the exponent field; n = -128 (x near the lower clamp) would wrap, so clamp
  // to -127, whose bit pattern is +0.
  const __m256i e = _mm256_max_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(-127));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

// tanh(x), Cephes tanhf: an odd polynomial below |x| = 0.625 (where 1 - 2/(e^2x + 1)
// would cancel), the exp form above. Relative error ~2e-7.
inline __m256 Tanh(__m256 x) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256 ax = _mm256_andnot_ps(sign_bit, x);
  // Large branch on |x|: 1 - 2 / (e^(2|x|) + 1), sign restored below.
  const __m256 e2 = Exp(_mm256_add_ps(ax, ax));
  const __m256 big =
      _mm256_sub_ps(_mm256_set1_ps(1.0f),
                    _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e2, _mm256_set1_ps(1.0f))));
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-5.70498872745e-3f);
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036e-1f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422e-1f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
  const __m256 big_signed = _mm256_or_ps(big, _mm256_and_ps(sign_bit, x));
  const __m256 use_small = _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ);
  return _mm256_blendv_ps(big_signed, small, use_small);
}

}  // namespace tpserve::cpu::avx2

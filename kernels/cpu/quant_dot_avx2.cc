// quant.h's AVX2 path (AVX2 + FMA + F16C): the dot kernels of quant_dot_*.inc on
// vpmaddubsw + vpmaddwd, and QuantizeX's blocks. Tested by tests/quant_kernels_test.cc.
//
// Only the code below the target pragma uses AVX2, and it has internal linkage (the anonymous
// namespace) or is called through quant_dot_paths.h after a CPUID check; nothing inside the
// pragma uses the standard library.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/base.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_dot_paths.h"

// GCC's target pragma; clang's equivalent (it ignores GCC's) for builds with clang.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

namespace tpserve::cpu::quant_paths {
namespace {

// 16 registers: 4 rows' fp32 and int32 accumulators beside the unpacked weights.
constexpr int kMaxRows = 4;
constexpr bool kUnsignedX = false;  // vpmaddubsw's pair sums would saturate at (q + 128) * w

inline __m256i DotBytes(__m256i acc, __m256i u, __m256i s) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}
inline __m256i DotPairs(__m256i acc, __m256i u, __m256i s, __m256i sc16) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc16));
}

// Byte j of a vector of 32 copies of the bits' 4 bytes (byte j/8), tested for bit j%8.

inline float HorizontalSum(__m256 v);  // quant_dot_kernels.inc
inline __m256i LoadBytes(const void* p);

// FP8: 8 rows' accumulators beside one step's weights and the constants; 4 rows' block sums
// beside their accumulators.
constexpr int kMaxF8Rows = 8;
constexpr int kFoldRows = 4;

// DotF8Rows' vectors (quant_dot_fp8.inc): 16 codes per step, widened to 16-bit words and
// converted by F16C.
struct F8Vec {
  using V = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kStep = 16;
  static V Set1(float f) { return _mm256_set1_ps(f); }
  static V Zero() { return _mm256_setzero_ps(); }
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static float Sum(V v) { return HorizontalSum(v); }
  static void Weights(const uint8_t* q, V* w) {
    // The sign-extended code shifted left by 7: the sign in bits 15 and 14, exponent and
    // mantissa in bits 13..7; clearing bit 14 leaves the fp16 bits.
    const __m256i t = _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))), 7);
    const __m256i h = _mm256_and_si256(t, _mm256_set1_epi16(static_cast<short>(0xbfff)));
    w[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    w[1] = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
  }
  // A NaN code is 0xff once its sign bit is set, the largest byte.
  static bool HasNaN(const uint8_t* q) {
    const __m256i sign = _mm256_set1_epi8(static_cast<char>(0x80));
    __m256i m = _mm256_or_si256(LoadBytes(q), sign);
    for (int j = 1; j < 4; ++j) m = _mm256_max_epu8(m, _mm256_or_si256(LoadBytes(q + 32 * j), sign));
    return !_mm256_testz_si256(_mm256_cmpeq_epi8(m, _mm256_set1_epi8(-1)), _mm256_set1_epi8(-1));
  }
};

// The dot kernels, in the order quant_dot_kernels.inc's header gives.
#include "kernels/cpu/quant_dot_kernels.inc"
#include "kernels/cpu/quant_dot_legacy.inc"
#include "kernels/cpu/quant_dot_kquants.inc"
#include "kernels/cpu/quant_dot_fp8.inc"
#include "kernels/cpu/quant_dot_table.inc"

inline float HorizontalMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256 Abs(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// round(x * id) to int32 with roundf's ties away from zero: trunc(v + copysign(0.5 - 2^-25, v))
// is exact for |v| < 2^23. The empty asm keeps the product rounded on its own (GCC would
// otherwise contract the multiply and the add into an FMA, unlike the scalar path).
inline __m256i RoundScaled(__m256 x, __m256 id) {
  __m256 v = _mm256_mul_ps(x, id);
  __asm__("" : "+x"(v));
  const __m256 half = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0f)),
                                   _mm256_castsi256_ps(_mm256_set1_epi32(0x3effffff)));
  return _mm256_cvttps_epi32(_mm256_add_ps(v, half));
}

// Four vectors of int32 (each within int8) as 32 int8 in order.
inline __m256i PackBytes(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// One 32-element block of x: its d, and its 32 int8 values as int32 in q[0..3] (in order).
inline float RoundBlock32(const float* xb, __m256i* q) {
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int j = 0; j < 4; ++j) {
    v[j] = _mm256_loadu_ps(xb + 8 * j);
    amax = _mm256_max_ps(amax, Abs(v[j]));
  }
  const float a = HorizontalMax(amax);
  const __m256 id = _mm256_set1_ps(a > 0.0f ? 127.0f / a : 0.0f);
  for (int j = 0; j < 4; ++j) q[j] = RoundScaled(v[j], id);
  return a / 127.0f;
}

}  // namespace

QuantDotFn FindAvx2(DType w) { return FindKernel(w); }

void QuantizeQ8Avx2(const float* x, int64_t blocks, BlockQ8* out) {
  for (int64_t b = 0; b < blocks; ++b) {
    __m256i q[4];
    out[b].d = RoundBlock32(x + 32 * b, q);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs), PackBytes(q[0], q[1], q[2], q[3]));
  }
}

void QuantizeQ8_1Avx2(const float* x, int64_t blocks, BlockQ8_1* out) {
  for (int64_t b = 0; b < blocks; ++b) {
    __m256i q[4];
    const float d = RoundBlock32(x + 32 * b, q);
    out[b].d = d;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs), PackBytes(q[0], q[1], q[2], q[3]));
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    out[b].s = d * static_cast<float>(_mm_cvtsi128_si32(s4));
  }
}

void QuantizeQ8KAvx2(const float* x, int64_t blocks, BlockQ8K* out) {
  for (int64_t b = 0; b < blocks; ++b) {
    const float* xb = x + 256 * b;
    __m256 amax = _mm256_setzero_ps();
    for (int j = 0; j < 32; ++j) amax = _mm256_max_ps(amax, Abs(_mm256_loadu_ps(xb + 8 * j)));
    const float a = HorizontalMax(amax);
    const __m256 id = _mm256_set1_ps(a > 0.0f ? 127.0f / a : 0.0f);
    out[b].d = a / 127.0f;
    for (int c = 0; c < 8; ++c) {
      __m256i q[4];
      for (int j = 0; j < 4; ++j) q[j] = RoundScaled(_mm256_loadu_ps(xb + 32 * c + 8 * j), id);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs + 32 * c), PackBytes(q[0], q[1], q[2], q[3]));
      // The sums of elements [0, 16) and [16, 32) of the chunk in lanes 0 and 1.
      __m256i s = _mm256_hadd_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
      s = _mm256_hadd_epi32(s, s);
      const __m128i s2 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
      out[b].bsums[2 * c] = static_cast<int16_t>(_mm_cvtsi128_si32(s2));
      out[b].bsums[2 * c + 1] = static_cast<int16_t>(_mm_extract_epi32(s2, 1));
    }
  }
}

}  // namespace tpserve::cpu::quant_paths

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

// Linear's decode GEMV on AVX512-BF16 (see gemv_avx512_bf16.h). One vdpbf16ps multiplies
// 32 bf16 pairs into 16 fp32 sums: twice the multiply-adds per instruction of the AVX2
// kernel's fp32 FMAs, and the weights need no widening. That matters for speculative
// verification, where 2-6 rows of x share each weight and the AVX2 kernel is bound by its
// FMAs rather than by memory; one row stays bound by memory either way.
//
// Only the functions below the target pragma use AVX-512: the includes above it (and any
// template they define) are compiled for the build's ISA, so no AVX-512 code can leak into
// an inline function another file shares (gemv::ForEachTile is instantiated here with this
// file's own lambdas, so its instantiations are this file's alone). `nm` of the object
// shows no weak symbols. Nothing inside the pragma uses the standard library.
#include "kernels/cpu/gemv_avx512_bf16.h"

#include <immintrin.h>

#include "kernels/cpu/gemv_tiles.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,bmi2")
// GCC 12's _mm512_reduce_add_ps passes _mm256_undefined_pd() (deliberately uninitialized)
// to an extract, which -Wuninitialized reports at every use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tpserve::cpu {
namespace {

// Elements of one step: 32 bf16, a 64-byte cache line of a weight row.
constexpr int64_t kStep = 32;

inline __m512bh LoadBf16(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }
inline __m512bh LoadBf16Masked(__mmask32 mask, const uint16_t* p) {
  return (__m512bh)_mm512_maskz_loadu_epi16(mask, p);
}

// y[i, r] (+)= xb[i, k_begin:k_end] · w[r, k_begin:k_end] for kM rows of x and kR rows of
// w (row stride k). The kM*kR accumulators stay in registers, so each weight line is
// loaded once and used kM times; a partial last step is loaded masked (zeros add nothing).
// Every output is the same sequence of vdpbf16ps over the same steps, then the same
// horizontal sum, whatever kM and kR are.
template <int kM, int kR>
inline void DotTile(const uint16_t* xb, int64_t k, int64_t k_begin, int64_t k_end, const uint16_t* w,
                    const uint16_t* next, int phase, int period, bool accumulate, float* y, int64_t ldy) {
  __m512 acc[kM][kR];
#pragma GCC unroll 16
  for (int i = 0; i < kM; ++i) {
#pragma GCC unroll 16
    for (int r = 0; r < kR; ++r) acc[i][r] = _mm512_setzero_ps();
  }
  int64_t kk = k_begin;
  int steps_to_prefetch = phase;
  for (; kk + kStep <= k_end; kk += kStep) {
    if (next != nullptr && steps_to_prefetch-- == 0) {
      steps_to_prefetch = period - 1;
#pragma GCC unroll 16
      for (int r = 0; r < kR; ++r) _mm_prefetch(reinterpret_cast<const char*>(next + r * k + kk), _MM_HINT_T1);
    }
    __m512bh xv[kM];
#pragma GCC unroll 16
    for (int i = 0; i < kM; ++i) xv[i] = LoadBf16(xb + i * k + kk);
#pragma GCC unroll 16
    for (int r = 0; r < kR; ++r) {
      const __m512bh wv = LoadBf16(w + r * k + kk);
#pragma GCC unroll 16
      for (int i = 0; i < kM; ++i) acc[i][r] = _mm512_dpbf16_ps(acc[i][r], xv[i], wv);
    }
  }
  if (kk < k_end) {
    const __mmask32 mask = _bzhi_u32(~0u, static_cast<unsigned>(k_end - kk));
    __m512bh xv[kM];
    for (int i = 0; i < kM; ++i) xv[i] = LoadBf16Masked(mask, xb + i * k + kk);
    for (int r = 0; r < kR; ++r) {
      const __m512bh wv = LoadBf16Masked(mask, w + r * k + kk);
      for (int i = 0; i < kM; ++i) acc[i][r] = _mm512_dpbf16_ps(acc[i][r], xv[i], wv);
    }
  }
  for (int i = 0; i < kM; ++i) {
    for (int r = 0; r < kR; ++r) {
      const float sum = _mm512_reduce_add_ps(acc[i][r]);
      y[i * ldy + r] = accumulate ? y[i * ldy + r] + sum : sum;
    }
  }
}

// DotTile for a runtime number (1..kMaxM) of x rows.
template <int kMaxM, int kR>
inline void DotTileM(int m, const uint16_t* xb, int64_t k, int64_t k_begin, int64_t k_end, const uint16_t* w,
                     const uint16_t* next, int phase, int period, bool accumulate, float* y, int64_t ldy) {
  if constexpr (kMaxM >= 1) {
    if (m == kMaxM) return DotTile<kMaxM, kR>(xb, k, k_begin, k_end, w, next, phase, period, accumulate, y, ldy);
    if constexpr (kMaxM > 1) {
      return DotTileM<kMaxM - 1, kR>(m, xb, k, k_begin, k_end, w, next, phase, period, accumulate, y, ldy);
    }
  }
}

template <int kM, int kR>
void Stream(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y) {
  gemv::ForEachTile<kM, kR>(m, k, n, [&](const gemv::Tile& t) {
    const uint16_t* xc = xb + t.i0 * k;
    float* yc = y + t.i0 * n + t.r0;
    if (t.w_rows == kR) {
      const uint16_t* next = t.next_r0 >= 0 ? w + t.next_r0 * k : nullptr;
      DotTileM<kM, kR>(t.x_rows, xc, k, t.k_begin, t.k_end, w + t.r0 * k, next, t.prefetch_phase,
                       t.prefetch_period, t.accumulate, yc, n);
    } else {
      for (int64_t r = 0; r < t.w_rows; ++r) {
        DotTileM<kM, 1>(t.x_rows, xc, k, t.k_begin, t.k_end, w + (t.r0 + r) * k, nullptr, 0, 1, t.accumulate,
                        yc + r, n);
      }
    }
  });
}

}  // namespace

void RoundToBf16Avx512(const float* x, int64_t count, uint16_t* xb) {
  int64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    // The second operand goes to the low half.
    const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(xb + i, (__m512i)b);
  }
  if (i < count) {
    const __mmask32 mask = _bzhi_u32(~0u, static_cast<unsigned>(count - i));
    const __m512 lo = _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask), x + i);
    const __m512 hi = _mm512_maskz_loadu_ps(static_cast<__mmask16>(mask >> 16), x + i + 16);
    _mm512_mask_storeu_epi16(xb + i, mask, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
}

// Tile shapes as the AVX2 kernel's (linear.cc): 1 x 4 with the next block prefetched for
// decode, 3 x 4 for verification batches of 2-6 rows, 4 x 4 above.
void StreamingLinearAvx512Bf16(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, int64_t n,
                               float* y) {
  if (m == 1) return Stream<1, 4>(xb, m, k, w, n, y);
  if (m <= 6) return Stream<3, 4>(xb, m, k, w, n, y);
  return Stream<4, 4>(xb, m, k, w, n, y);
}

}  // namespace tpserve::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options

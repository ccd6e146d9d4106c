// quant.h's AVX-512 VNNI path: the dot kernels of quant_dot_*.inc on the 256-bit (VL)
// forms of vpdpbusd (legacy blocks: u8 x s8 summed into int32 in one instruction) and
// vpdpwssd (K-quants: vpmaddubsw's pair sums times the 16-bit sub-block scales, accumulated),
// with 32 registers for 8 rows of x per weight block; and FP8 E4M3's fp32 kernel on AVX-512 F/BW
// (512-bit vcvtph2ps and FMAs, 16 rows per block). Tested by tests/quant_kernels_test.cc.
//
// 256-bit rather than 512-bit vectors: a legacy block is 32 bytes and a K-quant sub-block 32
// elements, so ymm needs no shuffles to pair blocks, and Zen 4 splits zmm operations in two.
// Only the code below the target pragma uses AVX-512, with internal linkage or behind
// quant_dot_paths.h's CPUID-checked entry; nothing inside the pragma uses the standard library.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/base.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_dot_paths.h"

// GCC's target pragma; clang's equivalent (it ignores GCC's) for builds with clang.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#endif

namespace tpserve::cpu::quant_paths {
namespace {

constexpr int kMaxRows = 8;
constexpr bool kUnsignedX = true;  // vpdpbusd sums (q + 128) * w in int32 without saturating

inline __m256i DotBytes(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
inline __m256i DotPairs(__m256i acc, __m256i u, __m256i s, __m256i sc16) {
  return _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(u, s), sc16);
}


inline float HorizontalSum(__m256 v);  // quant_dot_kernels.inc

// FP8: 16 rows' zmm accumulators beside one step's weights and the constants; block sums for
// up to 4 rows (beyond, the weights' multiply by the scale is the cheaper share).
constexpr int kMaxF8Rows = 16;
constexpr int kFoldRows = 4;

// DotF8Rows' vectors (quant_dot_fp8.inc): fp32 in zmm, since FP8 needs no shuffles to pair
// blocks. 16 codes per step, widened to 16-bit words in a ymm (Zen 4 splits zmm integer work
// in two anyway) and converted by the 512-bit vcvtph2ps.
// The masked forms of vcvtph2ps and of the 256-bit extracts below keep GCC 12 from its
// -Wuninitialized false alarm in the unmasked intrinsics (their undefined pass-through); with
// an all-ones mask they are the plain instructions.
struct F8Vec {
  using V = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kStep = 16;
  static V Set1(float f) { return _mm512_set1_ps(f); }
  static V Zero() { return _mm512_setzero_ps(); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static float Sum(V v) {
    const __m512d d = _mm512_castps_pd(v);
    return HorizontalSum(_mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, d, 0)),
                                       _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, d, 1))));
  }
  static void Weights(const uint8_t* q, V* w) {
    // As the AVX2 path's (quant_dot_avx2.cc): sign-extend, shift left by 7, clear bit 14.
    const __m256i t = _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))), 7);
    const __m256i h = _mm256_and_si256(t, _mm256_set1_epi16(static_cast<short>(0xbfff)));
    w[0] = _mm512_maskz_cvtph_ps(static_cast<__mmask16>(0xffff), h);
  }
  // A NaN code is 0xff once its sign bit is set: vpternlogd's A | B, then a compare per 64 bytes.
  static bool HasNaN(const uint8_t* q) {
    const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80)), ones = _mm512_set1_epi8(-1);
    const __m512i a = _mm512_or_si512(_mm512_loadu_si512(q), sign);
    const __m512i b = _mm512_or_si512(_mm512_loadu_si512(q + 64), sign);
    return (_mm512_cmpeq_epi8_mask(a, ones) | _mm512_cmpeq_epi8_mask(b, ones)) != 0;
  }
};

// The dot kernels, in the order quant_dot_kernels.inc's header gives.
#include "kernels/cpu/quant_dot_kernels.inc"
#include "kernels/cpu/quant_dot_legacy.inc"
#include "kernels/cpu/quant_dot_kquants.inc"
#include "kernels/cpu/quant_dot_fp8.inc"
#include "kernels/cpu/quant_dot_table.inc"

// quant.h's tile kernel: block b of a signed legacy type against the 16 rows of a
// QuantizeXTile tile, into acc[g] (lane i: row i's sum for the block's elements 4g..4g+3, as lane
// g of LegacyBlock's acc for row i). Per group g, vpdpbusd starts from LegacyBlock's start
// (-128 times the dword's sum of weights, vpermd'd from a register) and multiplies the rows'
// biased bytes by the weights' dword g broadcast from memory: Q8_0's as stored, the others'
// unpacked into a buffer. Broadcasts from registers cost a shuffle each on the port the zmm
// arithmetic needs; GCC makes them out of a stored buffer too unless told the buffer is read
// (the asm statement). On the Sapphire Rapids VM, Q8_0 at 16 rows in L2 (quant_dot_bench --mib
// 1): shuffles for both 5.0 GB/s, both from memory 7.1, the start by vpermd (a shuffle, but no
// store for the broadcasts to wait on) 7.8.
template <class U>
inline void TileBlock(const uint8_t* blk, const uint8_t* xb, __m512* acc) {
  const __m256i wv = U::Weights(blk), zero = _mm256_setzero_si256();
  const __m512i start = _mm512_castsi256_si512(
      _mm256_sub_epi32(zero, DotBytes(zero, _mm256_set1_epi8(static_cast<char>(0x80)), wv)));
  alignas(32) int32_t unpacked[8];
  const int32_t* dwords = unpacked;
  if constexpr (__is_same(U, UnpackQ8_0)) {
    dwords = reinterpret_cast<const int32_t*>(blk + 2);  // the weights as stored (read by memcpy)
  } else {
    _mm256_store_si256(reinterpret_cast<__m256i*>(unpacked), wv);
    asm volatile("" : : "m"(unpacked) : "memory");
  }
  const __m512 scale =  // d_w d_x per row, as LegacyBlock's product
      _mm512_mul_ps(_mm512_set1_ps(LoadHalf(blk)), _mm512_loadu_ps(reinterpret_cast<const float*>(xb + 512)));
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) {
    int32_t w4;
    __builtin_memcpy(&w4, dwords + g, 4);
    const __m512i p = _mm512_dpbusd_epi32(_mm512_maskz_permutexvar_epi32(0xffff, _mm512_set1_epi32(g), start),
                                          _mm512_loadu_si512(xb + 64 * g), _mm512_set1_epi32(w4));
    acc[g] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xffff, p), scale, acc[g]);  // masked forms: see F8Vec
  }
}

// LegacyRows' sums with the rows in the lanes: even blocks into acc[0], odd ones into acc[1],
// then added as LegacyRows adds them and as Finish's HorizontalSum adds a row's 8 lanes.
template <class U>
void TileRows(const void* w_row, const void* tile, int m, int64_t k, float* y, int64_t ldy) {
  const uint8_t* w = static_cast<const uint8_t*>(w_row);
  const uint8_t* t = static_cast<const uint8_t*>(tile);
  constexpr int64_t kTileBlockBytes = kQuantTileRows * sizeof(BlockQ8);
  const int64_t nb = k / 32;
  __m512 acc[2][8];
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) acc[0][g] = acc[1][g] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const uint8_t* blk = w + U::kBytes * b;
    PrefetchAhead<2 * U::kBytes>(blk);
    TileBlock<U>(blk, t + kTileBlockBytes * b, acc[0]);
    TileBlock<U>(blk + U::kBytes, t + kTileBlockBytes * (b + 1), acc[1]);
  }
  if (b < nb) TileBlock<U>(w + U::kBytes * b, t + kTileBlockBytes * b, acc[0]);
  __m512 v[8];
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) v[g] = _mm512_add_ps(acc[0][g], acc[1][g]);
  // HorizontalSum: lanes g and g + 4, then 0 + 2 and 1 + 3, then 0 + 1.
  const __m512 s0 = _mm512_add_ps(_mm512_add_ps(v[0], v[4]), _mm512_add_ps(v[2], v[6]));
  const __m512 s1 = _mm512_add_ps(_mm512_add_ps(v[1], v[5]), _mm512_add_ps(v[3], v[7]));
  alignas(64) float out[kQuantTileRows];
  _mm512_store_ps(out, _mm512_add_ps(s0, s1));
  for (int i = 0; i < m; ++i) y[i * ldy] = out[i];
}

}  // namespace

QuantDotFn FindAvx512Vnni(DType w) { return FindKernel(w); }

QuantTileFn FindAvx512VnniTile(DType w) {
  switch (w) {
    case DType::kQ4_0: return TileRows<UnpackQ4_0>;
    case DType::kQ5_0: return TileRows<UnpackQ5_0>;
    case DType::kQ8_0: return TileRows<UnpackQ8_0>;
    default: return nullptr;
  }
}

}  // namespace tpserve::cpu::quant_paths

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

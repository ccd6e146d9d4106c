// quant.h's AVX-512 VNNI path: the dot kernels of quant_dot_kernels.inc on the 256-bit (VL)
// forms of vpdpbusd (legacy blocks: u8 x s8 summed into int32 in one instruction) and
// vpdpwssd (K-quants: vpmaddubsw's pair sums times the 16-bit sub-block scales, accumulated),
// with 32 registers for 8 rows of x per weight block. Tested by tests/quant_kernels_test.cc.
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

inline __m256i DotBytes(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
inline __m256i DotPairs(__m256i acc, __m256i u, __m256i s, __m256i sc16) {
  return _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(u, s), sc16);
}

inline __m256i BitsToBytes(uint32_t bits) { return _mm256_movm_epi8(bits); }  // vpmovm2b

#include "kernels/cpu/quant_dot_kernels.inc"

}  // namespace

QuantDotFn FindAvx512Vnni(DType w) { return FindKernel(w); }

}  // namespace tpserve::cpu::quant_paths

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

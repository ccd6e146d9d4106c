// The blocked attention's products (attention_tiles.inc) at 16 lanes, for CPUs with AVX-512
// (attention_blocked.cc chooses): twice the multiply-adds per instruction of the AVX2 ones,
// with the same bits. Only the code below the target pragma uses AVX-512; nothing inside it
// uses the standard library. Tested by tests/cpu_attention_test.cc.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/attention_blocked.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,avx512f,avx512vl"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f,avx512vl")
#endif

namespace tpserve::cpu::attention_tiles {
namespace {

struct Vec {
  using V = __m512;
  static constexpr int kLanes = 16;
  static V Zero() { return _mm512_setzero_ps(); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V Broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static __mmask16 First(int n) { return static_cast<__mmask16>((1u << n) - 1); }
  static V LoadFirst(const float* p, int n) { return _mm512_maskz_loadu_ps(First(n), p); }
  static void StoreFirst(float* p, V v, int n) { _mm512_mask_storeu_ps(p, First(n), v); }
};

#include "kernels/cpu/attention_tiles.inc"

}  // namespace

void ScoresAvx512(const float* q, int rows, int64_t hd, const float* kt, int padded, float* s) {
  TileScores(q, rows, hd, kt, padded, s);
}

void ValuesAvx512(const float* p, int rows, int count, const float* const* v_rows, int64_t hd, float* o,
                  int64_t ldo) {
  TileValues(p, rows, count, v_rows, hd, o, ldo);
}

}  // namespace tpserve::cpu::attention_tiles

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

// Products with weights held in tile order (gemm_amx.h, DType::kBF16Tiles).
//
// Prefill (LinearTiles): x is the A operand (16 rows of 32 bf16: rows of x, copied once into
// tile order), the weights the B operand as they are held, and the fp32 sums come out as
// tiles in y's own orientation ([m][n]). Against LinearBf16 on the same weights held as rows,
// nothing is copied per weight block and nothing is transposed on the way out. A 2 x 2 block of tiles (32 rows of x by 32 weight rows) runs a chunk of k steps;
// each thread takes a contiguous share of the weight rows and walks them in groups
// (kWeightPairs pairs of 16-row groups) against x in groups (kXPairs pairs of 16-row blocks),
// so that both operands come from L2, and asks for the next step's four tiles ahead of the
// loads (prefetcht0). The sums of a weight group by an x group stay in a small buffer of the
// thread's over k's chunks and are copied into y at the end.
// Measured: docs/cpu_backend.md, "Weights in tile order".
//
// Decode (GemvTiles): each 64-byte tile row holds one bf16 pair of each of 16 weight rows,
// so one VDPBF16PS with x's pair broadcast adds to 16 outputs' sums at once: no horizontal
// sums, and the weights are read as one sequential stream per group.
//
// Only the functions below the target pragma use AMX / AVX-512; nothing inside uses the
// standard library (their buffers come from the callers below the pragma).
#include <immintrin.h>
#include <omp.h>

#include <cstdint>
#include <vector>

#include "kernels/base.h"
#include "kernels/cpu/gemm_amx.h"

namespace tpserve::cpu::amx {
namespace {

constexpr int64_t kTileElems = 512;   // bf16 elements of a 16 x 64-byte tile
constexpr int64_t kChunkSteps = 64;   // k steps (of 32) per pass before sums go back to y
constexpr int64_t kWeightPairs = 4;   // pairs of 16-row weight groups per weight group (256 KiB at k = 2048)
constexpr int64_t kXPairs = 8;        // pairs of 16-row x blocks per x group (1 MiB at k = 2048)

inline int64_t Min(int64_t a, int64_t b) { return a < b ? a : b; }

#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")

// x rows into A tiles: block b (rows 16 b..) step s at xa + (b * steps + s) * kTileElems, 16
// rows of 32 bf16; rows past m are zeros. Called by every thread of the team (omp for).
void PackXTiles(const uint16_t* xb, int64_t m, int64_t k, int64_t m_padded, uint16_t* xa) {
  const int64_t steps = k / kBf16StepK;
#pragma omp for schedule(static)
  for (int64_t b = 0; b < m_padded / 16; ++b) {
    for (int i = 0; i < 16; ++i) {
      const int64_t row = b * 16 + i;
      uint16_t* dst = xa + b * steps * kTileElems + i * kBf16StepK;
      if (row >= m) {
        for (int64_t s = 0; s < steps; ++s) _mm512_storeu_si512(dst + s * kTileElems, _mm512_setzero_si512());
        continue;
      }
      const uint16_t* src = xb + row * k;
      for (int64_t s = 0; s < steps; ++s) {
        _mm512_storeu_si512(dst + s * kTileElems, _mm512_loadu_si512(src + s * kBf16StepK));
      }
    }
  }
}

inline void PrefetchTile(const uint16_t* t) {
  const char* p = reinterpret_cast<const char*>(t);
#pragma GCC unroll 16
  for (int l = 0; l < 16; ++l) _mm_prefetch(p + 64 * l, _MM_HINT_T0);
}

// Steps [s0, s1) of the 2 x 2 (or, for a last odd group, 2 x 1) block: x blocks a0, a1 (A
// tiles of 32 x rows), weight groups b0, b1 (b1 null: one group), sums in c (rows ldc floats
// apart), zeroed first when `first`, else loaded.
void Block(const uint16_t* a0, const uint16_t* a1, const uint16_t* b0, const uint16_t* b1, int64_t s0, int64_t s1,
           bool first, float* c, int64_t ldc) {
  const int64_t stride = ldc * 4;
  if (first) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  } else {
    _tile_loadd(0, c, stride);
    _tile_loadd(2, c + 16 * ldc, stride);
    if (b1 != nullptr) {
      _tile_loadd(1, c + 16, stride);
      _tile_loadd(3, c + 16 * ldc + 16, stride);
    }
  }
  if (b1 != nullptr) {
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t o = s * kTileElems, next = o + kTileElems;
      PrefetchTile(a0 + next);
      PrefetchTile(a1 + next);
      PrefetchTile(b0 + next);
      PrefetchTile(b1 + next);
      _tile_loadd(4, a0 + o, 64);
      _tile_loadd(5, a1 + o, 64);
      _tile_loadd(6, b0 + o, 64);
      _tile_loadd(7, b1 + o, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(1, c + 16, stride);
    _tile_stored(3, c + 16 * ldc + 16, stride);
  } else {
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t o = s * kTileElems;
      _tile_loadd(4, a0 + o, 64);
      _tile_loadd(5, a1 + o, 64);
      _tile_loadd(6, b0 + o, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(2, 5, 6);
    }
  }
  _tile_stored(0, c, stride);
  _tile_stored(2, c + 16 * ldc, stride);
}

// xa: x in A tiles (PackXTiles), m_padded rows; sums: per thread, the fp32 sums of one weight
// group by one x group ([kXPairs * 32][kWeightPairs * 32], sums_floats apart per thread).
// The sums of a (weight group, x group) stay there over k's chunks (no round trip through y
// between chunks) and are copied into y when k is done. Written against tiles stored straight
// into a y whose rows are 64 KiB apart (gate_up), which land in a few cache sets; gate_up ran
// 1.19-1.28 TFLOP/s both ways, so that is not what holds it below the other products.
void RunTiles(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y, int64_t ldy,
              uint16_t* xa, int64_t m_padded, float* sums, int64_t sums_floats) {
  const int64_t steps = k / kBf16StepK, groups = n / kTileGroupRows, pairs = (groups + 1) / 2;
  const int64_t x_pairs = m_padded / 32, ldc = kWeightPairs * 32;
#pragma omp parallel
  {
    PackXTiles(xb, m, k, m_padded, xa);  // ends in the omp for's barrier
    ConfigureTiles();
    const int threads = omp_get_num_threads(), me = omp_get_thread_num();
    float* c = sums + me * sums_floats;
    const int64_t p_begin = pairs * me / threads, p_end = pairs * (me + 1) / threads;
    for (int64_t w0 = p_begin; w0 < p_end; w0 += kWeightPairs) {
      const int64_t w1 = Min(w0 + kWeightPairs, p_end);
      for (int64_t x0 = 0; x0 < x_pairs; x0 += kXPairs) {
        const int64_t x1 = Min(x0 + kXPairs, x_pairs);
        for (int64_t s0 = 0; s0 < steps; s0 += kChunkSteps) {
          const int64_t s1 = Min(s0 + kChunkSteps, steps);
          for (int64_t p = w0; p < w1; ++p) {
            const int64_t g = 2 * p;
            const uint16_t* b0 = w + g * steps * kTileElems;
            const uint16_t* b1 = g + 1 < groups ? b0 + steps * kTileElems : nullptr;
            for (int64_t xp = x0; xp < x1; ++xp) {
              const uint16_t* a0 = xa + 2 * xp * steps * kTileElems;
              Block(a0, a0 + steps * kTileElems, b0, b1, s0, s1, s0 == 0, c + (xp - x0) * 32 * ldc + (p - w0) * 32,
                    ldc);
            }
          }
        }
        // The group's sums into y: x rows [64 x0, ..) below m, weight rows [32 w0, ..) below n.
        const int64_t row0 = x0 * 32, rows = Min(x1 * 32, m) - row0;
        const int64_t col0 = w0 * 32, cols = Min(w1 * 32, n) - col0;
        for (int64_t r = 0; r < rows; ++r) {
          const float* src = c + r * ldc;
          float* dst = y + (row0 + r) * ldy + col0;
          for (int64_t j = 0; j < cols; j += 16) _mm512_storeu_ps(dst + j, _mm512_loadu_ps(src + j));
        }
      }
    }
    _tile_release();
  }
}

// kM rows of x (bf16 pairs as dwords, rows k / 2 apart) against 16-row groups [g0, g1):
// y[i, 16 g + c] for c < 16. Two sets of sums (even and odd tile rows) so that one row of x
// is not one chain of dependent VDPBF16PS.
template <int kM>
void GemvGroups(const uint32_t* xp, int64_t k, const uint16_t* w, int64_t g0, int64_t g1, float* y, int64_t ldy) {
  const int64_t steps = k / kBf16StepK, x_stride = k / 2;
  for (int64_t g = g0; g < g1; ++g) {
    const uint16_t* tiles = w + g * steps * kTileElems;
    __m512 acc[2][kM];
#pragma GCC unroll 16
    for (int i = 0; i < kM; ++i) acc[0][i] = acc[1][i] = _mm512_setzero_ps();
    for (int64_t s = 0; s < steps; ++s) {
      const uint16_t* t = tiles + s * kTileElems;  // no software prefetch: a thread's groups are one
                                                    // sequential stream (prefetching 4-16 KiB ahead ran at 0.7-0.8x)
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) {
        const __m512bh wv = (__m512bh)_mm512_loadu_si512(t + r * kBf16StepK);
#pragma GCC unroll 16
        for (int i = 0; i < kM; ++i) {
          const __m512bh xv = (__m512bh)_mm512_set1_epi32(static_cast<int>(xp[i * x_stride + s * 16 + r]));
          acc[r & 1][i] = _mm512_dpbf16_ps(acc[r & 1][i], wv, xv);
        }
      }
    }
#pragma GCC unroll 16
    for (int i = 0; i < kM; ++i) _mm512_storeu_ps(y + i * ldy + g * 16, _mm512_add_ps(acc[0][i], acc[1][i]));
  }
}

void GemvRows(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y) {
  const int64_t groups = n / kTileGroupRows;
  const uint32_t* xp = reinterpret_cast<const uint32_t*>(xb);
#pragma omp parallel
  {
    const int threads = omp_get_num_threads(), me = omp_get_thread_num();
    const int64_t g0 = groups * me / threads, g1 = groups * (me + 1) / threads;
    for (int64_t i = 0; i < m; i += 8) {
      const uint32_t* xi = xp + i * (k / 2);
      float* yi = y + i * n;
      switch (Min(8, m - i)) {
        case 1: GemvGroups<1>(xi, k, w, g0, g1, yi, n); break;
        case 2: GemvGroups<2>(xi, k, w, g0, g1, yi, n); break;
        case 3: GemvGroups<3>(xi, k, w, g0, g1, yi, n); break;
        case 4: GemvGroups<4>(xi, k, w, g0, g1, yi, n); break;
        case 5: GemvGroups<5>(xi, k, w, g0, g1, yi, n); break;
        case 6: GemvGroups<6>(xi, k, w, g0, g1, yi, n); break;
        case 7: GemvGroups<7>(xi, k, w, g0, g1, yi, n); break;
        default: GemvGroups<8>(xi, k, w, g0, g1, yi, n); break;
      }
    }
  }
}

#pragma GCC pop_options

}  // namespace

void LinearTiles(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y, int64_t ldy) {
  TP_CHECK(CanHoldAsTiles(n, k) && ldy >= n && Bf16Available());
  if (m <= 0 || n <= 0) return;
  const int64_t m_padded = (m + 31) / 32 * 32;
  thread_local std::vector<uint16_t> xa;  // tile loads need no alignment
  if (xa.size() < static_cast<size_t>(m_padded * k)) xa.resize(m_padded * k);
  constexpr int64_t kSumsFloats = kXPairs * 32 * kWeightPairs * 32;
  thread_local std::vector<float> sums;
  const size_t sums_size = static_cast<size_t>(omp_get_max_threads()) * kSumsFloats;
  if (sums.size() < sums_size) sums.resize(sums_size);
  RunTiles(xb, m, k, w, n, y, ldy, xa.data(), m_padded, sums.data(), kSumsFloats);
}

void GemvTiles(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y) {
  TP_CHECK(CanHoldAsTiles(n, k));
  if (m <= 0 || n <= 0) return;
  GemvRows(xb, m, k, w, n, y);
}

}  // namespace tpserve::cpu::amx

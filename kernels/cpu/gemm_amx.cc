// The amx-bf16 prefill GEMM (gemm_amx.h). One TDPBF16PS multiplies a 16 x 32 bf16 tile by a
// 32 x 16 one into 16 x 16 fp32 sums: 16x the multiply-adds of an AVX512-BF16 instruction.
//
// Orientation: the weights are the tiles' A operand. An A tile is 16 rows of 32 contiguous
// bf16, which is exactly 16 weight rows as they are held, so the weights are loaded straight
// from the model's memory with no per-call repacking (oneDNN 2.6 copies the weights into its
// VNNI layout on every call, one more pass over them per product). The B operand must be in
// VNNI layout (pairs of k side by side), and that is x: the small side, packed once per
// product. The sums come out as y^T tiles ([n][m]) and are transposed on the way out.
//
// Blocking: each thread takes 32 weight rows at a time (2 A tiles) and runs them against
// every 32 rows of x (2 B tiles) with the full k in 4 accumulator tiles, so a weight row is
// read from memory once per product and then from L2.
//
// Only the functions below the target pragma use AMX / AVX-512; nothing inside uses the
// standard library, so no such code can leak into an inline function other files share.
#include "kernels/cpu/gemm_amx.h"

#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/base.h"
#include "kernels/cpu/cpu_features.h"

namespace tpserve::cpu::amx {
namespace {

constexpr int kTileRows = 16;       // rows of every tile
constexpr int kTileBytes = 64;      // bytes per tile row
constexpr int kBlockRows = 32;      // rows of w (and of x) per 2 x 2 block of tiles
constexpr int64_t kTileElems = kTileRows * kTileBytes / 4;  // 256 fp32 / bf16 pairs

// The LDTILECFG operand (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

}  // namespace

const std::string& Bf16Unavailable() {
  static const std::string reason = [] {
    if (!DetectCpuFeatures().amx_bf16) return std::string("the CPU has no AMX-BF16 (or the OS does not enable its tiles)");
    // Linux hands out the 8 KiB of tile data state only to a process that asks for it.
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtileData = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) != 0) {
      return std::string("the kernel refused this process the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM)");
    }
    return std::string();
  }();
  return reason;
}

namespace {

#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq")
// GCC 12's _mm512_shuffle_f32x4 passes _mm512_undefined_ps() (deliberately uninitialized)
// as the unused merge source, which -Wmaybe-uninitialized reports at every use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

void ConfigureTiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = kTileBytes;
    cfg.rows[t] = kTileRows;
  }
  _tile_loadconfig(&cfg);
}

// xp: x as B tiles. Tile (mb, ks) (x rows 16 mb.., k 32 ks..) at xp + (mb * steps + ks) *
// kTileElems; its row r holds, for each of the 16 x rows j, the bf16 pair x[j][2r, 2r + 1]
// of that k step as one 32-bit element. x rows past m are zeros.
void PackX(const uint16_t* xb, int64_t m, int64_t k, int64_t m_padded, uint32_t* xp) {
  const int64_t steps = k / kBf16StepK;
#pragma omp for schedule(static)
  for (int64_t mb = 0; mb < m_padded / kTileRows; ++mb) {
    uint32_t* tiles = xp + mb * steps * kTileElems;
    for (int j = 0; j < kTileRows; ++j) {
      const int64_t row = mb * kTileRows + j;
      if (row >= m) {
        for (int64_t ks = 0; ks < steps; ++ks) {
          for (int r = 0; r < kTileRows; ++r) tiles[ks * kTileElems + r * kTileRows + j] = 0;
        }
        continue;
      }
      const uint32_t* src = reinterpret_cast<const uint32_t*>(xb + row * k);
      for (int64_t ks = 0; ks < steps; ++ks) {
        const uint32_t* s = src + ks * kTileRows;
        uint32_t* t = tiles + ks * kTileElems + j;
        for (int r = 0; r < kTileRows; ++r) t[r * kTileRows] = s[r];
      }
    }
  }
}

// r[0..15] := its transpose (16 x 16 fp32).
inline void Transpose16(__m512* r) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 4; ++j) {
      t[8 * i + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0x88);
      t[8 * i + 4 + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0xdd);
    }
  }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
  }
}

// c: a y^T tile (row i: weight row n0 + i, column j: x row m0 + j). Writes its valid part,
// n_valid weight rows by m_valid x rows, into y.
inline void StoreTransposed(const float* c, int64_t m0, int m_valid, int64_t n0, int n_valid, float* y,
                            int64_t ldy) {
  if (m_valid <= 0 || n_valid <= 0) return;
  __m512 r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_load_ps(c + i * 16);
  Transpose16(r);
  const __mmask16 mask = n_valid >= 16 ? 0xffff : static_cast<__mmask16>((1u << n_valid) - 1);
  for (int j = 0; j < m_valid && j < 16; ++j) _mm512_mask_storeu_ps(y + (m0 + j) * ldy + n0, mask, r[j]);
}

// One 32-row block of w (a0: its first row, rows `a_stride` bytes apart) against every 32
// rows of x, the 4 accumulator tiles over all of k, then out to y (transposed through c).
void Block(const char* a0, int64_t a_stride, const uint32_t* xp, int64_t steps, int64_t m, int64_t m_padded,
           int64_t n0, int n_valid, float* y, int64_t ldy, float* c) {
  const char* a1 = a0 + kTileRows * a_stride;
  for (int64_t m0 = 0; m0 < m_padded; m0 += kBlockRows) {
    const uint32_t* b0 = xp + (m0 / kTileRows) * steps * kTileElems;
    const uint32_t* b1 = b0 + steps * kTileElems;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t ks = 0; ks < steps; ++ks) {
      _tile_loadd(4, a0 + ks * kTileBytes, a_stride);
      _tile_loadd(5, a1 + ks * kTileBytes, a_stride);
      _tile_loadd(6, b0 + ks * kTileElems, kTileBytes);
      _tile_loadd(7, b1 + ks * kTileElems, kTileBytes);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c, kTileBytes);
    _tile_stored(1, c + kTileElems, kTileBytes);
    _tile_stored(2, c + 2 * kTileElems, kTileBytes);
    _tile_stored(3, c + 3 * kTileElems, kTileBytes);
    const int64_t m_left = m - m0;  // > 0; StoreTransposed clips to 16 and skips <= 0
    const int m_lo = static_cast<int>(m_left < 16 ? m_left : 16);
    const int m_hi = static_cast<int>(m_left - 16 < 16 ? m_left - 16 : 16);
    const int n_lo = n_valid < 16 ? n_valid : 16, n_hi = n_valid - 16;
    StoreTransposed(c, m0, m_lo, n0, n_lo, y, ldy);
    StoreTransposed(c + kTileElems, m0 + 16, m_hi, n0, n_lo, y, ldy);
    StoreTransposed(c + 2 * kTileElems, m0, m_lo, n0 + 16, n_hi, y, ldy);
    StoreTransposed(c + 3 * kTileElems, m0 + 16, m_hi, n0 + 16, n_hi, y, ldy);
  }
}

// Weight rows come straight from w (`widen` null) or from `widen` into a per-thread buffer.
// No k chunking: chunking k so packed x stays in L2 (accumulators kept in L2 between
// chunks) measured slower on every product (docs/cpu_backend.md, "AMX").
void Run(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, WidenRows widen, const void* ctx, int64_t n,
         float* y, int64_t ldy, uint32_t* xp, int64_t m_padded) {
  const int64_t steps = k / kBf16StepK;
  const int64_t blocks = (n + kBlockRows - 1) / kBlockRows;
  const int64_t stride = k * static_cast<int64_t>(sizeof(uint16_t));
#pragma omp parallel
  {
    PackX(xb, m, k, m_padded, xp);  // ends in the omp for's barrier
    ConfigureTiles();
    alignas(64) float c[4 * kTileElems];
    uint16_t* rows = nullptr;  // kBlockRows x k: widened rows, or the last block's, zero-padded
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t n0 = b * kBlockRows;
      const int n_valid = static_cast<int>(n - n0 < kBlockRows ? n - n0 : kBlockRows);
      const uint16_t* a = w + n0 * k;
      if (widen != nullptr || n_valid < kBlockRows) {
        if (rows == nullptr) rows = static_cast<uint16_t*>(::operator new(kBlockRows * stride, std::align_val_t(64)));
        if (widen != nullptr) {
          widen(ctx, n0, n_valid, k, rows);
        } else {
          __builtin_memcpy(rows, a, n_valid * stride);
        }
        __builtin_memset(rows + n_valid * k, 0, (kBlockRows - n_valid) * stride);
        a = rows;
      }
      Block(reinterpret_cast<const char*>(a), stride, xp, steps, m, m_padded, n0, n_valid, y, ldy, c);
    }
    _tile_release();
    if (rows != nullptr) ::operator delete(rows, std::align_val_t(64));
  }
}

#pragma GCC diagnostic pop
#pragma GCC pop_options

}  // namespace

namespace {

void Product(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, WidenRows widen, const void* ctx,
             int64_t n, float* y, int64_t ldy) {
  TP_CHECK(k % kBf16StepK == 0 && ldy >= n && Bf16Available());
  if (m <= 0 || n <= 0) return;
  const int64_t m_padded = (m + kBlockRows - 1) / kBlockRows * kBlockRows;
  thread_local std::vector<uint32_t> xp;  // tile loads need no alignment
  if (xp.size() < static_cast<size_t>(m_padded * k / 2)) xp.resize(m_padded * k / 2);
  Run(xb, m, k, w, widen, ctx, n, y, ldy, xp.data(), m_padded);
}

}  // namespace

void LinearBf16(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y, int64_t ldy) {
  Product(xb, m, k, w, nullptr, nullptr, n, y, ldy);
}

void LinearBf16Widened(const uint16_t* xb, int64_t m, int64_t k, WidenRows widen, const void* ctx, int64_t n,
                       float* y, int64_t ldy) {
  Product(xb, m, k, nullptr, widen, ctx, n, y, ldy);
}

}  // namespace tpserve::cpu::amx

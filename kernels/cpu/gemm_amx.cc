// The amx-bf16 prefill GEMM (gemm_amx.h). One TDPBF16PS multiplies a 16 x 32 bf16 tile by a
// 32 x 16 one into 16 x 16 fp32 sums: 16x the multiply-adds of an AVX512-BF16 instruction.
//
// Orientation: the weights are the tiles' A operand. An A tile is 16 rows of 32 contiguous
// bf16, the layout weight rows are held in, so packing them is a plain copy into tile order
// (no VNNI pairing). The B operand must be in VNNI layout (pairs of k side by side), and that
// is x: the small side, packed once per product. The sums come out as y^T tiles ([n][m]) and
// are transposed on the way out.
//
// Blocking: each thread takes 32 weight rows at a time (2 A tiles), copies them once into
// tile order (PackA: each tile's 16 rows of 64 bytes contiguous, so a tile load reads 1 KiB in
// a row instead of 16 lines a weight row apart) and runs them against 32 rows of x at a time
// (2 B tiles) in 4 accumulator tiles. The operands must come from L2 for the tiles to run
// near their rate (a 2 x 2 step loads 4 KiB for 4 TDPBF16PS), so:
// - k <= kWholeKMax (and quantized weights, widened per block): the sums stay in tiles over
//   the whole k; the thread's blocks are packed in groups (<= kWeightGroupBytes), and each
//   group runs against x in groups of rows whose packed x fits kXGroupBytes, so both operands
//   stay in L2 and a weight row is read from memory once per product;
// - larger k: k in chunks whose packed x fits kXChunkBytes; the partial sums of a group of
//   blocks (<= kSumGroupBytes) wait in memory between chunks.
// Measured (docs/cpu_backend.md, "AMX tiles of our own"): the unpacked strided loads and x
// streamed from L3 had held the kernel to ~0.9 TFLOP/s on 2 cores where a tile step from L2
// runs at ~2 TFLOP/s per core.
//
// Only the functions below the target pragma use AMX / AVX-512; nothing inside uses the
// standard library, so no such code can leak into an inline function other files share.
#include "kernels/cpu/gemm_amx.h"

#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
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
constexpr int64_t kPackedStepBytes = 2 * kTileRows * kTileBytes;  // a packed block's 2 A tiles of one k step

// The blocking's sizes (see the top of the file); measured on a Sapphire Rapids VM, 2 cores.
constexpr int64_t kWholeKMax = 4096;
constexpr int64_t kWeightGroupBytes = int64_t{4} << 20;
constexpr int64_t kXGroupBytes = int64_t{1} << 20;
constexpr int64_t kXChunkBytes = int64_t{256} << 10;
constexpr int64_t kSumGroupBytes = int64_t{1} << 20;

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

}  // namespace

void ConfigureTiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = kTileBytes;
    cfg.rows[t] = kTileRows;
  }
  // Not _tile_loadconfig: GCC 12 declares its asm operand as a pointer-sized object, so the
  // compiler may take the 56 bytes after it (columns and rows) as never read and drop their
  // stores. A copy of this function compiled out of line did (LDTILECFG with every tile
  // disabled, then SIGILL at the first tile instruction); this operand names all 64 bytes.
  asm volatile("ldtilecfg %0" : : "m"(cfg));
}

namespace {

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

// Each group's 16 rows <-> its tiles: the 16 x 16 dwords (bf16 pairs) of step s, rows to tile
// rows, are a transpose, so packing and unpacking are the same loop over a copy of the group.
// scratch: a group's elements (16 k) per thread.
void TransposeGroups(uint16_t* w, int64_t n, int64_t k, bool to_tiles, uint16_t* scratch) {
  const int64_t steps = k / kBf16StepK, group_elems = kTileGroupRows * k;
#pragma omp parallel
  {
    uint16_t* copy = scratch + omp_get_thread_num() * group_elems;
#pragma omp for schedule(static)
    for (int64_t g = 0; g < n / kTileGroupRows; ++g) {
      uint16_t* group = w + g * group_elems;
      __builtin_memcpy(copy, group, group_elems * 2);
      for (int64_t s = 0; s < steps; ++s) {
        __m512 r[16];
        // rows: copy[c * k + 32 s ..] (to tiles) or tile rows copy[(s * 16 + c) * 32 ..] (back)
        for (int c = 0; c < 16; ++c) {
          r[c] = _mm512_loadu_ps(copy + (to_tiles ? c * k + s * kBf16StepK : (s * 16 + c) * kBf16StepK));
        }
        Transpose16(r);
        for (int c = 0; c < 16; ++c) {
          _mm512_storeu_ps(group + (to_tiles ? (s * 16 + c) * kBf16StepK : c * k + s * kBf16StepK), r[c]);
        }
      }
    }
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

// k steps [ks0, ks1) of a 32-row block of w (a0: its first row, rows a_stride bytes apart;
// rows from `rows` on are zeros: the last block) into tile order at ap: the 2 A tiles of step
// ks at ap + (ks - ks0) * kPackedStepBytes.
void PackA(const char* a0, int64_t a_stride, int rows, int64_t ks0, int64_t ks1, char* ap) {
  for (int r = 0; r < kBlockRows; ++r) {
    const char* src = a0 + r * a_stride;
    char* dst = ap + (r / kTileRows) * kTileRows * kTileBytes + (r % kTileRows) * kTileBytes;
    for (int64_t ks = ks0; ks < ks1; ++ks) {
      _mm512_store_si512(dst + (ks - ks0) * kPackedStepBytes,
                         r < rows ? _mm512_loadu_si512(src + ks * kTileBytes) : _mm512_setzero_si512());
    }
  }
}

// Where a block's sums go: into y when this pass ends the block's k (transposed through c),
// else into its partial sums (4 tiles per 32 rows of x) for the next chunk.
struct BlockOut {
  int64_t n0 = 0;
  int n_valid = 0;
  float* y = nullptr;
  int64_t ldy = 0;
  float* partial = nullptr;  // null: the whole k in one pass
  bool first = true, last = true;
};

// A packed block's steps [ks0, ks1) (ap: PackA's from ks0) against x rows [m0_begin, m0_end)
// (m: x's real rows; xp: PackX's, `steps` per 16 rows).
void TilesOverX(const char* ap, const uint32_t* xp, int64_t steps, int64_t ks0, int64_t ks1, int64_t m0_begin,
                int64_t m0_end, int64_t m, const BlockOut& o, float* c) {
  for (int64_t m0 = m0_begin; m0 < m0_end; m0 += kBlockRows) {
    const uint32_t* b0 = xp + (m0 / kTileRows) * steps * kTileElems;
    const uint32_t* b1 = b0 + steps * kTileElems;
    float* partial = o.partial == nullptr ? nullptr : o.partial + (m0 / kBlockRows) * 4 * kTileElems;
    if (o.first) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
    } else {
      _tile_loadd(0, partial, kTileBytes);
      _tile_loadd(1, partial + kTileElems, kTileBytes);
      _tile_loadd(2, partial + 2 * kTileElems, kTileBytes);
      _tile_loadd(3, partial + 3 * kTileElems, kTileBytes);
    }
    for (int64_t ks = ks0; ks < ks1; ++ks) {
      const char* a = ap + (ks - ks0) * kPackedStepBytes;
      _tile_loadd(4, a, kTileBytes);
      _tile_loadd(5, a + kTileRows * kTileBytes, kTileBytes);
      _tile_loadd(6, b0 + ks * kTileElems, kTileBytes);
      _tile_loadd(7, b1 + ks * kTileElems, kTileBytes);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    float* out = o.last ? c : partial;
    _tile_stored(0, out, kTileBytes);
    _tile_stored(1, out + kTileElems, kTileBytes);
    _tile_stored(2, out + 2 * kTileElems, kTileBytes);
    _tile_stored(3, out + 3 * kTileElems, kTileBytes);
    if (!o.last) continue;
    const int64_t m_left = m - m0;  // > 0; StoreTransposed clips to 16 and skips <= 0
    const int m_lo = static_cast<int>(m_left < 16 ? m_left : 16);
    const int m_hi = static_cast<int>(m_left - 16 < 16 ? m_left - 16 : 16);
    const int n_lo = o.n_valid < 16 ? o.n_valid : 16, n_hi = o.n_valid - 16;
    StoreTransposed(c, m0, m_lo, o.n0, n_lo, o.y, o.ldy);
    StoreTransposed(c + kTileElems, m0 + 16, m_hi, o.n0, n_lo, o.y, o.ldy);
    StoreTransposed(c + 2 * kTileElems, m0, m_lo, o.n0 + 16, n_hi, o.y, o.ldy);
    StoreTransposed(c + 3 * kTileElems, m0 + 16, m_hi, o.n0 + 16, n_hi, o.y, o.ldy);
  }
}

// The product's shape and its blocking.
struct Plan {
  const uint16_t* w = nullptr;  // null: rows from widen
  WidenRows widen = nullptr;
  const void* ctx = nullptr;
  int64_t m = 0, k = 0, n = 0, m_padded = 0, steps = 0, blocks = 0;
  float* y = nullptr;
  int64_t ldy = 0;
  bool chunked = false;      // k in chunks (else the whole k per pass)
  int64_t group_blocks = 1;  // blocks packed (whole k) or summed (chunked) together
  int64_t x_rows = 0;        // whole k: x rows per group
  int64_t chunk_steps = 0;   // chunked: k steps per chunk
};

// Per thread: a block's widened rows as bf16 [32, k] (quantized weights), the packed weights
// and the partial sums.
struct ThreadBuffers {
  uint16_t* rows = nullptr;
  char* packed = nullptr;
  float* partial = nullptr;
};

// Block b's output into y (whole k in one pass).
BlockOut OutputOf(const Plan& p, int64_t b) {
  const int64_t n0 = b * kBlockRows;
  return BlockOut{.n0 = n0, .n_valid = static_cast<int>(std::min<int64_t>(p.n - n0, kBlockRows)), .y = p.y,
                  .ldy = p.ldy};
}

// Packs k steps [ks0, ks1) of block b into ap: from w, or from its rows widened into t.rows.
void PackBlock(const Plan& p, int64_t b, int64_t ks0, int64_t ks1, ThreadBuffers& t, char* ap) {
  const int64_t n0 = b * kBlockRows;
  const int rows = static_cast<int>(std::min<int64_t>(p.n - n0, kBlockRows));
  const uint16_t* src = p.w + n0 * p.k;
  if (p.widen != nullptr) {
    p.widen(p.ctx, n0, rows, p.k, t.rows);
    src = t.rows;
  }
  PackA(reinterpret_cast<const char*>(src), p.k * 2, rows, ks0, ks1, ap);
}

void RunThread(const Plan& p, const uint32_t* xp, int64_t b_begin, int64_t b_end, ThreadBuffers& t, float* c) {
  for (int64_t g0 = b_begin; g0 < b_end; g0 += p.group_blocks) {
    const int64_t g1 = std::min(g0 + p.group_blocks, b_end);
    if (!p.chunked) {
      const int64_t packed_bytes = p.steps * kPackedStepBytes;
      for (int64_t b = g0; b < g1; ++b) PackBlock(p, b, 0, p.steps, t, t.packed + (b - g0) * packed_bytes);
      for (int64_t x0 = 0; x0 < p.m_padded; x0 += p.x_rows) {
        const int64_t x1 = std::min(x0 + p.x_rows, p.m_padded);
        for (int64_t b = g0; b < g1; ++b) {
          TilesOverX(t.packed + (b - g0) * packed_bytes, xp, p.steps, 0, p.steps, x0, x1, p.m, OutputOf(p, b), c);
        }
      }
      continue;
    }
    const int64_t partial_floats = (p.m_padded / kBlockRows) * 4 * kTileElems;
    for (int64_t ks0 = 0; ks0 < p.steps; ks0 += p.chunk_steps) {
      const int64_t ks1 = std::min(ks0 + p.chunk_steps, p.steps);
      for (int64_t b = g0; b < g1; ++b) {
        PackBlock(p, b, ks0, ks1, t, t.packed);
        BlockOut o = OutputOf(p, b);
        o.partial = t.partial + (b - g0) * partial_floats;
        o.first = ks0 == 0;
        o.last = ks1 == p.steps;
        TilesOverX(t.packed, xp, p.steps, ks0, ks1, 0, p.m_padded, p.m, o, c);
      }
    }
  }
}

// Per thread's buffers, carved from one allocation: widened rows, packed weights, partial sums.
struct BufferSizes {
  int64_t rows = 0, packed = 0, partial = 0;  // bytes, multiples of 64
  int64_t per_thread() const { return rows + packed + partial; }
};

// Packs x (all threads), then each thread runs its contiguous share of the blocks (the same
// share in every chunk: its partial sums are its own).
void Run(const Plan& p, const uint16_t* xb, uint32_t* xp, const BufferSizes& sizes, char* buffers) {
#pragma omp parallel
  {
    PackX(xb, p.m, p.k, p.m_padded, xp);  // ends in the omp for's barrier
    ConfigureTiles();
    alignas(64) float c[4 * kTileElems];
    const int threads = omp_get_num_threads(), me = omp_get_thread_num();
    char* mine = buffers + me * sizes.per_thread();
    ThreadBuffers t{reinterpret_cast<uint16_t*>(mine), mine + sizes.rows,
                    reinterpret_cast<float*>(mine + sizes.rows + sizes.packed)};
    RunThread(p, xp, p.blocks * me / threads, p.blocks * (me + 1) / threads, t, c);
    _tile_release();
  }
}

#pragma GCC diagnostic pop
#pragma GCC pop_options

void Product(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, WidenRows widen, const void* ctx,
             int64_t n, float* y, int64_t ldy) {
  TP_CHECK(k % kBf16StepK == 0 && ldy >= n && Bf16Available());
  if (m <= 0 || n <= 0) return;
  Plan p{.w = w,
         .widen = widen,
         .ctx = ctx,
         .m = m,
         .k = k,
         .n = n,
         .m_padded = (m + kBlockRows - 1) / kBlockRows * kBlockRows,
         .steps = k / kBf16StepK,
         .blocks = (n + kBlockRows - 1) / kBlockRows,
         .y = y,
         .ldy = ldy,
         .chunked = widen == nullptr && k > kWholeKMax};
  const int64_t x_row_bytes = k * 2;  // packed x: 2 bytes per element, like x
  BufferSizes sizes;
  sizes.rows = widen != nullptr ? kBlockRows * k * 2 : 0;
  if (!p.chunked) {
    const int64_t block_bytes = p.steps * kPackedStepBytes;
    p.group_blocks = std::max<int64_t>(1, kWeightGroupBytes / block_bytes);
    p.x_rows = std::max<int64_t>(kBlockRows, kXGroupBytes / x_row_bytes / kBlockRows * kBlockRows);
    sizes.packed = p.group_blocks * block_bytes;
  } else {
    p.chunk_steps = std::clamp<int64_t>(kXChunkBytes / (p.m_padded * kTileBytes), 1, p.steps);
    const int64_t partial_bytes = p.m_padded * kBlockRows * 4;
    p.group_blocks = std::max<int64_t>(1, kSumGroupBytes / partial_bytes);
    sizes.packed = p.chunk_steps * kPackedStepBytes;
    sizes.partial = p.group_blocks * partial_bytes;
  }
  thread_local std::vector<uint32_t> xp;  // tile loads need no alignment
  if (xp.size() < static_cast<size_t>(p.m_padded * k / 2)) xp.resize(p.m_padded * k / 2);
  // Buffers for every thread, 64-byte aligned (PackA's aligned stores), kept between calls.
  thread_local std::vector<char> buffers;
  const size_t bytes = static_cast<size_t>(omp_get_max_threads() * sizes.per_thread() + 64);
  if (buffers.size() < bytes) buffers.resize(bytes);
  char* aligned = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(buffers.data()) + 63) & ~uintptr_t{63});
  Run(p, xb, xp.data(), sizes, aligned);
}

}  // namespace

void PackTiles(uint16_t* w, int64_t n, int64_t k) {
  TP_CHECK(CanHoldAsTiles(n, k));
  std::vector<uint16_t> scratch(static_cast<size_t>(omp_get_max_threads()) * kTileGroupRows * k);
  TransposeGroups(w, n, k, /*to_tiles=*/true, scratch.data());
}

void UnpackTiles(uint16_t* w, int64_t n, int64_t k) {
  TP_CHECK(CanHoldAsTiles(n, k));
  std::vector<uint16_t> scratch(static_cast<size_t>(omp_get_max_threads()) * kTileGroupRows * k);
  TransposeGroups(w, n, k, /*to_tiles=*/false, scratch.data());
}

void LinearBf16(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y, int64_t ldy) {
  Product(xb, m, k, w, nullptr, nullptr, n, y, ldy);
}

void LinearBf16Widened(const uint16_t* xb, int64_t m, int64_t k, WidenRows widen, const void* ctx, int64_t n,
                       float* y, int64_t ldy) {
  Product(xb, m, k, nullptr, widen, ctx, n, y, ldy);
}

}  // namespace tpserve::cpu::amx

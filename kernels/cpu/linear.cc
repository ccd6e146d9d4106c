// Linear (y = x · w^T) on the CPU: weight-streaming kernels for decode batches (AVX2 fp32
// FMAs; AVX512-BF16 dot products on kOneDnnBf16) and, for prefill, single-threaded sgemm
// over fp32 weight panels or oneDNN's bf16 matmul (GemmPath).
// Tested by tests/cpu_kernels_test.cc; measured by bench/kernels_bench.cc.
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/avx2.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/gemm_amx.h"
#include "kernels/cpu/gemm_onednn.h"
#include "kernels/cpu/gemv_avx512_bf16.h"
#include "kernels/cpu/gemv_tiles.h"
#include "kernels/cpu/quant.h"

namespace tpserve::cpu {
namespace {

using avx2::Bf16;
using avx2::F16;

// Up to kMaxStreamingRows (cpu_kernels.h) rows of x the streaming kernels win: they read
// each weight once from DRAM and are bandwidth-bound, while sgemm pays for packing. Above it
// the panel sgemm path is faster (kernels_bench --sweep prints the crossover). How they
// split the work: gemv_tiles.h.
// fp32 elements per sgemm weight panel (4 MiB): big enough that re-packing x per panel is
// noise, small enough that the per-thread conversion buffer stays in L3.
constexpr int64_t kPanelElems = int64_t{1} << 20;

// 16 consecutive weights of one row as two fp32 vectors. bf16 avoids the cross-lane widen
// (vpmovzxwd): a 32-bit lane holds elements 2j (low half) and 2j+1 (high half), so a shift
// and a mask give the even and the odd elements, matched by an x whose 16-element groups
// were reordered evens-then-odds (kPermutesX). fp32 and fp16 keep x's order.
template <typename W>
struct Weights16;

template <>
struct Weights16<float> {
  static constexpr bool kPermutesX = false;
  explicit Weights16(const float* p) : p(p) {}
  __m256 Half(int h) const { return _mm256_loadu_ps(p + 8 * h); }
  const float* p;
};

template <>
struct Weights16<F16> {
  static constexpr bool kPermutesX = false;
  explicit Weights16(const F16* p) : p(p) {}
  __m256 Half(int h) const { return avx2::Load8(p + 8 * h); }
  const F16* p;
};

template <>
struct Weights16<Bf16> {
  static constexpr bool kPermutesX = true;
  explicit Weights16(const Bf16* p)
      : raw(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))) {}
  __m256 Half(int h) const {
    return _mm256_castsi256_ps(h == 0 ? _mm256_slli_epi32(raw, 16)
                                      : _mm256_and_si256(raw, _mm256_set1_epi32(-65536)));
  }
  __m256i raw;
};

// Reorders each full 16-element group of x's rows into evens then odds (see Weights16);
// the k % 16 tail is left in order for the scalar loop.
void PermuteForBf16(const float* x, int64_t m, int64_t k, float* out) {
  const int64_t k16 = k & ~int64_t{15};
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * k;
    float* oi = out + i * k;
    for (int64_t kk = 0; kk < k16; kk += 16) {
      for (int j = 0; j < 8; ++j) {
        oi[kk + j] = xi[kk + 2 * j];
        oi[kk + 8 + j] = xi[kk + 2 * j + 1];
      }
    }
    for (int64_t kk = k16; kk < k; ++kk) oi[kk] = xi[kk];
  }
}

// acc[i][r] += x[i, kk : kk + 16 * kGroups] · w[r, same], xv being x as permuted for W.
template <typename W, int kM, int kR, int kGroups>
inline void AccumulateGroups(const float* xv, int64_t k, const W* w, int64_t kk,
                             __m256 (&acc)[kM][kR]) {
#pragma GCC unroll 16
  for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 4
    for (int g = 0; g < kGroups; ++g) {
      const Weights16<W> wr(w + r * k + kk + 16 * g);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256 wv = wr.Half(h);
        const float* xg = xv + kk + 16 * g + 8 * h;
#pragma GCC unroll 16
        for (int i = 0; i < kM; ++i) {
          acc[i][r] = _mm256_fmadd_ps(_mm256_loadu_ps(xg + i * k), wv, acc[i][r]);
        }
      }
    }
  }
}

// The kR weight rows a tile's thread streams next (rows may be null). The tiles of one
// weight block (one per chunk of x rows) take turns pulling them into L2, a line of each
// row every `period` steps, so DRAM streams the next block at an even rate while the
// current one is computed from cache; without it DRAM idles during the later chunks
// (2-8 row batches measured ~1.5x slower).
template <typename W>
struct NextBlock {
  const W* rows = nullptr;
  int phase = 0;   // this tile prefetches at steps phase, phase + period, ...
  int period = 1;  // tiles per weight block
};

// y[i, r] (+)= x[i, k_begin:k_end] · w[r, k_begin:k_end] for kM rows of x and kR rows of
// w (both with row stride k); xv is x as the vector loop reads it (permuted for bf16).
// The kM*kR accumulators stay in registers, so each weight vector is loaded once and used
// kM times. The main loop consumes a whole 64-byte line of every weight row per step: with
// power-of-two K all kR rows map to the same L1 set, and a line left half-used could be
// evicted before its second half is read.
template <typename W, int kM, int kR>
inline void DotTile(const float* xv, const float* x, int64_t k, int64_t k_begin, int64_t k_end,
                    const W* w, NextBlock<W> next, bool accumulate, float* y, int64_t ldy) {
  constexpr int kLineGroups = 64 / (16 * sizeof(W));
  __m256 acc[kM][kR];
#pragma GCC unroll 16
  for (int i = 0; i < kM; ++i) {
#pragma GCC unroll 16
    for (int r = 0; r < kR; ++r) acc[i][r] = _mm256_setzero_ps();
  }
  int64_t kk = k_begin;
  int steps_to_prefetch = next.phase;
  for (; kk + 16 * kLineGroups <= k_end; kk += 16 * kLineGroups) {
    if (next.rows != nullptr && steps_to_prefetch-- == 0) {
      steps_to_prefetch = next.period - 1;
#pragma GCC unroll 16
      for (int r = 0; r < kR; ++r) {
        _mm_prefetch(reinterpret_cast<const char*>(next.rows + r * k + kk), _MM_HINT_T1);
      }
    }
    AccumulateGroups<W, kM, kR, kLineGroups>(xv, k, w, kk, acc);
  }
  for (; kk + 16 <= k_end; kk += 16) AccumulateGroups<W, kM, kR, 1>(xv, k, w, kk, acc);
  for (int i = 0; i < kM; ++i) {
    for (int r = 0; r < kR; ++r) {
      // The scalar tail is the last partial 16-group, which x's bf16 permutation leaves alone.
      float sum = avx2::HorizontalSum(acc[i][r]);
      for (int64_t j = kk; j < k_end; ++j) sum += x[i * k + j] * avx2::ToF32(w[r * k + j]);
      y[i * ldy + r] = accumulate ? y[i * ldy + r] + sum : sum;
    }
  }
}

// DotTile for a runtime number (1..kMaxM) of x rows.
template <typename W, int kMaxM, int kR>
inline void DotTileM(int m, const float* xv, const float* x, int64_t k, int64_t k_begin,
                     int64_t k_end, const W* w, NextBlock<W> next, bool accumulate, float* y,
                     int64_t ldy) {
  if constexpr (kMaxM >= 1) {
    if (m == kMaxM) {
      return DotTile<W, kMaxM, kR>(xv, x, k, k_begin, k_end, w, next, accumulate, y, ldy);
    }
    if constexpr (kMaxM > 1) {
      return DotTileM<W, kMaxM - 1, kR>(m, xv, x, k, k_begin, k_end, w, next, accumulate, y, ldy);
    }
  }
}

// The AVX2 kernel over gemv::ForEachTile's tiles (fp32 x; bf16 x permuted first).
template <typename W, int kM, int kR>
void StreamingLinear(const float* x, int64_t m, int64_t k, const W* w, int64_t n, float* y) {
  const float* xv = x;
  if constexpr (Weights16<W>::kPermutesX) {
    thread_local std::vector<float> permuted;
    if (permuted.size() < static_cast<size_t>(m * k)) permuted.resize(m * k);
    PermuteForBf16(x, m, k, permuted.data());
    xv = permuted.data();
  }
  gemv::ForEachTile<kM, kR>(m, k, n, [&](const gemv::Tile& t) {
    const float* xc = x + t.i0 * k;
    const float* xvc = xv + t.i0 * k;
    float* yc = y + t.i0 * n + t.r0;
    if (t.w_rows == kR) {
      NextBlock<W> next;
      if (t.next_r0 >= 0) next = {w + t.next_r0 * k, t.prefetch_phase, t.prefetch_period};
      DotTileM<W, kM, kR>(t.x_rows, xvc, xc, k, t.k_begin, t.k_end, w + t.r0 * k, next, t.accumulate,
                          yc, n);
    } else {
      for (int64_t r = 0; r < t.w_rows; ++r) {
        DotTileM<W, kM, 1>(t.x_rows, xvc, xc, k, t.k_begin, t.k_end, w + (t.r0 + r) * k, NextBlock<W>{},
                           t.accumulate, yc + r, n);
      }
    }
  });
}

// Tile shapes (x rows x weight rows), as measured with weights streamed from DRAM
// (docs/cpu_backend.md, "Decode GEMV tiles"): one x row streams 4 weight rows with the next
// block prefetched; 2-6 rows (speculative verification) share each weight vector among 3 x
// rows (12 accumulators, chunks of at most 3); larger batches among 4. The tile shape does
// not change any sum: each output is accumulated in the same order whatever the tile.
template <typename W>
void StreamingLinearAnyM(const float* x, int64_t m, int64_t k, const void* w, int64_t n, float* y) {
  const W* wt = static_cast<const W*>(w);
  if (m == 1) return StreamingLinear<W, 1, 4>(x, m, k, wt, n, y);
  if (m <= 6) return StreamingLinear<W, 3, 4>(x, m, k, wt, n, y);
  return StreamingLinear<W, 4, 3>(x, m, k, wt, n, y);
}

// kOneDnnBf16's decode batches: x rounded to bf16 as for its prefill, then AVX512-BF16 dot
// products where the CPU has them; elsewhere (oneDNN forced on a CPU with AVX-512 but no
// bf16 units) the AVX2 kernel on the rounded x, the same products summed in fp32.
void RoundedBf16StreamingLinear(const float* x, int64_t m, int64_t k, const void* w, int64_t n, float* y) {
  if (DetectCpuFeatures().avx512_bf16) {
    thread_local std::vector<uint16_t> xb;
    if (xb.size() < static_cast<size_t>(m * k)) xb.resize(m * k);
    RoundToBf16Avx512(x, m * k, xb.data());
    return StreamingLinearAvx512Bf16(xb.data(), m, k, static_cast<const uint16_t*>(w), n, y);
  }
  RoundedBf16LinearAvx2(x, m, k, w, n, y);
}

template <typename W>
void ConvertToF32(const W* src, int64_t count, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) _mm256_storeu_ps(dst + i, avx2::Load8(src + i));
  for (; i < count; ++i) dst[i] = avx2::ToF32(src[i]);
}

// OpenBLAS runs single-threaded and is called from inside our OpenMP team, one weight panel
// per call; this measured as fast as OpenBLAS's own threading (kernels_bench). Letting
// OpenBLAS thread instead would put a second pool of threads on the same cores: its pthread
// workers spin (sched_yield) for a while after each call and slow down the OpenMP kernels
// that follow, and its pthread build must not be entered by several threads at once unless
// it is single-threaded. Note this is process-wide: other BLAS callers get one thread too.
void MakeBlasSingleThreaded() {
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

// Prefill: each thread takes whole panels of weight rows, widens them to fp32 (bf16/fp16)
// in a thread-local buffer and computes y[:, panel] with one sgemm.
void PanelSgemm(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n,
                float* y) {
  MakeBlasSingleThreaded();
  const int64_t threads = omp_get_max_threads();
  // Rows per panel: a multiple of 16 (sgemm's register tile), at most kPanelElems fp32, and
  // small enough to give every thread a few panels to balance.
  int64_t panel_rows = std::max<int64_t>(16, kPanelElems / k / 16 * 16);
  const int64_t balanced = ((n + 4 * threads - 1) / (4 * threads) + 15) / 16 * 16;
  panel_rows = std::max<int64_t>(64, std::min(panel_rows, balanced));
  const int64_t panels = (n + panel_rows - 1) / panel_rows;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t n0 = p * panel_rows;
    const int64_t rows = std::min(panel_rows, n - n0);
    const float* panel = nullptr;
    if (w_dtype == DType::kF32) {
      panel = static_cast<const float*>(w) + n0 * k;
    } else {
      thread_local std::vector<float> buffer;
      if (buffer.size() < static_cast<size_t>(rows * k)) buffer.resize(rows * k);
      if (IsQuantized(w_dtype)) {
        const size_t row_bytes = RowBytes(w_dtype, k);
        const uint8_t* src = static_cast<const uint8_t*>(w) + n0 * row_bytes;
        for (int64_t r = 0; r < rows; ++r) DequantizeRow(w_dtype, src + r * row_bytes, k, buffer.data() + r * k);
      } else if (w_dtype == DType::kBF16) {
        ConvertToF32(static_cast<const Bf16*>(w) + n0 * k, rows * k, buffer.data());
      } else {
        ConvertToF32(static_cast<const F16*>(w) + n0 * k, rows * k, buffer.data());
      }
      panel = buffer.data();
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m),
                static_cast<blasint>(rows), static_cast<blasint>(k), 1.0f, x,
                static_cast<blasint>(k), panel, static_cast<blasint>(k), 0.0f, y + n0,
                static_cast<blasint>(n));
  }
}

// kOneDnnBf16's prefill for block-quantized weights: panels of weight rows widened to bf16
// (all threads), then oneDNN's bf16 matmul of x with the panel into y's columns. The weights
// the product sees are those the GGUF loader used to widen to bf16 at load: the same numbers.
// A panel is ~4 MiB of bf16 (kQuantPanelBytes): past L2, but oneDNN's product gains more from
// wider panels than the widened rows lose by coming back from L3. On the EPYC Zen 4 VM, a
// 512-token prefill alternated 6 rounds (`tpserve generate --max-tokens 1`, medians; a temporary
// build read this constant from the environment), 1 MiB -> 2 -> 4 MiB panels: Llama-3.2-1B
// Q4_K_M 156 -> 162 -> 167 tok/s (widened at load: 178, an earlier 5-round run), Q8_0
// 158 -> 171 (5 rounds); Gemma 3 270M Q4_K_M level (1068 -> 1042, within its spread); peak RSS
// +2 to +11 MiB.
constexpr int64_t kQuantPanelBytes = int64_t{4} << 20;
// count values of x rounded to bf16, to nearest even (vectorized where the CPU has AVX512-BF16).
void RoundToBf16(const float* x, int64_t count, uint16_t* out) {
  if (DetectCpuFeatures().avx512_bf16) return RoundToBf16Avx512(x, count, out);
  for (int64_t i = 0; i < count; ++i) out[i] = F32ToBf16(x[i]);
}

// amx::WidenRows over a quantized weight matrix.
struct QuantRows {
  const uint8_t* w;
  DType dtype;
  size_t row_bytes;
};
void WidenQuantRows(const void* ctx, int64_t n0, int64_t rows, int64_t k, uint16_t* out) {
  const QuantRows& q = *static_cast<const QuantRows*>(ctx);
  thread_local std::vector<float> row;
  if (row.size() < static_cast<size_t>(k)) row.resize(k);
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(q.dtype, q.w + (n0 + r) * q.row_bytes, k, row.data());
    RoundToBf16(row.data(), k, out + r * k);
  }
}

// x [count] rounded to bf16 in this thread's buffer (reused by the next product on it).
const uint16_t* RoundedX(const float* x, int64_t count) {
  thread_local std::vector<uint16_t> xb;
  if (xb.size() < static_cast<size_t>(count)) xb.resize(count);
  RoundToBf16(x, count, xb.data());
  return xb.data();
}

// Prefill with bf16 weights on kAmxBf16: the tiles where k is whole tile steps; else (no
// model seen so far) the streaming kernel on the same rounded x, the same numbers.
void AmxLinearBf16(const float* x, int64_t m, int64_t k, const void* w, int64_t n, float* y) {
  if (k % amx::kBf16StepK != 0) return RoundedBf16StreamingLinear(x, m, k, w, n, y);
  amx::LinearBf16(RoundedX(x, m * k), m, k, static_cast<const uint16_t*>(w), n, y, n);
}

// Weights held in tile order (only the amx-bf16 path holds them so): x rounded to bf16, then
// the AMX product for prefill, the AVX512-BF16 one for decode rows.
void TilesLinear(const float* x, int64_t m, int64_t k, const void* w, int64_t n, float* y) {
  const auto* wt = static_cast<const uint16_t*>(w);
  if (m > kMaxStreamingRows) return amx::LinearTiles(RoundedX(x, m * k), m, k, wt, n, y, n);
  amx::GemvTiles(RoundedX(x, m * k), m, k, wt, n, y);
}

// Quantized prefill on kAmxBf16: each thread widens 32 weight rows to bf16 right before its
// tiles read them. Every block type holds a multiple of 32 elements, so k is whole steps.
void AmxQuantPrefill(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n, float* y) {
  TP_CHECK(k % amx::kBf16StepK == 0);
  const QuantRows rows{static_cast<const uint8_t*>(w), w_dtype, RowBytes(w_dtype, k)};
  amx::LinearBf16Widened(RoundedX(x, m * k), m, k, WidenQuantRows, &rows, n, y, n);
}

void QuantPrefillBf16(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n, float* y) {
  const int64_t panel_rows = std::max<int64_t>(64, kQuantPanelBytes / 2 / k / 16 * 16);
  const size_t row_bytes = RowBytes(w_dtype, k);
  thread_local std::vector<uint16_t> panel;
  if (panel.size() < static_cast<size_t>(panel_rows * k)) panel.resize(panel_rows * k);
  uint16_t* out = panel.data();
  const uint16_t* xb = RoundedX(x, m * k);  // once for all panels (as LinearBf16 rounds it)
  for (int64_t n0 = 0; n0 < n; n0 += panel_rows) {
    const int64_t rows = std::min(panel_rows, n - n0);
    const uint8_t* src = static_cast<const uint8_t*>(w) + n0 * row_bytes;
#pragma omp parallel
    {
      thread_local std::vector<float> row;
      if (row.size() < static_cast<size_t>(k)) row.resize(k);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        DequantizeRow(w_dtype, src + r * row_bytes, k, row.data());
        RoundToBf16(row.data(), k, out + r * k);
      }
    }
    onednn::LinearBf16RoundedX(xb, m, k, out, rows, y + n0, n);
  }
}

// A representative prefill product (gemma-4-1b's QKV over a 512-token chunk) whose
// oneDNN implementation decides whether that path is worth choosing.
constexpr int64_t kProbeM = 512, kProbeK = 1536, kProbeN = 4096;

}  // namespace

void RoundedBf16LinearAvx2(const float* x, int64_t m, int64_t k, const void* w, int64_t n, float* y) {
  thread_local std::vector<float> rounded;
  if (rounded.size() < static_cast<size_t>(m * k)) rounded.resize(m * k);
  for (int64_t i = 0; i < m * k; ++i) rounded[i] = Bf16ToF32(F32ToBf16(x[i]));
  StreamingLinearAnyM<Bf16>(rounded.data(), m, k, w, n, y);
}

const char* GemmPathName(GemmPath path) {
  switch (path) {
    case GemmPath::kOneDnnBf16: return "onednn-bf16";
    case GemmPath::kAmxBf16: return "amx-bf16";
    default: return "sgemm";
  }
}

std::vector<GemmPath> AvailableGemmPaths() {
  std::vector<GemmPath> paths = {GemmPath::kSgemm};
  if (!onednn::Bf16Implementation(kProbeM, kProbeK, kProbeN).empty()) {
    paths.push_back(GemmPath::kOneDnnBf16);
  }
  if (amx::Bf16Available()) paths.push_back(GemmPath::kAmxBf16);
  return paths;
}

const char* QuantPrefillName(QuantPrefill q) { return q == QuantPrefill::kInt8 ? "int8" : "widen"; }

namespace {

absl::StatusOr<GemmChoice> ChoosePath(std::string_view spec) {
  const CpuFeatures& cpu = DetectCpuFeatures();
  const std::string cpu_name = absl::StrCat("CPU: ", CpuFeaturesName(cpu));
  const std::string impl = onednn::Bf16Implementation(kProbeM, kProbeK, kProbeN);
  const std::string sgemm = absl::StrCat("sgemm (OpenBLAS fp32 prefill, fp32-FMA decode; ", cpu_name, ")");
  if (spec == "sgemm") return GemmChoice{GemmPath::kSgemm, sgemm};
  const bool jit = !impl.empty() && impl.find("ref") == std::string::npos;
  const bool bf16_units = cpu.amx_bf16 || cpu.avx512_bf16;
  const std::string onednn =
      absl::StrCat("onednn-bf16 (prefill: ", onednn::Describe(), " ", impl, "; decode: ",
                   cpu.avx512_bf16 ? "avx512_bf16 dot products" : "fp32 FMAs on bf16-rounded x", "; ", cpu_name, ")");
  const std::string amx_name = absl::StrCat("amx-bf16 (bf16 weights held in AMX tile order; prefill: AMX-BF16 tiles; ",
                                            "decode: avx512_bf16 dot products; ", cpu_name, ")");
  if (spec == "amx-bf16") {
    const std::string why = amx::Bf16Unavailable();
    if (!why.empty()) {
      return absl::FailedPreconditionError(absl::StrCat("--cpu-gemm amx-bf16 is not available here: ", why, " (",
                                                        cpu_name, "); use --cpu-gemm auto or sgemm"));
    }
    return GemmChoice{GemmPath::kAmxBf16, amx_name};
  }
  if (spec == "onednn-bf16") {
    if (impl.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--cpu-gemm onednn-bf16 is not available here: ",
          onednn::Linked() ? "oneDNN has no bf16 matmul on this CPU (it needs AVX-512; "
                           : "tpserve was built without oneDNN (install libdnnl-dev and rebuild; ",
          cpu_name, "); use --cpu-gemm auto or sgemm"));
    }
    return GemmChoice{GemmPath::kOneDnnBf16, onednn};
  }
  if (spec != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("--cpu-gemm \"", std::string(spec), "\" is not one of auto, sgemm, onednn-bf16, amx-bf16"));
  }
  // AMX: our tiles on weights held in tile order, 1.2-1.4x oneDNN 2.6.3's prefill end to end
  // with the decode level (docs/cpu_backend.md, "Weights in tile order").
  if (cpu.amx_bf16 && amx::Bf16Available()) return GemmChoice{GemmPath::kAmxBf16, amx_name};
  if (bf16_units && jit) return GemmChoice{GemmPath::kOneDnnBf16, onednn};
  if (!bf16_units) return GemmChoice{GemmPath::kSgemm, sgemm};
  return GemmChoice{GemmPath::kSgemm,
                    absl::StrCat("sgemm (OpenBLAS fp32: the CPU has bf16 units but ",
                                 onednn::Linked() ? absl::StrCat(onednn::Describe(), " offers ",
                                                                 impl.empty() ? "no bf16 matmul" : impl)
                                                  : "tpserve was built without oneDNN",
                                 "; ", cpu_name, ")")};
}

}  // namespace

absl::StatusOr<GemmChoice> ChooseGemmPath(std::string_view spec, std::string_view quant_prefill_spec) {
  TP_ASSIGN_OR_RETURN(GemmChoice choice, ChoosePath(spec));
  const CpuFeatures& cpu = DetectCpuFeatures();
  const QuantIsa isa = BestQuantIsa();
  if (quant_prefill_spec == "auto") {
    // docs/quantization.md, "Int8 prefill": the int8 path measured 1.4-1.7x oneDNN's bf16
    // widening on a Sapphire Rapids VM without AMX, 0.65-0.96x on Zen 4 (and level with sgemm's
    // widening there); AMX's bf16 tiles were not raced against it.
    const bool int8 = isa == QuantIsa::kAvx512Vnni && choice.path != GemmPath::kAmxBf16 && !cpu.amd;
    choice.quant_prefill = int8 ? QuantPrefill::kInt8 : QuantPrefill::kWiden;
  } else if (quant_prefill_spec == "int8") {
    if (isa == QuantIsa::kScalar) {
      return absl::FailedPreconditionError(
          absl::StrCat("--cpu-quant-prefill int8 is not available here: the int8 dot kernels need AVX2 or AVX-512 "
                       "VNNI (CPU: ", CpuFeaturesName(cpu), "); use --cpu-quant-prefill auto or widen"));
    }
    choice.quant_prefill = QuantPrefill::kInt8;
  } else if (quant_prefill_spec == "widen") {
    choice.quant_prefill = QuantPrefill::kWiden;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--cpu-quant-prefill \"", std::string(quant_prefill_spec),
                                                   "\" is not one of auto, int8, widen"));
  }
  absl::StrAppend(&choice.description, "; quantized prefill: ",
                  choice.quant_prefill == QuantPrefill::kInt8
                      ? absl::StrCat("int8 (", QuantIsaName(isa), " dot kernels on int8 x, as decode)")
                      : absl::StrCat("widen (blocks widened to ", choice.path == GemmPath::kSgemm ? "fp32" : "bf16",
                                     " for ", GemmPathName(choice.path), "'s GEMM)"));
  return choice;
}

void Linear(GemmPath path, QuantPrefill quant_prefill, const float* x, int64_t m, int64_t k, const void* w,
            DType w_dtype, int64_t n, float* y) {
  if (quant_prefill == QuantPrefill::kInt8 && m > kMaxStreamingRows && k > 0 && n > 0 && IsQuantized(w_dtype) &&
      w_dtype != DType::kF8_E4M3) {
    return QuantGemm(x, m, k, w, w_dtype, n, y);
  }
  Linear(path, x, m, k, w, w_dtype, n, y);
}

void Linear(GemmPath path, const float* x, int64_t m, int64_t k, const void* w, DType w_dtype,
            int64_t n, float* y) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    std::memset(y, 0, sizeof(float) * m * n);
    return;
  }
  if (w_dtype == DType::kBF16Tiles) return TilesLinear(x, m, k, w, n, y);
  if (m > kMaxStreamingRows) {
    if (path == GemmPath::kOneDnnBf16 && w_dtype == DType::kBF16) {
      return onednn::LinearBf16(x, m, k, static_cast<const uint16_t*>(w), n, y);
    }
    if (path == GemmPath::kOneDnnBf16 && IsQuantized(w_dtype)) return QuantPrefillBf16(x, m, k, w, w_dtype, n, y);
    if (path == GemmPath::kAmxBf16 && w_dtype == DType::kBF16) return AmxLinearBf16(x, m, k, w, n, y);
    if (path == GemmPath::kAmxBf16 && IsQuantized(w_dtype)) return AmxQuantPrefill(x, m, k, w, w_dtype, n, y);
    return PanelSgemm(x, m, k, w, w_dtype, n, y);
  }
  if (IsQuantized(w_dtype)) return QuantGemv(x, m, k, w, w_dtype, n, y);
  switch (w_dtype) {
    case DType::kF32:
      return StreamingLinearAnyM<float>(x, m, k, w, n, y);
    case DType::kBF16:
      if (RoundsXToBf16(path)) return RoundedBf16StreamingLinear(x, m, k, w, n, y);
      return StreamingLinearAnyM<Bf16>(x, m, k, w, n, y);
    case DType::kF16:
      return StreamingLinearAnyM<F16>(x, m, k, w, n, y);
    default:
      TP_CHECK(false);  // quantized: above
  }
}

}  // namespace tpserve::cpu

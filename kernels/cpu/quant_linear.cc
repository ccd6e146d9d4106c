// Linear's decode rows over block-quantized weights (see quant.h): x quantized once per call
// (FP8 reads fp32 x in place: QuantizeX would only copy it),
// then one dot kernel call per weight row, the rows split among the OpenMP threads in
// contiguous ranges so that each thread streams its own stretch of the weight. And the int8
// prefill over the same kernels (QuantGemm).
// Tested by tests/quant_kernels_test.cc and tests/quant_linear_test.cc; measured by
// bench/quant_dot_bench.cc and, end to end, bench/engine_bench.cc --cpu_quant_prefill.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/quant.h"

namespace tpserve::cpu {

void QuantGemv(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n, float* y) {
  const QuantIsa isa = BestQuantIsa();
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const size_t w_row_bytes = RowBytes(w_dtype, k);
  const int mi = static_cast<int>(m);
  if (m >= kQuantTileRowsFrom && m <= kQuantTileRows) {
    if (const QuantTileFn tile = FindQuantTile(w_dtype, isa)) {
      thread_local std::vector<uint8_t> xt;
      if (xt.size() < QuantizedXTileBytes(w_dtype, k)) xt.resize(QuantizedXTileBytes(w_dtype, k));
      QuantizeXTile(w_dtype, x, m, k, xt.data());
      const uint8_t* xtb = xt.data();
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < n; ++r) tile(wb + r * w_row_bytes, xtb, mi, k, y + r, n);
      return;
    }
  }
  const QuantDotFn dot = FindQuantDot(w_dtype, isa);
  TP_CHECK(dot != nullptr);
  const size_t x_row_bytes = QuantizedXRowBytes(w_dtype, k);
  const uint8_t* xb = reinterpret_cast<const uint8_t*>(x);  // FP8's kernels read fp32 x as it is
  if (w_dtype != DType::kF8_E4M3) {
    thread_local std::vector<uint8_t> xq;
    if (xq.size() < m * x_row_bytes) xq.resize(m * x_row_bytes);
    QuantizeX(w_dtype, isa, x, m, k, xq.data());
    xb = xq.data();
  }
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) dot(wb + r * w_row_bytes, xb, x_row_bytes, mi, k, y + r, n);
}

namespace {

// One chunk of kQuantTileRows rows of x, quantized as QuantGemv quantizes that many rows.
struct XChunk {
  size_t offset;  // into the quantized buffer (FP8: unused, its kernels read x in place)
  int rows;
  bool tile;
};

// Bytes of weight rows QuantGemm's threads take at a time: small enough to stay in L2 while
// every chunk of x passes over them (L2 is 1-2 MiB a core on the CPUs measured). On the Zen 4
// VM 128 KiB to 1 MiB were level within the noise (1B Q4_K_M, 512-token prefill, 2 rounds);
// 256 KiB is what the Sapphire Rapids measurement ran with.
constexpr int64_t kQuantGemmPanelBytes = int64_t{256} << 10;

}  // namespace

void QuantGemm(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n, float* y) {
  const QuantIsa isa = BestQuantIsa();
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const size_t w_row_bytes = RowBytes(w_dtype, k);
  const QuantDotFn dot = FindQuantDot(w_dtype, isa);
  TP_CHECK(dot != nullptr);
  const QuantTileFn tile = FindQuantTile(w_dtype, isa);
  const bool fp8 = w_dtype == DType::kF8_E4M3;
  const size_t x_row_bytes = QuantizedXRowBytes(w_dtype, k);
  // The chunks and where each one's quantized rows go: as QuantGemv would take them.
  const int64_t chunks = (m + kQuantTileRows - 1) / kQuantTileRows;
  thread_local std::vector<XChunk> plan;
  plan.resize(chunks);
  size_t bytes = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    const int rows = static_cast<int>(std::min<int64_t>(kQuantTileRows, m - c * kQuantTileRows));
    const bool use_tile = tile != nullptr && rows >= kQuantTileRowsFrom;
    plan[c] = {bytes, rows, use_tile};
    if (!fp8) bytes += use_tile ? QuantizedXTileBytes(w_dtype, k) : rows * x_row_bytes;
  }
  thread_local std::vector<uint8_t> xq;
  if (xq.size() < bytes) xq.resize(bytes);
  uint8_t* xqb = xq.data();
  const XChunk* chunk = plan.data();
  if (!fp8) {
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      const float* xc = x + c * kQuantTileRows * k;
      if (chunk[c].tile) {
        QuantizeXTile(w_dtype, xc, chunk[c].rows, k, xqb + chunk[c].offset);
      } else {
        QuantizeX(w_dtype, isa, xc, chunk[c].rows, k, xqb + chunk[c].offset);
      }
    }
  }
  // Panels of weight rows outer (each read from memory once), every chunk of x over a panel
  // while it sits in this thread's L2.
  const int64_t panel_rows = std::max<int64_t>(16, kQuantGemmPanelBytes / static_cast<int64_t>(w_row_bytes));
  const int64_t panels = (n + panel_rows - 1) / panel_rows;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t r0 = p * panel_rows, r1 = std::min(n, r0 + panel_rows);
    for (int64_t c = 0; c < chunks; ++c) {
      float* yc = y + c * kQuantTileRows * n;
      const int rows = chunk[c].rows;
      if (chunk[c].tile) {
        const uint8_t* xt = xqb + chunk[c].offset;
        for (int64_t r = r0; r < r1; ++r) tile(wb + r * w_row_bytes, xt, rows, k, yc + r, n);
      } else {
        const uint8_t* xc = fp8 ? reinterpret_cast<const uint8_t*>(x + c * kQuantTileRows * k) : xqb + chunk[c].offset;
        for (int64_t r = r0; r < r1; ++r) dot(wb + r * w_row_bytes, xc, x_row_bytes, rows, k, yc + r, n);
      }
    }
  }
}

}  // namespace tpserve::cpu

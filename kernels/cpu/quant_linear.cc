// Linear's decode rows over block-quantized weights (see quant.h): x quantized once per call
// (FP8 reads fp32 x in place: QuantizeX would only copy it),
// then one kernel call per weight row, the rows split among the OpenMP threads in
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
namespace {

// How `rows` (<= kQuantTileRows) rows of x meet a weight row: the row tile where the type has
// one and rows >= kQuantTileRowsFrom, else the dot kernel on QuantizeX's rows (FP8's read fp32
// x in place). QuantGemv takes its rows so and QuantGemm each of its chunks, one rule for both,
// so that a chunk's y is QuantGemv's bit for bit.
class RowsKernel {
 public:
  RowsKernel(DType w, QuantIsa isa, int64_t k, int rows)
      : w_(w), isa_(isa), k_(k), rows_(rows), x_row_bytes_(QuantizedXRowBytes(w, k)) {
    if (rows >= kQuantTileRowsFrom) tile_ = FindQuantTile(w, isa);
    if (tile_ == nullptr) {
      dot_ = FindQuantDot(w, isa);
      TP_CHECK(dot_ != nullptr);
    }
  }
  int rows() const { return rows_; }
  // Bytes Quantize writes (none for FP8).
  size_t XBytes() const {
    if (tile_ != nullptr) return QuantizedXTileBytes(w_, k_);
    return w_ == DType::kF8_E4M3 ? 0 : rows_ * x_row_bytes_;
  }
  // The rows of x (rows_ x k_ fp32) as the kernel reads them: written to `out` (XBytes()), or
  // x itself for FP8.
  const uint8_t* Quantize(const float* x, uint8_t* out) const {
    if (tile_ != nullptr) {
      QuantizeXTile(w_, x, rows_, k_, out);
      return out;
    }
    if (w_ == DType::kF8_E4M3) return reinterpret_cast<const uint8_t*>(x);
    QuantizeX(w_, isa_, x, rows_, k_, out);
    return out;
  }
  // y[i * ldy] = w_row · x_i for the rows i, xq from Quantize.
  void Row(const uint8_t* w_row, const uint8_t* xq, float* y, int64_t ldy) const {
    if (tile_ != nullptr) return tile_(w_row, xq, rows_, k_, y, ldy);
    dot_(w_row, xq, x_row_bytes_, rows_, k_, y, ldy);
  }

 private:
  DType w_;
  QuantIsa isa_;
  int64_t k_;
  int rows_;
  size_t x_row_bytes_;
  QuantTileFn tile_ = nullptr;
  QuantDotFn dot_ = nullptr;
};

// Bytes of weight rows QuantGemm's threads take at a time: small enough to stay in L2 while
// every chunk of x passes over them (L2 is 1-2 MiB a core on the CPUs measured). On the Zen 4
// VM 128 KiB to 1 MiB were level within the noise (1B Q4_K_M, 512-token prefill, 2 rounds);
// 256 KiB is what the Sapphire Rapids measurement ran with.
constexpr int64_t kQuantGemmPanelBytes = int64_t{256} << 10;

}  // namespace

void QuantGemv(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n, float* y) {
  const RowsKernel kernel(w_dtype, BestQuantIsa(), k, static_cast<int>(m));
  thread_local std::vector<uint8_t> xq;
  if (xq.size() < kernel.XBytes()) xq.resize(kernel.XBytes());
  const uint8_t* xb = kernel.Quantize(x, xq.data());
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const size_t w_row_bytes = RowBytes(w_dtype, k);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) kernel.Row(wb + r * w_row_bytes, xb, y + r, n);
}

void QuantGemm(const float* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n, float* y) {
  const QuantIsa isa = BestQuantIsa();
  // Chunks of kQuantTileRows rows of x, the last one of what is left.
  const int64_t chunks = (m + kQuantTileRows - 1) / kQuantTileRows;
  const RowsKernel full(w_dtype, isa, k, kQuantTileRows);
  const RowsKernel last(w_dtype, isa, k, static_cast<int>(m - (chunks - 1) * kQuantTileRows));
  const auto kernel = [&](int64_t c) -> const RowsKernel& { return c + 1 < chunks ? full : last; };
  // Each chunk's rows at c * full.XBytes(): the last chunk's, of fewer rows, take no more.
  thread_local std::vector<uint8_t> xq;
  thread_local std::vector<const uint8_t*> xc;  // chunk c's rows as its kernel reads them
  if (xq.size() < chunks * full.XBytes()) xq.resize(chunks * full.XBytes());
  xc.resize(chunks);
  uint8_t* xqb = xq.data();
  const uint8_t** xcb = xc.data();
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    xcb[c] = kernel(c).Quantize(x + c * kQuantTileRows * k, xqb + c * full.XBytes());
  }
  // Panels of weight rows outer (each read from memory once), every chunk of x over a panel
  // while it sits in this thread's L2.
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const size_t w_row_bytes = RowBytes(w_dtype, k);
  const int64_t panel_rows = std::max<int64_t>(16, kQuantGemmPanelBytes / static_cast<int64_t>(w_row_bytes));
  const int64_t panels = (n + panel_rows - 1) / panel_rows;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t r0 = p * panel_rows, r1 = std::min(n, r0 + panel_rows);
    for (int64_t c = 0; c < chunks; ++c) {
      const RowsKernel& kc = kernel(c);
      float* yc = y + c * kQuantTileRows * n;
      for (int64_t r = r0; r < r1; ++r) kc.Row(wb + r * w_row_bytes, xcb[c], yc + r, n);
    }
  }
}

}  // namespace tpserve::cpu

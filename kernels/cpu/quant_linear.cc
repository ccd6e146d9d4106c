// Linear's decode rows over block-quantized weights (see quant.h): x quantized once per call
// (FP8 reads fp32 x in place: QuantizeX would only copy it),
// then one dot kernel call per weight row, the rows split among the OpenMP threads in
// contiguous ranges so that each thread streams its own stretch of the weight.
// Tested by tests/quant_kernels_test.cc; measured by bench/quant_dot_bench.cc.
#include <omp.h>

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

}  // namespace tpserve::cpu

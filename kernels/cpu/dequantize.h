// ggml's block layouts (kernels/base.h's quantized DTypes, and the float types) to fp32,
// exactly as ggml and the `gguf` Python package's gguf.quants.dequantize compute them: the
// reference every quantized kernel (kernels/cpu/quant.h) is tested against, and what the
// GGUF loader uses where a weight is widened at load. Tested by tests/gguf_quants_test.cc.
#pragma once

#include <cstdint>

#include "kernels/base.h"

namespace tpserve::cpu {

// Dequantizes `n` elements of dtype `t` from src (at a block boundary) into dst[0, n); n is a
// multiple of BlockElems(t) (a broken invariant otherwise). Thread-safe; callers parallelize
// over rows.
void DequantizeRow(DType t, const void* src, int64_t n, float* dst);

}  // namespace tpserve::cpu

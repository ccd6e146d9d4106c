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

// The other way, for weights quantized at load (--quantization int8): n elements (a multiple
// of 32) of x into n / 32 Q8_0 blocks, as ggml's quantizer writes them: d = amax / 127 stored
// as fp16, q = round(x / d) (ties away from zero), an all-zero block d = 0.
void QuantizeRowQ8_0(const float* x, int64_t n, void* dst);

}  // namespace tpserve::cpu

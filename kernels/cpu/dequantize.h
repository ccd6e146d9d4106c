// ggml's block layouts (kernels/base.h's quantized DTypes, and the float types) to fp32,
// exactly as ggml and the `gguf` Python package's gguf.quants.dequantize compute them: the
// reference every quantized kernel (kernels/cpu/quant.h) is tested against, and what the
// GGUF loader uses where a weight is widened at load; and the FP8 E4M3 blocks (kF8_E4M3) with
// their conversions. Tested by tests/gguf_quants_test.cc (ggml types) and
// tests/quant_kernels_test.cc (FP8: every code, and rounding against a brute-force search).
#pragma once

#include <bit>
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

// n elements (a multiple of 128) of finite x into n / 128 kF8_E4M3 blocks: scale = amax / 448
// (0 for an all-zero block, whose codes are then all 0), q = F32ToF8E4M3(x / scale). Never
// writes a NaN code for finite x: |x / scale| past 448 (rounding, or a subnormal scale)
// saturates to +-448.
void QuantizeRowF8E4M3(const float* x, int64_t n, void* dst);

// One OCP FP8 E4M3 code (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; exponent 0:
// subnormal 2^-6 * m/8; 0x7f and 0xff NaN; no infinities; max 448) to fp32, exactly. NaN codes
// give a quiet NaN with the code's sign. Branch-free so that loops over it vectorize.
inline float F8E4M3ToF32(uint8_t q) {
  const uint32_t sign = static_cast<uint32_t>(q & 0x80u) << 24;
  const uint32_t mag = q & 0x7fu;
  // Exponent e > 0: the 7 bits as fp32's exponent (rebiased by 127 - 7) and top 3 mantissa bits.
  const uint32_t normal = (mag << 20) + (120u << 23);
  // e = 0: m * 2^-9, exact in fp32 (and normal there, so no denormals-are-zero mode matters).
  const uint32_t subnormal = std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(mag)) * 0x1p-9f);
  const uint32_t is_sub = 0u - static_cast<uint32_t>(mag < 8u);
  const uint32_t is_nan = 0u - static_cast<uint32_t>(mag == 0x7fu);
  const uint32_t u = (subnormal & is_sub) | (0x7fc00000u & is_nan) | (normal & ~(is_sub | is_nan));
  return std::bit_cast<float>(u | sign);
}

// fp32 to the nearest E4M3 code, ties to even (to the even code: the mantissa's last bit),
// saturating: |f| >= 448 (and +-inf) gives +-448, never a NaN code. The sign is kept, so -0.0
// gives 0x80 (-0) and F32ToF8E4M3(F8E4M3ToF32(q)) == q for all 256 codes; a NaN gives the NaN
// code of its sign (0x7f / 0xff).
uint8_t F32ToF8E4M3(float f);

}  // namespace tpserve::cpu

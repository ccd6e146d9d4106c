// Linear's decode GEMV on AVX512-BF16 dot products (vdpbf16ps): bf16 x against bf16
// weights, fp32 accumulation. Only to be called where DetectCpuFeatures().avx512_bf16;
// the file is compiled for that ISA whatever the build's -march. Tested by
// tests/cpu_kernels_test.cc (GemmPathTest, Linear.BatchRowsEqualSingleRowsExactly).
#pragma once

#include <cstdint>

namespace tpserve::cpu {

// xb[i] = x[i] rounded to bf16, to nearest even (as the CPU's vcvtne2ps2bf16 rounds; inputs
// below fp32's normal range count as zero).
void RoundToBf16Avx512(const float* x, int64_t count, uint16_t* xb);

// y[m, n] = xb[m, k] · w[n, k]^T for m <= kMaxStreamingRows rows of bf16 x. Each output is
// summed in an order that depends on k alone (gemv_tiles.h), so a row of a batch equals
// the same row alone bit for bit.
void StreamingLinearAvx512Bf16(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, int64_t n,
                               float* y);

}  // namespace tpserve::cpu

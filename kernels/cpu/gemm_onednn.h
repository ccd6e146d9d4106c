// Private to the CPU kernels: oneDNN's bf16 matmul for Linear's kOneDnnBf16 path, or a
// stand-in without it (gemm_onednn_none.cc). Tested through tests/cpu_kernels_test.cc.
#pragma once

#include <cstdint>
#include <string>

namespace tpserve::cpu::onednn {

// Whether this build links oneDNN.
bool Linked();

// oneDNN's implementation of a bf16 product of this shape on this CPU, e.g.
// "brg:avx512_core_amx"; "" where it has none (oneDNN 2.x needs AVX-512 for bf16) or is
// not linked. The first call lets oneDNN use AMX where the CPU has it (oneDNN 2.6 leaves
// AMX off unless asked).
std::string Bf16Implementation(int64_t m, int64_t k, int64_t n);

// e.g. "oneDNN 2.6.3 (avx512_core_amx)": the library and the instruction set it runs on.
std::string Describe();

// y[m, n] = bf16(x)[m, k] · w[n, k]^T with fp32 accumulation and output; w: bf16 bits; rows
// of y ldy floats apart (ldy >= n; 0: n). Only where Bf16Implementation is not empty.
void LinearBf16(const float* x, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y, int64_t ldy = 0);
// The same product of an x already rounded to bf16 (xb: bf16 bits [m, k]), for callers that
// run several products of one x (Linear's panels of widened quantized weights).
void LinearBf16RoundedX(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y,
                        int64_t ldy = 0);

}  // namespace tpserve::cpu::onednn

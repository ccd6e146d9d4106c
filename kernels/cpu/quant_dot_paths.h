// Private to the quant_dot*.cc files: the instruction-set paths of kernels/cpu/quant.h, each
// compiled in its own file under its own target pragma (so that the build's -march decides
// none of them) and picked at run time by quant_dot.cc. Tested by tests/quant_kernels_test.cc.
#pragma once

#include <cstdint>

#include "kernels/base.h"
#include "kernels/cpu/quant.h"

namespace tpserve::cpu::quant_paths {

// From this many rows of x on, the AVX-512 VNNI kernels of Q4_0, Q5_0 and Q8_0 take x as
// QuantX::kQ8U (quant.h): QuantXFor's choice and quant_dot_table.inc's DotSigned's, one rule.
inline constexpr int kBiasedXRowsFrom = 2;

// The dot kernel for weight type w on AVX2 + FMA + F16C (quant_dot_avx2.cc) and on AVX-512
// F/BW/VL + VNNI (quant_dot_avx512.cc); null where w has no kernel. The caller checks the CPU.
QuantDotFn FindAvx2(DType w);
QuantDotFn FindAvx512Vnni(DType w);
// quant.h's tile kernel for Q4_0, Q5_0 or Q8_0 on AVX-512 VNNI (quant_dot_avx512.cc).
QuantTileFn FindAvx512VnniTile(DType w);

// QuantizeX's blocks on AVX2 (quant_dot_avx2.cc), bit-identical to the scalar ones in
// quant_dot.cc: `blocks` consecutive 32- or 256-element blocks of x.
void QuantizeQ8Avx2(const float* x, int64_t blocks, BlockQ8* out);
void QuantizeQ8_1Avx2(const float* x, int64_t blocks, BlockQ8_1* out);
void QuantizeQ8KAvx2(const float* x, int64_t blocks, BlockQ8K* out);

}  // namespace tpserve::cpu::quant_paths

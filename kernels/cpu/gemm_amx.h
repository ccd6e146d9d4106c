// Private to the CPU kernels: a bf16 GEMM on AMX tiles that reads the weights as they are
// held ([n, k] rows), for Linear's amx-bf16 prefill path. Tested by tests/cpu_kernels_test.cc
// (GemmPathTest on amx-bf16, skipped where the CPU has no AMX); measured by
// bench/kernels_bench.cc beside oneDNN's matmul and PyTorch's (bench/cpu_vs_torch.sh).
#pragma once

#include <cstdint>
#include <string>

namespace tpserve::cpu::amx {

// Whether this CPU has AMX-BF16 and the kernel granted this process the tile data state
// (Linux asks each process to request it: arch_prctl ARCH_REQ_XCOMP_PERM). The first call
// makes the request; "" when available, else why not (for the path choice's error).
const std::string& Bf16Unavailable();
inline bool Bf16Available() { return Bf16Unavailable().empty(); }

// The K step of one tile product: k must be a multiple of it.
inline constexpr int64_t kBf16StepK = 32;

// y[m, n] = xb[m, k] · w[n, k]^T with fp32 accumulation and output; xb and w are bf16 bits;
// rows of y ldy floats apart (ldy >= n). k % kBf16StepK == 0. Only where Bf16Available().
// Runs on the caller's OpenMP threads (weight rows split between them).
void LinearBf16(const uint16_t* xb, int64_t m, int64_t k, const uint16_t* w, int64_t n, float* y, int64_t ldy);

// The same product with weights held in another form (quantized blocks): `widen` writes
// weight rows [n0, n0 + rows) as bf16 bits to out ([rows, k]; rows <= 32), called on the
// thread that then multiplies them, so each 32-row slice is widened into that thread's
// cache right before its tiles read it (no panel of widened weights, no barrier per panel).
using WidenRows = void (*)(const void* ctx, int64_t n0, int64_t rows, int64_t k, uint16_t* out);
void LinearBf16Widened(const uint16_t* xb, int64_t m, int64_t k, WidenRows widen, const void* ctx, int64_t n,
                       float* y, int64_t ldy);

}  // namespace tpserve::cpu::amx

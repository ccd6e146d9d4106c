// What the CPU offers the kernels, probed once (CPUID and the OS's XSAVE state), and the
// prefill GEMM path chosen from it. Tested by tests/cpu_kernels_test.cc.
#pragma once

#include <string>

namespace tpserve::cpu {

struct CpuFeatures {
  bool avx2 = false;  // with FMA and F16C, which the kernels' AVX2 paths assume
  bool avx512 = false;       // F, BW, VL, and the OS saves the ZMM state
  bool avx512_vnni = false;  // vpdpbusd: int8 dot products (Cascade Lake, Ice Lake, Zen 4)
  bool avx512_bf16 = false;  // vdpbf16ps (Cooper Lake, Sapphire Rapids, Zen 4)
  bool amx_bf16 = false;     // AMX tiles with bf16 (Sapphire Rapids); the OS state is asked for on use
  // CPUID vendor "AuthenticAMD". Zen 4 runs 512-bit instructions as two 256-bit halves, and the
  // choice of quantized prefill (cpu::ChooseGemmPath) was measured to differ there.
  bool amd = false;
};

// The probe of this CPU, made on the first call and cached (the one global of the CPU
// kernels: the CPU does not change under a process).
const CpuFeatures& DetectCpuFeatures();

// e.g. "avx2 avx512 avx512_bf16 amx_bf16", "amd avx2 avx512 avx512_vnni avx512_bf16", or "avx2".
std::string CpuFeaturesName(const CpuFeatures& f);

}  // namespace tpserve::cpu

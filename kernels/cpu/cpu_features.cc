// CPU feature probe. Tested by tests/cpu_kernels_test.cc.
#include "kernels/cpu/cpu_features.h"

#include <cpuid.h>

#include <cstdint>

namespace tpserve::cpu {
namespace {

uint64_t Xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

CpuFeatures Probe() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  f.amd = b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163;  // "Auth" "enti" "cAMD"
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool fma = c & (1u << 12);
  const bool f16c = c & (1u << 29);
  const bool osxsave = c & (1u << 27);
  if (!osxsave || __get_cpuid_max(0, nullptr) < 7) return f;
  const uint64_t xcr0 = Xgetbv0();
  const bool os_ymm = (xcr0 & 0x6) == 0x6;      // SSE and AVX state
  const bool os_zmm = (xcr0 & 0xe6) == 0xe6;    // plus opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_tiles = (xcr0 & 0x60000) == 0x60000;  // XTILECFG, XTILEDATA
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = os_ymm && (b & (1u << 5)) && fma && f16c;
  const bool avx512f = b & (1u << 16), avx512bw = b & (1u << 30), avx512vl = b & (1u << 31);
  f.avx512 = os_zmm && avx512f && avx512bw && avx512vl;
  const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24);
  f.amx_bf16 = f.avx512 && os_tiles && amx_bf16 && amx_tile;
  f.avx512_vnni = f.avx512 && (c & (1u << 11));
  __cpuid_count(7, 1, a, b, c, d);
  f.avx512_bf16 = f.avx512 && (a & (1u << 5));
  return f;
}

}  // namespace

const CpuFeatures& DetectCpuFeatures() {
  static const CpuFeatures features = Probe();
  return features;
}

std::string CpuFeaturesName(const CpuFeatures& f) {
  std::string s;
  const auto add = [&s](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.amd, "amd");
  add(f.avx2, "avx2");
  add(f.avx512, "avx512");
  add(f.avx512_vnni, "avx512_vnni");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.amx_bf16, "amx_bf16");
  return f.avx2 ? s : (s.empty() ? "no avx2" : s + " (no avx2)");
}

}  // namespace tpserve::cpu

// The stand-in for builds without oneDNN: no bf16 matmul. Tested through
// tests/cpu_kernels_test.cc (BuiltGemmPaths lists only sgemm).
#include "kernels/base.h"
#include "kernels/cpu/gemm_onednn.h"

namespace tpserve::cpu::onednn {

bool Linked() { return false; }
std::string Bf16Implementation(int64_t, int64_t, int64_t) { return ""; }
std::string Describe() { return "oneDNN not built in"; }
void LinearBf16(const float*, int64_t, int64_t, const uint16_t*, int64_t, float*, int64_t) {
  TP_CHECK(false && "built without oneDNN");
}
void LinearBf16RoundedX(const uint16_t*, int64_t, int64_t, const uint16_t*, int64_t, float*, int64_t) {
  TP_CHECK(false && "built without oneDNN");
}

}  // namespace tpserve::cpu::onednn

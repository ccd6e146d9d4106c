// The prefill attention kernel's sm_90a variants, head_dim 256: S = Q·K^T on wgmma (one
// warpgroup of 64 rows, both operands from 128-byte-swizzled shared memory) with P·V on
// mma.sync as in prefill_attention.cu (variant 1), or P·V on wgmma too (variant 2: P from
// registers, V an MN-major swizzled operand). Compiled for sm_90a only
// (kernels/cuda/CMakeLists.txt); held to the CPU reference by
// tests/cuda_attention_test.cc (Wgmma) and timed by cuda_kernels_bench ("prefill wgmma").
#include "kernels/cuda/prefill_attention.cuh"

namespace tpserve::cuda::prefill_detail {
namespace {

// Whether this device runs the sm_90a code: compute capability 9.0 exactly (arch-specific
// code runs nowhere else) and the kernel's image loads.
bool DeviceRunsIt() {
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (major != 9 || minor != 0) return false;
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, PrefillKernel<256, 32, 1, 4, 1>) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.binaryVersion == 90;
}

}  // namespace

size_t WgmmaSmemBytes(int head_dim, int variant) {
  if (head_dim != 256 || !DeviceRunsIt()) return 0;
  return variant == 1 ? Cfg<256, 32, 1, 4, 1>::kBytes : variant == 2 ? Cfg<256, 32, 1, 4, 2>::kBytes : 0;
}

bool LaunchWgmma(int head_dim, int variant, const AttnArgs& a, const TilePlan& plan, int group, int smem_optin,
                 cudaStream_t stream) {
  if (head_dim != 256) return false;
  if (variant == 1) {
    LaunchPrefillKernel<256, 32, 1, 4, 1>(a, plan, group, smem_optin, stream);
  } else if (variant == 2) {
    LaunchPrefillKernel<256, 32, 1, 4, 2>(a, plan, group, smem_optin, stream);
  } else {
    return false;
  }
  return true;
}

}  // namespace tpserve::cuda::prefill_detail

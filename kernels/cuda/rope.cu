// Rotate-half rotary embedding in place on bf16 q/k, angles in fp32 exactly as
// cpu::Rope computes them. Tested by tests/cuda_elementwise_test.cc.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace tpserve::cuda {
namespace {

// One block per token: cos/sin of its angles once in shared memory, then every head.
__global__ void RopeKernel(bf16* __restrict__ x, int64_t heads, int64_t head_dim, const int32_t* __restrict__ positions,
                           const float* __restrict__ inv_freq, float attn_factor) {
  extern __shared__ float cs[];  // [half] cos, then [half] sin
  const int64_t half = head_dim / 2;
  const int64_t t = blockIdx.x;
  const float pos = static_cast<float>(positions[t]);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    // The angle is rounded to fp32 before cos/sin (precise, not the fast intrinsics:
    // angles reach 1e5 radians and more).
    const float angle = pos * inv_freq[i];
    float s, c;
    sincosf(angle, &s, &c);
    cs[i] = c * attn_factor;
    cs[half + i] = s * attn_factor;
  }
  __syncthreads();
  bf16* xt = x + t * heads * head_dim;
  for (int64_t j = threadIdx.x; j < heads * half; j += blockDim.x) {
    const int64_t h = j / half, i = j % half;
    bf16* xh = xt + h * head_dim;
    const float x0 = __bfloat162float(xh[i]);
    const float x1 = __bfloat162float(xh[i + half]);
    xh[i] = __float2bfloat16_rn(x0 * cs[i] - x1 * cs[half + i]);
    xh[i + half] = __float2bfloat16_rn(x1 * cs[i] + x0 * cs[half + i]);
  }
}

}  // namespace

void Rope(bf16* x, int64_t tokens, int64_t heads, int64_t head_dim, const int32_t* positions, const float* inv_freq,
          float attn_factor, cudaStream_t stream) {
  if (tokens == 0) return;
  TP_CHECK(head_dim % 2 == 0);
  const size_t smem = static_cast<size_t>(head_dim) * sizeof(float);
  RopeKernel<<<tokens, 256, smem, stream>>>(x, heads, head_dim, positions, inv_freq, attn_factor);
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace tpserve::cuda

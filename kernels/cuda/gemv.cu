// y = x · W^T for a few rows of x (decode), memory-bound on W: one warp per output
// feature streams its W row with 16-byte loads, several in flight per lane, against up to
// 8 rows of x at once. Also the (slow, correct) path for fp16/fp32 weights at any M.
// Tested by tests/cuda_linear_test.cc against cpu::Linear.
#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kUnroll = 4;  // independent 16-byte loads in flight per lane

// Eight weights starting at w[i] (16-byte aligned for 16-bit types, 32 for fp32) in fp32.
__device__ __forceinline__ void Load8(const bf16* w, int64_t i, float* f) {
  Bf16x8ToFloat(__ldg(reinterpret_cast<const uint4*>(w + i)), f);
}
__device__ __forceinline__ void Load8(const __half* w, int64_t i, float* f) {
  Half8ToFloat(__ldg(reinterpret_cast<const uint4*>(w + i)), f);
}
__device__ __forceinline__ void Load8(const float* w, int64_t i, float* f) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(w + i));
  const float4 b = __ldg(reinterpret_cast<const float4*>(w + i + 4));
  f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
  f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}

// Block (x: 8 output features, y: kRows rows of x). Warp w computes feature
// blockIdx.x * 8 + w for rows [blockIdx.y * kRows, + kRows).
template <typename WT, int kRows>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarp)
    GemvKernel(const bf16* __restrict__ x, int64_t m, int64_t k, const WT* __restrict__ w, int64_t n,
               bf16* __restrict__ y) {
  const int lane = threadIdx.x % kWarp;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kRows;
  if (col >= n) return;
  const int rows = static_cast<int>(min(static_cast<int64_t>(kRows), m - m0));
  const WT* wr = w + col * k;
  const bf16* xr = x + m0 * k;
  float acc[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) acc[r] = 0.0f;

  if (k % 8 == 0) {
    const int64_t vecs = k / 8;
    int64_t v = lane;
    // Main loop: kUnroll vectors per lane per iteration, loads issued before any math.
    for (; v + (kUnroll - 1) * kWarp < vecs; v += kUnroll * kWarp) {
      float wf[kUnroll][8];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) Load8(wr, (v + u * kWarp) * 8, wf[u]);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r >= rows) break;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          float xf[8];
          Bf16x8ToFloat(*reinterpret_cast<const uint4*>(xr + r * k + (v + u * kWarp) * 8), xf);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[r] += wf[u][e] * xf[e];
        }
      }
    }
    for (; v < vecs; v += kWarp) {
      float wf[8];
      Load8(wr, v * 8, wf);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r >= rows) break;
        float xf[8];
        Bf16x8ToFloat(*reinterpret_cast<const uint4*>(xr + r * k + v * 8), xf);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[r] += wf[e] * xf[e];
      }
    }
  } else {
    for (int64_t i = lane; i < k; i += kWarp) {
      const float wv = ToFloat(wr[i]);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (r < rows) acc[r] += wv * __bfloat162float(xr[r * k + i]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float s = WarpSum(acc[r]);
    if (lane == 0 && r < rows) y[(m0 + r) * n + col] = __float2bfloat16_rn(s);
  }
}

template <typename WT>
void LaunchGemv(const bf16* x, int64_t m, int64_t k, const WT* w, int64_t n, bf16* y, cudaStream_t stream) {
  const unsigned gx = static_cast<unsigned>((n + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const int threads = kWarpsPerBlock * kWarp;
  if (m == 1) {
    GemvKernel<WT, 1><<<dim3(gx, 1), threads, 0, stream>>>(x, m, k, w, n, y);
  } else if (m == 2) {
    GemvKernel<WT, 2><<<dim3(gx, 1), threads, 0, stream>>>(x, m, k, w, n, y);
  } else if (m <= 4) {
    GemvKernel<WT, 4><<<dim3(gx, 1), threads, 0, stream>>>(x, m, k, w, n, y);
  } else {
    GemvKernel<WT, 8><<<dim3(gx, static_cast<unsigned>((m + 7) / 8)), threads, 0, stream>>>(x, m, k, w, n, y);
  }
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace

void Gemv(const bf16* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n, bf16* y,
          cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  switch (w_dtype) {
    case DType::kBF16:
      LaunchGemv(x, m, k, static_cast<const bf16*>(w), n, y, stream);
      break;
    case DType::kF16:
      LaunchGemv(x, m, k, static_cast<const __half*>(w), n, y, stream);
      break;
    case DType::kF32:
      LaunchGemv(x, m, k, static_cast<const float*>(w), n, y, stream);
      break;
  }
}

}  // namespace tpserve::cuda

// RMSNorm (three weight kinds) and the fused residual-add + RMSNorm, bf16 in and out,
// fp32 statistics. Tested by tests/cuda_elementwise_test.cc against cpu::RmsNorm.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace tpserve::cuda {
namespace {

// Rows up to this width get one warp each (per-head q/k norms); wider rows a whole block.
constexpr int64_t kWarpRowMaxDim = 1024;
constexpr int kBlockThreads = 256;

__device__ __forceinline__ float Weighted(float xn, const float* w, int64_t i, cpu::NormKind kind) {
  switch (kind) {
    case cpu::NormKind::kScale:
      return xn * w[i];
    case cpu::NormKind::kOnePlusScale:
      return xn * (1.0f + w[i]);
    default:
      return xn;
  }
}

// kTpr threads normalize one row (kTpr = 32: a warp; kTpr = blockDim.x: the block).
// kFused: residual += x first, and the statistics are taken of the rounded sum.
template <int kTpr, bool kFused>
__global__ void RmsNormKernel(const bf16* x, bf16* __restrict__ residual, const float* __restrict__ w,
                              int64_t rows, int64_t dim, float eps, cpu::NormKind kind, bf16* out) {
  __shared__ float scratch[kWarp];
  const int rows_per_block = blockDim.x / kTpr;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * rows_per_block + threadIdx.x / kTpr;
  const int tid = threadIdx.x % kTpr;
  // Out-of-range rows still take part in the block reduction below (kTpr == blockDim.x
  // has a single row per block, so this only idles warps of the last block).
  const bool active = r < rows;
  const bf16* src = kFused ? residual : x;
  float ss = 0.0f;
  if (active) {
    for (int64_t i = tid; i < dim; i += kTpr) {
      float v;
      if (kFused) {
        const bf16 sum = __float2bfloat16_rn(__bfloat162float(residual[r * dim + i]) + __bfloat162float(x[r * dim + i]));
        residual[r * dim + i] = sum;
        v = __bfloat162float(sum);
      } else {
        v = __bfloat162float(src[r * dim + i]);
      }
      ss += v * v;
    }
  }
  if (kTpr == kWarp) {
    ss = WarpSum(ss);
  } else {
    ss = BlockSum(ss, scratch);
  }
  if (!active) return;
  const float inv_rms = 1.0f / sqrtf(ss / static_cast<float>(dim) + eps);
  for (int64_t i = tid; i < dim; i += kTpr) {
    const float v = __bfloat162float(src[r * dim + i]);
    out[r * dim + i] = __float2bfloat16_rn(Weighted(v * inv_rms, w, i, kind));
  }
}

template <bool kFused>
void Launch(const bf16* x, bf16* residual, const float* w, int64_t rows, int64_t dim, float eps, cpu::NormKind kind,
            bf16* out, cudaStream_t stream) {
  if (rows == 0) return;
  TP_CHECK(kind == cpu::NormKind::kNoScale || w != nullptr);
  if (dim <= kWarpRowMaxDim) {
    const int rows_per_block = 4;
    RmsNormKernel<kWarp, kFused><<<CeilDiv(rows, rows_per_block), rows_per_block * kWarp, 0, stream>>>(
        x, residual, w, rows, dim, eps, kind, out);
  } else {
    RmsNormKernel<kBlockThreads, kFused><<<rows, kBlockThreads, 0, stream>>>(x, residual, w, rows, dim, eps, kind,
                                                                             out);
  }
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace

void RmsNorm(const bf16* x, const float* w, int64_t rows, int64_t dim, float eps, cpu::NormKind kind, bf16* out,
             cudaStream_t stream) {
  Launch<false>(x, nullptr, w, rows, dim, eps, kind, out, stream);
}

void AddRmsNorm(const bf16* x, bf16* residual, const float* w, int64_t rows, int64_t dim, float eps,
                cpu::NormKind kind, bf16* out, cudaStream_t stream) {
  TP_CHECK(out != residual);
  Launch<true>(x, residual, w, rows, dim, eps, kind, out, stream);
}

}  // namespace tpserve::cuda

// RMSNorm (three weight kinds) and the fused residual joint (norm, add, scale, norm), bf16
// in and out, fp32 statistics. Tested by tests/cuda_elementwise_test.cc against cpu::RmsNorm.
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace tpserve::cuda {
namespace {

// Rows up to this width get one warp each (per-head q/k norms); wider rows a whole block.
constexpr int64_t kWarpRowMaxDim = 1024;
constexpr int kBlockThreads = 256;

// kTpr threads normalize one row (kTpr = 32: a warp; kTpr = blockDim.x: the block).
template <int kTpr>
__global__ void RmsNormKernel(const bf16* x, const float* __restrict__ w, int64_t rows, int64_t dim, float eps,
                              cpu::NormKind kind, bf16* out) {
  AllowDependentLaunch();  // a GEMV launched after this one may start fetching weights
  __shared__ float scratch[kWarp];
  const int rows_per_block = blockDim.x / kTpr;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * rows_per_block + threadIdx.x / kTpr;
  const int tid = threadIdx.x % kTpr;
  // Out-of-range rows still take part in the block reduction below (kTpr == blockDim.x
  // has a single row per block, so this only idles warps of the last block).
  const bool active = r < rows;
  const float inv_rms = InvRms<kTpr>(x + r * dim, dim, tid, active, eps, scratch);
  if (!active) return;
  for (int64_t i = tid; i < dim; i += kTpr) {
    const float v = __bfloat162float(x[r * dim + i]);
    out[r * dim + i] = __float2bfloat16_rn(NormWeighted(v * inv_rms, w, i, kind));
  }
}

// Backend::ResidualNorm's sequence in one pass per row, rounding to bf16 where the op-by-op
// kernels store (normed o, h + o, h * scale, x) and summing in their thread order, so the
// result is bit-identical to RmsNorm, Add, Scale and RmsNorm launched one by one.
template <int kTpr>
__global__ void ResidualNormKernel(const bf16* __restrict__ o, const float* __restrict__ post_w,
                                   bf16* __restrict__ h, float scale, const float* __restrict__ next_w, int64_t rows,
                                   int64_t dim, float eps, cpu::NormKind kind, bf16* __restrict__ x) {
  AllowDependentLaunch();  // a GEMV launched after this one may start fetching weights
  __shared__ float scratch[kWarp];
  const int rows_per_block = blockDim.x / kTpr;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * rows_per_block + threadIdx.x / kTpr;
  const int tid = threadIdx.x % kTpr;
  const bool active = r < rows;
  const float n = static_cast<float>(dim);
  const float inv_o = post_w != nullptr ? InvRms<kTpr>(o + r * dim, dim, tid, active, eps, scratch) : 1.0f;
  // Each thread rereads only the h values it wrote itself: no barrier needed.
  float ss = 0.0f;
  if (active) {
    for (int64_t i = tid; i < dim; i += kTpr) {
      float ov = __bfloat162float(o[r * dim + i]);
      if (post_w != nullptr) ov = __bfloat162float(__float2bfloat16_rn(NormWeighted(ov * inv_o, post_w, i, kind)));
      float hv = __bfloat162float(__float2bfloat16_rn(__bfloat162float(h[r * dim + i]) + ov));
      if (scale != 1.0f) hv = __bfloat162float(__float2bfloat16_rn(hv * scale));
      h[r * dim + i] = __float2bfloat16_rn(hv);
      ss += hv * hv;
    }
  }
  if (next_w == nullptr) return;
  ss = kTpr == kWarp ? WarpSum(ss) : BlockSum(ss, scratch);
  if (!active) return;
  const float inv_h = 1.0f / sqrtf(ss / n + eps);
  for (int64_t i = tid; i < dim; i += kTpr) {
    const float v = __bfloat162float(h[r * dim + i]);
    x[r * dim + i] = __float2bfloat16_rn(NormWeighted(v * inv_h, next_w, i, kind));
  }
}

// Rows up to kWarpRowMaxDim wide: a warp each, 4 per block; wider: a block each.
template <typename Launch>
void ByWidth(int64_t rows, int64_t dim, Launch launch) {
  if (dim <= kWarpRowMaxDim) {
    const int rows_per_block = 4;
    launch(std::integral_constant<int, kWarp>{}, CeilDiv(rows, rows_per_block), rows_per_block * kWarp);
  } else {
    launch(std::integral_constant<int, kBlockThreads>{}, static_cast<int>(rows), kBlockThreads);
  }
}

}  // namespace

void RmsNorm(const bf16* x, const float* w, int64_t rows, int64_t dim, float eps, cpu::NormKind kind, bf16* out,
             cudaStream_t stream) {
  if (rows == 0) return;
  TP_CHECK(kind == cpu::NormKind::kNoScale || w != nullptr);
  ByWidth(rows, dim, [&](auto tpr, int blocks, int threads) {
    RmsNormKernel<decltype(tpr)::value><<<blocks, threads, 0, stream>>>(x, w, rows, dim, eps, kind, out);
  });
  TP_CUDA_CHECK_LAUNCH();
}

void ResidualNorm(const bf16* o, const float* post_w, bf16* h, float scale, const float* next_w, int64_t rows,
                  int64_t dim, float eps, cpu::NormKind kind, bf16* x, cudaStream_t stream) {
  if (rows == 0) return;
  TP_CHECK(kind != cpu::NormKind::kNoScale);
  TP_CHECK(x != h && x != o);
  ByWidth(rows, dim, [&](auto tpr, int blocks, int threads) {
    ResidualNormKernel<decltype(tpr)::value><<<blocks, threads, 0, stream>>>(o, post_w, h, scale, next_w, rows, dim,
                                                                            eps, kind, x);
  });
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace tpserve::cuda

// Rotate-half rotary embedding in place on bf16 q/k, angles in fp32 exactly as
// cpu::Rope computes them; and the fused attention prologue (q/k/v norms, RoPE, KV-cache
// write). Tested by tests/cuda_elementwise_test.cc.
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
    RotatePair(x0, x1, cs[i], cs[half + i], &xh[i], &xh[i + half]);
  }
}

// One warp per (token, head). Heads [0, q_heads) are q's, rewritten in place; the next
// kv_heads are k's and v's, which go to the cache slot (none for a padding slot < 0). The
// norms sum in RmsNorm's warp-per-row order and the values round to bf16 where RmsNorm,
// Rope and WriteKv store, so the result is bit-identical to launching those one by one.
__global__ void AttentionPrologueKernel(AttentionPrologueArgs a) {
  constexpr int kWarpsPerBlock = 4;
  const int lane = threadIdx.x % kWarp;
  const int64_t heads = a.q_heads + a.kv_heads;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (item >= a.tokens * heads) return;
  const int64_t t = item / heads, head = item % heads;
  const int64_t D = a.head_dim, half = D / 2;
  const bf16* src;
  bf16* dst;
  const float* w;
  if (head < a.q_heads) {
    dst = a.q + (t * a.q_heads + head) * D;
    src = dst;
    w = a.q_norm;
  } else {
    const int64_t slot = a.slot_mapping[t];
    if (slot < 0) return;
    const int64_t kh = head - a.q_heads;
    const int64_t row = (t * a.kv_heads + kh) * D, cache_row = (slot * a.kv_heads + kh) * D;
    src = a.k + row;
    dst = a.k_cache + cache_row;
    w = a.k_norm;
    const bf16* vs = a.v + row;
    bf16* vd = a.v_cache + cache_row;
    if (a.v_norm) {
      const float inv = WarpInvRms(vs, D, lane, a.eps);
      for (int64_t i = lane; i < D; i += kWarp) vd[i] = __float2bfloat16_rn(__bfloat162float(vs[i]) * inv);
    } else {
      for (int64_t i = lane; i < D; i += kWarp) vd[i] = vs[i];
    }
  }
  // In place (q): the norm's reads all feed the warp sum, so they are done before any
  // lane writes; without a norm each lane reads and writes only its own pairs.
  const float inv = w != nullptr ? WarpInvRms(src, D, lane, a.eps) : 1.0f;
  const float pos = static_cast<float>(a.positions[t]);
  for (int64_t i = lane; i < half; i += kWarp) {
    float x0 = __bfloat162float(src[i]);
    float x1 = __bfloat162float(src[i + half]);
    if (w != nullptr) {
      x0 = __bfloat162float(__float2bfloat16_rn(NormWeighted(x0 * inv, w, i, a.norm_kind)));
      x1 = __bfloat162float(__float2bfloat16_rn(NormWeighted(x1 * inv, w, i + half, a.norm_kind)));
    }
    float s, c;
    sincosf(pos * a.inv_freq[i], &s, &c);
    RotatePair(x0, x1, c, s, &dst[i], &dst[i + half]);
  }
}

}  // namespace

void AttentionPrologue(const AttentionPrologueArgs& a, cudaStream_t stream) {
  const int64_t items = a.tokens * (a.q_heads + a.kv_heads);
  if (items == 0) return;
  TP_CHECK(a.head_dim % 2 == 0 && a.head_dim <= 1024);
  TP_CHECK(a.norm_kind != cpu::NormKind::kNoScale || (a.q_norm == nullptr && a.k_norm == nullptr));
  AttentionPrologueKernel<<<CeilDiv(items, 4), 4 * kWarp, 0, stream>>>(a);
  TP_CUDA_CHECK_LAUNCH();
}

void Rope(bf16* x, int64_t tokens, int64_t heads, int64_t head_dim, const int32_t* positions, const float* inv_freq,
          float attn_factor, cudaStream_t stream) {
  if (tokens == 0) return;
  TP_CHECK(head_dim % 2 == 0);
  const size_t smem = static_cast<size_t>(head_dim) * sizeof(float);
  RopeKernel<<<tokens, 256, smem, stream>>>(x, heads, head_dim, positions, inv_freq, attn_factor);
  TP_CUDA_CHECK_LAUNCH();
}

}  // namespace tpserve::cuda

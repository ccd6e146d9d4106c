// Device helpers shared by the CUDA kernels: dtype loads/stores in fp32, 16-byte vector
// access to 8 bf16 values, warp and block reductions. Tested through every kernel's test.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <utility>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_check.h"

namespace tpserve::cuda {

constexpr int kWarp = 32;

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T FromFloat(float x);
template <>
__device__ __forceinline__ float FromFloat<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float x) {
  return __float2half_rn(x);
}

// Eight 16-bit values <-> one 16-byte load/store. By value: `Bf16x8ToFloat(*ptr, f)` is
// then one 16-byte load (a reference bound to memory let the compiler read it as four
// 4-byte loads, each a 4-way bank conflict in shared memory).
__device__ __forceinline__ void Bf16x8ToFloat(const uint4 v, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __bfloat1622float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}
__device__ __forceinline__ uint4 FloatToBf16x8(const float* f) {
  uint4 v;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return v;
}
__device__ __forceinline__ void Half8ToFloat(const uint4 v, float* f) {
  const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = __half22float2(h[i]);
    f[2 * i] = p.x;
    f[2 * i + 1] = p.y;
  }
}

// The 32-bit shared-window address of a pointer into shared memory (PTX operands).
__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block; every thread gets the result. `scratch` holds >= 32 floats and may
// be reused once the call returns.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = (blockDim.x + kWarp - 1) / kWarp;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return WarpSum(v);
}
__device__ __forceinline__ float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = (blockDim.x + kWarp - 1) / kWarp;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  return WarpMax(v);
}

// An RMS-normalized value with its weight applied as `kind` says (w unused for kNoScale).
__device__ __forceinline__ float NormWeighted(float xn, const float* w, int64_t i, cpu::NormKind kind) {
  switch (kind) {
    case cpu::NormKind::kScale:
      return xn * w[i];
    case cpu::NormKind::kOnePlusScale:
      return xn * (1.0f + w[i]);
    default:
      return xn;
  }
}

// 1 / rms of a row of n bf16 values, kTpr threads per row, thread `tid` summing elements
// tid, tid + kTpr, ... (kTpr = 32: a warp per row; kTpr = blockDim.x: a block per row, and
// then every thread of the block must call it: rows past the end pass active = false).
// The one reduction order of the RMSNorm kernels, which the fused kernels share to match
// them bit for bit. scratch: 32 floats of shared memory (unused for a warp).
template <int kTpr>
__device__ __forceinline__ float InvRms(const __nv_bfloat16* x, int64_t n, int tid, bool active, float eps,
                                        float* scratch) {
  float ss = 0.0f;
  if (active) {
    for (int64_t i = tid; i < n; i += kTpr) {
      const float v = __bfloat162float(x[i]);
      ss += v * v;
    }
  }
  ss = kTpr == kWarp ? WarpSum(ss) : BlockSum(ss, scratch);
  return 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
}
__device__ __forceinline__ float WarpInvRms(const __nv_bfloat16* x, int64_t n, int lane, float eps) {
  return InvRms<kWarp>(x, n, lane, true, eps, nullptr);
}

// Rotate-half RoPE of the pair (x0, x1) = (x[i], x[i + half]) by the angle with cosine c
// and sine s, rounded to bf16: one definition for every kernel that applies RoPE.
__device__ __forceinline__ void RotatePair(float x0, float x1, float c, float s, __nv_bfloat16* y0,
                                           __nv_bfloat16* y1) {
  *y0 = __float2bfloat16_rn(x0 * c - x1 * s);
  *y1 = __float2bfloat16_rn(x1 * c + x0 * s);
}

// Programmatic dependent launch (compute capability 9.0+; no-ops below, and when the
// kernel was not launched with cudaLaunchAttributeProgrammaticStreamSerialization).
// A kernel so launched may start while the kernel before it on the stream still runs; it
// must call WaitForPriorGrids() before it reads anything an earlier kernel wrote or
// writes anything an earlier kernel reads (weights, written long before, may be read
// earlier). AllowDependentLaunch() lets such a kernel after this one start once every
// block of this one has called it (or exited): call it early in kernels that precede a
// programmatically launched one.
__device__ __forceinline__ void WaitForPriorGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void AllowDependentLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" :::);
#endif
}

// Runs f() once per device: kernel attributes such as the dynamic shared-memory limit are
// per device, and thread ranks of one process may drive several.
class OncePerDevice {
 public:
  static constexpr int kMaxDevices = 64;
  template <typename F>
  void Run(int device, F&& f) {
    TP_CHECK(device >= 0 && device < kMaxDevices);
    std::call_once(flags_[device], std::forward<F>(f));
  }
  // On the current device.
  template <typename F>
  void Run(F&& f) {
    int device = 0;
    TP_CUDA_CHECK(cudaGetDevice(&device));
    Run(device, std::forward<F>(f));
  }

 private:
  std::once_flag flags_[kMaxDevices];
};

// Launches kernel<<<grid, block, smem, stream>>>(args...), with programmatic dependent
// launch allowed when `pdl` (the kernel must then call WaitForPriorGrids()).
template <typename... Params, typename... Args>
void LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl,
                  Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = pdl ? 1 : 0;
  TP_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

inline int CeilDiv(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

}  // namespace tpserve::cuda

// The pieces the split-K GEMV (gemv.cu) and the bulk-copy GEMV (gemv_bulk.cu) share: where
// an output feature goes, the one summation order that makes their bits equal, and the
// bulk path's entry points for gemv.cu's dispatch. Internal to kernels/cuda; tested with
// the GEMVs by tests/cuda_linear_test.cc.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace tpserve::cuda::gemv_detail {

// Where output feature `col` of row `row` goes: the GemvOutputs segment holding it, with
// cumulative column ends precomputed by the launcher.
struct OutputMap {
  bf16* y[kMaxGemvOutputs];
  int64_t end[kMaxGemvOutputs];  // end[i] = cols[0] + ... + cols[i]
  int count;
};
__device__ __forceinline__ bf16* OutputAt(const OutputMap& o, int64_t row, int64_t col) {
  int64_t start = 0;
#pragma unroll
  for (int i = 0; i < kMaxGemvOutputs; ++i) {
    if (i + 1 == o.count || col < o.end[i]) return o.y[i] + row * (o.end[i] - start) + (col - start);
    start = o.end[i];
  }
  return nullptr;  // unreachable: col < end[count - 1]
}
constexpr int kSplitThreads = 256;

// The one summation order of the split and bulk kernels, which is why their bits match:
// thread t adds the vectors t, t + 256, ... of each feature in that order, eight products a
// vector (AddVector), then ReduceAndStore sums each warp by shuffles and the 8 warps in
// order. AddVector: acc[r][f] += wf[f] . x_r for one vector, x0 being row 0's (row r at
// x0 + r * k).
template <int kRows, int kFeatures>
__device__ __forceinline__ void AddVector(float (&acc)[kRows][kFeatures], const float (&wf)[kFeatures][8],
                                          const bf16* x0, int64_t k, int rows) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r >= rows) break;
    float xf[8];
    Bf16x8ToFloat(*reinterpret_cast<const uint4*>(x0 + r * k), xf);
#pragma unroll
    for (int f = 0; f < kFeatures; ++f) {
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[r][f] += wf[f][e] * xf[e];
    }
  }
}

// Every thread of the 256 calls it: the block's sums of acc to y (features [col0, col0 +
// features) of rows [m0, m0 + rows)) through partial [8][kRows][kFeatures] in shared
// memory. after_sync() runs once every thread's partial sums are in (and every thread is
// past its loads of the group). The storing threads still read partial on return.
template <int kRows, int kFeatures, typename AfterSync>
__device__ __forceinline__ void ReduceAndStore(const float (&acc)[kRows][kFeatures], float (*partial)[kRows][kFeatures],
                                               const OutputMap& y, int64_t m0, int rows, int64_t col0, int features,
                                               AfterSync after_sync) {
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int f = 0; f < kFeatures; ++f) {
      const float sum = WarpSum(acc[r][f]);
      if (lane == 0) partial[warp][r][f] = sum;
    }
  }
  __syncthreads();
  after_sync();
  if (tid < kRows * kFeatures) {
    const int r = tid / kFeatures, f = tid % kFeatures;
    if (r < rows && f < features) {
      float sum = 0.0f;
#pragma unroll
      for (int wi = 0; wi < kSplitThreads / kWarp; ++wi) sum += partial[wi][r][f];
      *OutputAt(y, m0 + r, col0 + f) = __float2bfloat16_rn(sum);
    }
  }
}

// The current device, once per launch: whether it runs the GEMVs' sm_90 code (the bulk
// kernel, the grid dependency waits: compute capability 9.0+ and a binary built for it; a
// build for sm_80 only would run its PTX there, where both are compiled out) and its SMs.
struct DeviceFacts {
  int device = 0;
  bool sm90 = false;
  int sms = 0;
};
DeviceFacts CurrentDevice();

// Launches the bulk-copy kernel for this product if the device and shape allow it (sm_90
// code, bf16, m <= 4, k % 8 == 0, 16-byte aligned x and w, rows that fit its stages); false:
// nothing launched. dry_run: only says whether it would.
bool TryBulk(const bf16* x, int64_t m, int64_t k, const bf16* w, int64_t n, const OutputMap& y,
             const DeviceFacts& d, bool pdl, bool dry_run, cudaStream_t stream);

}  // namespace tpserve::cuda::gemv_detail

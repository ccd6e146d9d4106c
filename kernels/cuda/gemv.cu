// y = x · W^T for a few rows of x (decode), memory-bound on W. K a multiple of 8 (every
// real model): a block of 256 threads takes kFeatures output features and splits K among
// all its threads, so each thread issues all its 16-byte weight loads (kFeatures x up to
// kUnroll) before any math: one DRAM round trip for K up to 8192, not the ~6 dependent
// ones of a warp that walks a whole row (on an H200 that cost small projections half
// their bandwidth); partial sums meet through warp shuffles and shared memory. Other K:
// one warp per feature. Up to 8 rows of x at once; also the (slow, correct) path for
// fp16/fp32 weights at any M. The output features may be split across up to three
// outputs (a fused QKV projection writes q, k and v). On compute capability 9.0+ two
// launch choices give the same bits (GemvLaunch): the bulk-copy kernel below, and
// programmatic dependent launch. Tested by tests/cuda_linear_test.cc against cpu::Linear;
// measured by bench/cuda_kernels_bench.cu.
#include <algorithm>
#include <cstdio>
#include <mutex>
#include <type_traits>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"

namespace tpserve::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

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
               OutputMap y) {
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
    if (lane == 0 && r < rows) *OutputAt(y, m0 + r, col) = __float2bfloat16_rn(s);
  }
}

// Eight weights as loaded (16 bytes; 32 for fp32), widened to fp32 only when used, so
// that the loads in flight hold 4 registers each, not 8.
template <typename WT>
struct Raw8 {
  uint4 v;
};
template <>
struct Raw8<float> {
  float4 a, b;
};
__device__ __forceinline__ Raw8<bf16> LoadRaw8(const bf16* w, int64_t i) {
  return {__ldg(reinterpret_cast<const uint4*>(w + i))};
}
__device__ __forceinline__ Raw8<__half> LoadRaw8(const __half* w, int64_t i) {
  return {__ldg(reinterpret_cast<const uint4*>(w + i))};
}
__device__ __forceinline__ Raw8<float> LoadRaw8(const float* w, int64_t i) {
  return {__ldg(reinterpret_cast<const float4*>(w + i)), __ldg(reinterpret_cast<const float4*>(w + i + 4))};
}
__device__ __forceinline__ void Widen(const Raw8<bf16>& r, float* f) { Bf16x8ToFloat(r.v, f); }
__device__ __forceinline__ void Widen(const Raw8<__half>& r, float* f) { Half8ToFloat(r.v, f); }
__device__ __forceinline__ void Widen(const Raw8<float>& r, float* f) {
  f[0] = r.a.x; f[1] = r.a.y; f[2] = r.a.z; f[3] = r.a.w;
  f[4] = r.b.x; f[5] = r.b.y; f[6] = r.b.z; f[7] = r.b.w;
}

constexpr int kSplitThreads = 256;
// The production shape: output features per block, 16-byte vectors per feature in flight
// per thread, and (for 16-bit weights up to 2 rows, batch-1 decode) two blocks per SM, so
// one block's loads overlap the other's reduction. GemvTuning benchmarks other choices.
constexpr int kFeaturesDefault = 4;
constexpr int kUnrollDefault = 4;

template <typename WT, int kRows>
constexpr int DefaultMinBlocks() {
  return kRows <= 2 && sizeof(WT) == 2 ? 2 : 1;
}

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

// Block (x: kFeatures output features from blockIdx.x * kFeatures, y: kRows rows of x).
// Thread t sums vectors t, t + 256, ... of each feature in that order whatever kFeatures,
// kSplitUnroll and kMinBlocks are, so every variant gives bit-identical results.
template <typename WT, int kRows, int kFeatures = kFeaturesDefault, int kSplitUnroll = kUnrollDefault,
          int kMinBlocks = DefaultMinBlocks<WT, kRows>()>
__global__ void __launch_bounds__(kSplitThreads, kMinBlocks)
    GemvSplitKernel(const bf16* __restrict__ x, int64_t m, int64_t k, const WT* __restrict__ w, int64_t n,
                    OutputMap y) {
  __shared__ float partial[kSplitThreads / kWarp][kRows][kFeatures];
  const int tid = threadIdx.x;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kFeatures;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kRows;
  const int rows = static_cast<int>(min(static_cast<int64_t>(kRows), m - m0));
  const int features = static_cast<int>(min(static_cast<int64_t>(kFeatures), n - col0));
  const bf16* xr = x + m0 * k;
  const int64_t vecs = k / 8;
  constexpr int64_t kStep = static_cast<int64_t>(kSplitThreads) * kSplitUnroll;
  float acc[kRows][kFeatures];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int f = 0; f < kFeatures; ++f) acc[r][f] = 0.0f;
  }
  Raw8<WT> raw[kSplitUnroll][kFeatures];
  auto load = [&](int64_t base) {
#pragma unroll
    for (int u = 0; u < kSplitUnroll; ++u) {
      const int64_t v = base + u * kSplitThreads;
#pragma unroll
      for (int f = 0; f < kFeatures; ++f) {
        // Past the last feature: reread the last one (in bounds, never summed).
        if (v < vecs) raw[u][f] = LoadRaw8(w + (col0 + min(f, features - 1)) * k, v * 8);
      }
    }
  };
  // The weights need nothing from earlier kernels: the first loads are in flight before
  // the wait (programmatic launch), x is read after it.
  AllowDependentLaunch();
  load(tid);
  WaitForPriorGrids();
  for (int64_t base = tid; base < vecs; base += kStep) {
    if (base != tid) load(base);
#pragma unroll
    for (int u = 0; u < kSplitUnroll; ++u) {
      const int64_t v = base + u * kSplitThreads;
      if (v >= vecs) break;
      float wf[kFeatures][8];
#pragma unroll
      for (int f = 0; f < kFeatures; ++f) Widen(raw[u][f], wf[f]);
      AddVector(acc, wf, xr + v * 8, k, rows);
    }
  }
  ReduceAndStore(acc, partial, y, m0, rows, col0, features, [] {});
}

template <typename WT, int kRows, int kFeatures = kFeaturesDefault, int kSplitUnroll = kUnrollDefault,
          int kMinBlocks = DefaultMinBlocks<WT, kRows>()>
void LaunchSplit(const bf16* x, int64_t m, int64_t k, const WT* w, int64_t n, const OutputMap& y, bool pdl,
                 cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((n + kFeatures - 1) / kFeatures), static_cast<unsigned>((m + kRows - 1) / kRows));
  LaunchKernel(GemvSplitKernel<WT, kRows, kFeatures, kSplitUnroll, kMinBlocks>, grid, dim3(kSplitThreads), 0, stream,
               pdl, x, m, k, w, n, y);
}

// ---- The bulk-copy GEMV (compute capability 9.0+, bf16 weights, m <= 4) ----
// A persistent block per SM takes groups of kFeatures consecutive output features
// (blockIdx.x, + gridDim.x, ...). A group's weight rows are contiguous, so one thread
// fetches a whole group into shared memory with one bulk asynchronous copy (the TMA
// engine, completion counted in bytes on an mbarrier); `stages` groups are in flight per
// block, from the kernel's first instruction (weights need nothing from earlier kernels:
// under programmatic launch they stream in while the kernel before finishes), and a
// stage is refilled as soon as its group is summed. x is copied to shared memory once.
// Thread t sums vectors t, t + 256, ... of each feature, warps meet as in the split
// kernel: the split kernel's bits exactly. No register holds a load in flight, so the
// bytes in flight per SM are bounded by shared memory, not by the register file.
constexpr int kBulkThreads = kSplitThreads;  // part of the summation order
constexpr int kBulkMaxStages = 6;
constexpr int64_t kBulkStageTarget = 48 << 10;  // bytes per group, at most

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// True once the phase of the mbarrier at shared address `bar` with this parity completed.
__device__ __forceinline__ bool MbarrierTryWait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}
#endif

template <int kRows, int kFeatures>
__global__ void __launch_bounds__(kBulkThreads, 1)
    GemvBulkKernel(const bf16* __restrict__ x, int64_t m, int64_t k, const bf16* __restrict__ w, int64_t n,
                   OutputMap y, int stages, int64_t x_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) uint8_t smem[];  // x (x_bytes, padded), then the stages
  __shared__ __align__(8) uint64_t full[kBulkMaxStages];
  __shared__ float partial[2][kBulkThreads / kWarp][kRows][kFeatures];
  const int tid = threadIdx.x;
  const int64_t groups = (n + kFeatures - 1) / kFeatures;
  const int64_t stage_bytes = kFeatures * k * static_cast<int64_t>(sizeof(bf16));
  const bf16* xs = reinterpret_cast<const bf16*>(smem);
  uint8_t* stage0 = smem + x_bytes;
  const int rows = static_cast<int>(min(static_cast<int64_t>(kRows), m));
  const int64_t vecs = k / 8;
  auto SmemAddress = [](const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); };

  // Thread 0 only: fetch group g into stage s, completing on full[s].
  auto fetch = [&](int s, int64_t g) {
    const int64_t col0 = g * kFeatures;
    const uint32_t bytes =
        static_cast<uint32_t>(min(static_cast<int64_t>(kFeatures), n - col0) * k * static_cast<int64_t>(sizeof(bf16)));
    const uint32_t bar = SmemAddress(&full[s]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
            SmemAddress(stage0 + s * stage_bytes)),
        "l"(w + col0 * k), "r"(bytes), "r"(bar)
        : "memory");
  };
  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SmemAddress(&full[s])), "r"(1) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    for (int s = 0; s < stages; ++s) {
      const int64_t g = blockIdx.x + static_cast<int64_t>(s) * gridDim.x;
      if (g < groups) fetch(s, g);
    }
  }
  AllowDependentLaunch();
  WaitForPriorGrids();
  for (int64_t i = tid; i < rows * vecs; i += kBulkThreads) {
    reinterpret_cast<uint4*>(smem)[i] = reinterpret_cast<const uint4*>(x)[i];
  }
  __syncthreads();  // x in shared memory; the barriers initialized

  int it = 0;
  for (int64_t g = blockIdx.x; g < groups; g += gridDim.x, ++it) {
    const int s = it % stages;
    const uint32_t parity = static_cast<uint32_t>(it / stages) & 1u;
    // A copy that never lands is a bug: trap after 2 s (the launch fails with an error)
    // rather than hang the process.
    uint64_t waited_since = 0;
    while (!MbarrierTryWait(SmemAddress(&full[s]), parity)) {
      const uint64_t now = GlobalTimerNs();
      if (waited_since == 0) {
        waited_since = now;
      } else if (static_cast<int64_t>(now - waited_since) > 2000000000ll) {
        if (tid == 0) printf("GemvBulkKernel: block %d waited 2 s for the bulk copy of group %lld\n", blockIdx.x,
                                static_cast<long long>(g));
        __trap();
      }
    }
    const bf16* ws = reinterpret_cast<const bf16*>(stage0 + s * stage_bytes);
    const int64_t col0 = g * kFeatures;
    const int features = static_cast<int>(min(static_cast<int64_t>(kFeatures), n - col0));
    float acc[kRows][kFeatures];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int f = 0; f < kFeatures; ++f) acc[r][f] = 0.0f;
    }
#pragma unroll 2
    for (int64_t v = tid; v < vecs; v += kBulkThreads) {
      float wf[kFeatures][8];
#pragma unroll
      for (int f = 0; f < kFeatures; ++f) {
        // Past the last feature: the last one again (never summed).
        Bf16x8ToFloat(*reinterpret_cast<const uint4*>(ws + min(f, features - 1) * k + v * 8), wf[f]);
      }
      AddVector(acc, wf, xs + v * 8, k, rows);
    }
    // partial alternates between two buffers: the next group's sums cannot meet this
    // group's, still being read by the storing threads. Once every thread is past stage s,
    // thread 0 refills it.
    ReduceAndStore(acc, partial[it & 1], y, 0, rows, col0, features, [&] {
      if (tid != 0) return;
      const int64_t next = g + static_cast<int64_t>(stages) * gridDim.x;
      if (next < groups) {
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic reads before the async write
        fetch(s, next);
      }
    });
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // the host launches it only where sm_90 code runs (DeviceFacts::sm90)
#endif
}

// Output features per bulk group for rows of k bf16 values: as many as fit kBulkStageTarget.
int BulkFeatures(int64_t k) {
  const int64_t row = k * static_cast<int64_t>(sizeof(bf16));
  return row * 4 <= kBulkStageTarget ? 4 : row * 2 <= kBulkStageTarget ? 2 : row <= kBulkStageTarget ? 1 : 0;
}

// The current device, once per launch: whether it runs this file's sm_90 code (the bulk
// kernel, the grid dependency waits: compute capability 9.0+ and a binary built for it; a
// build for sm_80 only would run its PTX there, where both are compiled out) and its SMs.
struct DeviceFacts {
  int device = 0;
  bool sm90 = false;
  int sms = 0;
};
DeviceFacts CurrentDevice() {
  static OncePerDevice once;
  static DeviceFacts facts[OncePerDevice::kMaxDevices];
  int device = 0;
  TP_CUDA_CHECK(cudaGetDevice(&device));
  once.Run(device, [device] {
    cudaFuncAttributes attr{};
    TP_CUDA_CHECK(cudaFuncGetAttributes(&attr, GemvBulkKernel<1, 4>));
    facts[device].device = device;
    facts[device].sm90 = attr.binaryVersion >= 90;
    TP_CUDA_CHECK(cudaDeviceGetAttribute(&facts[device].sms, cudaDevAttrMultiProcessorCount, device));
  });
  return facts[device];
}

// The most dynamic shared memory the kernel may ask for on `device` (the current one): the
// opt-in limit less its static shared memory, raised once per instantiation and device.
template <int kRows, int kFeatures>
int64_t BulkSmemLimit(int device) {
  static OncePerDevice once;
  static int64_t limit[OncePerDevice::kMaxDevices] = {};
  once.Run(device, [device] {
    int optin = 0;
    TP_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cudaFuncAttributes attr{};
    TP_CUDA_CHECK(cudaFuncGetAttributes(&attr, GemvBulkKernel<kRows, kFeatures>));
    limit[device] = optin - static_cast<int64_t>(attr.sharedSizeBytes);
    TP_CUDA_CHECK(cudaFuncSetAttribute(GemvBulkKernel<kRows, kFeatures>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(limit[device])));
  });
  return limit[device];
}

// Launches the bulk kernel if the shape allows it on `device`; false: nothing launched.
// dry_run: only says whether it would.
template <int kRows, int kFeatures>
bool LaunchBulkRows(const bf16* x, int64_t m, int64_t k, const bf16* w, int64_t n, const OutputMap& y,
                    const DeviceFacts& d, bool pdl, bool dry_run, cudaStream_t stream) {
  const int64_t x_bytes = (m * k * static_cast<int64_t>(sizeof(bf16)) + 127) / 128 * 128;
  const int64_t stage_bytes = kFeatures * k * static_cast<int64_t>(sizeof(bf16));
  const int64_t stages = std::min<int64_t>(kBulkMaxStages, (BulkSmemLimit<kRows, kFeatures>(d.device) - x_bytes) /
                                                               stage_bytes);
  if (stages < 2) return false;
  if (dry_run) return true;
  const int64_t groups = (n + kFeatures - 1) / kFeatures;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(groups, d.sms));
  LaunchKernel(GemvBulkKernel<kRows, kFeatures>, dim3(grid), dim3(kBulkThreads),
               static_cast<size_t>(x_bytes + stages * stage_bytes), stream, pdl, x, m, k, w, n, y,
               static_cast<int>(stages), x_bytes);
  return true;
}

template <int kRows>
bool LaunchBulk(const bf16* x, int64_t m, int64_t k, const bf16* w, int64_t n, const OutputMap& y,
                const DeviceFacts& d, bool pdl, bool dry_run, cudaStream_t stream) {
  switch (BulkFeatures(k)) {
    case 4:
      return LaunchBulkRows<kRows, 4>(x, m, k, w, n, y, d, pdl, dry_run, stream);
    case 2:
      return LaunchBulkRows<kRows, 2>(x, m, k, w, n, y, d, pdl, dry_run, stream);
    case 1:
      return LaunchBulkRows<kRows, 1>(x, m, k, w, n, y, d, pdl, dry_run, stream);
    default:
      return false;
  }
}

bool TryBulk(const bf16* x, int64_t m, int64_t k, const bf16* w, int64_t n, const OutputMap& y,
             const DeviceFacts& d, bool pdl, bool dry_run, cudaStream_t stream) {
  if (!d.sm90 || m > 4 || k <= 0 || k % 8 != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(x) % 16 != 0) {
    return false;
  }
  switch (m) {
    case 1:
      return LaunchBulk<1>(x, m, k, w, n, y, d, pdl, dry_run, stream);
    case 2:
      return LaunchBulk<2>(x, m, k, w, n, y, d, pdl, dry_run, stream);
    default:
      return LaunchBulk<4>(x, m, k, w, n, y, d, pdl, dry_run, stream);
  }
}

// The tunings instantiated: loads in flight per thread (features x unroll) traded against
// blocks per SM (registers: 2 blocks allow 128 per thread, 3 about 85, 4 64).
template <int kF, int kU, int kB>
struct Tuning {
  static constexpr GemvTuning kShape{kF, kU, kB};
  static bool Run(const GemvTuning& t, const bf16* x, int64_t k, const bf16* w, int64_t n, const OutputMap& y,
                  bool pdl, cudaStream_t stream) {
    if (t.features != kF || t.unroll != kU || t.min_blocks != kB) return false;
    LaunchSplit<bf16, 1, kF, kU, kB>(x, 1, k, w, n, y, pdl, stream);
    return true;
  }
};
template <typename... Ts>
struct TuningList {
  static std::vector<GemvTuning> All() { return {Ts::kShape...}; }
  static bool Run(const GemvTuning& t, const bf16* x, int64_t k, const bf16* w, int64_t n, const OutputMap& y,
                  bool pdl, cudaStream_t stream) {
    return (Ts::Run(t, x, k, w, n, y, pdl, stream) || ...);
  }
};
using Tunings = TuningList<Tuning<4, 4, 2>, Tuning<4, 3, 2>, Tuning<4, 3, 3>, Tuning<4, 2, 4>, Tuning<2, 4, 3>,
                           Tuning<2, 4, 4>, Tuning<2, 3, 4>, Tuning<8, 2, 2>, Tuning<8, 2, 3>>;

template <typename WT>
void LaunchGemv(const bf16* x, int64_t m, int64_t k, const WT* w, int64_t n, const OutputMap& y,
                GemvLaunch launch, cudaStream_t stream) {
  // One device query, and none for the plain launch.
  const DeviceFacts d = launch.bulk || launch.pdl ? CurrentDevice() : DeviceFacts{};
  // Programmatic launch only where the kernels' grid dependency waits are compiled in.
  launch.pdl = launch.pdl && d.sm90;
  if constexpr (std::is_same_v<WT, bf16>) {
    if (launch.bulk && TryBulk(x, m, k, w, n, y, d, launch.pdl, /*dry_run=*/false, stream)) {
      TP_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  if (k % 8 == 0) {
    if constexpr (std::is_same_v<WT, bf16>) {
      static const std::vector<GemvTuning> tunings = Tunings::All();
      if (m == 1 && launch.tuning >= 0) {
        TP_CHECK(launch.tuning < static_cast<int>(tunings.size()));  // an index into GemvTunings()
        TP_CHECK(Tunings::Run(tunings[launch.tuning], x, k, w, n, y, launch.pdl, stream));
        TP_CUDA_CHECK_LAUNCH();
        return;
      }
    }
    if (m == 1) {
      LaunchSplit<WT, 1>(x, m, k, w, n, y, launch.pdl, stream);
    } else if (m == 2) {
      LaunchSplit<WT, 2>(x, m, k, w, n, y, launch.pdl, stream);
    } else if (m <= 4) {
      LaunchSplit<WT, 4>(x, m, k, w, n, y, launch.pdl, stream);
    } else {
      LaunchSplit<WT, 8>(x, m, k, w, n, y, launch.pdl, stream);
    }
    TP_CUDA_CHECK_LAUNCH();
    return;
  }
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

bool GemvBulkSupported() { return CurrentDevice().sm90; }

bool GemvTakesBulk(int64_t m, int64_t k) {
  return m >= 1 && TryBulk(nullptr, m, k, nullptr, 1, OutputMap{}, CurrentDevice(), false, /*dry_run=*/true, nullptr);
}

void GemvSplit(const bf16* x, int64_t m, int64_t k, const void* w, DType w_dtype, const GemvOutputs& out,
               cudaStream_t stream, const GemvLaunch& launch) {
  TP_CHECK(out.count >= 1 && out.count <= kMaxGemvOutputs);
  OutputMap y{};
  int64_t n = 0;
  for (int i = 0; i < out.count; ++i) {
    TP_CHECK(out.cols[i] > 0 && out.y[i] != nullptr);
    n += out.cols[i];
    y.y[i] = out.y[i];
    y.end[i] = n;
  }
  y.count = out.count;
  if (m == 0) return;
  switch (w_dtype) {
    case DType::kBF16:
      LaunchGemv(x, m, k, static_cast<const bf16*>(w), n, y, launch, stream);
      break;
    case DType::kF16:
      LaunchGemv(x, m, k, static_cast<const __half*>(w), n, y, launch, stream);
      break;
    case DType::kF32:
      LaunchGemv(x, m, k, static_cast<const float*>(w), n, y, launch, stream);
      break;
  }
}

std::vector<GemvTuning> GemvTunings() { return Tunings::All(); }

std::vector<GemvCandidate> GemvCandidates(int64_t m, int64_t k, bool pdl) {
  std::vector<GemvCandidate> out = {{"split", GemvLaunch{.pdl = pdl}}};
  if (m == 1) {
    const GemvTuning production{};
    const std::vector<GemvTuning> shapes = GemvTunings();
    for (size_t i = 0; i < shapes.size(); ++i) {
      const GemvTuning& t = shapes[i];
      if (t.features == production.features && t.unroll == production.unroll && t.min_blocks == production.min_blocks) {
        continue;  // the production launch itself
      }
      out.push_back({"split F" + std::to_string(t.features) + " U" + std::to_string(t.unroll) + " B" +
                         std::to_string(t.min_blocks),
                     GemvLaunch{.pdl = pdl, .tuning = static_cast<int>(i)}});
    }
  }
  if (GemvBulkSupported() && GemvTakesBulk(m, k)) out.push_back({"bulk", GemvLaunch{.bulk = true, .pdl = pdl}});
  return out;
}

void GemvWithTuning(const GemvTuning& t, const bf16* x, int64_t k, const bf16* w, int64_t n, bf16* y,
                    cudaStream_t stream) {
  TP_CHECK(k % 8 == 0 && n > 0);
  OutputMap out{};
  out.y[0] = y;
  out.end[0] = n;
  out.count = 1;
  TP_CHECK(Tunings::Run(t, x, k, w, n, out, /*pdl=*/false, stream));  // else not one of GemvTunings()
  TP_CUDA_CHECK_LAUNCH();
}

void Gemv(const bf16* x, int64_t m, int64_t k, const void* w, DType w_dtype, int64_t n, bf16* y,
          cudaStream_t stream, const GemvLaunch& launch) {
  if (m == 0 || n == 0) return;
  GemvOutputs out;
  out.y[0] = y;
  out.cols[0] = n;
  out.count = 1;
  GemvSplit(x, m, k, w, w_dtype, out, stream, launch);
}

}  // namespace tpserve::cuda

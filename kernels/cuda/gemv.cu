// y = x · W^T for a few rows of x (decode), memory-bound on W. K a multiple of 8 (every
// real model): a block of 256 threads takes kFeatures output features and splits K among
// all its threads, so each thread issues all its 16-byte weight loads (kFeatures x up to
// kUnroll) before any math: one DRAM round trip for K up to 8192, not the ~6 dependent
// ones of a warp that walks a whole row (on an H200 that cost small projections half
// their bandwidth); partial sums meet through warp shuffles and shared memory. Other K:
// one warp per feature. Up to 8 rows of x at once; also the (slow, correct) path for
// fp16/fp32 weights at any M. The output features may be split across up to three
// outputs (a fused QKV projection writes q, k and v). On compute capability 9.0+ two
// launch choices give the same bits (GemvLaunch): the bulk-copy kernel (gemv_bulk.cu), and
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
#include "kernels/cuda/gemv_common.cuh"

namespace tpserve::cuda {
namespace {

using gemv_detail::AddVector;
using gemv_detail::CurrentDevice;
using gemv_detail::DeviceFacts;
using gemv_detail::kSplitThreads;
using gemv_detail::OutputAt;
using gemv_detail::OutputMap;
using gemv_detail::ReduceAndStore;
using gemv_detail::TryBulk;

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
               const __grid_constant__ OutputMap y) {
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

// The production shape: output features per block, 16-byte vectors per feature in flight
// per thread, and (for 16-bit weights up to 2 rows, batch-1 decode) two blocks per SM, so
// one block's loads overlap the other's reduction. GemvTuning benchmarks other choices.
constexpr int kFeaturesDefault = 4;
constexpr int kUnrollDefault = 4;

template <typename WT, int kRows>
constexpr int DefaultMinBlocks() {
  return kRows <= 2 && sizeof(WT) == 2 ? 2 : 1;
}

// Block (x: kFeatures output features from blockIdx.x * kFeatures, y: kRows rows of x).
// Thread t sums vectors t, t + 256, ... of each feature in that order whatever kFeatures,
// kSplitUnroll and kMinBlocks are, so every variant gives bit-identical results.
// x is not __restrict__: with programmatic launch the kernel before this one writes x while
// this one runs (its weight loads start early), so x must not go through the read-only
// (ld.global.nc) path, whose contract is data unchanged for the kernel's lifetime. Its
// loads are plain L1-cached LDG.E.128 after griddepcontrol.wait. y is a __grid_constant__
// parameter: OutputAt reads it in place instead of from a per-thread local copy.
template <typename WT, int kRows, int kFeatures = kFeaturesDefault, int kSplitUnroll = kUnrollDefault,
          int kMinBlocks = DefaultMinBlocks<WT, kRows>()>
__global__ void __launch_bounds__(kSplitThreads, kMinBlocks)
    GemvSplitKernel(const bf16* x, int64_t m, int64_t k, const WT* __restrict__ w, int64_t n,
                    const __grid_constant__ OutputMap y) {
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
    default:
      TP_CHECK(false && "block-quantized weights on CUDA (the loader widens them)");
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

// The bulk-copy GEMV (compute capability 9.0+, bf16 weights, m <= 4): weights streamed into
// shared memory by the TMA engine, summed in the split kernel's order (gemv_common.cuh), so
// its bits are the split kernel's. Launched through gemv.cu's dispatch (GemvLaunch::bulk).
// Tested by tests/cuda_linear_test.cc; measured by bench/cuda_kernels_bench.cu.
#include <algorithm>
#include <cstdio>
#include <mutex>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/gemv_common.cuh"

namespace tpserve::cuda {
namespace gemv_detail {

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
    GemvBulkKernel(const bf16* x, int64_t m, int64_t k, const bf16* __restrict__ w, int64_t n,
                   const __grid_constant__ OutputMap y, int stages, int64_t x_bytes) {
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

  // Thread 0 only: fetch group g into stage s, completing on full[s].
  auto fetch = [&](int s, int64_t g) {
    const int64_t col0 = g * kFeatures;
    const uint32_t bytes =
        static_cast<uint32_t>(min(static_cast<int64_t>(kFeatures), n - col0) * k * static_cast<int64_t>(sizeof(bf16)));
    const uint32_t bar = SmemAddr(&full[s]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
            SmemAddr(stage0 + s * stage_bytes)),
        "l"(w + col0 * k), "r"(bytes), "r"(bar)
        : "memory");
  };
  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SmemAddr(&full[s])), "r"(1) : "memory");
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
    while (!MbarrierTryWait(SmemAddr(&full[s]), parity)) {
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

DeviceFacts CurrentDevice() {
  static OncePerDevice once;
  static DeviceFacts facts[OncePerDevice::kMaxDevices];
  int device = 0;
  TP_CUDA_CHECK(cudaGetDevice(&device));
  once.Run(device, [device] {
    cudaFuncAttributes attr{};
    TP_CUDA_CHECK(cudaFuncGetAttributes(&attr, GemvBulkKernel<1, 4>));
    facts[device].device = device;
    // ptxVersion is the architecture the code was compiled for (__CUDA_ARCH__); binaryVersion
    // is the device's own where sm_80 PTX was compiled at load time.
    facts[device].sm90 = attr.ptxVersion >= 90 && attr.binaryVersion >= 90;
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

}  // namespace gemv_detail

using gemv_detail::CurrentDevice;
using gemv_detail::OutputMap;
using gemv_detail::TryBulk;

bool GemvBulkSupported() { return CurrentDevice().sm90; }

bool GemvTakesBulk(int64_t m, int64_t k) {
  return m >= 1 && TryBulk(nullptr, m, k, nullptr, 1, OutputMap{}, CurrentDevice(), false, /*dry_run=*/true, nullptr);
}

}  // namespace tpserve::cuda

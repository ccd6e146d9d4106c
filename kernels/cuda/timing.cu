// Timing kernel candidates with CUDA events, each batch queued behind a hold kernel.
// Exercised by the tuning tests (tests/cuda_linear_test.cc, tests/cuda_model_test.cc).
#include "kernels/cuda/timing.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/base.h"

namespace tpserve::cuda {
namespace {

// Occupies the stream for `ns` nanoseconds of the GPU's global timer.
__global__ void HoldKernel(uint64_t ns) {
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

// How long the host may take to enqueue one run: launches cost a few microseconds (a
// cuBLASLt call or a two-kernel attention a few more); generous, since a hold that ends
// before the batch is queued lets host time into the measurement (then it is doubled).
constexpr double kEnqueueUsPerRun = 15.0;
constexpr double kMaxHoldUs = 20000.0;

}  // namespace

std::vector<double> TimeCandidates(cudaStream_t stream, int count, const std::function<bool(int)>& enqueue,
                                   double round_us, int rounds) {
  std::vector<double> us(count, -1.0);
  if (count <= 0) return us;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  TP_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  TP_CHECK(capture == cudaStreamCaptureStatusNone);  // it synchronizes
  cudaEvent_t start, stop;
  TP_CUDA_CHECK(cudaEventCreate(&start));
  TP_CUDA_CHECK(cudaEventCreate(&stop));
  auto time_runs = [&](int i, int reps) {
    double hold_us = std::clamp(reps * kEnqueueUsPerRun + 20.0, 20.0, kMaxHoldUs);
    for (;;) {
      HoldKernel<<<1, 1, 0, stream>>>(static_cast<uint64_t>(hold_us * 1e3));
      TP_CUDA_CHECK_LAUNCH();
      TP_CUDA_CHECK(cudaEventRecord(start, stream));
      for (int r = 0; r < reps; ++r) enqueue(i);
      // The hold already over (start reached) before the batch was queued: the GPU may
      // have waited on the host. Time again with a longer hold.
      const cudaError_t held = cudaEventQuery(start);
      if (held != cudaErrorNotReady) TP_CUDA_CHECK(held);  // a kernel before it failed
      // "Not ready" is no error; should the runtime keep it as the thread's last error,
      // the next launch check would read it.
      if (held == cudaErrorNotReady && cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
      TP_CUDA_CHECK(cudaEventRecord(stop, stream));
      TP_CUDA_CHECK(cudaEventSynchronize(stop));
      if (held == cudaSuccess && hold_us < kMaxHoldUs) {
        hold_us = std::min(2 * hold_us, kMaxHoldUs);
        continue;
      }
      float ms = 0;
      TP_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      return 1e3 * ms / reps;
    }
  };
  std::vector<bool> runs(count, false);
  std::vector<int> reps(count, 1);
  for (int i = 0; i < count; ++i) {
    runs[i] = enqueue(i);  // warm-up
    if (!runs[i]) continue;
    const double estimate = std::max(time_runs(i, 1), 0.5);
    reps[i] = std::clamp(static_cast<int>(std::ceil(round_us / estimate)), 1, 200);
  }
  for (int round = 0; round < rounds; ++round) {
    for (int i = 0; i < count; ++i) {
      if (!runs[i]) continue;
      const double t = time_runs(i, reps[i]);
      us[i] = us[i] < 0 ? t : std::min(us[i], t);
    }
  }
  TP_CUDA_CHECK(cudaEventDestroy(start));
  TP_CUDA_CHECK(cudaEventDestroy(stop));
  return us;
}

}  // namespace tpserve::cuda

// Timing kernel candidates with CUDA events.
#include "kernels/cuda/timing.h"

#include <algorithm>
#include <cmath>

#include "kernels/cuda/cuda_check.h"

namespace tpserve::cuda {

std::vector<double> TimeCandidates(cudaStream_t stream, int count, const std::function<bool(int)>& enqueue,
                                   double round_us, int rounds) {
  std::vector<double> us(count, -1.0);
  if (count <= 0) return us;
  cudaEvent_t start, stop;
  TP_CUDA_CHECK(cudaEventCreate(&start));
  TP_CUDA_CHECK(cudaEventCreate(&stop));
  auto time_runs = [&](int i, int reps) {
    TP_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int r = 0; r < reps; ++r) enqueue(i);
    TP_CUDA_CHECK(cudaEventRecord(stop, stream));
    TP_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    TP_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return 1e3 * ms / reps;
  };
  // Warm-up (lazy module loading, cuBLASLt's first use of a kernel) and one estimate each.
  std::vector<bool> runs(count, false);
  std::vector<int> reps(count, 1);
  for (int i = 0; i < count; ++i) {
    runs[i] = enqueue(i);
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

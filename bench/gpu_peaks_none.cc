// bench/gpu_peaks.h without CUDA: nothing to measure.
#include "bench/gpu_peaks.h"

namespace tpserve::bench {

absl::StatusOr<double> MeasureDeviceCopyGBs(int, size_t, int) {
  return absl::UnavailableError("built without CUDA: no GPU copy bandwidth to measure");
}
absl::StatusOr<double> MeasureCublasBf16GemmTflops(int, int64_t, int64_t, int64_t, int) {
  return absl::UnavailableError("built without CUDA: no cuBLAS GEMM to measure");
}

}  // namespace tpserve::bench

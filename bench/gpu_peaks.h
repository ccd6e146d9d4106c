// The GPU's own rates, measured in the benchmark's run so that engine_bench prints its
// achieved rates beside them: device-to-device copy bandwidth (the decode roofline) and a
// plain cuBLAS bf16 GEMM (the prefill reference). bench/gpu_peaks_cuda.cc where CUDA is
// built, bench/gpu_peaks_none.cc elsewhere (UNAVAILABLE). Not a test: run by
// bench/gpu_check.sh through engine_bench --backend cuda.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace tpserve::bench {

// cudaMemcpyAsync of `bytes` from one device buffer to another, timed with CUDA events;
// GB/s counting the bytes read plus the bytes written, best of `reps`.
absl::StatusOr<double> MeasureDeviceCopyGBs(int device, size_t bytes, int reps);

// y[m, n] = x[m, k] · w[n, k]^T through cublasGemmEx (bf16 in and out, fp32 compute) on
// non-zero data, timed with CUDA events; TFLOP/s as 2 m n k / time, best of `reps`.
absl::StatusOr<double> MeasureCublasBf16GemmTflops(int device, int64_t m, int64_t n, int64_t k, int reps);

}  // namespace tpserve::bench

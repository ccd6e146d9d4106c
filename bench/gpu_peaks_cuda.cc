// bench/gpu_peaks.h on CUDA: a device-to-device copy and a cuBLAS bf16 GEMM, timed with
// events on a stream of their own.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/gpu_peaks.h"
#include "kernels/base.h"

namespace tpserve::bench {
namespace {

absl::Status Cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

// Device memory, a stream and two events, released on every path out.
struct Scope {
  std::vector<void*> buffers;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  cublasHandle_t blas = nullptr;
  ~Scope() {
    if (stream != nullptr) cudaStreamSynchronize(stream);
    if (blas != nullptr) cublasDestroy(blas);
    for (void* p : buffers) cudaFree(p);
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
  absl::Status Init(int device) {
    TP_RETURN_IF_ERROR(Cuda(cudaSetDevice(device), "cudaSetDevice"));
    TP_RETURN_IF_ERROR(Cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"));
    TP_RETURN_IF_ERROR(Cuda(cudaEventCreate(&start), "cudaEventCreate"));
    return Cuda(cudaEventCreate(&stop), "cudaEventCreate");
  }
  absl::StatusOr<void*> Alloc(size_t bytes) {
    void* p = nullptr;
    TP_RETURN_IF_ERROR(Cuda(cudaMalloc(&p, bytes), "cudaMalloc"));
    buffers.push_back(p);
    return p;
  }
  // Best time of `reps` runs of `enqueue` on the stream, in ms, after one warm-up run.
  template <typename F>
  absl::StatusOr<float> BestMs(int reps, F enqueue) {
    TP_RETURN_IF_ERROR(enqueue());
    float best = std::numeric_limits<float>::infinity();
    for (int r = 0; r < std::max(reps, 1); ++r) {
      TP_RETURN_IF_ERROR(Cuda(cudaEventRecord(start, stream), "cudaEventRecord"));
      TP_RETURN_IF_ERROR(enqueue());
      TP_RETURN_IF_ERROR(Cuda(cudaEventRecord(stop, stream), "cudaEventRecord"));
      TP_RETURN_IF_ERROR(Cuda(cudaEventSynchronize(stop), "cudaEventSynchronize"));
      float ms = 0;
      TP_RETURN_IF_ERROR(Cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime"));
      best = std::min(best, ms);
    }
    return best;
  }
};

// Uniform bf16 values in [-1, 1) from a cheap generator: tensor cores draw less power on
// zeros, which would flatter the GEMM.
absl::Status FillBf16(void* device_dst, int64_t n, uint32_t seed, cudaStream_t stream) {
  std::vector<__nv_bfloat16> host(static_cast<size_t>(n));
  uint32_t x = seed * 2654435761u + 1;
  for (auto& v : host) {
    x = x * 1664525u + 1013904223u;
    v = __float2bfloat16(static_cast<float>(x >> 8) * (2.0f / 16777216.0f) - 1.0f);
  }
  TP_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(device_dst, host.data(), host.size() * sizeof(host[0]),
                                          cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync"));
  return Cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

}  // namespace

absl::StatusOr<double> MeasureDeviceCopyGBs(int device, size_t bytes, int reps) {
  Scope s;
  TP_RETURN_IF_ERROR(s.Init(device));
  TP_ASSIGN_OR_RETURN(void* src, s.Alloc(bytes));
  TP_ASSIGN_OR_RETURN(void* dst, s.Alloc(bytes));
  TP_RETURN_IF_ERROR(Cuda(cudaMemsetAsync(src, 1, bytes, s.stream), "cudaMemsetAsync"));
  TP_ASSIGN_OR_RETURN(float ms, s.BestMs(reps, [&] {
    return Cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s.stream), "cudaMemcpyAsync");
  }));
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}

absl::StatusOr<double> MeasureCublasBf16GemmTflops(int device, int64_t m, int64_t n, int64_t k, int reps) {
  Scope s;
  TP_RETURN_IF_ERROR(s.Init(device));
  TP_ASSIGN_OR_RETURN(void* x, s.Alloc(static_cast<size_t>(m * k) * 2));
  TP_ASSIGN_OR_RETURN(void* w, s.Alloc(static_cast<size_t>(n * k) * 2));
  TP_ASSIGN_OR_RETURN(void* y, s.Alloc(static_cast<size_t>(m * n) * 2));
  TP_RETURN_IF_ERROR(FillBf16(x, m * k, 1, s.stream));
  TP_RETURN_IF_ERROR(FillBf16(w, n * k, 2, s.stream));
  if (cublasCreate(&s.blas) != CUBLAS_STATUS_SUCCESS) return absl::InternalError("cublasCreate failed");
  if (cublasSetStream(s.blas, s.stream) != CUBLAS_STATUS_SUCCESS) return absl::InternalError("cublasSetStream failed");
  const float alpha = 1.0f, beta = 0.0f;
  // Row-major y[m, n] = x[m, k] · w[n, k]^T is column-major y^T[n, m] = w^T · x.
  TP_ASSIGN_OR_RETURN(float ms, s.BestMs(reps, [&]() -> absl::Status {
    const cublasStatus_t st = cublasGemmEx(s.blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                                           static_cast<int>(k), &alpha, w, CUDA_R_16BF, static_cast<int>(k), x,
                                           CUDA_R_16BF, static_cast<int>(k), &beta, y, CUDA_R_16BF,
                                           static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) return absl::InternalError(absl::StrCat("cublasGemmEx failed: status ", st));
    return absl::OkStatus();
  }));
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / (ms * 1e-3) / 1e12;
}

}  // namespace tpserve::bench

// bf16 GEMM through cuBLASLt, y[m, n] = x[m, k] · w[n, k]^T with fp32 compute: the large-M
// (prefill) path of the CUDA backend's Linear. One per backend (it owns a cuBLASLt handle
// and workspace; not thread-safe). Tested by tests/cuda_linear_test.cc.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"

namespace tpserve::cuda {

class Gemm {
 public:
  // Creates the handle and a workspace on the current device.
  explicit Gemm(size_t workspace_bytes = size_t{32} << 20);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Enqueues the product on `stream`; no allocation or synchronization after the first
  // call for a shape (heuristics are cached), so calls may be captured in a CUDA graph.
  void Run(const bf16* x, int64_t m, int64_t k, const bf16* w, int64_t n, bf16* y, cudaStream_t stream);
  size_t workspace_bytes() const { return workspace_bytes_; }

  // For cuda_kernels_bench: the same product with the i-th of cuBLASLt's heuristic
  // candidates for this shape (0 is what Run uses). False (nothing enqueued) when the
  // heuristic offers fewer than i + 1 (at most kMaxCandidates).
  static constexpr int kMaxCandidates = 8;
  bool RunCandidate(int i, const bf16* x, int64_t m, int64_t k, const bf16* w, int64_t n, bf16* y,
                    cudaStream_t stream);

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    std::vector<cublasLtMatmulAlgo_t> candidates;  // the heuristic's, best first (algo is [0])
  };
  const Plan& PlanFor(int64_t m, int64_t n, int64_t k);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<std::tuple<int64_t, int64_t, int64_t>, Plan> plans_;
};

}  // namespace tpserve::cuda

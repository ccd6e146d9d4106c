// bf16 GEMM through cuBLASLt, y[m, n] = x[m, k] · w[n, k]^T with fp32 compute: the large-M
// (prefill) path of the CUDA backend's Linear. One per backend (it owns a cuBLASLt handle
// and workspace; not thread-safe). Tested by tests/cuda_linear_test.cc.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
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

  // Measured choice (TensorRT-LLM profiles its GEMMs the same way): times every heuristic
  // candidate for this exact shape (cuda::TimeCandidates; synchronizes `stream`, so not
  // while capturing; y is overwritten) and keeps the fastest (ChooseFastest: the heuristic's
  // first unless another beats it by over 3%) for every product with this n and k whose row
  // count maps to m (TuneBucketFor over the row counts tuned for this n and k) and that
  // candidate can run (cublasLtMatmulAlgoCheck, within the workspace). Run uses the choices
  // while use_tuned is on. Candidates differ in summation order, so results move by
  // rounding (cuda_linear_test holds them to the CPU reference).
  struct TuneResult {
    std::vector<double> us;  // per candidate, one run; [0] is the heuristic's first
    int chosen = 0;
  };
  TuneResult Tune(const bf16* x, int64_t m, int64_t k, const bf16* w, int64_t n, bf16* y, cudaStream_t stream);
  void set_use_tuned(bool on) { use_tuned_ = on; }
  bool use_tuned() const { return use_tuned_; }
  // The algorithm Run would use for this shape is a tuned one other than the heuristic's
  // first (for tests).
  bool UsesTunedChoice(int64_t m, int64_t n, int64_t k);

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    std::vector<cublasLtMatmulAlgo_t> candidates;  // the heuristic's, best first (algo is [0])
    // The tuned choice for this row count, resolved at tune_generation (nullopt: none, or
    // it cannot run this shape).
    std::optional<cublasLtMatmulAlgo_t> tuned;
    uint64_t tuned_generation = 0;
  };
  Plan& PlanFor(int64_t m, int64_t n, int64_t k);
  // The algorithm Run uses: the tuned choice where use_tuned_ and one applies, else algo.
  const cublasLtMatmulAlgo_t& AlgoFor(Plan& p, int64_t m, int64_t n, int64_t k);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<std::tuple<int64_t, int64_t, int64_t>, Plan> plans_;
  // Tuned choices: (n, k) -> row count measured -> the candidate that won there (nullopt:
  // the heuristic's first won, so products mapped there keep their own heuristic's first).
  std::map<std::pair<int64_t, int64_t>, std::map<int64_t, std::optional<cublasLtMatmulAlgo_t>>> tuned_;
  uint64_t tune_generation_ = 1;  // bumped by Tune: plans resolve their tuned choice again
  bool use_tuned_ = false;
};

}  // namespace tpserve::cuda

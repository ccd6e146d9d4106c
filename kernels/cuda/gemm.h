// bf16 GEMM through cuBLASLt, y[m, n] = x[m, k] · w[n, k]^T with fp32 compute: the large-M
// (prefill) path of the CUDA backend's Linear, with the heuristic's algorithm or one chosen
// by measurement. One per backend (it owns a cuBLASLt handle and workspace; not
// thread-safe). Tested by tests/cuda_linear_test.cc.
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

  // Measured choice (worker/cuda_tuning.cc times the candidates, as TensorRT-LLM profiles
  // its GEMMs): the number of heuristic candidates for this exact shape, and keeping
  // candidate i (0: the heuristic's first, i.e. no change) for every product with this n
  // and k whose row count maps to m (TuneBucketFor over the row counts chosen for this n and
  // k) and that the candidate can run (cublasLtMatmulAlgoCheck, within the workspace; else
  // that product keeps its own heuristic's first). Run uses the choices while use_tuned is
  // on. Candidates differ in summation order, so results move by rounding
  // (cuda_linear_test holds every candidate to the CPU reference).
  int NumCandidates(int64_t m, int64_t n, int64_t k);
  void Choose(int64_t m, int64_t n, int64_t k, int candidate);
  void ClearChoices();
  void set_use_tuned(bool on) { use_tuned_ = on; }
  // The algorithm Run would use for this shape is a chosen one other than the heuristic's
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
  // Choices: (n, k) -> row count -> the candidate chosen there (nullopt: the heuristic's
  // first, so products mapped there keep their own heuristic's first).
  std::map<std::pair<int64_t, int64_t>, std::map<int64_t, std::optional<cublasLtMatmulAlgo_t>>> tuned_;
  uint64_t tune_generation_ = 1;  // bumped by Choose: plans resolve their tuned choice again
  bool use_tuned_ = false;
};

}  // namespace tpserve::cuda

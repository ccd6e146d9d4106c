// cuBLASLt bf16 GEMM: cached per-shape heuristics, and choices made by measurement per row
// count. Tested by tests/cuda_linear_test.cc.
#include "kernels/cuda/gemm.h"

#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/tuning.h"

namespace tpserve::cuda {

Gemm::Gemm(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  TP_CUBLAS_CHECK(cublasLtCreate(&handle_));
  TP_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

Gemm::~Gemm() {
  for (auto& [shape, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
  }
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

// Column-major view: y^T [n, m] = op_T(w: [k, n], ld k) · x^T ([k, m], ld k).
Gemm::Plan& Gemm::PlanFor(int64_t m, int64_t n, int64_t k) {
  const auto key = std::make_tuple(m, n, k);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan p;
  TP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  TP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  TP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  TP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, k, n, k));
  TP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, k, m, k));
  TP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_16BF, n, m, n));
  cublasLtMatmulPreference_t pref;
  TP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  TP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &workspace_bytes_, sizeof(workspace_bytes_)));
  cublasLtMatmulHeuristicResult_t results[kMaxCandidates]{};
  int found = 0;
  TP_CUBLAS_CHECK(
      cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref, kMaxCandidates, results, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  if (found == 0) {
    std::fprintf(stderr, "tpserve: cuBLASLt has no bf16 algorithm for m=%lld n=%lld k=%lld\n",
                 static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k));
    std::abort();
  }
  for (int i = 0; i < found; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS) p.candidates.push_back(results[i].algo);
  }
  if (p.candidates.empty()) {
    std::fprintf(stderr, "tpserve: cuBLASLt offers no usable bf16 algorithm for m=%lld n=%lld k=%lld\n",
                 static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k));
    std::abort();
  }
  p.algo = p.candidates[0];
  return plans_.emplace(key, p).first->second;
}

bool Gemm::RunCandidate(int i, const bf16* x, int64_t m, int64_t k, const bf16* w, int64_t n, bf16* y,
                        cudaStream_t stream) {
  const Plan& p = PlanFor(m, n, k);
  if (i < 0 || i >= static_cast<int>(p.candidates.size())) return false;
  const float alpha = 1.0f, beta = 0.0f;
  TP_CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.candidates[i],
                                 workspace_, workspace_bytes_, stream));
  return true;
}

const cublasLtMatmulAlgo_t& Gemm::AlgoFor(Plan& p, int64_t m, int64_t n, int64_t k) {
  if (!use_tuned_) return p.algo;
  if (p.tuned_generation != tune_generation_) {
    p.tuned_generation = tune_generation_;
    p.tuned.reset();
    const auto it = tuned_.find({n, k});
    if (it != tuned_.end()) {
      std::vector<int64_t> measured;
      for (const auto& [rows, algo] : it->second) measured.push_back(rows);
      const std::optional<cublasLtMatmulAlgo_t>& algo = it->second.at(TuneBucketFor(m, measured));
      cublasLtMatmulHeuristicResult_t check{};
      if (algo && cublasLtMatmulAlgoCheck(handle_, p.op, p.a, p.b, p.c, p.c, &*algo, &check) == CUBLAS_STATUS_SUCCESS &&
          check.workspaceSize <= workspace_bytes_) {
        p.tuned = *algo;
      }
    }
  }
  return p.tuned ? *p.tuned : p.algo;
}

int Gemm::NumCandidates(int64_t m, int64_t n, int64_t k) {
  return static_cast<int>(PlanFor(m, n, k).candidates.size());
}

void Gemm::Choose(int64_t m, int64_t n, int64_t k, int candidate) {
  const Plan& p = PlanFor(m, n, k);
  TP_CHECK(candidate >= 0 && candidate < static_cast<int>(p.candidates.size()));
  std::optional<cublasLtMatmulAlgo_t> choice;
  if (candidate > 0) choice = p.candidates[candidate];
  tuned_[{n, k}][m] = choice;
  ++tune_generation_;
}

void Gemm::ClearChoices() {
  tuned_.clear();
  ++tune_generation_;
}

bool Gemm::UsesTunedChoice(int64_t m, int64_t n, int64_t k) {
  Plan& p = PlanFor(m, n, k);
  const cublasLtMatmulAlgo_t& algo = AlgoFor(p, m, n, k);
  return &algo != &p.algo && std::memcmp(&algo, &p.algo, sizeof(algo)) != 0;
}

void Gemm::Run(const bf16* x, int64_t m, int64_t k, const bf16* w, int64_t n, bf16* y, cudaStream_t stream) {
  if (m == 0 || n == 0) return;
  Plan& p = PlanFor(m, n, k);
  const cublasLtMatmulAlgo_t& algo = AlgoFor(p, m, n, k);
  const float alpha = 1.0f, beta = 0.0f;
  TP_CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &algo, workspace_,
                                 workspace_bytes_, stream));
}

}  // namespace tpserve::cuda

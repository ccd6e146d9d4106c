// Start-up kernel tuning on one GPU (Backend::TuneLinear of the CUDA backend): times the
// interchangeable kernels for each weight shape's products and records the fastest.
// Tested by tests/cuda_model_test.cc (TuneLinear through the backend) and, piece by piece,
// tests/cuda_linear_test.cc; the choice rule by tests/tuning_test.cc.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <tuple>

#include "absl/status/statusor.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm.h"
#include "worker/backend.h"

namespace tpserve {

// The GEMV launch chosen per (rows, n, k) where it is not the production one.
using GemvChoices = std::map<std::tuple<int64_t, int64_t, int64_t>, cuda::GemvLaunch>;

struct LinearTuneTarget {
  cudaStream_t stream = nullptr;
  cuda::Gemm* gemm = nullptr;  // gets its cuBLASLt choices (Gemm::Choose)
  GemvChoices* gemv = nullptr;
  bool pdl = false;            // GEMVs timed (and later run) under programmatic launch
  std::function<absl::StatusOr<std::unique_ptr<Buffer>>(size_t)> allocate;  // temporaries
};

// Replaces every choice in `t` with new measurements for these uses: GEMVs of each bf16
// weight shape at 1..min(4, max_rows) rows (cuda::GemvCandidates, all with the same
// bits), and every cuBLASLt heuristic candidate per (n, k) of each part at row counts
// TuneRowBuckets(5, max_rows); ChooseFastest picks. Each candidate reads in turn every
// weight of its shape (the model's layers share shapes), so the weights come from DRAM
// as they do in a step, not from L2. Synchronizes the stream; not while capturing.
absl::StatusOr<TuneReport> TuneLinearOnDevice(std::span<const LinearUse> uses, const LinearTuneTarget& t);

}  // namespace tpserve

// Start-up kernel tuning on one GPU (Backend::TuneKernels of the CUDA backend): times the
// interchangeable kernels for each weight shape's products and each attention
// configuration's prefill, and records the fastest. Tested by tests/cuda_model_test.cc
// (TuneKernels through the backend) and, piece by piece, tests/cuda_linear_test.cc and
// tests/cuda_attention_test.cc; the choice rule by tests/tuning_test.cc.
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

// Row counts above the GEMV's 4 where the GEMV (8 rows a block) beat every cuBLASLt
// candidate: (n, k) -> measured row count (at most kWideGemvMaxRows) -> it won there.
inline constexpr int64_t kWideGemvMaxRows = 16;
using WideGemvChoices = std::map<std::pair<int64_t, int64_t>, std::map<int64_t, bool>>;
// Whether a product of m rows by an (n, k) weight takes the GEMV: the choice at the
// smallest measured row count at or above m (none above 16: cuBLASLt).
bool WideGemvChosen(const WideGemvChoices& c, int64_t m, int64_t n, int64_t k);

// The prefill attention tile chosen per configuration where it is not the production one.
using PrefillKey = std::tuple<int32_t, int32_t, int32_t, int32_t, bool>;  // D, q heads, KV heads, window, softcap
PrefillKey PrefillKeyOf(const cpu::PagedAttentionParams& p);
using PrefillChoices = std::map<PrefillKey, cuda::PrefillTuning>;

struct TuneTarget {
  cudaStream_t stream = nullptr;
  cuda::Gemm* gemm = nullptr;  // gets its cuBLASLt choices (Gemm::Choose)
  GemvChoices* gemv = nullptr;
  WideGemvChoices* wide_gemv = nullptr;
  PrefillChoices* prefill = nullptr;
  bool pdl = false;            // GEMVs timed (and later run) under programmatic launch
  int64_t gemv_max_rows = 4;       // Linear over more rows runs cuBLASLt (or the wide GEMV)
  int64_t decode_max_tokens = 64;  // attention over more query tokens runs the prefill kernel
  std::function<absl::StatusOr<std::unique_ptr<Buffer>>(size_t)> allocate;  // temporaries
};

// Replaces every choice in `t` with new measurements for these uses: GEMVs of each bf16
// weight shape at 1..min(4, max_rows) rows (cuda::GemvCandidates, all with the same
// bits), every cuBLASLt heuristic candidate per (n, k) of each part at row counts
// TuneRowBuckets(5, max_rows) (at row counts up to 16 also the GEMV, which reads the
// weights once per 8 rows: small decode batches), and the prefill attention tiles
// (cuda::PrefillAttentionTunings) per configuration on one causal prompt of max_tokens
// tokens, at most 8192 (where that is more than the decode kernel's 64); ChooseFastest
// picks. Each
// linear candidate reads in turn every weight of its shape (the model's layers share
// shapes), so the weights come from DRAM as they do in a step, not from L2. Synchronizes
// the stream; not while capturing.
absl::StatusOr<TuneReport> TuneKernelsOnDevice(const KernelUses& uses, const TuneTarget& t);

}  // namespace tpserve

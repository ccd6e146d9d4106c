// Start-up kernel tuning on one GPU. Tested by tests/cuda_model_test.cc.
#include "worker/cuda_tuning.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/timing.h"
#include "kernels/tuning.h"

namespace tpserve {
namespace {

using cuda::bf16;

// GEMVs at up to this many rows (the CUDA backend's kGemvMaxRows); cuBLASLt above.
constexpr int64_t kGemvRows = 4;

// The weights of one shape, read in turn by the timed runs.
struct Weights {
  std::vector<const bf16*> w;
  int64_t max_rows = 0;
  size_t next = 0;
  const bf16* Next() { return w[next++ % w.size()]; }
};

void AddWeight(Weights& ws, const bf16* w, int64_t max_rows) {
  if (std::find(ws.w.begin(), ws.w.end(), w) == ws.w.end()) ws.w.push_back(w);
  ws.max_rows = std::max(ws.max_rows, max_rows);
}

}  // namespace

absl::StatusOr<TuneReport> TuneLinearOnDevice(std::span<const LinearUse> uses, const LinearTuneTarget& t) {
  const auto t0 = std::chrono::steady_clock::now();
  t.gemv->clear();
  t.gemm->ClearChoices();
  // The distinct products: GEMVs by (m, n, k) of whole weights (LinearSplit's GEMV writes
  // all parts in one launch), cuBLASLt GEMMs by (n, k) of each part (LinearSplit above
  // the GEMV's rows runs one GEMM per part).
  std::map<std::tuple<int64_t, int64_t, int64_t>, Weights> gemvs;
  std::map<std::pair<int64_t, int64_t>, Weights> gemms;
  int64_t x_elems = 0, y_elems = 0;
  for (const LinearUse& u : uses) {
    if (u.w.dtype != DType::kBF16 || u.max_rows <= 0) continue;  // other dtypes have one kernel
    const bf16* w = static_cast<const bf16*>(u.w.data);
    const int64_t k = u.w.cols;
    if (k % 8 == 0) {  // other k: one GEMV kernel
      for (int64_t m = 1; m <= std::min(kGemvRows, u.max_rows); ++m) {
        AddWeight(gemvs[{m, u.w.rows, k}], w, m);
        x_elems = std::max(x_elems, m * k);
        y_elems = std::max(y_elems, m * u.w.rows);
      }
    }
    if (u.max_rows <= kGemvRows) continue;
    const std::vector<int64_t> parts = u.parts.empty() ? std::vector<int64_t>{u.w.rows} : u.parts;
    int64_t row0 = 0;
    for (int64_t n : parts) {
      Weights& ws = gemms[{n, k}];
      AddWeight(ws, w + row0 * k, u.max_rows);
      x_elems = std::max(x_elems, ws.max_rows * k);
      y_elems = std::max(y_elems, ws.max_rows * n);
      row0 += n;
    }
  }
  TuneReport report;
  if (gemvs.empty() && gemms.empty()) return report;
  auto buffer = [&](int64_t elems, const char* what) -> absl::StatusOr<std::unique_ptr<Buffer>> {
    auto b = t.allocate(static_cast<size_t>(elems) * sizeof(bf16));
    if (!b.ok()) {
      return absl::Status(b.status().code(), absl::StrCat("kernel tuning's ", what, " buffer (",
                                                          elems * static_cast<int64_t>(sizeof(bf16)), " bytes; "
                                                          "--max-num-batched-tokens sets its size): ",
                                                          b.status().message()));
    }
    return b;
  };
  TP_ASSIGN_OR_RETURN(auto x_buf, buffer(x_elems, "input"));
  TP_ASSIGN_OR_RETURN(auto y_buf, buffer(y_elems, "output"));
  bf16* x = static_cast<bf16*>(x_buf->data());
  bf16* y = static_cast<bf16*>(y_buf->data());
  cuda::FillPattern(x, x_elems, 1, t.stream);

  for (auto& [key, ws] : gemvs) {
    const auto [m, n, k] = key;
    const std::vector<cuda::GemvCandidate> candidates = cuda::GemvCandidates(m, k, t.pdl);
    const std::vector<double> us = cuda::TimeCandidates(t.stream, static_cast<int>(candidates.size()), [&](int i) {
      cuda::Gemv(x, m, k, ws.Next(), DType::kBF16, n, y, t.stream, candidates[i].launch);
      return true;
    });
    const int best = std::max(ChooseFastest(us), 0);
    if (best > 0) (*t.gemv)[key] = candidates[best].launch;
    ++report.products;
    report.changed += best > 0;
    report.lines.push_back(absl::StrCat("gemv m=", m, " n=", n, " k=", k, " (", ws.w.size(), " weights): ",
                                        candidates[best].name, absl::StrFormat(" %.1f us", us[best]),
                                        best > 0 ? absl::StrFormat(" (split %.1f us)", us[0]) : std::string(), ", ",
                                        candidates.size(), " candidates"));
  }
  for (auto& [key, ws] : gemms) {
    const auto [n, k] = key;
    for (int64_t m : TuneRowBuckets(kGemvRows + 1, ws.max_rows)) {
      const int count = t.gemm->NumCandidates(m, n, k);
      const std::vector<double> us = cuda::TimeCandidates(
          t.stream, count, [&](int i) { return t.gemm->RunCandidate(i, x, m, k, ws.Next(), n, y, t.stream); });
      const int best = std::max(ChooseFastest(us), 0);
      t.gemm->Choose(m, n, k, best);
      ++report.products;
      report.changed += best > 0;
      report.lines.push_back(absl::StrCat("gemm m=", m, " n=", n, " k=", k, " (", ws.w.size(),
                                          " weights): candidate ", best, absl::StrFormat(" %.1f us", us[best]),
                                          best > 0 ? absl::StrFormat(" (heuristic's first %.1f us)", us[0])
                                                   : std::string(),
                                          ", ", count, " candidates"));
    }
  }
  TP_CUDA_CHECK(cudaStreamSynchronize(t.stream));
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace tpserve

// Start-up kernel tuning on one GPU: linear products, then prefill attention. Tested by
// tests/cuda_model_test.cc.
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

// The longest synthetic prompt prefill attention is timed on.
constexpr int64_t kAttentionTuneMaxTokens = 8192;

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

// A temporary device buffer of `elems` values of `elem_bytes` each, or an error that says
// what it was for.
absl::StatusOr<std::unique_ptr<Buffer>> TuneBuffer(const TuneTarget& t, int64_t elems, size_t elem_bytes,
                                                   const char* what) {
  auto b = t.allocate(static_cast<size_t>(elems) * elem_bytes);
  if (!b.ok()) {
    return absl::Status(b.status().code(),
                        absl::StrCat("kernel tuning's ", what, " buffer (", elems * static_cast<int64_t>(elem_bytes),
                                     " bytes; --max-num-batched-tokens sets its size): ", b.status().message()));
  }
  return b;
}

absl::Status TuneLinear(std::span<const LinearUse> uses, const TuneTarget& t, TuneReport& report) {
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
      for (int64_t m = 1; m <= std::min(t.gemv_max_rows, u.max_rows); ++m) {
        AddWeight(gemvs[{m, u.w.rows, k}], w, m);
        x_elems = std::max(x_elems, m * k);
        y_elems = std::max(y_elems, m * u.w.rows);
      }
    }
    if (u.max_rows <= t.gemv_max_rows) continue;
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
  if (gemvs.empty() && gemms.empty()) return absl::OkStatus();
  TP_ASSIGN_OR_RETURN(auto x_buf, TuneBuffer(t, x_elems, sizeof(bf16), "input"));
  TP_ASSIGN_OR_RETURN(auto y_buf, TuneBuffer(t, y_elems, sizeof(bf16), "output"));
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
    for (int64_t m : TuneRowBuckets(t.gemv_max_rows + 1, ws.max_rows)) {
      const int count = t.gemm->NumCandidates(m, n, k);
      const std::vector<double> us = cuda::TimeCandidates(
          t.stream, count, [&](int i) { return t.gemm->RunCandidate(i, x, m, k, ws.Next(), n, y, t.stream); });
      const int best = std::max(ChooseFastest(us), 0);
      t.gemm->Choose(m, n, k, best);
      // Small batches: the GEMV against cuBLASLt's best (other summation orders both).
      bool gemv_won = false;
      std::string gemv_note;
      if (m <= kWideGemvMaxRows && k % 8 == 0) {
        const double gemv_us = cuda::TimeCandidates(t.stream, 1, [&](int) {
          cuda::Gemv(x, m, k, ws.Next(), DType::kBF16, n, y, t.stream, cuda::GemvLaunch{.pdl = t.pdl});
          return true;
        })[0];
        gemv_won = ChooseFastest(std::vector<double>{us[best], gemv_us}) == 1;
        (*t.wide_gemv)[{n, k}][m] = gemv_won;
        gemv_note = absl::StrFormat(", gemv %.1f us", gemv_us);
      }
      ++report.products;
      report.changed += best > 0 || gemv_won;
      report.lines.push_back(absl::StrCat(
          "gemm m=", m, " n=", n, " k=", k, " (", ws.w.size(), " weights): ",
          gemv_won ? "gemv, over cuBLASLt " : "", "candidate ", best, absl::StrFormat(" %.1f us", us[best]),
          best > 0 ? absl::StrFormat(" (heuristic's first %.1f us)", us[0]) : std::string(), gemv_note, ", ", count,
          " candidates"));
    }
  }
  TP_CUDA_CHECK(cudaStreamSynchronize(t.stream));  // before the buffers go
  return absl::OkStatus();
}

// One causal prompt of `tokens` tokens (one sequence, positions 0..tokens-1, its KV in
// consecutive blocks) per configuration, the production tile against the others.
absl::Status TuneAttention(std::span<const AttentionUse> uses, const TuneTarget& t, TuneReport& report) {
  std::map<PrefillKey, AttentionUse> configs;  // the most tokens any layer of the configuration has
  for (const AttentionUse& u : uses) {
    if (u.max_tokens <= t.decode_max_tokens || !cuda::AttentionHeadDimSupported(u.p.head_dim)) continue;
    auto [it, added] = configs.emplace(PrefillKeyOf(u.p), u);
    it->second.max_tokens = std::max(it->second.max_tokens, u.max_tokens);
  }
  for (const auto& [key, use] : configs) {
    const cuda::PrefillTuning production = cuda::PrefillAttentionProductionTuning(use.p.head_dim);
    std::vector<cuda::PrefillTuning> tiles = {production};  // [0]: what PrefillAttention launches
    for (const cuda::PrefillTuning& tile : cuda::PrefillAttentionTunings(use.p.head_dim)) {
      if (tile.block_keys != production.block_keys || tile.row_warps != production.row_warps) tiles.push_back(tile);
    }
    if (tiles.size() < 2) continue;  // nothing to choose between for this head_dim
    // Work grows as T^2; the tiles rank alike well before 8192 tokens.
    const int64_t T = std::min<int64_t>(use.max_tokens, kAttentionTuneMaxTokens);
    cpu::PagedAttentionParams p = use.p;
    if (p.block_size <= 0) p.block_size = 16;
    p.max_blocks_per_seq = static_cast<int32_t>((T + p.block_size - 1) / p.block_size);
    const int64_t q_elems = T * p.num_q_heads * p.head_dim;
    const int64_t kv_elems = int64_t{p.max_blocks_per_seq} * p.block_size * p.num_kv_heads * p.head_dim;
    TP_ASSIGN_OR_RETURN(auto q, TuneBuffer(t, q_elems, sizeof(bf16), "attention query"));
    TP_ASSIGN_OR_RETURN(auto out, TuneBuffer(t, q_elems, sizeof(bf16), "attention output"));
    TP_ASSIGN_OR_RETURN(auto k, TuneBuffer(t, kv_elems, sizeof(bf16), "attention key"));
    TP_ASSIGN_OR_RETURN(auto v, TuneBuffer(t, kv_elems, sizeof(bf16), "attention value"));
    // token_seq (zeros), token_pos, the block table, then the tile-plan workspace.
    const size_t ws_bytes = cuda::PrefillAttentionWorkspaceBytes(T);
    const int64_t ints = 2 * T + p.max_blocks_per_seq;
    TP_ASSIGN_OR_RETURN(auto meta, TuneBuffer(t, ints + static_cast<int64_t>(ws_bytes / 4) + 1, 4, "attention plan"));
    std::vector<int32_t> host(ints, 0);
    for (int64_t i = 0; i < T; ++i) host[T + i] = static_cast<int32_t>(i);
    for (int32_t b = 0; b < p.max_blocks_per_seq; ++b) host[2 * T + b] = b;
    int32_t* dev = static_cast<int32_t*>(meta->data());
    TP_CUDA_CHECK(cudaMemcpyAsync(dev, host.data(), host.size() * 4, cudaMemcpyHostToDevice, t.stream));
    const int32_t *seq = dev, *pos = dev + T, *table = dev + 2 * T;
    void* ws = dev + ints;
    cuda::FillPattern(static_cast<bf16*>(q->data()), q_elems, 2, t.stream);
    cuda::FillPattern(static_cast<bf16*>(k->data()), kv_elems, 3, t.stream);
    cuda::FillPattern(static_cast<bf16*>(v->data()), kv_elems, 4, t.stream);
    const auto* qb = static_cast<const bf16*>(q->data());
    const auto* kb = static_cast<const bf16*>(k->data());
    const auto* vb = static_cast<const bf16*>(v->data());
    auto* ob = static_cast<bf16*>(out->data());
    const std::vector<double> us = cuda::TimeCandidates(t.stream, static_cast<int>(tiles.size()), [&](int i) {
      cuda::PrefillAttentionWithTuning(tiles[i], qb, kb, vb, seq, pos, T, table, p, ws, ws_bytes, ob, t.stream);
      return true;
    });
    const int best = std::max(ChooseFastest(us), 0);
    if (best > 0) (*t.prefill)[key] = tiles[best];
    ++report.products;
    report.changed += best > 0;
    auto name = [&](int i) {
      return absl::StrCat(i == 0 ? "production " : "", "tile ", tiles[i].block_keys, " keys x ",
                          16 * tiles[i].row_warps, " rows");
    };
    report.lines.push_back(absl::StrCat(
        "prefill attention d=", p.head_dim, " heads ", p.num_q_heads, "/", p.num_kv_heads,
        p.sliding_window > 0 ? absl::StrCat(" window ", p.sliding_window) : std::string(), ", ", T,
        " causal tokens: ", name(best), absl::StrFormat(" %.1f us", us[best]),
        best > 0 ? absl::StrFormat(" (production %.1f us)", us[0]) : std::string(), ", ", tiles.size(),
        " candidates"));
    TP_CUDA_CHECK(cudaStreamSynchronize(t.stream));  // before the buffers go
  }
  return absl::OkStatus();
}

}  // namespace

bool WideGemvChosen(const WideGemvChoices& c, int64_t m, int64_t n, int64_t k) {
  if (m > kWideGemvMaxRows) return false;
  const auto it = c.find({n, k});
  return it != c.end() && ChosenAtOrAbove(it->second, m);
}

PrefillKey PrefillKeyOf(const cpu::PagedAttentionParams& p) {
  return {p.head_dim, p.num_q_heads, p.num_kv_heads, p.sliding_window, p.softcap > 0};
}

absl::StatusOr<TuneReport> TuneKernelsOnDevice(const KernelUses& uses, const TuneTarget& t) {
  const auto t0 = std::chrono::steady_clock::now();
  t.gemv->clear();
  t.wide_gemv->clear();
  t.gemm->ClearChoices();
  t.prefill->clear();
  TuneReport report;
  TP_RETURN_IF_ERROR(TuneLinear(uses.linear, t, report));
  TP_RETURN_IF_ERROR(TuneAttention(uses.attention, t, report));
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace tpserve

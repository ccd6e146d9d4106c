// The sampling rule of kernels/row_sampling.h on the CPU. Per row: one pass for greedy;
// otherwise an exp pass, nth_element for top-k, and a sort of the surviving candidates for
// top-p. Tested by tests/cpu_sampling_test.cc against tests/sampling_reference.h.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"

namespace tpserve::cpu {
namespace {

// The first index of the maximum; NaN counts as the largest (as torch.argmax).
int32_t FirstArgmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (std::isnan(x[best])) break;
    if (std::isnan(x[i]) || x[i] > x[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

int32_t SampleRow(const float* l, int64_t V, const RowSampling& p, std::vector<float>& s, std::vector<double>& w,
                  std::vector<int32_t>& cand) {
  if (!(p.temperature >= 1e-5f)) return FirstArgmax(l, V);
  s.resize(V);
  w.resize(V);
  float m = -INFINITY;
  for (int64_t i = 0; i < V; ++i) {
    s[i] = l[i] / p.temperature;
    m = std::max(m, s[i]);
  }
  if (!std::isfinite(m)) return FirstArgmax(l, V);  // no finite logit: nothing to weigh
  for (int64_t i = 0; i < V; ++i) w[i] = std::exp(static_cast<double>(s[i]) - m);
  float thr = -INFINITY;
  if (p.top_k > 0 && p.top_k < V) {
    std::vector<float> c(s.begin(), s.end());
    std::nth_element(c.begin(), c.begin() + (p.top_k - 1), c.end(), std::greater<float>());
    thr = c[p.top_k - 1];
  }
  if (p.top_p < 1.0f) {
    cand.clear();
    double kept = 0;
    for (int64_t i = 0; i < V; ++i) {
      if (s[i] >= thr) {
        cand.push_back(static_cast<int32_t>(i));
        kept += w[i];
      }
    }
    std::sort(cand.begin(), cand.end(), [&](int32_t a, int32_t b) { return s[a] > s[b]; });
    const double need = static_cast<double>(p.top_p) * kept;
    double cum = 0;
    for (int32_t i : cand) {
      cum += w[i];
      if (cum >= need) {
        thr = std::max(thr, s[i]);
        break;
      }
    }
  }
  if (p.min_p > 0.0f) thr = std::max(thr, m + std::log(p.min_p));
  double total = 0;
  for (int64_t i = 0; i < V; ++i) total += s[i] >= thr ? w[i] : 0.0;
  const double target = static_cast<double>(SampleUniform(p.seed, p.step)) * total;
  double cum = 0;
  int32_t last = -1;
  for (int64_t i = 0; i < V; ++i) {
    if (!(s[i] >= thr)) continue;
    last = static_cast<int32_t>(i);
    cum += w[i];
    if (cum > target) return last;
  }
  return last >= 0 ? last : FirstArgmax(l, V);
}

}  // namespace

void SampleRows(float* logits, int64_t rows, int64_t vocab, const RowSampling* params, const int32_t* offsets,
                const int32_t* token_ids, const int32_t* counts, int32_t* out) {
  std::vector<float> s;
  std::vector<double> w;
  std::vector<int32_t> cand;
  for (int64_t r = 0; r < rows; ++r) {
    float* l = logits + r * vocab;
    for (int32_t e = offsets[r]; e < offsets[r + 1]; ++e) {
      const int32_t id = token_ids[e];
      if (id >= 0 && id < vocab) l[id] = PenalizedLogit(l[id], params[r], counts[e]);
    }
    out[r] = SampleRow(l, vocab, params[r], s, w, cand);
  }
}

}  // namespace tpserve::cpu

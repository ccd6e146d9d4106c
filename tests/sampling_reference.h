// The plain reference of the sampling rule in kernels/row_sampling.h: written straight
// from the rule's text, sorting where the rule speaks of order and summing in doubles.
// Slow (a full sort per row); for tests only. Used by tests/cuda_sampling_test.cc and
// tests/cpu_sampling_test.cc.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/row_sampling.h"

namespace tpserve::testing {

struct PenaltyEntry {
  int32_t token, count;
};

// Rule 0: biases added, then every token outside `allowed` (when given) set to -inf.
inline void ReferenceEdits(std::vector<float>& l, const std::vector<std::pair<int32_t, float>>& biases,
                           const std::vector<bool>* allowed) {
  for (const auto& [token, bias] : biases) l[token] += bias;
  if (allowed == nullptr) return;
  for (size_t t = 0; t < l.size(); ++t) {
    if (!(*allowed)[t]) l[t] = -INFINITY;
  }
}

inline void ReferencePenalties(std::vector<float>& l, const RowSampling& p, const std::vector<PenaltyEntry>& entries) {
  for (const PenaltyEntry& e : entries) {
    float v = l[e.token];
    if (e.count == kMaskedCount) {
      l[e.token] = -INFINITY;
      continue;
    }
    if (p.repetition_penalty != 1.0f) v = v > 0.0f ? v / p.repetition_penalty : v * p.repetition_penalty;
    v -= p.presence_penalty * (e.count > 0 ? 1.0f : 0.0f) + p.frequency_penalty * static_cast<float>(e.count);
    l[e.token] = v;
  }
}

inline int32_t ReferenceArgmax(const std::vector<float>& l) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(l.size()); ++i) {
    const bool nb = std::isnan(l[best]), ni = std::isnan(l[i]);
    if (nb) break;
    if (ni || l[i] > l[best]) best = i;
  }
  return best;
}

struct ReferenceDraw {
  int32_t token = -1;
  bool ambiguous = false;  // float rounding could legitimately pick another token
};

inline ReferenceDraw ReferenceSample(const std::vector<float>& l, const RowSampling& p) {
  ReferenceDraw r;
  const int64_t V = static_cast<int64_t>(l.size());
  if (!(p.temperature >= 1e-5f)) {
    r.token = ReferenceArgmax(l);
    return r;
  }
  std::vector<float> s(V);
  for (int64_t i = 0; i < V; ++i) s[i] = l[i] / p.temperature;
  const float m = *std::max_element(s.begin(), s.end());
  std::vector<double> w(V);
  for (int64_t i = 0; i < V; ++i) w[i] = std::exp(static_cast<double>(s[i]) - m);
  std::vector<int64_t> order(V);
  for (int64_t i = 0; i < V; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return s[a] > s[b]; });
  float thr = -INFINITY;
  if (p.top_k > 0 && p.top_k < V) thr = s[order[p.top_k - 1]];
  if (p.top_p < 1.0f) {
    double kept = 0;
    for (int64_t i = 0; i < V; ++i) kept += s[i] >= thr ? w[i] : 0.0;
    const double need = static_cast<double>(p.top_p) * kept;
    double cum = 0;
    for (int64_t j = 0; j < V; ++j) {
      const int64_t i = order[j];
      if (s[i] < thr) break;
      cum += w[i];
      if (cum >= need) {
        if (std::abs(cum - need) < 1e-4 * kept || std::abs(cum - w[i] - need) < 1e-4 * kept) r.ambiguous = true;
        thr = std::max(thr, s[i]);
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    const float t = m + std::log(p.min_p);
    for (float v : s) {
      if (std::abs(v - t) < 1e-5f * std::max(1.0f, std::abs(t))) r.ambiguous = true;
    }
    thr = std::max(thr, t);
  }
  double total = 0;
  for (int64_t i = 0; i < V; ++i) total += s[i] >= thr ? w[i] : 0.0;
  const double target = static_cast<double>(SampleUniform(p.seed, p.step)) * total;
  double cum = 0;
  for (int64_t i = 0; i < V; ++i) {
    if (s[i] < thr) continue;
    r.token = static_cast<int32_t>(i);
    const double before = cum;
    cum += w[i];
    if (cum > target) {
      if (std::abs(cum - target) < 1e-4 * total || std::abs(before - target) < 1e-4 * total) r.ambiguous = true;
      break;
    }
  }
  return r;
}

}  // namespace tpserve::testing

// The quality benchmark's per-token scores and their statistics (quality_metrics.h).
#include "bench/quality_metrics.h"

#include <algorithm>
#include <cmath>

namespace tpserve::bench {

std::vector<double> LogSoftmax(absl::Span<const float> logits) {
  std::vector<double> out(logits.size());
  if (logits.empty()) return out;
  double max = logits[0];
  for (float x : logits) max = std::max<double>(max, x);
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max);
  const double log_z = max + std::log(sum);
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - log_z;
  return out;
}

int64_t ArgMax(absl::Span<const float> logits) {
  return std::max_element(logits.begin(), logits.end()) - logits.begin();
}

TokenScore ScoreToken(absl::Span<const float> ref_logits, absl::Span<const float> cand_logits, int32_t target) {
  const std::vector<double> ref = LogSoftmax(ref_logits);
  const std::vector<double> cand = LogSoftmax(cand_logits);
  TokenScore s;
  s.ref_nll = -ref[target];
  s.cand_nll = -cand[target];
  // Terms where p_ref underflows to 0 add 0 (the limit of p log p), whatever log p_cand is.
  for (size_t v = 0; v < ref.size(); ++v) {
    const double p = std::exp(ref[v]);
    if (p > 0) s.kl += p * (ref[v] - cand[v]);
  }
  s.same_top1 = ArgMax(ref_logits) == ArgMax(cand_logits);
  return s;
}

double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double h = std::clamp(q, 0.0, 1.0) * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (h - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

namespace {

struct MeanSe {
  double mean = 0, se = 0;
};

MeanSe MeanAndSe(const std::vector<double>& v) {
  MeanSe r;
  if (v.empty()) return r;
  const double n = static_cast<double>(v.size());
  for (double x : v) r.mean += x;
  r.mean /= n;
  if (v.size() < 2) return r;
  double ss = 0;
  for (double x : v) ss += (x - r.mean) * (x - r.mean);
  r.se = std::sqrt(ss / (n - 1)) / std::sqrt(n);
  return r;
}

}  // namespace

QualityStats Summarize(absl::Span<const TokenScore> scores) {
  QualityStats s;
  s.tokens = static_cast<int64_t>(scores.size());
  if (scores.empty()) return s;
  std::vector<double> ref_nll, cand_nll, diff, kl;
  int64_t same = 0;
  for (const TokenScore& t : scores) {
    ref_nll.push_back(t.ref_nll);
    cand_nll.push_back(t.cand_nll);
    diff.push_back(t.cand_nll - t.ref_nll);
    kl.push_back(t.kl);
    same += t.same_top1 ? 1 : 0;
  }
  const MeanSe ref = MeanAndSe(ref_nll), cand = MeanAndSe(cand_nll), d = MeanAndSe(diff), k = MeanAndSe(kl);
  s.ref_ppl = std::exp(ref.mean);
  s.ref_ppl_se = s.ref_ppl * ref.se;
  s.cand_ppl = std::exp(cand.mean);
  s.cand_ppl_se = s.cand_ppl * cand.se;
  s.ln_ppl_ratio = d.mean;
  s.ln_ppl_ratio_se = d.se;
  s.kl_mean = k.mean;
  s.kl_mean_se = k.se;
  s.kl_median = Quantile(kl, 0.5);
  s.kl_p90 = Quantile(kl, 0.9);
  s.kl_p99 = Quantile(kl, 0.99);
  s.kl_p999 = Quantile(kl, 0.999);
  s.kl_max = *std::max_element(kl.begin(), kl.end());
  const double n = static_cast<double>(scores.size());
  s.top1_agreement = static_cast<double>(same) / n;
  if (scores.size() >= 2) s.top1_agreement_se = std::sqrt(s.top1_agreement * (1 - s.top1_agreement) / n);
  return s;
}

}  // namespace tpserve::bench

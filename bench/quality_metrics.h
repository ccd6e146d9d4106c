// The scoring math of the quantization quality benchmark (bench/quality_bench.cc): per
// token, the log-softmax of a reference's and a candidate's logits in double precision, the
// true next token's NLL under each, KL(ref || cand) and whether their argmaxes agree; over
// tokens, perplexities, KL statistics and top-1 agreement. Pure; tested on hand-computed
// values by tests/quality_metrics_test.cc.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace tpserve::bench {

// log softmax(logits), in double: x - (max + log sum exp(x - max)).
std::vector<double> LogSoftmax(absl::Span<const float> logits);

// The index of the largest logit; the first one on ties.
int64_t ArgMax(absl::Span<const float> logits);

// One scored token.
struct TokenScore {
  double ref_nll = 0;   // -log p_ref(target)
  double cand_nll = 0;  // -log p_cand(target)
  // KL(ref || cand) = sum_v p_ref(v) (log p_ref(v) - log p_cand(v)), in nats; exactly 0
  // for identical logits, and may come out a few ulps below 0 for nearly identical ones.
  double kl = 0;
  bool same_top1 = false;  // argmax(ref) == argmax(cand)
};

// Scores one position: the two models' logits over the same vocabulary (equal sizes) and
// the token that truly came next.
TokenScore ScoreToken(absl::Span<const float> ref_logits, absl::Span<const float> cand_logits, int32_t target);

// The q-quantile (q in [0, 1]) of `values` by linear interpolation between the order
// statistics (numpy's default): sorted[h] + (h - floor h) (sorted[h + 1] - sorted[h]) at
// h = q (n - 1). 0 for none.
double Quantile(std::vector<double> values, double q);

// Over all scored tokens. Standard errors are the sample standard deviation (n - 1) over
// sqrt(n), the agreement's sqrt(p (1 - p) / n); 0 where n < 2.
struct QualityStats {
  int64_t tokens = 0;
  double ref_ppl = 0, ref_ppl_se = 0;    // exp(mean NLL); its SE by the delta method (ppl x SE of the mean NLL)
  double cand_ppl = 0, cand_ppl_se = 0;
  double ln_ppl_ratio = 0;               // ln(PPL(cand) / PPL(ref)) = mean(cand NLL - ref NLL)
  double ln_ppl_ratio_se = 0;            // of the per-token differences
  double kl_mean = 0, kl_mean_se = 0;
  double kl_median = 0, kl_p90 = 0, kl_p99 = 0, kl_p999 = 0, kl_max = 0;
  double top1_agreement = 0;             // fraction of tokens whose argmaxes agree, [0, 1]
  double top1_agreement_se = 0;
};

QualityStats Summarize(absl::Span<const TokenScore> scores);

}  // namespace tpserve::bench

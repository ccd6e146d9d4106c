// bench/quality_metrics.h on distributions small enough to score by hand: log-softmax,
// NLL, KL(ref || cand), top-1 agreement, quantiles and the summary's statistics.
#include "bench/quality_metrics.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve::bench {
namespace {

const double kLn2 = std::log(2.0);

TEST(QualityMetricsTest, LogSoftmaxOfKnownDistribution) {
  // exp of [ln 2, 0, 0] normalized: [1/2, 1/4, 1/4].
  const std::vector<float> logits = {static_cast<float>(kLn2), 0.0f, 0.0f};
  const std::vector<double> lp = LogSoftmax(logits);
  ASSERT_EQ(lp.size(), 3u);
  EXPECT_NEAR(lp[0], std::log(0.5), 1e-7);
  EXPECT_NEAR(lp[1], std::log(0.25), 1e-7);
  EXPECT_NEAR(lp[2], std::log(0.25), 1e-7);
}

TEST(QualityMetricsTest, LogSoftmaxIsShiftInvariantAndStableForLargeLogits) {
  const std::vector<float> a = {1.0f, 2.0f, 3.0f}, b = {1001.0f, 1002.0f, 1003.0f};
  const std::vector<double> la = LogSoftmax(a), lb = LogSoftmax(b);
  // softmax([1, 2, 3]) = [e, e^2, e^3] / (e + e^2 + e^3); log of the last is -log(1 + e^-1 + e^-2).
  EXPECT_NEAR(la[2], -std::log(1 + std::exp(-1.0) + std::exp(-2.0)), 1e-12);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(la[i], lb[i], 1e-12);
}

TEST(QualityMetricsTest, ScoresTwoThreeTokenDistributionsByHand) {
  // ref p = [1/2, 1/4, 1/4], cand q = [1/4, 1/2, 1/4].
  // KL(p || q) = 1/2 ln(2) + 1/4 ln(1/2) + 1/4 ln(1) = ln(2) / 4.
  const std::vector<float> ref = {static_cast<float>(kLn2), 0.0f, 0.0f};
  const std::vector<float> cand = {0.0f, static_cast<float>(kLn2), 0.0f};
  const TokenScore s = ScoreToken(ref, cand, /*target=*/0);
  EXPECT_NEAR(s.kl, kLn2 / 4, 1e-7);
  EXPECT_NEAR(s.ref_nll, kLn2, 1e-7);       // -ln(1/2)
  EXPECT_NEAR(s.cand_nll, 2 * kLn2, 1e-7);  // -ln(1/4)
  EXPECT_FALSE(s.same_top1);                // argmax 0 against 1
  // The other way round: KL(q || p) = 1/4 ln(1/2) + 1/2 ln(2) = ln(2) / 4 too (symmetric
  // here by construction); target 2 has p = q = 1/4.
  const TokenScore t = ScoreToken(cand, ref, /*target=*/2);
  EXPECT_NEAR(t.kl, kLn2 / 4, 1e-7);
  EXPECT_NEAR(t.ref_nll, 2 * kLn2, 1e-7);
  EXPECT_NEAR(t.cand_nll, 2 * kLn2, 1e-7);
}

TEST(QualityMetricsTest, AsymmetricKlByHand) {
  // p = [0.8, 0.2, 0], written as logits ln 0.8, ln 0.2 and a very negative one (p ~ 0);
  // q = [0.5, 0.25, 0.25]. KL(p || q) = 0.8 ln(0.8 / 0.5) + 0.2 ln(0.2 / 0.25) (the third
  // term's p log(p / q) -> 0) = 0.8 ln 1.6 + 0.2 ln 0.8 = 0.331369...
  const std::vector<float> ref = {std::log(0.8f), std::log(0.2f), -1e4f};
  const std::vector<float> cand = {std::log(0.5f), std::log(0.25f), std::log(0.25f)};
  const TokenScore s = ScoreToken(ref, cand, /*target=*/1);
  EXPECT_NEAR(s.kl, 0.8 * std::log(1.6) + 0.2 * std::log(0.8), 1e-6);
  EXPECT_NEAR(s.ref_nll, -std::log(0.2), 1e-6);
  EXPECT_NEAR(s.cand_nll, -std::log(0.25), 1e-6);
  EXPECT_TRUE(s.same_top1);
}

TEST(QualityMetricsTest, IdenticalLogitsScoreExactlyZero) {
  const std::vector<float> logits = {0.3f, -1.7f, 2.25f, 0.0f, 5.5f};
  const TokenScore s = ScoreToken(logits, logits, 3);
  EXPECT_EQ(s.kl, 0.0);
  EXPECT_EQ(s.ref_nll, s.cand_nll);
  EXPECT_TRUE(s.same_top1);
}

TEST(QualityMetricsTest, ArgMaxTakesTheFirstOfTies) {
  const std::vector<float> v = {1.0f, 3.0f, 3.0f};
  EXPECT_EQ(ArgMax(v), 1);
}

TEST(QualityMetricsTest, QuantileInterpolatesLinearly) {
  const std::vector<double> v = {4, 0, 3, 1, 2};  // sorted: 0 1 2 3 4
  EXPECT_DOUBLE_EQ(Quantile(v, 0.5), 2);
  EXPECT_DOUBLE_EQ(Quantile(v, 0.99), 3.96);  // h = 0.99 x 4 = 3.96
  EXPECT_DOUBLE_EQ(Quantile(v, 0.0), 0);
  EXPECT_DOUBLE_EQ(Quantile(v, 1.0), 4);
  EXPECT_DOUBLE_EQ(Quantile({7}, 0.99), 7);
  EXPECT_DOUBLE_EQ(Quantile({}, 0.5), 0);
}

TEST(QualityMetricsTest, SummarizesByHand) {
  // KL 0..4: mean 2, sample sd sqrt(10 / 4), SE sqrt(2.5 / 5) = sqrt(0.5).
  // NLL ref ln 2 each (PPL 2), cand ln 4 each (PPL 4): ln ratio ln 2, no spread.
  // Agreement 3 of 5: 0.6, SE sqrt(0.6 x 0.4 / 5).
  std::vector<TokenScore> scores;
  for (int i = 0; i < 5; ++i) scores.push_back({kLn2, 2 * kLn2, static_cast<double>(i), i < 3});
  const QualityStats s = Summarize(scores);
  EXPECT_EQ(s.tokens, 5);
  EXPECT_NEAR(s.ref_ppl, 2, 1e-12);
  EXPECT_NEAR(s.cand_ppl, 4, 1e-12);
  EXPECT_NEAR(s.ref_ppl_se, 0, 1e-12);
  EXPECT_NEAR(s.ln_ppl_ratio, kLn2, 1e-12);
  EXPECT_NEAR(s.ln_ppl_ratio_se, 0, 1e-12);
  EXPECT_DOUBLE_EQ(s.kl_mean, 2);
  EXPECT_NEAR(s.kl_mean_se, std::sqrt(0.5), 1e-12);
  EXPECT_DOUBLE_EQ(s.kl_median, 2);
  EXPECT_DOUBLE_EQ(s.kl_p90, 3.6);
  EXPECT_DOUBLE_EQ(s.kl_p99, 3.96);
  EXPECT_DOUBLE_EQ(s.kl_max, 4);
  EXPECT_DOUBLE_EQ(s.top1_agreement, 0.6);
  EXPECT_NEAR(s.top1_agreement_se, std::sqrt(0.6 * 0.4 / 5), 1e-12);
}

TEST(QualityMetricsTest, PerplexityOfMixedNlls) {
  // NLLs ln 2 and ln 8: mean 2 ln 2, PPL 4; sd of {ln 2, ln 8} is sqrt(2) ln 2, SE ln 2.
  const QualityStats s = Summarize(std::vector<TokenScore>{{kLn2, kLn2, 0, true}, {3 * kLn2, 3 * kLn2, 0, true}});
  EXPECT_NEAR(s.ref_ppl, 4, 1e-12);
  EXPECT_NEAR(s.ref_ppl_se, 4 * kLn2, 1e-12);
  EXPECT_DOUBLE_EQ(s.ln_ppl_ratio, 0);
  EXPECT_DOUBLE_EQ(s.top1_agreement, 1);
  EXPECT_DOUBLE_EQ(s.top1_agreement_se, 0);
}

TEST(QualityMetricsTest, EmptyIsZeros) {
  const QualityStats s = Summarize({});
  EXPECT_EQ(s.tokens, 0);
  EXPECT_EQ(s.kl_mean, 0);
}

}  // namespace
}  // namespace tpserve::bench

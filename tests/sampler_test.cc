// Tests for coordinator/sampler.h: greedy = argmax, sampled frequencies against exact
// (truncated) softmax distributions by chi-square over fixed seeds, penalties against
// hand-computed logits, seeded reproducibility, logprobs and validation messages.
#include "coordinator/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> RandomLogits(int64_t vocab, uint64_t seed, float scale = 2.0f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(vocab);
  for (float& x : logits) x = normal(gen);
  return logits;
}

// The distribution the sampler should draw from, computed the plain way: double
// precision, full sorts. Penalties are not applied here.
std::vector<double> ReferenceDistribution(const std::vector<float>& logits, const SamplingParams& p) {
  const int64_t n = static_cast<int64_t>(logits.size());
  std::vector<bool> keep(n, true);
  if (p.top_k > 0 && p.top_k < n) {
    std::vector<float> sorted = logits;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    const float kth = sorted[p.top_k - 1];
    for (int64_t i = 0; i < n; ++i) keep[i] = logits[i] >= kth;
  }
  const double max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> prob(n, 0.0);
  auto normalize = [&] {
    double z = 0;
    for (int64_t i = 0; i < n; ++i) z += keep[i] ? prob[i] : 0.0;
    for (int64_t i = 0; i < n; ++i) prob[i] = keep[i] ? prob[i] / z : 0.0;
  };
  for (int64_t i = 0; i < n; ++i) prob[i] = std::exp((logits[i] - max) / p.temperature);
  normalize();
  if (p.top_p < 1.0f) {
    // Keep a token when the tokens strictly more likely than it weigh less than top_p.
    std::vector<int64_t> order(n);
    for (int64_t i = 0; i < n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return prob[a] > prob[b]; });
    double heavier = 0;
    for (int64_t g = 0; g < n;) {  // groups of equal probability
      int64_t end = g;
      double group = 0;
      for (; end < n && prob[order[end]] == prob[order[g]]; ++end) group += prob[order[end]];
      for (int64_t i = g; i < end; ++i) keep[order[i]] = keep[order[i]] && heavier < p.top_p;
      heavier += group;
      g = end;
    }
    normalize();
  }
  if (p.min_p > 0.0f) {
    const double top = *std::max_element(prob.begin(), prob.end());
    for (int64_t i = 0; i < n; ++i) keep[i] = keep[i] && prob[i] >= p.min_p * top;
    normalize();
  }
  return prob;
}

// Upper 1e-4 tail of the chi-square distribution with `df` degrees of freedom
// (Wilson-Hilferty).
double ChiSquareCritical(int df) {
  const double z = 3.719;
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3);
}

// Draws `draws` tokens (steps 0.. of one seeded request) and checks that no token with
// probability 0 appears and that the counts fit `expected` (a chi-square test over
// `buckets` groups of ids, merging groups expected below 5 draws).
void ExpectSamplesFollow(Sampler& sampler, const std::vector<float>& logits, const SamplingParams& params,
                         const std::vector<double>& expected, int draws, int buckets, uint64_t seed) {
  const int64_t n = static_cast<int64_t>(logits.size());
  const std::vector<int32_t> history(draws, 0);  // only its length (the step) matters
  const SamplingRng rng(seed);
  std::vector<int64_t> counts(n, 0);
  for (int s = 0; s < draws; ++s) {
    auto r = sampler.Sample(logits, params, {}, absl::MakeConstSpan(history).first(s), rng);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_GE(r->token_id, 0);
    ASSERT_LT(r->token_id, n);
    ASSERT_GT(expected[r->token_id], 0.0) << "drew excluded token " << r->token_id << " at step " << s;
    ++counts[r->token_id];
  }
  std::vector<double> bucket_expected(buckets, 0.0);
  std::vector<double> bucket_observed(buckets, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    bucket_expected[i % buckets] += expected[i] * draws;
    bucket_observed[i % buckets] += counts[i];
  }
  double chi2 = 0, small_expected = 0, small_observed = 0;
  int df = -1;
  for (int b = 0; b < buckets; ++b) {
    if (bucket_expected[b] < 5) {
      small_expected += bucket_expected[b];
      small_observed += bucket_observed[b];
      continue;
    }
    chi2 += std::pow(bucket_observed[b] - bucket_expected[b], 2) / bucket_expected[b];
    ++df;
  }
  if (small_expected > 0) {
    chi2 += std::pow(small_observed - small_expected, 2) / std::max(small_expected, 1e-9);
    ++df;
  }
  if (df < 1) return;  // one outcome: nothing to compare beyond exclusions
  EXPECT_LT(chi2, ChiSquareCritical(df)) << "df " << df;
}

TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  // Random123's tests/kat_vectors, philox4x32 10 lines: counter, key, expected.
  EXPECT_EQ(Philox4x32({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(Philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(Philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(SamplingRngTest, DrawsDependOnlyOnSeedStreamAndStep) {
  const SamplingRng a(42), b(42), other_seed(43), other_stream(42, 1);
  double sum = 0;
  for (uint64_t step = 0; step < 10000; ++step) {
    const double u = a.Uniform(step);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    ASSERT_EQ(u, b.Uniform(step));
    ASSERT_NE(u, other_seed.Uniform(step));
    ASSERT_NE(u, other_stream.Uniform(step));
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.01);
  EXPECT_NE(a.Uniform(0), a.Uniform(1));
  // Steps past 2^32 use the counter's high word.
  EXPECT_NE(a.Uniform(1), a.Uniform((uint64_t{1} << 32) + 1));
}

TEST(SamplingRngTest, ForRequestUsesTheSeedOrFreshEntropy) {
  SamplingParams params;
  params.seed = 7;
  EXPECT_EQ(SamplingRng::ForRequest(params).seed(), 7u);
  EXPECT_EQ(SamplingRng::ForRequest(params, 3).stream(), 3u);
  params.seed.reset();
  EXPECT_NE(SamplingRng::ForRequest(params).seed(), SamplingRng::ForRequest(params).seed());
}

TEST(SamplingParamsTest, DefaultsAreValid) {
  EXPECT_TRUE(SamplingParams().Validate(1000).ok());
  SamplingParams p;
  p.temperature = 0;
  p.top_k = -1;
  p.top_p = 1;
  p.min_p = 1;
  p.max_tokens = 1;
  p.min_tokens = 1;
  p.presence_penalty = -2;
  p.frequency_penalty = 2;
  p.stop_token_ids = {0, 999};
  p.logprobs = 20;
  EXPECT_TRUE(p.Validate(1000).ok()) << p.Validate(1000);
}

TEST(SamplingParamsTest, ErrorsNameTheFieldAndValue) {
  struct Case {
    std::function<void(SamplingParams&)> set;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](SamplingParams& p) { p.temperature = -1; }, "temperature must be >= 0 and finite (0 = greedy), got -1"},
      {[](SamplingParams& p) { p.temperature = NAN; }, "temperature must be >= 0"},
      {[](SamplingParams& p) { p.temperature = kInf; }, "temperature must be >= 0 and finite (0 = greedy), got inf"},
      {[](SamplingParams& p) { p.top_k = -2; }, "top_k must be -1 or 0 (off) or >= 1, got -2"},
      {[](SamplingParams& p) { p.top_p = 0; }, "top_p must be in (0, 1] (1 = off), got 0"},
      {[](SamplingParams& p) { p.top_p = 1.5; }, "top_p must be in (0, 1] (1 = off), got 1.5"},
      {[](SamplingParams& p) { p.min_p = -0.5; }, "min_p must be in [0, 1] (0 = off), got -0.5"},
      {[](SamplingParams& p) { p.repetition_penalty = 0; }, "repetition_penalty must be > 0 and finite (1 = off), got 0"},
      {[](SamplingParams& p) { p.presence_penalty = 2.5; }, "presence_penalty must be in [-2, 2], got 2.5"},
      {[](SamplingParams& p) { p.frequency_penalty = -3; }, "frequency_penalty must be in [-2, 2], got -3"},
      {[](SamplingParams& p) { p.max_tokens = 0; }, "max_tokens must be >= 1, got 0"},
      {[](SamplingParams& p) { p.min_tokens = -1; }, "min_tokens must be in [0, max_tokens = 16], got -1"},
      {[](SamplingParams& p) { p.min_tokens = 17; }, "min_tokens must be in [0, max_tokens = 16], got 17"},
      {[](SamplingParams& p) { p.stop = {"a", ""}; }, "stop[1] is an empty string"},
      {[](SamplingParams& p) { p.stop_token_ids = {5, 1000}; },
       "stop_token_ids[1] must be in [0, vocab_size = 1000), got 1000"},
      {[](SamplingParams& p) { p.stop_token_ids = {-1}; }, "stop_token_ids[0] must be in [0, vocab_size = 1000), got -1"},
      {[](SamplingParams& p) { p.logprobs = 21; }, "logprobs must be in [0, 20], got 21"},
      {[](SamplingParams& p) { p.logprobs = -1; }, "logprobs must be in [0, 20], got -1"},
  };
  for (const Case& c : cases) {
    SamplingParams p;
    c.set(p);
    const absl::Status status = p.Validate(1000);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(status.message(), HasSubstr(c.message));
  }
}

TEST(SamplerTest, GreedyIsArgmaxWithTheFirstIndexOnTies) {
  SamplingParams greedy;
  greedy.temperature = 0;
  for (int64_t vocab : {1, 7, 8, 9, 255, 1000, 262144}) {
    Sampler sampler(vocab, {});
    for (uint64_t seed = 0; seed < 20; ++seed) {
      // Few distinct values, so the maximum is usually tied.
      std::mt19937_64 gen(seed);
      std::uniform_int_distribution<int> value(-3, 3);
      std::vector<float> logits(vocab);
      for (float& x : logits) x = static_cast<float>(value(gen));
      if (seed % 3 == 0 && vocab > 1) logits[gen() % vocab] = -kInf;
      const int32_t expected = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      auto r = sampler.Sample(logits, greedy, {}, {}, SamplingRng(seed));
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->token_id, expected) << "vocab " << vocab << " seed " << seed;
    }
  }
}

TEST(SamplerTest, ExtremeTemperatures) {
  const std::vector<float> logits = {0.5f, 2.0f, -kInf, 1.0f};
  Sampler sampler(4, {});
  SamplingParams p;
  p.temperature = 1e-6f;  // below 1e-5: greedy
  for (int s = 0; s < 50; ++s) EXPECT_EQ(sampler.Sample(logits, p, {}, {}, SamplingRng(s))->token_id, 1);
  p.temperature = 1e-4f;  // a spike on the argmax
  for (int s = 0; s < 50; ++s) EXPECT_EQ(sampler.Sample(logits, p, {}, {}, SamplingRng(s))->token_id, 1);
  p.temperature = 1e30f;  // uniform over the finite logits
  ExpectSamplesFollow(sampler, logits, p, {1 / 3.0, 1 / 3.0, 0, 1 / 3.0}, 6000, 4, 3);
}

TEST(SamplerTest, TemperatureMatchesSoftmaxOfScaledLogits) {
  const std::vector<float> logits = RandomLogits(16, 1);
  Sampler sampler(16, {});
  for (float t : {0.3f, 1.0f, 2.5f}) {
    SCOPED_TRACE(t);
    SamplingParams p;
    p.temperature = t;
    ExpectSamplesFollow(sampler, logits, p, ReferenceDistribution(logits, p), 40000, 16, 11);
  }
}

TEST(SamplerTest, TopKKeepsTheKLargestAndRenormalizes) {
  const std::vector<float> logits = RandomLogits(64, 2);
  Sampler sampler(64, {});
  SamplingParams p;
  p.temperature = 1.5f;
  p.top_k = 5;
  const std::vector<double> expected = ReferenceDistribution(logits, p);
  EXPECT_EQ(std::count_if(expected.begin(), expected.end(), [](double q) { return q > 0; }), 5);
  ExpectSamplesFollow(sampler, logits, p, expected, 30000, 64, 12);
}

TEST(SamplerTest, LargeTopKPaths) {
  // k = 3000 > 2048 finds the k-th logit by nth_element; k = 6000 leaves more than 4096
  // survivors, so they are weighed by the dense pass over the row. A high temperature
  // makes the excluded tokens likely enough that a leak would show.
  const std::vector<float> logits = RandomLogits(10000, 3);
  Sampler sampler(10000, {});
  for (int32_t top_k : {3000, 6000}) {
    for (float top_p : {1.0f, 0.8f}) {
      SCOPED_TRACE(testing::Message() << top_k << " " << top_p);
      SamplingParams p;
      p.temperature = 4.0f;
      p.top_k = top_k;
      p.top_p = top_p;
      p.min_p = top_p < 1.0f ? 0.01f : 0.0f;
      ExpectSamplesFollow(sampler, logits, p, ReferenceDistribution(logits, p), 8000, 32, 13);
    }
  }
}

TEST(SamplerTest, TopKKeepsEveryTokenTiedWithTheKth) {
  const std::vector<float> logits = {1, 2, 3, 2, 2, 0};
  Sampler sampler(6, {});
  SamplingParams p;
  p.top_k = 2;
  const std::vector<double> expected = ReferenceDistribution(logits, p);
  EXPECT_GT(expected[1], 0);
  EXPECT_GT(expected[4], 0);
  EXPECT_EQ(expected[0], 0);
  ExpectSamplesFollow(sampler, logits, p, expected, 20000, 6, 14);
}

TEST(SamplerTest, TopPKeepsTheSmallestHeadWithEnoughMass) {
  // probs 0.4, 0.3, 0.2, 0.1: top_p = 0.65 keeps the first two (0.4 < 0.65 <= 0.7).
  const std::vector<float> logits = {std::log(0.2f), std::log(0.4f), std::log(0.1f), std::log(0.3f)};
  Sampler sampler(4, {});
  SamplingParams p;
  p.top_p = 0.65f;
  const std::vector<double> expected = ReferenceDistribution(logits, p);
  EXPECT_NEAR(expected[1], 0.4 / 0.7, 1e-6);
  EXPECT_NEAR(expected[3], 0.3 / 0.7, 1e-6);
  EXPECT_EQ(expected[0], 0);
  EXPECT_EQ(expected[2], 0);
  ExpectSamplesFollow(sampler, logits, p, expected, 20000, 4, 15);

  for (float top_p : {0.05f, 0.5f, 0.9f, 0.99f}) {
    SCOPED_TRACE(top_p);
    const std::vector<float> many = RandomLogits(300, 4);
    Sampler big(300, {});
    p.top_p = top_p;
    p.temperature = 1.3f;
    ExpectSamplesFollow(big, many, p, ReferenceDistribution(many, p), 20000, 50, 16);
  }
}

TEST(SamplerTest, MinPDropsTokensBelowAFractionOfTheMax) {
  const std::vector<float> logits = RandomLogits(200, 5);
  Sampler sampler(200, {});
  for (float min_p : {0.05f, 0.3f, 1.0f}) {
    SCOPED_TRACE(min_p);
    SamplingParams p;
    p.temperature = 0.8f;
    p.min_p = min_p;
    ExpectSamplesFollow(sampler, logits, p, ReferenceDistribution(logits, p), 20000, 40, 17);
  }
}

TEST(SamplerTest, FiltersComposeInOrder) {
  const std::vector<float> logits = RandomLogits(500, 6, 1.5f);
  Sampler sampler(500, {});
  struct Config {
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
  };
  for (const Config& c : std::vector<Config>{{0.7f, 40, 0.8f, 0.02f},
                                             {1.2f, 100, 0.5f, 0.0f},
                                             {2.0f, 0, 0.95f, 0.1f},
                                             {1.0f, 3000, 0.9f, 0.0f},
                                             {0.5f, 10, 1.0f, 0.2f}}) {
    SCOPED_TRACE(testing::Message() << c.temperature << " " << c.top_k << " " << c.top_p << " " << c.min_p);
    SamplingParams p;
    p.temperature = c.temperature;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    ExpectSamplesFollow(sampler, logits, p, ReferenceDistribution(logits, p), 20000, 40, 18);
  }
}

TEST(SamplerTest, FullVocabularyDistributions) {
  // 262144 tokens: noise plus a few strong tokens, bucketed as each strong token and the
  // rest, through the block draw (no top-p / min-p) and the candidate draw.
  constexpr int64_t kVocab = 262144;
  std::vector<float> logits = RandomLogits(kVocab, 7, 1.0f);
  const std::vector<int32_t> strong = {5, 70000, 131071, 131072, 200003, 262143};
  for (size_t i = 0; i < strong.size(); ++i) logits[strong[i]] = 9.0f + 0.5f * i;
  Sampler sampler(kVocab, {});
  for (float top_p : {1.0f, 0.9f}) {
    SCOPED_TRACE(top_p);
    SamplingParams p;
    p.temperature = 0.9f;
    p.top_p = top_p;
    const std::vector<double> expected = ReferenceDistribution(logits, p);
    std::vector<double> bucket_expected(strong.size() + 1, 0.0);
    std::vector<double> bucket_observed(strong.size() + 1, 0.0);
    std::map<int32_t, int> bucket_of;
    for (size_t i = 0; i < strong.size(); ++i) bucket_of[strong[i]] = static_cast<int>(i);
    auto bucket = [&](int32_t id) { return bucket_of.count(id) ? bucket_of[id] : static_cast<int>(strong.size()); };
    constexpr int kDraws = 2000;
    for (int64_t i = 0; i < kVocab; ++i) bucket_expected[bucket(i)] += expected[i] * kDraws;
    const std::vector<int32_t> history(kDraws, 0);
    for (int s = 0; s < kDraws; ++s) {
      auto r = sampler.Sample(logits, p, {}, absl::MakeConstSpan(history).first(s), SamplingRng(21));
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_GT(expected[r->token_id], 0.0) << r->token_id;
      bucket_observed[bucket(r->token_id)] += 1;
    }
    double chi2 = 0;
    int df = -1;
    for (size_t b = 0; b < bucket_expected.size(); ++b) {
      if (bucket_expected[b] < 5) {
        EXPECT_LE(bucket_observed[b], 10);
        continue;
      }
      chi2 += std::pow(bucket_observed[b] - bucket_expected[b], 2) / bucket_expected[b];
      ++df;
    }
    EXPECT_LT(chi2, ChiSquareCritical(df));
  }
}

// Penalized logits read back through logprobs, which are taken after the penalties.
std::vector<double> PenalizedLogits(Sampler& sampler, const std::vector<float>& logits, const SamplingParams& p,
                                    const std::vector<int32_t>& prompt, const std::vector<int32_t>& output) {
  SamplingParams with_logprobs = p;
  with_logprobs.logprobs = static_cast<int32_t>(logits.size());
  auto r = sampler.Sample(logits, with_logprobs, prompt, output, SamplingRng(0));
  EXPECT_TRUE(r.ok()) << r.status();
  std::vector<double> out(logits.size());
  for (const auto& [id, logprob] : r->top_logprobs) out[id] = logprob;
  // log-softmax is shift invariant: anchor on a token no penalty touches (the last).
  const double shift = logits.back() - out.back();
  for (double& x : out) x += shift;
  return out;
}

TEST(SamplerTest, PenaltiesMatchHandComputedLogits) {
  const std::vector<float> logits = {2, -1, 0.5, 3, -2, 1};
  const std::vector<int32_t> prompt = {0, 1, 1};
  const std::vector<int32_t> output = {3, 3, 4};
  Sampler sampler(6, {});

  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2;
  p.presence_penalty = 0.5;
  p.frequency_penalty = 0.25;
  // 0: prompt, positive: 2 / 2.      1: prompt, negative: -1 * 2.    2: unseen.
  // 3: output twice: 3 / 2 - 0.25 * 2 - 0.5.   4: output once: -2 * 2 - 0.25 - 0.5.
  const std::vector<double> expected = {1, -2, 0.5, 0.5, -4.75, 1};
  const std::vector<double> got = PenalizedLogits(sampler, logits, p, prompt, output);
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-5) << i;

  // Presence and frequency look at the output only; a negative presence favours repeats.
  p.repetition_penalty = 1;
  p.presence_penalty = -1;
  p.frequency_penalty = 0;
  const std::vector<double> got2 = PenalizedLogits(sampler, logits, p, prompt, output);
  const std::vector<double> expected2 = {2, -1, 0.5, 4, -1, 1};
  for (size_t i = 0; i < expected2.size(); ++i) EXPECT_NEAR(got2[i], expected2[i], 1e-5) << i;

  // And they change the choice: token 3 (argmax) loses to token 0 under a frequency penalty.
  p.presence_penalty = 0;
  p.frequency_penalty = 1;
  auto r = sampler.Sample(logits, p, prompt, output, SamplingRng(0));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->token_id, 0);
}

TEST(SamplerTest, PenaltyScratchDoesNotLeakBetweenCalls) {
  // The same request sampled alone and after another request that saw other tokens.
  const std::vector<float> logits = RandomLogits(100, 8);
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.4f;
  p.logprobs = 5;
  Sampler alone(100, {});
  Sampler shared(100, {});
  auto want = alone.Sample(logits, p, {1, 2, 3}, {4, 4, 5}, SamplingRng(0));
  ASSERT_TRUE(shared.Sample(logits, p, {6, 7, 8, 9}, {10, 10, 10, 4}, SamplingRng(0)).ok());
  auto got = shared.Sample(logits, p, {1, 2, 3}, {4, 4, 5}, SamplingRng(0));
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_EQ(got->token_id, want->token_id);
  EXPECT_EQ(got->top_logprobs, want->top_logprobs);
}

// Logprobs of a token chosen elsewhere (the workers' sampling) are what Sample reports
// when it draws that token itself: same penalties, same min_tokens mask, same top list.
TEST(SamplerTest, LogprobsOfAGivenTokenMatchSample) {
  const std::vector<float> logits = RandomLogits(1000, 12);
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 30;
  p.repetition_penalty = 1.2f;
  p.presence_penalty = 0.3f;
  p.min_tokens = 5;
  p.logprobs = 3;
  Sampler sampler(1000, {7});
  const std::vector<int32_t> prompt = {1, 2, 3}, output = {4, 4, 5};
  for (uint64_t seed = 0; seed < 5; ++seed) {
    auto want = sampler.Sample(logits, p, prompt, output, SamplingRng(seed));
    ASSERT_TRUE(want.ok());
    auto got = sampler.Logprobs(logits, p, prompt, output, want->token_id);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->token_id, want->token_id);
    EXPECT_EQ(got->logprob, want->logprob);
    EXPECT_EQ(got->top_logprobs, want->top_logprobs);
  }
  // EOS (7) is masked below min_tokens: -inf, whoever picked it.
  auto masked = sampler.Logprobs(logits, p, prompt, output, 7);
  ASSERT_TRUE(masked.ok());
  EXPECT_EQ(masked->logprob, -std::numeric_limits<float>::infinity());
  EXPECT_FALSE(sampler.Logprobs(logits, p, prompt, output, 1000).ok());  // not a token
}

TEST(SamplerTest, MinTokensMasksEosAndStopIdsUntilReached) {
  std::vector<float> logits(10, 0.0f);
  logits[9] = 10;  // EOS
  logits[8] = 9;   // a stop token id
  logits[2] = 1;
  Sampler sampler(10, {9});
  SamplingParams p;
  p.temperature = 0;
  p.min_tokens = 2;
  p.stop_token_ids = {8};
  std::vector<int32_t> output;
  for (int step = 0; step < 3; ++step) {
    auto r = sampler.Sample(logits, p, {}, output, SamplingRng(0));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->token_id, step < 2 ? 2 : 9) << step;
    output.push_back(r->token_id);
  }
  // ignore_eos leaves EOS alone (it does not stop the request anyway).
  p.ignore_eos = true;
  auto r = sampler.Sample(logits, p, {}, {}, SamplingRng(0));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->token_id, 9);
  // Sampled too: neither masked id ever appears.
  p.ignore_eos = false;
  p.temperature = 1;
  for (int s = 0; s < 200; ++s) {
    auto sampled = sampler.Sample(logits, p, {}, {}, SamplingRng(s));
    ASSERT_TRUE(sampled.ok());
    EXPECT_NE(sampled->token_id, 9);
    EXPECT_NE(sampled->token_id, 8);
  }
}

// Generates `steps` tokens for one request; `interleave` samples an unrelated request
// on the same Sampler before each step, as a batch would.
std::vector<int32_t> Generate(Sampler& sampler, const SamplingParams& p, uint64_t seed, int steps, bool interleave) {
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  std::vector<int32_t> output;
  const SamplingRng rng(seed);
  const SamplingRng other_rng(seed + 1000);
  SamplingParams other = p;
  other.top_k = 7;
  for (int s = 0; s < steps; ++s) {
    const std::vector<float> logits = RandomLogits(sampler.vocab_size(), 100 + s, 1.0f);
    if (interleave) {
      EXPECT_TRUE(sampler.Sample(RandomLogits(sampler.vocab_size(), 5000 + s), other, {9}, output, other_rng).ok());
    }
    auto r = sampler.Sample(logits, p, prompt, output, rng);
    EXPECT_TRUE(r.ok()) << r.status();
    output.push_back(r->token_id);
  }
  return output;
}

TEST(SamplerTest, SameSeedSameTokensRegardlessOfBatching) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_p = 0.95f;
  p.repetition_penalty = 1.1f;
  p.presence_penalty = 0.3f;
  Sampler a(1000, {}), b(1000, {});
  const std::vector<int32_t> first = Generate(a, p, 42, 64, false);
  EXPECT_EQ(first, Generate(b, p, 42, 64, true));
  EXPECT_EQ(first, Generate(a, p, 42, 64, false));
  EXPECT_NE(first, Generate(a, p, 43, 64, false));
}

TEST(SamplerTest, LogprobsAreALogSoftmaxBeforeTemperatureAndFilters) {
  const std::vector<float> logits = RandomLogits(20, 9);
  double max = *std::max_element(logits.begin(), logits.end()), z = 0;
  for (float x : logits) z += std::exp(x - max);
  const double log_z = max + std::log(z);
  Sampler sampler(20, {});
  for (float t : {0.0f, 0.5f, 1.0f, 3.0f}) {
    SamplingParams p;
    p.temperature = t;
    p.top_k = t == 0.5f ? 3 : 0;
    p.logprobs = 20;
    auto r = sampler.Sample(logits, p, {}, {}, SamplingRng(1));
    ASSERT_TRUE(r.ok());
    EXPECT_NEAR(r->logprob, logits[r->token_id] - log_z, 1e-5);
    ASSERT_EQ(r->top_logprobs.size(), 20u);
    double total = 0;
    for (size_t i = 0; i < r->top_logprobs.size(); ++i) {
      const auto [id, logprob] = r->top_logprobs[i];
      EXPECT_NEAR(logprob, logits[id] - log_z, 1e-5);
      if (i > 0) {
        EXPECT_GE(r->top_logprobs[i - 1].second, logprob);
      }
      if (id == r->token_id) {
        EXPECT_EQ(logprob, r->logprob);
      }
      total += std::exp(logprob);
    }
    EXPECT_NEAR(total, 1.0, 1e-5);
  }
}

TEST(SamplerTest, TopLogprobsOrderTiesByIdAndMatchAFullSort) {
  Sampler small(6, {});
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 4;
  auto r = small.Sample(std::vector<float>{1, 3, 2, 3, 2, 2}, p, {}, {}, SamplingRng(0));
  ASSERT_TRUE(r.ok());
  std::vector<int32_t> ids;
  for (const auto& e : r->top_logprobs) ids.push_back(e.first);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 2, 4}));

  p.logprobs = 0;  // the chosen token's logprob only
  r = small.Sample(std::vector<float>{0, 0, 0, 0, 0, 0}, p, {}, {}, SamplingRng(0));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->top_logprobs.empty());
  EXPECT_NEAR(r->logprob, -std::log(6.0), 1e-6);

  constexpr int64_t kVocab = 262144;
  const std::vector<float> logits = RandomLogits(kVocab, 10);
  Sampler big(kVocab, {});
  p.logprobs = 20;
  p.temperature = 1;
  r = big.Sample(logits, p, {}, {}, SamplingRng(0));
  ASSERT_TRUE(r.ok());
  std::vector<int32_t> order(kVocab);
  for (int32_t i = 0; i < kVocab; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const double max = logits[order[0]];
  double z = 0;
  for (float x : logits) z += std::exp(static_cast<double>(x) - max);
  ASSERT_EQ(r->top_logprobs.size(), 20u);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(r->top_logprobs[i].first, order[i]);
    EXPECT_NEAR(r->top_logprobs[i].second, logits[order[i]] - max - std::log(z), 1e-5);
  }
  EXPECT_NEAR(r->logprob, logits[r->token_id] - max - std::log(z), 1e-5);
}

TEST(SamplerTest, RejectsRowsWithoutAValidMaximum) {
  Sampler sampler(4, {});
  SamplingParams p;
  auto nan = sampler.Sample(std::vector<float>{0, NAN, 1, 2}, p, {}, {}, SamplingRng(0));
  EXPECT_EQ(nan.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(nan.status().message(), HasSubstr("nan at token 1"));
  p.temperature = 0;
  auto inf = sampler.Sample(std::vector<float>{0, 1, kInf, 2}, p, {}, {}, SamplingRng(0));
  EXPECT_THAT(inf.status().message(), HasSubstr("inf at token 2"));
  auto masked = sampler.Sample(std::vector<float>{-kInf, -kInf, -kInf, -kInf}, p, {}, {}, SamplingRng(0));
  EXPECT_EQ(masked.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(masked.status().message(), HasSubstr("every logit is -inf"));
  p.repetition_penalty = 1.2f;
  auto bad_id = sampler.Sample(std::vector<float>{0, 1, 2, 3}, p, {0, 4}, {}, SamplingRng(0));
  EXPECT_EQ(bad_id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_id.status().message(), HasSubstr("prompt token 1 is 4, outside the vocabulary [0, 4)"));
}

}  // namespace
}  // namespace tpserve

// Speculative decoding: --speculative-config parsing, the n-gram proposer, the
// verification rule's distribution (a chi-square test that passes for the rule and fails
// for two classic wrong corrections), and the engine core on real fixture models: a seeded
// request samples the same tokens with and without speculation, and stops inside a kept
// run end where plain decoding ends. (Greedy with drafts = transformers under chunked
// prefill and preemption: engine_core_test.)
#include "coordinator/engine/speculative.h"

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/engine/engine_core.h"
#include "coordinator/engine/offline.h"
#include "coordinator/engine/scheduler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/offline_harness.h"
#include "tests/sampling_reference.h"
#include "tests/tp_harness.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

TEST(SpeculativeConfigTest, ParsesNgramWithVllmDefaults) {
  auto c = ParseSpeculativeConfig(R"({"method": "ngram", "num_speculative_tokens": 4})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->method, SpeculativeConfig::Method::kNgram);
  EXPECT_EQ(c->num_speculative_tokens, 4);
  EXPECT_EQ(c->prompt_lookup_min, 5);
  EXPECT_EQ(c->prompt_lookup_max, 5);
  EXPECT_EQ(c->ToJson(), R"({"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":5,"prompt_lookup_max":5})");

  c = ParseSpeculativeConfig(R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->prompt_lookup_min, 4);
  c = ParseSpeculativeConfig(R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2,
                                 "prompt_lookup_max": 6})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->prompt_lookup_min, 2);
  EXPECT_EQ(c->prompt_lookup_max, 6);

  for (const char* off : {"", "null"}) {
    c = ParseSpeculativeConfig(off);
    ASSERT_TRUE(c.ok());
    EXPECT_FALSE(c->enabled());
    EXPECT_EQ(c->ToJson(), "");
  }
}

// The MTP drafter: the directory is read by StartEngine (tests/mtp_engine_test.cc), not here.
TEST(SpeculativeConfigTest, ParsesMtp) {
  auto c = ParseSpeculativeConfig(R"({"method": "mtp", "model": "/models/assistant", "num_speculative_tokens": 3})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->method, SpeculativeConfig::Method::kMtp);
  EXPECT_TRUE(c->enabled());
  EXPECT_EQ(c->model, "/models/assistant");
  EXPECT_EQ(c->num_speculative_tokens, 3);
  EXPECT_EQ(c->ToJson(), R"({"method":"mtp","model":"/models/assistant","num_speculative_tokens":3})");
  // The drafter's sliding layers read further back than the target's: the scheduler keeps
  // two more positions of every sliding window.
  SchedulerConfig sc;
  EXPECT_EQ(WithSpeculation(sc, *c).sliding_lookback, kMtpDrafterLookback);
  EXPECT_EQ(WithSpeculation(sc, *c).num_speculative_tokens, 3);
  auto ngram = ParseSpeculativeConfig(R"({"method": "ngram", "num_speculative_tokens": 3})");
  ASSERT_TRUE(ngram.ok());
  EXPECT_EQ(WithSpeculation(sc, *ngram).sliding_lookback, 0);
}

TEST(SpeculativeConfigTest, ParsesAdaptive) {
  auto ngram = ParseSpeculativeConfig(R"({"method": "ngram", "num_speculative_tokens": 4, "adaptive": true})");
  ASSERT_TRUE(ngram.ok()) << ngram.status();
  EXPECT_TRUE(ngram->adaptive);
  EXPECT_EQ(ngram->ToJson(),
            R"({"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":5,"prompt_lookup_max":5,"adaptive":true})");
  EXPECT_TRUE(WithSpeculation(SchedulerConfig{}, *ngram).adaptive_drafts);
  auto mtp = ParseSpeculativeConfig(R"({"method": "mtp", "model": "/m", "num_speculative_tokens": 2, "adaptive": true})");
  ASSERT_TRUE(mtp.ok()) << mtp.status();
  EXPECT_TRUE(mtp->adaptive);
  EXPECT_EQ(mtp->ToJson(), R"({"method":"mtp","model":"/m","num_speculative_tokens":2,"adaptive":true})");
  auto off = ParseSpeculativeConfig(R"({"method": "ngram", "num_speculative_tokens": 4, "adaptive": false})");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->adaptive);
  EXPECT_FALSE(WithSpeculation(SchedulerConfig{}, *off).adaptive_drafts);
}

// The draft length that maximizes expected tokens per forward millisecond, against the sums
// worked out by hand. Widths measured: 1, 2, 3, 4, 5 tokens take 20, 21, 23, 33, 43 ms (a
// CPU where verification is compute-bound beyond 3 rows).
TEST(DraftLengthPolicyTest, ChoosesTheMostTokensPerMillisecond) {
  DraftLengthPolicy policy;
  // Nothing measured: every width costs alike, so as many drafts as allowed.
  EXPECT_EQ(policy.Choose(0.3, 0, 4), 4);
  const double ms[] = {20, 21, 23, 33, 43};
  for (int w = 1; w <= 5; ++w) policy.ObserveStep(w, ms[w - 1]);
  EXPECT_DOUBLE_EQ(policy.Cost(3), 23);
  // a = 0.7: k = 2 gives (1 + .7 + .49) / 23 = .0952, above k = 1 (.0810), k = 3 (.0768), k = 4 (.0645).
  EXPECT_EQ(policy.Choose(0.7, 0, 4), 2);
  // a = 0.2: k = 1, 1.2 / 21 = .0571, above k = 0 (.05) and k = 2 (1.24 / 23 = .0539).
  EXPECT_EQ(policy.Choose(0.2, 0, 4), 1);
  // a = 0.05: no drafts.
  EXPECT_EQ(policy.Choose(0.05, 0, 4), 0);
  // Never above the sequence's own limit.
  EXPECT_EQ(policy.Choose(0.99, 0, 1), 1);
  // With 2 other tokens in the step the widths are 3 ... 5 for up to 2 drafts: at a = 0.7,
  // k = 1 (1.7 / 33 = .0515) beats k = 0 (1 / 23 = .0435) and k = 2 (2.19 / 43 = .0509).
  EXPECT_EQ(policy.Choose(0.7, 2, 2), 1);
  // Widths beyond the widest measured (6, 7) cost as it does, so they get tried: k = 4.
  EXPECT_EQ(policy.Choose(0.7, 2, 4), 4);
}

TEST(DraftLengthPolicyTest, AnUnmeasuredWidthLooksAsCheapAsTheNarrowerOneSoItIsTried) {
  DraftLengthPolicy policy;
  policy.ObserveStep(1, 20);
  policy.ObserveStep(5, 43);
  EXPECT_DOUBLE_EQ(policy.Cost(4), 20);  // the nearest narrower measured width
  EXPECT_DOUBLE_EQ(policy.Cost(9), 43);
  // a = 0.7: k = 3 (width 4, costed 20) wins; once width 4 is measured dear, fewer.
  EXPECT_EQ(policy.Choose(0.7, 0, 4), 3);
  for (int i = 0; i < 20; ++i) policy.ObserveStep(4, 40);
  EXPECT_NEAR(policy.Cost(4), 40, 0.1);
  EXPECT_EQ(policy.Choose(0.7, 0, 4), 2);  // width 3 unmeasured: costed as width 1
}

TEST(DraftAcceptanceTest, FollowsRecentStepsAndFadesBackToThePrior) {
  DraftAcceptance a;
  EXPECT_DOUBLE_EQ(a.rate(), 0.5);
  for (int i = 0; i < 20; ++i) a.Observe(4, 4);
  EXPECT_GT(a.rate(), 0.9);
  for (int i = 0; i < 20; ++i) a.Observe(4, 0);  // each step: one position verified, refused
  EXPECT_LT(a.rate(), 0.25);
  for (int i = 0; i < 60; ++i) a.Forget();
  EXPECT_NEAR(a.rate(), 0.5, 0.02);
  a.Observe(0, 0);  // no drafts verified: nothing learned
  EXPECT_NEAR(a.rate(), 0.5, 0.02);
}

TEST(SpeculativeConfigTest, RefusesWhatItCannotRunNamingTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"method": "mtp", "num_speculative_tokens": 2})", "method \"mtp\" needs \"model\""},
      {R"({"method": "mtp", "model": "", "num_speculative_tokens": 2})", "method \"mtp\" needs \"model\""},
      {R"({"method": "mtp", "model": 3, "num_speculative_tokens": 2})", "method \"mtp\" needs \"model\""},
      {R"({"method": "mtp", "model": "/m"})", "\"num_speculative_tokens\" is required"},
      {R"({"method": "mtp", "model": "/m", "num_speculative_tokens": 65})", "must be in [1, 64]"},
      {R"({"method": "mtp", "model": "/m", "num_speculative_tokens": 2, "prompt_lookup_min": 2})",
       "key \"prompt_lookup_min\" is not supported with method \"mtp\""},
      {R"({"method": "mtp", "model": "/m", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 1})",
       "key \"draft_tensor_parallel_size\" is not supported"},
      {R"({"method": "eagle", "num_speculative_tokens": 2})", "not implemented yet"},
      {R"({"method": "ngram", "model": "/m", "num_speculative_tokens": 2})", "draft \"model\""},
      {R"({"method": "telepathy", "num_speculative_tokens": 2})", "unknown method"},
      {R"({"num_speculative_tokens": 2})", "\"method\" is required"},
      {R"({"method": "ngram"})", "\"num_speculative_tokens\" is required"},
      {R"({"method": "ngram", "num_speculative_tokens": 0})", "\"num_speculative_tokens\" must be in [1, 64]"},
      {R"({"method": "ngram", "num_speculative_tokens": 2.5})", "must be an integer"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 5, "prompt_lookup_max": 3})",
       "above \"prompt_lookup_max\""},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": 8})",
       "key \"disable_by_batch_size\" is not supported"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "adaptive": "yes"})", "\"adaptive\" must be true or false"},
      {R"({"method": "mtp", "model": "/m", "num_speculative_tokens": 2, "adaptive": 1})",
       "\"adaptive\" must be true or false"},
      {"[1, 2]", "expected a JSON object"},
      {"{not json", "expected a JSON object"},
  };
  for (const auto& [json, want] : cases) {
    auto c = ParseSpeculativeConfig(json);
    ASSERT_FALSE(c.ok()) << json;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << json;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(want)) << json;
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("--speculative-config")) << json;
  }
}

TEST(NgramProposerTest, ProposesWhatFollowedTheLongestRecentMatch) {
  NgramProposer p(1, 3);
  // "... 5 6 7 8 9 ... 5 6 7": the 3-gram 5 6 7 occurred before, followed by 8 9.
  EXPECT_EQ(p.Propose({1, 5, 6, 7, 8, 9, 2, 5, 6, 7}, 2), (std::vector<int32_t>{8, 9}));
  // Fewer follow than asked: what there is.
  EXPECT_EQ(p.Propose({5, 6, 7, 8, 5, 6, 7}, 5), (std::vector<int32_t>{8, 5, 6, 7}));
  // The longest n wins over a more recent shorter match: 2 7 -> 3, not 7 -> 4.
  EXPECT_EQ(p.Propose({2, 7, 3, 7, 4, 2, 7}, 1), (std::vector<int32_t>{3}));
  // Of equal matches the most recent one that has enough tokens after it.
  EXPECT_EQ(p.Propose({9, 1, 2, 9, 3, 4, 9}, 2), (std::vector<int32_t>{3, 4}));
  // A repeated token: the match overlapping the suffix still proposes.
  EXPECT_EQ(p.Propose({4, 4, 4, 4}, 3), (std::vector<int32_t>{4}));
  // No match, too short, or nothing asked: nothing.
  EXPECT_TRUE(p.Propose({1, 2, 3, 4}, 3).empty());
  EXPECT_TRUE(p.Propose({1}, 3).empty());
  EXPECT_TRUE(p.Propose({1, 2, 1, 2}, 0).empty());
  // min_n bounds the match: a 1-gram is not enough for NgramProposer(2, 3).
  NgramProposer two(2, 3);
  EXPECT_TRUE(two.Propose({7, 1, 8, 2, 7}, 2).empty());
  EXPECT_EQ(two.Propose({3, 7, 1, 8, 3, 7}, 2), (std::vector<int32_t>{1, 8}));
}

TEST(NumAcceptedDraftsTest, KeepsTheLongestPrefixEqualToTheSamples) {
  EXPECT_EQ(NumAcceptedDrafts({4, 5, 6}, {4, 5, 6, 7}), 3);
  EXPECT_EQ(NumAcceptedDrafts({4, 5, 6}, {4, 9, 6, 7}), 1);
  EXPECT_EQ(NumAcceptedDrafts({4, 5, 6}, {1, 5, 6, 7}), 0);
  EXPECT_EQ(NumAcceptedDrafts({}, {3}), 0);
}

// ---------------------------------------------------------------------------------------
// The verification rule keeps the target's distribution.

constexpr int32_t kVocab = 4;

// The target: next-token probabilities given the previous token (a fixed table; row t
// is p(. | t)), as logits.
std::vector<float> TargetLogits(int32_t previous) {
  static const double kProbs[kVocab][kVocab] = {
      {0.50, 0.20, 0.20, 0.10}, {0.10, 0.60, 0.25, 0.05}, {0.30, 0.30, 0.10, 0.30}, {0.25, 0.25, 0.25, 0.25}};
  std::vector<float> l(kVocab);
  for (int32_t i = 0; i < kVocab; ++i) l[i] = static_cast<float>(std::log(kProbs[previous][i]));
  return l;
}

double TargetProb(int32_t previous, int32_t token) { return std::exp(static_cast<double>(TargetLogits(previous)[token])); }

// Pearson's chi-square of `counts` (outcome: 3 tokens after token 0, base 4) against the
// target's joint distribution; 63 degrees of freedom.
double ChiSquare(const std::map<int32_t, int64_t>& counts, int64_t n) {
  double chi2 = 0;
  for (int32_t o = 0; o < kVocab * kVocab * kVocab; ++o) {
    const int32_t a = o / 16, b = (o / 4) % 4, c = o % 4;
    const double expected = n * TargetProb(0, a) * TargetProb(a, b) * TargetProb(b, c);
    auto it = counts.find(o);
    const double seen = it == counts.end() ? 0.0 : static_cast<double>(it->second);
    chi2 += (seen - expected) * (seen - expected) / expected;
  }
  return chi2;
}
// Chi-square with 63 degrees of freedom exceeds 120 with probability about 1.5e-5.
constexpr double kChiSquareLimit = 120;

// A verification rule: the token before the drafts, the drafts, the target's sample at
// each row (row i as if drafts 0..i-1 were kept), and a fresh draw from the target after a
// given token (for wrong rules that resample); returns the tokens emitted.
using VerifyRule = std::function<std::vector<int32_t>(
    int32_t previous, const std::vector<int32_t>& drafts, const std::vector<int32_t>& samples,
    const std::function<int32_t(int32_t previous)>& fresh)>;

std::vector<int32_t> TheRule(int32_t, const std::vector<int32_t>& drafts, const std::vector<int32_t>& samples,
                             const std::function<int32_t(int32_t)>&) {
  const int32_t kept = NumAcceptedDrafts(drafts, samples);
  return std::vector<int32_t>(samples.begin(), samples.begin() + kept + 1);
}

// Three tokens after token 0, drafting [1, 2] (K = 2) each round, with `rule`; the draws
// are the row-sampling rule's (seed, position) uniforms, as the workers draw them.
std::map<int32_t, int64_t> Simulate(const VerifyRule& rule, int64_t n) {
  std::map<int32_t, int64_t> counts;
  RowSampling r;
  r.temperature = 1.0f;
  for (int64_t seed = 0; seed < n; ++seed) {
    r.seed = static_cast<uint64_t>(seed) * 7919 + 17;
    std::vector<int32_t> out;
    uint64_t fresh_draws = 1000;  // a wrong rule's extra draws: their own stream positions
    auto sample_after = [&](int32_t previous, uint64_t step) {
      r.step = step;
      return testing::ReferenceSample(TargetLogits(previous), r).token;
    };
    auto fresh = [&](int32_t previous) { return sample_after(previous, fresh_draws++); };
    while (out.size() < 3) {
      const std::vector<int32_t> drafts = {1, 2};
      const int32_t before = out.empty() ? 0 : out.back();
      std::vector<int32_t> samples;
      int32_t previous = before;
      for (size_t i = 0; i <= drafts.size(); ++i) {
        samples.push_back(sample_after(previous, out.size() + i));
        if (i < drafts.size()) previous = drafts[i];
      }
      for (int32_t t : rule(before, drafts, samples, fresh)) {
        if (out.size() < 3) out.push_back(t);
      }
    }
    ++counts[out[0] * 16 + out[1] * 4 + out[2]];
  }
  return counts;
}

TEST(VerificationDistributionTest, TheRuleKeepsTheTargetDistributionAndWrongCorrectionsDoNot) {
  constexpr int64_t kDraws = 40000;
  const double right = ChiSquare(Simulate(TheRule, kDraws), kDraws);
  EXPECT_LT(right, kChiSquareLimit) << "the verification rule moved the distribution";

  // Wrong: a rejected position resamples from p with a fresh draw (it can emit the
  // rejected draft again, so the draft is over-weighted).
  const VerifyRule resample = [](int32_t previous, const std::vector<int32_t>& drafts,
                                 const std::vector<int32_t>& samples, const std::function<int32_t(int32_t)>& fresh) {
    const int32_t kept = NumAcceptedDrafts(drafts, samples);
    std::vector<int32_t> out(drafts.begin(), drafts.begin() + kept);
    out.push_back(kept < static_cast<int32_t>(drafts.size()) ? fresh(kept == 0 ? previous : drafts[kept - 1])
                                                            : samples[kept]);
    return out;
  };
  const double wrong_resample = ChiSquare(Simulate(resample, kDraws), kDraws);
  EXPECT_GT(wrong_resample, kChiSquareLimit) << "the test cannot tell a resampling correction";

  // Wrong: a draft at least as likely as the token sampled in its place is kept too.
  const VerifyRule lenient = [](int32_t previous, const std::vector<int32_t>& drafts,
                                const std::vector<int32_t>& samples, const std::function<int32_t(int32_t)>&) {
    std::vector<int32_t> out;
    for (size_t i = 0; i < drafts.size(); ++i) {
      if (samples[i] != drafts[i] && TargetProb(previous, drafts[i]) < TargetProb(previous, samples[i])) {
        out.push_back(samples[i]);
        return out;
      }
      out.push_back(drafts[i]);
      previous = drafts[i];
    }
    out.push_back(samples[drafts.size()]);
    return out;
  };
  const double wrong_lenient = ChiSquare(Simulate(lenient, kDraws), kDraws);
  EXPECT_GT(wrong_lenient, kChiSquareLimit) << "the test cannot tell a lenient acceptance";
  std::printf("chi-square (63 dof, limit %.0f): rule %.1f, resampling correction %.1f, lenient acceptance %.1f\n",
              kChiSquareLimit, right, wrong_resample, wrong_lenient);
}

// The same through the scheduler (its Update applies the rule), a batch of requests at a
// time with the seeds and output positions of the plan's sampling rows.
TEST(VerificationDistributionTest, TheSchedulerKeepsTheTargetDistribution) {
  SchedulerConfig c;
  c.vocab_size = kVocab;
  c.max_num_seqs = 256;
  c.max_num_batched_tokens = 1024;
  c.max_model_len = 16;
  c.block_size = 4;
  c.num_kv_blocks = {2048};
  c.kv_group_windows = {0};
  c.num_speculative_tokens = 2;
  Scheduler s(c);
  constexpr int64_t kDraws = 20000;
  SamplingParams p;
  p.temperature = 1.0f;
  p.max_tokens = 4;  // the first 3 are counted: after the prefill's token, a step verifies 2 drafts
  for (int64_t i = 0; i < kDraws; ++i) {
    ASSERT_TRUE(s.AddRequest(SequenceRequest{absl::StrCat(i), {0}, p, static_cast<uint64_t>(i) * 7919 + 17}).ok());
  }
  std::map<int32_t, int64_t> counts;
  int64_t drafted = 0;
  while (s.has_unfinished()) {
    SchedulerOutput d = s.Schedule();
    // The fake model: each logit row's distribution follows the token at its position.
    std::vector<int32_t> sampled;
    size_t token = 0, logit_row = 0;
    for (size_t row = 0, k = 0; row < d.plan.slots.size(); ++row) {
      token += d.plan.num_tokens[row];
      if (k < d.plan.sampled_rows.size() && d.plan.sampled_rows[k] == static_cast<int32_t>(row)) {
        const int32_t count = d.plan.sampled_counts.empty() ? 1 : d.plan.sampled_counts[k];
        for (int32_t j = count; j >= 1; --j) {
          sampled.push_back(testing::ReferenceSample(TargetLogits(d.plan.token_ids[token - j]),
                                                     d.plan.sampling[logit_row++])
                                .token);
        }
        ++k;
      }
    }
    for (const SequenceOutput& o : s.Update(d, sampled)) {
      drafted += o.num_draft;
      if (o.finish_reason != FinishReason::kNone) {
        const auto out = o.seq->output_token_ids();
        ASSERT_EQ(out.size(), 4u);
        ++counts[out[0] * 16 + out[1] * 4 + out[2]];
      } else {
        s.SetDrafts(*o.seq, {1, 2});
      }
    }
  }
  EXPECT_GT(drafted, kDraws);
  EXPECT_LT(ChiSquare(counts, kDraws), kChiSquareLimit);
}

// ---------------------------------------------------------------------------------------
// The engine core on fixture models.

// One request (a 9-token prompt) decoded plainly, then with drafts (K = 4) from an oracle
// that knows the plain output, on a fresh engine each.
struct PlainAndDrafted {
  OfflineResult plain, drafted;
};
absl::StatusOr<PlainAndDrafted> DecodeBothWays(Model& model, StepExecutor& exec, const SamplingParams& p,
                                               bool adaptive) {
  std::vector<int32_t> prompt;
  for (int k = 0; k < 9; ++k) prompt.push_back(3 + k * 17 % 500);
  PlainAndDrafted r;
  EngineCore plain(exec, SchedulerConfigFor(model, 8, 256));
  TP_ASSIGN_OR_RETURN(r.plain, GenerateOffline(plain, {prompt}, p));
  SchedulerConfig sc = SchedulerConfigFor(model, 8, 256);
  sc.num_speculative_tokens = 4;
  sc.adaptive_drafts = adaptive;
  EngineCore spec(exec, sc, std::nullopt,
                  std::make_unique<testing::OracleProposer>(prompt, r.plain.outputs[0].output_ids));
  TP_ASSIGN_OR_RETURN(r.drafted, GenerateOffline(spec, {prompt}, p));
  return r;
}

// What drafting must not change: the tokens, and each token's logprob (within `tolerance`);
// and drafts were accepted at all.
void ExpectDraftsChangeNothing(const PlainAndDrafted& both, const std::string& fixture, int tp, double tolerance) {
  const GenerationOutput &plain = both.plain.outputs[0], &drafted = both.drafted.outputs[0];
  EXPECT_EQ(drafted.output_ids, plain.output_ids) << fixture << " tp " << tp;
  EXPECT_GT(both.drafted.spec.num_accepted_tokens, 0) << fixture << " tp " << tp;
  ASSERT_EQ(drafted.output_logprobs.size(), plain.output_logprobs.size());
  for (size_t i = 0; i < plain.output_logprobs.size(); ++i) {
    EXPECT_NEAR(drafted.output_logprobs[i], plain.output_logprobs[i], tolerance)
        << fixture << " tp " << tp << " token " << i;
  }
}

// `body` on each fixture model at TP 1 and 2 (a 256-block KV cache).
void OnFixturesAtTp1And2(std::initializer_list<const char*> fixtures,
                         const std::function<void(const std::string&, int, Model&, StepExecutor&)>& body) {
  for (const std::string fixture : fixtures) {
    for (int tp : {1, 2}) {
      testing::WithFixtureModel(fixture, tp, 256,
                                [&](Model& model, StepExecutor& exec) { body(fixture, tp, model, exec); });
    }
  }
}

// A seeded request at temperature 1 (top-p, top-k and a repetition penalty on) samples
// the same tokens with drafts as without: each row draws with its output position's
// uniform, so whichever step computes a position, it draws the same token.
TEST(SpeculativeEngineTest, SeededSamplingIsTheSameWithAndWithoutDrafts) {
  OnFixturesAtTp1And2({"qwen3", "gemma4_text"},
                      [](const std::string& fixture, int tp, Model& model, StepExecutor& exec) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_p = 0.95f;
    p.top_k = 50;
    p.repetition_penalty = 1.1f;
    p.seed = 2024;
    p.max_tokens = 16;
    p.ignore_eos = true;
    p.logprobs = 2;
    auto both = DecodeBothWays(model, exec, p, /*adaptive=*/false);
    ASSERT_TRUE(both.ok()) << both.status();
    // Logprobs are computed from each token's own row: they agree too.
    ExpectDraftsChangeNothing(*both, fixture, tp, 2e-3);
  });
}

// Adaptive speculation changes how many drafts each step verifies, never the tokens:
// greedy output with it equals plain decoding's, and it does verify drafts.
TEST(SpeculativeEngineTest, AdaptiveDraftLengthKeepsTheGreedyTokens) {
  for (int tp : {1, 2}) {
    testing::WithFixtureModel("qwen3", tp, 256, [&](Model& model, StepExecutor& exec) {
      SamplingParams p;
      p.temperature = 0.0f;
      p.max_tokens = 24;
      p.ignore_eos = true;
      auto both = DecodeBothWays(model, exec, p, /*adaptive=*/true);
      ASSERT_TRUE(both.ok()) << both.status();
      EXPECT_EQ(both->drafted.outputs[0].output_ids, both->plain.outputs[0].output_ids) << "tp " << tp;
      EXPECT_GT(both->drafted.spec.num_accepted_tokens, 0) << "tp " << tp;
    });
  }
}

// On quantized weights (compressed-tensors int4 as Q4_0 blocks, FP8 blocks) a verification step's
// rows run the quantized kernels several rows at a time (each row's x quantized on its own),
// and each row's logits are those a one-row decode step gives: the same greedy tokens and
// logprobs with drafts as without.
TEST(SpeculativeEngineTest, VerifyingDraftsOnQuantizedWeightsIsPlainDecoding) {
  OnFixturesAtTp1And2({"ct_w4a16", "ct_fp8_block"},
                      [](const std::string& fixture, int tp, Model& model, StepExecutor& exec) {
    ASSERT_TRUE(model.weight_formats().any_quantized()) << fixture;
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = 16;
    p.ignore_eos = true;
    p.logprobs = 0;
    auto both = DecodeBothWays(model, exec, p, /*adaptive=*/false);
    ASSERT_TRUE(both.ok()) << both.status();
    ExpectDraftsChangeNothing(*both, fixture, tp, 1e-4);
  });
}

// Stops inside a kept run end the sequence exactly where decoding without drafts would:
// max_tokens mid-draft, and a stop token id that is a kept draft.
TEST(SpeculativeEngineTest, StopsInsideAKeptRunEndWhereTheyWouldWithoutDrafts) {
  const testing::Reference ref = testing::LoadReference("llama3");
  testing::WithFixtureModel("llama3", 1, 64, [&](Model& model, StepExecutor& exec) {
    SchedulerConfig sc = SchedulerConfigFor(model, 8, 256);
    sc.num_speculative_tokens = 4;
    SamplingParams p;
    p.temperature = 0;
    p.ignore_eos = true;
    // Every draft is right: a run of 5 could pass max_tokens 3.
    for (int32_t max_tokens : {1, 2, 3, 6}) {
      p.max_tokens = max_tokens;
      EngineCore core(exec, sc, std::nullopt, std::make_unique<testing::OracleProposer>(ref.prompt_ids, ref.greedy_ids));
      auto r = GenerateOffline(core, {ref.prompt_ids}, p);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->outputs[0].output_ids,
                std::vector<int32_t>(ref.greedy_ids.begin(), ref.greedy_ids.begin() + max_tokens));
      EXPECT_EQ(r->outputs[0].finish_reason, "length");
    }
    // The 4th greedy token as a stop token: the output ends with it.
    p.max_tokens = 8;
    p.stop_token_ids = {ref.greedy_ids[3]};
    EngineCore core(exec, sc, std::nullopt, std::make_unique<testing::OracleProposer>(ref.prompt_ids, ref.greedy_ids));
    auto r = GenerateOffline(core, {ref.prompt_ids}, p);
    ASSERT_TRUE(r.ok()) << r.status();
    size_t first = 0;
    while (ref.greedy_ids[first] != ref.greedy_ids[3]) ++first;
    EXPECT_EQ(r->outputs[0].output_ids,
              std::vector<int32_t>(ref.greedy_ids.begin(), ref.greedy_ids.begin() + first + 1));
    EXPECT_EQ(r->outputs[0].finish_reason, "stop");
  });
}

}  // namespace
}  // namespace tpserve

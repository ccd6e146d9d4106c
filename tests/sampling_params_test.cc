// Tests for coordinator/engine/sampling_params.h (validation messages name the field and
// value; seeds) and coordinator/engine/logprobs.h (a log-softmax after the row's penalty
// entries, before temperature and filters; top-N order; invalid rows are errors).
#include "coordinator/engine/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "coordinator/engine/field_error.h"
#include "coordinator/engine/logprobs.h"
#include "gmock/gmock.h"
#include "coordinator/structured/grammar_compiler.h"
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

absl::StatusOr<TokenLogprob> Logprobs(const std::vector<float>& logits, int32_t token, int32_t top_n,
                                      const RowSampling& row = {}, std::vector<int32_t> tokens = {},
                                      std::vector<int32_t> counts = {}) {
  return ComputeLogprobs(logits, row, tokens, counts, token, top_n);
}

// A grammar for a four-token vocabulary ("{", "}", " " and EOS).
std::shared_ptr<const CompiledGrammar> JsonObjectGrammar() {
  VocabularyBytes bytes{{"{", "}", " ", ""}, {TokenKind::kText, TokenKind::kText, TokenKind::kText, TokenKind::kEos}};
  GrammarCompiler compiler(TokenVocabulary::Create(std::move(bytes)));
  return *compiler.CompileJsonObject();
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
      {[](SamplingParams& p) { p.logit_bias = {{1000, 1}}; },
       "logit_bias: token id 1000 is outside the vocabulary [0, 1000)"},
      {[](SamplingParams& p) { p.logit_bias = {{3, 101}}; }, "logit_bias: the bias of token 3 must be in [-100, 100], got 101"},
      {[](SamplingParams& p) { p.logit_bias = {{3, 1}, {3, 2}}; }, "logit_bias: token id 3 appears twice"},
      {[](SamplingParams& p) {
         p.grammar = JsonObjectGrammar();
         p.min_tokens = 2;
       },
       "min_tokens cannot be combined with response_format"},
  };
  for (const Case& c : cases) {
    SamplingParams p;
    c.set(p);
    const absl::Status status = p.Validate(1000);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(status.message(), HasSubstr(c.message));
    // Tagged with the field the message starts with (the HTTP API's "param").
    const std::string field = c.message.substr(0, c.message.find_first_of(" [:"));
    EXPECT_EQ(ErrorField(status).value_or("(none)"), field) << c.message;
  }
}

TEST(SamplingParamsTest, ResolveSeedUsesTheSeedOrFreshEntropy) {
  SamplingParams p;
  p.seed = 42;
  EXPECT_EQ(ResolveSeed(p), 42u);
  p.seed.reset();
  EXPECT_NE(ResolveSeed(p), ResolveSeed(p));
}

TEST(LogprobsTest, ALogSoftmaxOfTheRawRowWithoutPenalties) {
  const std::vector<float> logits = RandomLogits(20, 9);
  double max = *std::max_element(logits.begin(), logits.end()), z = 0;
  for (float x : logits) z += std::exp(x - max);
  const double log_z = max + std::log(z);
  RowSampling row;
  row.temperature = 0.5f;  // temperature and filters do not enter logprobs
  row.top_k = 3;
  for (int32_t token : {0, 7, 19}) {
    auto r = Logprobs(logits, token, 20, row);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->token_id, token);
    EXPECT_NEAR(r->logprob, logits[token] - log_z, 1e-5);
    ASSERT_EQ(r->top.size(), 20u);
    double total = 0;
    for (size_t i = 0; i < r->top.size(); ++i) {
      EXPECT_NEAR(r->top[i].second, logits[r->top[i].first] - log_z, 1e-5);
      if (i > 0) {
        EXPECT_GE(r->top[i - 1].second, r->top[i].second);
      }
      total += std::exp(r->top[i].second);
    }
    EXPECT_NEAR(total, 1.0, 1e-5);
  }
}

TEST(LogprobsTest, PenaltyEntriesApplyTheWorkersRule) {
  std::vector<float> logits = {1.0f, -1.0f, 2.0f, 0.5f, 3.0f};
  RowSampling row;
  row.repetition_penalty = 2.0f;
  row.presence_penalty = 0.25f;
  row.frequency_penalty = 0.5f;
  // token 0 in the prompt only, token 1 twice in the output, token 4 masked (EOS before min_tokens)
  auto r = Logprobs(logits, 2, 5, row, {0, 1, 4}, {0, 2, kMaskedCount});
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<float> want = logits;
  want[0] = PenalizedLogit(logits[0], row, 0);
  want[1] = PenalizedLogit(logits[1], row, 2);
  want[4] = -kInf;
  EXPECT_FLOAT_EQ(want[0], 0.5f);
  EXPECT_FLOAT_EQ(want[1], -2.0f - 0.25f - 1.0f);
  double z = 0;
  for (float x : want) z += std::exp(static_cast<double>(x) - 2.0);
  EXPECT_NEAR(r->logprob, 0.0 - std::log(z), 1e-6);
  auto masked = Logprobs(logits, 4, 0, row, {4}, {kMaskedCount});
  ASSERT_TRUE(masked.ok());
  EXPECT_EQ(masked->logprob, -kInf);
  EXPECT_TRUE(masked->top.empty());
}

TEST(LogprobsTest, TopLogprobsOrderTiesByIdAndMatchAFullSort) {
  auto r = Logprobs({1, 3, 2, 3, 2, 2}, 0, 4);
  ASSERT_TRUE(r.ok());
  std::vector<int32_t> ids;
  for (const auto& e : r->top) ids.push_back(e.first);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 2, 4}));

  r = Logprobs({0, 0, 0, 0, 0, 0}, 2, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->top.empty());
  EXPECT_NEAR(r->logprob, -std::log(6.0), 1e-6);

  constexpr int64_t kVocab = 262144;
  const std::vector<float> logits = RandomLogits(kVocab, 10);
  r = Logprobs(logits, 5, 20);
  ASSERT_TRUE(r.ok());
  std::vector<int32_t> order(kVocab);
  for (int32_t i = 0; i < kVocab; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const double max = logits[order[0]];
  double z = 0;
  for (float x : logits) z += std::exp(static_cast<double>(x) - max);
  ASSERT_EQ(r->top.size(), 20u);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(r->top[i].first, order[i]);
    EXPECT_NEAR(r->top[i].second, logits[order[i]] - max - std::log(z), 1e-5);
  }
  EXPECT_NEAR(r->logprob, logits[5] - max - std::log(z), 1e-5);
}

// Tokens at -inf (a structured-output mask, min_tokens) are never listed as alternatives.
TEST(LogprobsTest, MaskedTokensAreNotListed) {
  auto r = Logprobs({0, -kInf, 1, -kInf}, 2, 4);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->top.size(), 2u);
  EXPECT_EQ(r->top[0].first, 2);
  EXPECT_EQ(r->top[1].first, 0);
}

TEST(LogprobsTest, RejectsRowsWithoutAValidMaximumAndBadIds) {
  auto nan = Logprobs({0, NAN, 1, 2}, 0, 0);
  EXPECT_EQ(nan.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(nan.status().message(), HasSubstr("nan at token 1"));
  auto inf = Logprobs({0, 1, kInf, 2}, 0, 0);
  EXPECT_THAT(inf.status().message(), HasSubstr("inf at token 2"));
  auto masked = Logprobs({-kInf, -kInf, -kInf, -kInf}, 0, 0);
  EXPECT_EQ(masked.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(masked.status().message(), HasSubstr("every logit is -inf"));
  EXPECT_EQ(Logprobs({0, 1}, 2, 0).status().code(), absl::StatusCode::kInternal);  // not a token
  auto bad_entry = Logprobs({0, 1, 2, 3}, 0, 0, RowSampling{}, {4}, {1});
  EXPECT_THAT(bad_entry.status().message(), HasSubstr("token id 4 is outside the vocabulary [0, 4)"));
}

}  // namespace
}  // namespace tpserve

// cpu::SampleRows against the plain reference of the rule in kernels/row_sampling.h
// (tests/sampling_reference.h): penalties and masks, greedy, and seeded draws across
// mixes of temperature, top-k, top-p and min-p; plus the frequency of many draws against
// the softmax. The same reference checks the GPU kernels (tests/cuda_sampling_test.cc).
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/row_sampling.h"
#include "tests/sampling_reference.h"

namespace tpserve {
namespace {

using testing::PenaltyEntry;

struct Csr {
  std::vector<int32_t> offsets{0}, ids, counts;
  void Add(const std::vector<PenaltyEntry>& row) {
    for (const PenaltyEntry& e : row) {
      ids.push_back(e.token);
      counts.push_back(e.count);
    }
    offsets.push_back(static_cast<int32_t>(ids.size()));
  }
};

// The uniform draw both samplers use (kernels/row_sampling.h, host and device). Moved
// here from cuda_sampling_test: it runs on the host, so it must run where no GPU is.
TEST(CpuSamplingTest, UniformIsInUnitIntervalAndVaries) {
  float lo = 1, hi = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    const float u = SampleUniform(1234, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
  }
  EXPECT_LT(lo, 0.01f);
  EXPECT_GT(hi, 0.99f);
  EXPECT_NE(SampleUniform(1, 0), SampleUniform(2, 0));
}

TEST(CpuSamplingTest, PenaltiesAndMasksThenGreedy) {
  const int64_t V = 50;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<RowSampling> params(4);
  for (auto& p : params) p.temperature = 0.0f;
  params[0].repetition_penalty = 1.5f;
  params[1].presence_penalty = 1.0f;
  params[1].frequency_penalty = 0.5f;
  params[2].repetition_penalty = 0.7f;
  const std::vector<std::vector<PenaltyEntry>> entries = {
      {{1, 0}, {7, 2}}, {{0, 3}, {5, 1}, {9, 0}}, {{3, 1}}, {{0, kMaskedCount}, {1, kMaskedCount}}};
  std::vector<float> logits(params.size() * V);
  for (float& x : logits) x = normal(rng);
  // Row 3: the two largest logits are masked, so greedy must take the third.
  logits[3 * V + 0] = 100.0f;
  logits[3 * V + 1] = 90.0f;
  Csr csr;
  for (const auto& e : entries) csr.Add(e);
  std::vector<float> work = logits;
  std::vector<int32_t> out(params.size());
  cpu::SampleRows(work.data(), params.size(), V, params.data(), csr.offsets.data(), csr.ids.data(), csr.counts.data(),
                  out.data());
  for (size_t r = 0; r < params.size(); ++r) {
    std::vector<float> row(logits.begin() + r * V, logits.begin() + (r + 1) * V);
    testing::ReferencePenalties(row, params[r], entries[r]);
    EXPECT_EQ(std::vector<float>(work.begin() + r * V, work.begin() + (r + 1) * V), row) << "row " << r;
    EXPECT_EQ(out[r], testing::ReferenceArgmax(row)) << "row " << r;
  }
  EXPECT_NE(out[3], 0);
  EXPECT_NE(out[3], 1);
}

TEST(CpuSamplingTest, MatchesReferenceAcrossParameterMixes) {
  const int64_t V = 4000;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const float temps[] = {0.0f, 0.5f, 1.0f, 1.3f};
  const int32_t top_ks[] = {0, 1, 5, 50, 1000};
  const float top_ps[] = {1.0f, 0.9f, 0.5f};
  const float min_ps[] = {0.0f, 0.05f};
  int ambiguous = 0, checked = 0;
  for (int i = 0; i < 240; ++i) {
    RowSampling p;
    p.temperature = temps[i % 4];
    p.top_k = top_ks[(i / 4) % 5];
    p.top_p = top_ps[(i / 20) % 3];
    p.min_p = min_ps[(i / 60) % 2];
    p.seed = rng();
    p.step = static_cast<uint64_t>(i);
    std::vector<float> row(V);
    for (float& x : row) x = normal(rng);
    const testing::ReferenceDraw want = testing::ReferenceSample(row, p);
    const int32_t offsets[2] = {0, 0};
    int32_t got = -1;
    cpu::SampleRows(row.data(), 1, V, &p, offsets, nullptr, nullptr, &got);
    if (want.ambiguous) {
      ++ambiguous;
      continue;
    }
    ++checked;
    EXPECT_EQ(got, want.token) << "row " << i << " T=" << p.temperature << " k=" << p.top_k << " p=" << p.top_p
                               << " min_p=" << p.min_p;
  }
  EXPECT_GT(checked, 200) << ambiguous << " ambiguous rows";
}

// 20000 seeded draws at T = 1 from 8 logits: each token's share within 5 standard
// errors of its softmax probability (a wrong weight or an off-by-one in the draw fails).
TEST(CpuSamplingTest, DrawFrequenciesFollowTheSoftmax) {
  const std::vector<float> logits = {0.0f, 1.0f, -1.0f, 2.0f, 0.5f, -3.0f, 1.5f, 0.25f};
  const int64_t V = static_cast<int64_t>(logits.size());
  std::vector<double> prob(V);
  double z = 0;
  for (int64_t i = 0; i < V; ++i) z += std::exp(static_cast<double>(logits[i]));
  for (int64_t i = 0; i < V; ++i) prob[i] = std::exp(static_cast<double>(logits[i])) / z;
  const int n = 20000;
  std::vector<int> hits(V, 0);
  const int32_t offsets[2] = {0, 0};
  for (int i = 0; i < n; ++i) {
    RowSampling p;
    p.temperature = 1.0f;
    p.seed = 42;
    p.step = static_cast<uint64_t>(i);
    std::vector<float> row = logits;
    int32_t got = -1;
    cpu::SampleRows(row.data(), 1, V, &p, offsets, nullptr, nullptr, &got);
    ASSERT_GE(got, 0);
    ASSERT_LT(got, V);
    ++hits[got];
  }
  for (int64_t i = 0; i < V; ++i) {
    const double se = std::sqrt(prob[i] * (1 - prob[i]) / n);
    EXPECT_NEAR(static_cast<double>(hits[i]) / n, prob[i], 5 * se + 1e-9) << "token " << i;
  }
}

}  // namespace
}  // namespace tpserve

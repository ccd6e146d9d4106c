// GPU argmax, penalties and sampling against the plain C++ reference of the rule in
// kernels/cuda/sampling.h (written out below, in doubles where it sums), plus a
// frequency check of many seeded draws against the softmax. GPU test (ctest -L gpu).
#include <algorithm>
#include <cmath>
#include <random>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/sampling.h"
#include "tests/cuda_test_util.h"

namespace tpserve {
namespace {

using cuda::SamplingParams;
using testing::DeviceArray;

// ---- The reference ----

struct PenaltyEntry {
  int32_t token, count;
};

void ReferencePenalties(std::vector<float>& l, const SamplingParams& p, const std::vector<PenaltyEntry>& entries) {
  for (const PenaltyEntry& e : entries) {
    float v = l[e.token];
    if (p.repetition_penalty != 1.0f) v = v > 0.0f ? v / p.repetition_penalty : v * p.repetition_penalty;
    v -= p.presence_penalty * (e.count > 0 ? 1.0f : 0.0f) + p.frequency_penalty * static_cast<float>(e.count);
    l[e.token] = v;
  }
}

int32_t ReferenceArgmax(const std::vector<float>& l) {
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

ReferenceDraw ReferenceSample(const std::vector<float>& l, const SamplingParams& p) {
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
  const double target = static_cast<double>(cuda::SampleUniform(p.seed, p.step)) * total;
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

// ---- Tests ----

TEST(CudaSamplingTest, UniformIsInUnitIntervalAndVaries) {
  float lo = 1, hi = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    const float u = cuda::SampleUniform(1234, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
  }
  EXPECT_LT(lo, 0.01f);
  EXPECT_GT(hi, 0.99f);
  EXPECT_NE(cuda::SampleUniform(1, 0), cuda::SampleUniform(2, 0));
}

TEST(CudaArgmaxTest, TiesNanAndDtypes) {
  TP_SKIP_WITHOUT_GPU();
  const int64_t V = 262144;
  std::vector<std::vector<float>> rows;
  rows.push_back(testing::RandomVector(V, 1, -10.0f, 10.0f));
  std::vector<float> ties(V, 1.0f);
  ties[5] = 3.0f;
  ties[70000] = 3.0f;  // the first maximum wins
  rows.push_back(ties);
  std::vector<float> nan = testing::RandomVector(V, 2);
  nan[900] = NAN;
  nan[100000] = NAN;
  rows.push_back(nan);
  rows.push_back(std::vector<float>(V, -INFINITY));
  std::vector<float> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  DeviceArray<int32_t> out(rows.size());
  {
    DeviceArray<float> d(flat);
    cuda::Argmax(d.get(), DType::kF32, rows.size(), V, out.get(), nullptr);
    const std::vector<int32_t> got = out.Download();
    for (size_t r = 0; r < rows.size(); ++r) EXPECT_EQ(got[r], ReferenceArgmax(rows[r])) << "fp32 row " << r;
  }
  {
    DeviceArray<uint16_t> d(testing::ToBf16(flat));
    cuda::Argmax(d.get(), DType::kBF16, rows.size(), V, out.get(), nullptr);
    const std::vector<int32_t> got = out.Download();
    for (size_t r = 0; r < rows.size(); ++r) {
      EXPECT_EQ(got[r], ReferenceArgmax(testing::RoundBf16(rows[r]))) << "bf16 row " << r;
    }
  }
}

TEST(CudaSamplingTest, PenaltiesMatchReference) {
  TP_SKIP_WITHOUT_GPU();
  const int64_t rows = 3, V = 1000;
  std::vector<float> logits = testing::RandomVector(rows * V, 3, -5.0f, 5.0f);
  std::vector<SamplingParams> params(rows);
  params[0].repetition_penalty = 1.3f;
  params[1].presence_penalty = 0.5f;
  params[1].frequency_penalty = 0.25f;
  params[2].repetition_penalty = 0.8f;
  params[2].frequency_penalty = 1.0f;
  const std::vector<std::vector<PenaltyEntry>> entries = {
      {{1, 0}, {17, 2}, {999, 1}}, {{0, 3}, {5, 0}}, {{400, 1}, {401, 0}, {2, 7}}};
  std::vector<int32_t> offsets = {0}, ids, counts;
  for (const auto& row : entries) {
    for (const auto& e : row) {
      ids.push_back(e.token);
      counts.push_back(e.count);
    }
    offsets.push_back(static_cast<int32_t>(ids.size()));
  }
  DeviceArray<float> d_logits(logits);
  DeviceArray<SamplingParams> d_params(params);
  DeviceArray<int32_t> d_off(offsets), d_ids(ids), d_counts(counts);
  cuda::ApplyPenalties(d_logits.get(), rows, V, d_params.get(), d_off.get(), d_ids.get(), d_counts.get(), nullptr);
  std::vector<float> want = logits;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> row(want.begin() + r * V, want.begin() + (r + 1) * V);
    ReferencePenalties(row, params[r], entries[r]);
    std::copy(row.begin(), row.end(), want.begin() + r * V);
  }
  EXPECT_TRUE(testing::AllClose(d_logits.Download(), want, {1e-6, 1e-6}));
}

TEST(CudaSamplingTest, MatchesReferenceAcrossParameterMixes) {
  TP_SKIP_WITHOUT_GPU();
  const int64_t V = 32000;
  std::mt19937 rng(7);
  std::vector<SamplingParams> params;
  const float temps[] = {0.0f, 0.5f, 1.0f, 1.3f};
  const int32_t top_ks[] = {0, 1, 5, 50, 1000};
  const float top_ps[] = {1.0f, 0.9f, 0.5f};
  const float min_ps[] = {0.0f, 0.05f};
  for (int i = 0; i < 120; ++i) {
    SamplingParams p;
    p.temperature = temps[i % 4];
    p.top_k = top_ks[(i / 4) % 5];
    p.top_p = top_ps[(i / 20) % 3];
    p.min_p = min_ps[(i / 60) % 2];
    p.seed = rng();
    p.step = i;
    params.push_back(p);
  }
  const int64_t rows = static_cast<int64_t>(params.size());
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(rows * V);
  for (float& x : logits) x = normal(rng);
  DeviceArray<float> d_logits(logits);
  DeviceArray<SamplingParams> d_params(params);
  DeviceArray<int32_t> d_out(rows);
  cuda::Sample(d_logits.get(), rows, V, d_params.get(), d_out.get(), nullptr);
  const std::vector<int32_t> got = d_out.Download();
  int ambiguous = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const ReferenceDraw want =
        ReferenceSample(std::vector<float>(logits.begin() + r * V, logits.begin() + (r + 1) * V), params[r]);
    if (want.ambiguous) {
      ++ambiguous;
      continue;
    }
    EXPECT_EQ(got[r], want.token) << "row " << r << " T=" << params[r].temperature << " k=" << params[r].top_k
                                  << " p=" << params[r].top_p << " min_p=" << params[r].min_p;
  }
  EXPECT_LE(ambiguous, rows / 8);
}

// Many seeded draws from one small distribution follow its softmax (within 5 sigma).
TEST(CudaSamplingTest, DrawFrequenciesFollowTheSoftmax) {
  TP_SKIP_WITHOUT_GPU();
  const int64_t V = 5, rows = 20000;
  const std::vector<float> row = {1.0f, 2.0f, 0.5f, -1.0f, 2.2f};
  std::vector<float> logits;
  std::vector<SamplingParams> params(rows);
  for (int64_t r = 0; r < rows; ++r) {
    logits.insert(logits.end(), row.begin(), row.end());
    params[r].seed = 99;
    params[r].step = r;
    params[r].top_k = 4;  // drops token 3
  }
  DeviceArray<float> d_logits(logits);
  DeviceArray<SamplingParams> d_params(params);
  DeviceArray<int32_t> d_out(rows);
  cuda::Sample(d_logits.get(), rows, V, d_params.get(), d_out.get(), nullptr);
  std::vector<int> counts(V, 0);
  for (int32_t t : d_out.Download()) ++counts[t];
  double z = 0;
  for (int64_t i = 0; i < V; ++i) z += i == 3 ? 0 : std::exp(row[i]);
  EXPECT_EQ(counts[3], 0);
  for (int64_t i = 0; i < V; ++i) {
    const double p = i == 3 ? 0 : std::exp(row[i]) / z;
    const double sigma = std::sqrt(rows * p * (1 - p)) + 1;
    EXPECT_NEAR(counts[i], rows * p, 5 * sigma) << "token " << i;
  }
}

}  // namespace
}  // namespace tpserve

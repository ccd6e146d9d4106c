// GPU argmax, penalties and sampling against the plain C++ reference of the rule in
// kernels/row_sampling.h (tests/sampling_reference.h, in doubles where it sums), plus a
// frequency check of many seeded draws against the softmax. GPU test (ctest -L gpu).
#include <algorithm>
#include <cmath>
#include <random>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/sampling.h"
#include "tests/cuda_test_util.h"
#include "tests/sampling_reference.h"

namespace tpserve {
namespace {

using cuda::SamplingParams;
using testing::DeviceArray;
using testing::PenaltyEntry;
using testing::ReferenceArgmax;
using testing::ReferencePenalties;
using testing::ReferenceDraw;
using testing::ReferenceSample;

// ---- Tests ----

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
      {{1, 0}, {17, 2}, {999, 1}, {3, kMaskedCount}}, {{0, 3}, {5, 0}}, {{400, 1}, {401, 0}, {2, 7}}};
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
  std::vector<float> got = d_logits.Download();
  // The masked token: -inf on both sides (compared apart: AllClose takes finite values).
  EXPECT_EQ(got[3], -INFINITY);
  EXPECT_EQ(want[3], -INFINITY);
  got[3] = want[3] = 0.0f;
  EXPECT_TRUE(testing::AllClose(got, want, {1e-6, 1e-6}));
}

// The vocab-parallel head's gathered shards [tp][rows, shard cols] (the last shard cut at
// the vocabulary) become full fp32 rows.
TEST(CudaSamplingTest, AssemblesGatheredShards) {
  TP_SKIP_WITHOUT_GPU();
  for (const int tp : {1, 2, 3}) {
    const int64_t rows = 5, V = 1001, shard = (V + tp - 1) / tp;
    std::vector<float> full = testing::RoundBf16(testing::RandomVector(rows * V, 11 + tp, -4.0f, 4.0f));
    std::vector<float> shards(tp * rows * shard, 99.0f);  // 99: padding never read
    for (int k = 0; k < tp; ++k) {
      const int64_t cols = std::min<int64_t>(shard, V - k * shard);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < cols; ++j) shards[k * rows * shard + r * cols + j] = full[r * V + k * shard + j];
      }
    }
    DeviceArray<uint16_t> d_shards(testing::ToBf16(shards));
    DeviceArray<float> d_out(rows * V);
    cuda::AssembleLogits(reinterpret_cast<const cuda::bf16*>(d_shards.get()), tp, rows, shard, V, d_out.get(), nullptr);
    EXPECT_EQ(d_out.Download(), full) << "tp " << tp;
  }
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

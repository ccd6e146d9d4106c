// cpu::SampleRows against the plain reference of the rule in kernels/row_sampling.h
// (tests/sampling_reference.h): penalties and masks, greedy, and seeded draws across
// mixes of temperature, top-k, top-p and min-p at vocabularies from 1 to 262,144, with
// ties at every threshold; plus the frequency of many draws against the softmax. The same
// reference checks the GPU kernels (tests/cuda_sampling_test.cc).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <tuple>
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

// Rule 0 (logit_bias, then structured output's mask) before the penalties, over a vocabulary
// that is not a multiple of 64: rows with a bias only, a mask only, both, and neither.
TEST(CpuSamplingTest, LogitEditsThenPenaltiesThenSampling) {
  const int64_t V = 130, words = 3;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  const int rows = 4;
  const std::vector<std::vector<std::pair<int32_t, float>>> biases = {{{5, 30.0f}, {129, -2.5f}}, {}, {{64, 100.0f}}, {}};
  std::vector<std::vector<bool>> allowed(2, std::vector<bool>(V, false));
  for (int32_t t : {3, 5, 63, 64, 128}) allowed[0][t] = true;  // row 1's mask
  for (int32_t t = 0; t < V; t += 2) allowed[1][t] = true;     // row 2's mask
  const std::vector<int32_t> mask_index = {-1, 0, 1, -1};
  std::vector<uint64_t> masks(2 * words, 0);
  for (int m = 0; m < 2; ++m) {
    for (int32_t t = 0; t < V; ++t) {
      if (allowed[m][t]) masks[m * words + t / 64] |= uint64_t{1} << (t % 64);
    }
  }
  std::vector<int32_t> bias_offsets = {0}, bias_tokens;
  std::vector<float> bias_values;
  for (const auto& row : biases) {
    for (const auto& [t, b] : row) {
      bias_tokens.push_back(t);
      bias_values.push_back(b);
    }
    bias_offsets.push_back(static_cast<int32_t>(bias_tokens.size()));
  }
  std::vector<RowSampling> params(rows);
  params[1].repetition_penalty = 1.3f;
  params[2].temperature = 0.0f;
  params[3].temperature = 0.7f;
  for (int r = 0; r < rows; ++r) {
    params[r].seed = 100 + r;
    params[r].step = 3;
  }
  const std::vector<std::vector<PenaltyEntry>> entries = {{}, {{3, 0}, {63, 1}}, {{64, kMaskedCount}}, {}};
  Csr csr;
  for (const auto& e : entries) csr.Add(e);
  std::vector<float> logits(rows * V);
  for (float& x : logits) x = normal(rng);
  std::vector<float> work = logits;
  cpu::ApplyLogitEdits(work.data(), rows, V, bias_offsets.data(), bias_tokens.data(), bias_values.data(),
                       mask_index.data(), masks.data(), words);
  std::vector<int32_t> out(rows);
  cpu::SampleRows(work.data(), rows, V, params.data(), csr.offsets.data(), csr.ids.data(), csr.counts.data(), out.data());
  for (int r = 0; r < rows; ++r) {
    std::vector<float> row(logits.begin() + r * V, logits.begin() + (r + 1) * V);
    testing::ReferenceEdits(row, biases[r], mask_index[r] < 0 ? nullptr : &allowed[mask_index[r]]);
    testing::ReferencePenalties(row, params[r], entries[r]);
    EXPECT_EQ(std::vector<float>(work.begin() + r * V, work.begin() + (r + 1) * V), row) << "row " << r;
    const testing::ReferenceDraw want = testing::ReferenceSample(row, params[r]);
    if (!want.ambiguous) { EXPECT_EQ(out[r], want.token) << "row " << r; }
    if (mask_index[r] >= 0) { EXPECT_TRUE(allowed[mask_index[r]][out[r]]) << "row " << r << " sampled " << out[r]; }
  }
  EXPECT_EQ(out[0], 5);  // +30 on a N(0, 2) row
  EXPECT_NE(out[2], 64);  // +100, then masked by its penalty entry
  // No edits at all: the rows are untouched.
  std::vector<float> same = logits;
  cpu::ApplyLogitEdits(same.data(), rows, V, nullptr, nullptr, nullptr, nullptr, nullptr, words);
  EXPECT_EQ(same, logits);
}

// Structured output's masks as grammars make them: words all clear (few tokens fit), all
// set (inside a string), mixed, and a last partial word; NaN and infinite logits kept as
// they are where allowed.
TEST(CpuSamplingTest, LogitMasksOfEveryWordShape) {
  for (const int64_t V : {int64_t{64}, int64_t{71}, int64_t{64 * 9 + 13}, int64_t{4096}}) {
    const int64_t words = (V + 63) / 64;
    std::mt19937 rng(static_cast<uint32_t>(V));
    std::normal_distribution<float> normal(0.0f, 2.0f);
    const int rows = 4;
    std::vector<std::vector<bool>> allowed(rows, std::vector<bool>(V, false));
    for (int r = 0; r < rows; ++r) {
      for (int64_t t = 0; t < V; ++t) {
        switch ((t / 64 + r) % 4) {
          case 0: allowed[r][t] = false; break;                 // a word all clear
          case 1: allowed[r][t] = true; break;                  // all set
          case 2: allowed[r][t] = rng() % 2 == 0; break;        // mixed
          default: allowed[r][t] = t % 64 == 63 || t % 9 == 0;  // sparse
        }
      }
    }
    std::vector<uint64_t> masks(rows * words, 0);
    for (int r = 0; r < rows; ++r) {
      for (int64_t t = 0; t < V; ++t) {
        if (allowed[r][t]) masks[r * words + t / 64] |= uint64_t{1} << (t % 64);
      }
    }
    std::vector<float> logits(rows * V);
    for (float& x : logits) x = normal(rng);
    logits[1] = std::numeric_limits<float>::quiet_NaN();
    logits[V + 2] = std::numeric_limits<float>::infinity();
    const std::vector<int32_t> mask_index = {0, 1, -1, 3};
    std::vector<float> work = logits;
    cpu::ApplyLogitEdits(work.data(), rows, V, nullptr, nullptr, nullptr, mask_index.data(), masks.data(), words);
    for (int r = 0; r < rows; ++r) {
      for (int64_t t = 0; t < V; ++t) {
        const float before = logits[r * V + t], after = work[r * V + t];
        if (mask_index[r] >= 0 && !allowed[mask_index[r]][t]) {
          EXPECT_EQ(after, -std::numeric_limits<float>::infinity()) << "V " << V << " row " << r << " token " << t;
        } else if (std::isnan(before)) {
          EXPECT_TRUE(std::isnan(after)) << "V " << V << " row " << r << " token " << t;
        } else {
          EXPECT_EQ(after, before) << "V " << V << " row " << r << " token " << t;
        }
      }
    }
  }
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

// The rows of a step without penalty entries, sampled where they are (the CPU backend at TP 1)
// and in many threads' hands: the same tokens as SampleRows over a copy, the rows unchanged.
TEST(CpuSamplingTest, UnpenalizedRowsAreSampledInPlaceAlike) {
  const int64_t V = 262144, rows = 12;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(rows * V);
  for (float& x : logits) x = normal(rng);
  std::vector<RowSampling> params(rows);
  for (int64_t r = 0; r < rows; ++r) {
    params[r].temperature = r % 3 == 0 ? 0.0f : 0.8f;
    params[r].top_k = r % 4 == 1 ? 50 : 0;
    params[r].top_p = r % 4 == 2 ? 0.9f : 1.0f;
    params[r].seed = 1000 + r;
    params[r].step = 7;
  }
  std::vector<int32_t> offsets(rows + 1, 0);
  std::vector<float> copy = logits;
  std::vector<int32_t> want(rows, -1), got(rows, -2);
  cpu::SampleRows(copy.data(), rows, V, params.data(), offsets.data(), nullptr, nullptr, want.data());
  const std::vector<float> before = logits;
  cpu::SampleUnpenalizedRows(logits.data(), rows, V, params.data(), got.data());
  EXPECT_EQ(got, want);
  EXPECT_EQ(logits, before);
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

constexpr float kInf = std::numeric_limits<float>::infinity();

// One row of a SampleRows call.
struct Case {
  std::string name;
  RowSampling p;
  std::vector<float> logits;
  std::vector<PenaltyEntry> entries;  // may hold ids outside [0, V), which SampleRows skips
};

struct Tally {
  int checked = 0;
  int ambiguous = 0;
  std::vector<int32_t> tokens;  // per row
};

// Samples all cases (one vocabulary) in one SampleRows call and compares each row with the
// reference: the penalized logits always, the token unless the reference calls the draw
// ambiguous. Even an ambiguous draw from a row with a finite logit must pick a finite one
// (never a masked token). A row left without a finite logit takes the first argmax.
Tally ExpectMatchesReference(const std::vector<Case>& cases) {
  Tally tally;
  if (cases.empty()) return tally;
  const int64_t V = static_cast<int64_t>(cases[0].logits.size());
  Csr csr;
  std::vector<RowSampling> params;
  std::vector<float> work;
  for (const Case& c : cases) {
    EXPECT_EQ(static_cast<int64_t>(c.logits.size()), V);
    csr.Add(c.entries);
    params.push_back(c.p);
    work.insert(work.end(), c.logits.begin(), c.logits.end());
  }
  std::vector<int32_t> out(cases.size(), -1);
  cpu::SampleRows(work.data(), static_cast<int64_t>(cases.size()), V, params.data(), csr.offsets.data(),
                  csr.ids.data(), csr.counts.data(), out.data());
  tally.tokens = out;
  for (size_t r = 0; r < cases.size(); ++r) {
    const Case& c = cases[r];
    const std::string where = c.name + " (V=" + std::to_string(V) + ", row " + std::to_string(r) + ")";
    std::vector<PenaltyEntry> in_range;
    for (const PenaltyEntry& e : c.entries) {
      if (e.token >= 0 && e.token < V) in_range.push_back(e);
    }
    std::vector<float> row = c.logits;
    testing::ReferencePenalties(row, c.p, in_range);
    EXPECT_TRUE(std::equal(row.begin(), row.end(), work.begin() + r * V)) << where << ": penalized logits differ";
    const int32_t got = out[r];
    if (got < 0 || got >= V) {
      ADD_FAILURE() << where << ": token " << got << " outside the vocabulary";
      continue;
    }
    const bool any_finite = std::any_of(row.begin(), row.end(), [](float x) { return std::isfinite(x); });
    if (!(c.p.temperature >= 1e-5f) || !any_finite) {
      EXPECT_EQ(got, testing::ReferenceArgmax(row)) << where;
      ++tally.checked;
      continue;
    }
    EXPECT_TRUE(std::isfinite(row[got])) << where << ": drew token " << got << " with logit " << row[got];
    const testing::ReferenceDraw want = testing::ReferenceSample(row, c.p);
    if (want.ambiguous) {
      ++tally.ambiguous;
      continue;
    }
    ++tally.checked;
    EXPECT_EQ(got, want.token) << where << " T=" << c.p.temperature << " k=" << c.p.top_k << " p=" << c.p.top_p
                               << " min_p=" << c.p.min_p << " seed=" << c.p.seed << " step=" << c.p.step;
  }
  return tally;
}

RowSampling Params(float temperature, int32_t top_k = 0, float top_p = 1.0f, float min_p = 0.0f) {
  RowSampling p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

enum class Shape {
  kPeaked,       // N(0, 2) with a few tokens far above: most mass on a handful
  kFlat,         // N(0, 0.3): every token a top-p candidate
  kTied,         // integers: every threshold falls inside a group of ties
  kMasked,       // N(0, 2) with 70% of the tokens at -inf
  kHeavyAndSea,  // V/400 heavy tokens with 60% of the mass at T = 1 above a near-flat sea
};
constexpr Shape kShapes[] = {Shape::kPeaked, Shape::kFlat, Shape::kTied, Shape::kMasked, Shape::kHeavyAndSea};
const char* ShapeName(Shape s) {
  switch (s) {
    case Shape::kPeaked: return "peaked";
    case Shape::kFlat: return "flat";
    case Shape::kTied: return "tied";
    case Shape::kMasked: return "masked";
    case Shape::kHeavyAndSea: return "heavy+sea";
  }
  return "?";
}

std::vector<float> MakeLogits(Shape shape, int64_t V, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> token(0, V - 1);
  std::vector<float> l(V);
  switch (shape) {
    case Shape::kPeaked:
      for (float& x : l) x = 2.0f * normal(rng);
      for (int i = 0; i < 8; ++i) l[token(rng)] += 6.0f + 6.0f * uniform(rng);
      break;
    case Shape::kFlat:
      for (float& x : l) x = 0.3f * normal(rng);
      break;
    case Shape::kTied:
      for (float& x : l) x = std::round(1.5f * normal(rng));
      break;
    case Shape::kMasked:
      for (float& x : l) x = uniform(rng) < 0.7f ? -kInf : 2.0f * normal(rng);
      l[token(rng)] = normal(rng);  // at least one finite
      break;
    case Shape::kHeavyAndSea: {
      const int64_t heavy = std::max<int64_t>(1, V / 400);
      const float level = std::log(1.5f * static_cast<float>(V) / static_cast<float>(heavy));
      for (float& x : l) x = 0.05f * uniform(rng);
      for (int64_t i = 0; i < heavy; ++i) l[token(rng)] = level + 0.02f * uniform(rng);
      break;
    }
  }
  return l;
}

// Up to 12 distinct in-vocabulary entries (masks among them, never of every token) and
// two out-of-vocabulary ones.
std::vector<PenaltyEntry> MakeEntries(int64_t V, std::mt19937& rng) {
  const int32_t counts[] = {kMaskedCount, 0, 1, 2, 5};
  std::vector<int32_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  const int64_t n = std::min<int64_t>(V - 1, 12);
  std::vector<PenaltyEntry> entries;
  for (int64_t i = 0; i < n; ++i) {
    std::swap(ids[i], ids[i + rng() % (V - i)]);
    entries.push_back({ids[i], counts[rng() % 5]});
  }
  entries.push_back({static_cast<int32_t>(V), 1});
  entries.push_back({-1, kMaskedCount});
  return entries;
}

// Every filter alone and combined, at and around its limits (top_k > 2048 takes
// nth_element, top_k >= V is off, top_p <= 0 keeps the top ties).
std::vector<std::pair<std::string, RowSampling>> SweepConfigs(int64_t V) {
  const int32_t v = static_cast<int32_t>(V);
  return {
      {"greedy", Params(0.0f)},
      {"T=1", Params(1.0f)},
      {"T=0.8", Params(0.8f)},
      {"T=1.7", Params(1.7f)},
      {"k=1", Params(0.8f, 1)},
      {"k=5", Params(0.8f, 5)},
      {"k=50", Params(1.0f, 50)},
      {"k=2049", Params(1.0f, 2049)},
      {"k=5000", Params(0.9f, 5000)},
      {"k=V-1", Params(1.0f, v - 1)},
      {"k=V", Params(1.0f, v)},
      {"k=V+3", Params(0.8f, v + 3)},
      {"p=0.01", Params(1.0f, 0, 0.01f)},
      {"p=0.5", Params(0.8f, 0, 0.5f)},
      {"p=0.9", Params(1.0f, 0, 0.9f)},
      {"p=0.999", Params(1.2f, 0, 0.999f)},
      {"p=0", Params(1.0f, 0, 0.0f)},
      {"k=50,p=0.9", Params(0.8f, 50, 0.9f)},
      {"k=3000,p=0.9", Params(1.0f, 3000, 0.9f)},
      {"min_p=0.05", Params(1.0f, 0, 1.0f, 0.05f)},
      {"min_p=0.3", Params(1.3f, 0, 1.0f, 0.3f)},
      {"p=0.3,min_p=0.1", Params(1.0f, 0, 0.3f, 0.1f)},
      {"k=100,p=0.9,min_p=0.02", Params(0.8f, 100, 0.9f, 0.02f)},
      {"k=40,p=0.95,min_p=0.05", Params(0.7f, 40, 0.95f, 0.05f)},
  };
}

// Every vocabulary size around the block and SIMD widths up to 262,144, every logit shape,
// every config; one SampleRows call per (V, shape, seed) with a different config and
// penalties on each row.
TEST(CpuSamplingTest, VocabSweepMatchesReference) {
  std::mt19937 rng(11);
  Tally total;
  for (const int64_t V : {1, 7, 255, 256, 257, 4099, 262144}) {
    const int seeds = V >= 100000 ? 1 : 4;
    Tally tally;
    for (const Shape shape : kShapes) {
      for (int s = 0; s < seeds; ++s) {
        std::vector<Case> cases;
        for (const auto& [name, params] : SweepConfigs(V)) {
          Case c{std::string(ShapeName(shape)) + " " + name, params, MakeLogits(shape, V, rng), {}};
          c.p.seed = rng();
          c.p.step = rng() % 1000;
          if (cases.size() % 3 == 0) {
            c.name += " +penalties";
            c.entries = MakeEntries(V, rng);
            c.p.repetition_penalty = 1.3f;
            c.p.presence_penalty = 0.4f;
            c.p.frequency_penalty = 0.2f;
          }
          cases.push_back(std::move(c));
        }
        const Tally t = ExpectMatchesReference(cases);
        tally.checked += t.checked;
        tally.ambiguous += t.ambiguous;
      }
    }
    std::printf("V=%lld: %d draws checked, %d ambiguous\n", static_cast<long long>(V), tally.checked,
                tally.ambiguous);
    total.checked += tally.checked;
    total.ambiguous += tally.ambiguous;
  }
  // Flat rows at large V are ambiguous by the reference's measure (every weight is below
  // its 1e-4 tolerance); the rest must be checked.
  EXPECT_GT(total.checked, 3 * total.ambiguous);
}

// Tied logits straddle each threshold: the rule keeps every tie, so over many draws each
// kept token turns up and nothing else does.
TEST(CpuSamplingTest, TiesAtThresholdsAreAllKept) {
  const int64_t V = 300;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(-5.0f, 1.0f);
  std::vector<float> logits(V);
  for (float& x : logits) x = normal(rng);
  const std::set<int32_t> top = {10, 150, 299}, second = {20, 40, 60, 200};
  for (int32_t i : top) logits[i] = 4.0f;
  for (int32_t i : second) logits[i] = 3.0f;
  std::set<int32_t> both = top;
  both.insert(second.begin(), second.end());
  // The reference calls every draw under top_p <= 0 ambiguous (its crossing sits at need = 0)
  // and every one under min_p = 1 (the max lies on the threshold): there only the kept set
  // is checked.
  const std::vector<std::tuple<std::string, RowSampling, std::set<int32_t>, bool>> configs = {
      {"k=2 (inside the top ties)", Params(1.0f, 2), top, true},
      {"k=4 (inside the second ties)", Params(1.0f, 4), both, true},
      {"k=4, T=0.7", Params(0.7f, 4), both, true},
      {"p=0 (the top ties)", Params(1.0f, 0, 0.0f), top, false},
      {"p=0.8 (boundary in the second ties)", Params(1.0f, 0, 0.8f), both, true},
      {"p=0.5 (boundary in the top ties)", Params(0.9f, 0, 0.5f), top, true},
      {"min_p=1 (the max ties)", Params(1.0f, 0, 1.0f, 1.0f), top, false},
      {"k=4,p=0.8,min_p=0.3", Params(1.0f, 4, 0.8f, 0.3f), both, true},
  };
  for (const auto& [name, params, want, reference_decides] : configs) {
    std::vector<Case> cases;
    for (int step = 0; step < 300; ++step) {
      Case c{name, params, logits, {}};
      c.p.seed = 99;
      c.p.step = static_cast<uint64_t>(step);
      cases.push_back(std::move(c));
    }
    const Tally t = ExpectMatchesReference(cases);
    if (reference_decides) {
      EXPECT_GT(t.checked, 250) << name;
    }
    EXPECT_EQ(std::set<int32_t>(t.tokens.begin(), t.tokens.end()), want) << name;
  }
}

// Distinct logits that the division by T rounds to one s are ties of the rule (its
// thresholds are on s), so a threshold on the logits alone would drop one of them.
TEST(CpuSamplingTest, LogitsThatTemperatureMakesEqualAreTies) {
  const float T = 1.5f;
  float x = 1.6f;
  int tries = 0;
  while (x / T != std::nextafter(x, -kInf) / T) {
    x = std::nextafter(x, 2.0f);
    ASSERT_LT(++tries, 100000) << "no pair of adjacent floats that T merges";
  }
  const float below = std::nextafter(x, -kInf);
  ASSERT_NE(x, below);
  const int64_t V = 64;
  std::vector<float> logits(V, -10.0f);
  logits[30] = below;  // the lower logit first in id order: the draw must reach it
  logits[10] = x;
  std::vector<float> second = logits;  // the pair below a larger top token
  second[0] = 2.5f;
  // As in TiesAtThresholdsAreAllKept, the reference cannot decide under p=0 or min_p=1.
  const std::vector<std::tuple<std::string, RowSampling, std::vector<float>, std::set<int32_t>, bool>> configs = {
      {"k=1", Params(T, 1), logits, {10, 30}, true},
      {"p=0", Params(T, 0, 0.0f), logits, {10, 30}, false},
      {"min_p=1", Params(T, 0, 1.0f, 1.0f), logits, {10, 30}, false},
      {"k=2 below a larger top", Params(T, 2), second, {0, 10, 30}, true},
      {"k=2,p=0.999 below a larger top", Params(T, 2, 0.999f), second, {0, 10, 30}, true},
  };
  for (const auto& [name, params, row, want, reference_decides] : configs) {
    std::vector<Case> cases;
    for (int step = 0; step < 200; ++step) {
      Case c{name, params, row, {}};
      c.p.seed = 7;
      c.p.step = static_cast<uint64_t>(step);
      cases.push_back(std::move(c));
    }
    const Tally t = ExpectMatchesReference(cases);
    if (reference_decides) {
      EXPECT_GT(t.checked, 150) << name;
    }
    EXPECT_EQ(std::set<int32_t>(t.tokens.begin(), t.tokens.end()), want) << name;
  }
}

// A top-k threshold with more ties than the gathered (sparse) path holds: the kept set,
// ties included, is weighed over the whole row, alone and under top-p.
TEST(CpuSamplingTest, TopKTiesBeyondTheSparseLimit) {
  const int64_t V = 262144;
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(-20.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> logits(V);
  for (float& x : logits) x = normal(rng);
  for (int64_t i = 0; i < 5000; ++i) logits[(i * 52391) % V] = -2.0f;  // the 50th largest, 5000 times
  for (int64_t i = 0; i < 49; ++i) logits[(i * 7919 + 13) % V] = 2.0f + uniform(rng);
  std::vector<Case> cases;
  for (int step = 0; step < 24; ++step) {
    Case c{"k=50", Params(1.0f, 50), logits, {}};
    if (step % 2 == 1) c = {"k=50,p=0.4", Params(1.0f, 50, 0.4f), logits, {}};
    c.p.seed = 3;
    c.p.step = static_cast<uint64_t>(step);
    cases.push_back(std::move(c));
  }
  const Tally t = ExpectMatchesReference(cases);
  EXPECT_GT(t.checked, 10);
}

// Top-p over a quarter of a million candidates (the binned path) with the boundary among
// heavy tokens, where the reference's draws are not ambiguous; with min-p too.
TEST(CpuSamplingTest, TopPBinsManyCandidates) {
  const int64_t V = 262144;
  std::mt19937 rng(8);
  const std::vector<float> logits = MakeLogits(Shape::kHeavyAndSea, V, rng);
  std::vector<Case> cases;
  for (int step = 0; step < 24; ++step) {
    const RowSampling p = step % 3 == 0   ? Params(1.0f, 0, 0.3f)
                          : step % 3 == 1 ? Params(0.9f, 0, 0.45f)
                                          : Params(1.0f, 0, 0.3f, 1e-4f);
    Case c{"heavy+sea p=" + std::to_string(p.top_p), p, logits, {}};
    c.p.seed = 12;
    c.p.step = static_cast<uint64_t>(step);
    cases.push_back(std::move(c));
  }
  const Tally t = ExpectMatchesReference(cases);
  EXPECT_GT(t.checked, 12);
}

// Rows without a finite (scaled) logit have nothing to weigh: the first argmax, NaN
// counting as the largest, as for greedy rows.
TEST(CpuSamplingTest, NoFiniteLogitTakesTheFirstArgmax) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Row {
    std::vector<float> logits;
    RowSampling p;
    int32_t want;
  };
  const std::vector<Row> rows = {
      {{-kInf, -kInf, -kInf}, Params(1.0f, 2, 0.9f), 0},
      {{1.0f, kInf, 2.0f, kInf}, Params(1.0f), 1},
      {{3e38f, -1.0f, 3.1e38f}, Params(1e-3f), 2},  // 3.1e38 / T overflows
      {{1.0f, nan, 3.0f, nan}, Params(0.0f), 1},
      {{nan, nan}, Params(0.7f), 0},
  };
  for (size_t r = 0; r < rows.size(); ++r) {
    std::vector<float> l = rows[r].logits;
    const int32_t offsets[2] = {0, 0};
    int32_t got = -1;
    cpu::SampleRows(l.data(), 1, static_cast<int64_t>(l.size()), &rows[r].p, offsets, nullptr, nullptr, &got);
    EXPECT_EQ(got, rows[r].want) << "row " << r;
  }
}

// cpu::LogSumExp and cpu::TopN (the host logprobs' passes) against plain loops at every
// length around the vector width, with ties, masked (-inf) tokens in vector lanes and tails,
// and a NaN or +inf in either part.
TEST(CpuSamplingTest, LogSumExpAndTopNMatchPlainLoops) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(7);
  for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 257, 1000, 262144}) {
    std::vector<float> x(n);
    for (auto& v : x) v = static_cast<float>(static_cast<int>(rng() % 64) - 32) / 4.0f;  // many ties
    for (int64_t i = 3; i < n; i += 5) x[i] = -kInf;
    double max = -kInf;
    for (float v : x) max = std::max<double>(max, v);
    double z = 0;
    for (float v : x) z += std::exp(static_cast<double>(v) - max);
    EXPECT_NEAR(cpu::LogSumExp(x.data(), n), max + std::log(z), 1e-5) << n;

    for (int64_t top_n : {1, 3, 8, 20}) {
      std::vector<int32_t> order;
      for (int32_t i = 0; i < n; ++i) {
        if (x[i] != -kInf) order.push_back(i);
      }
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
      order.resize(std::min<size_t>(order.size(), top_n));
      std::vector<int32_t> ids(top_n, -1);
      std::vector<float> values(top_n);
      const int64_t listed = cpu::TopN(x.data(), n, top_n, ids.data(), values.data());
      ASSERT_EQ(listed, static_cast<int64_t>(order.size())) << n << " " << top_n;
      for (int64_t i = 0; i < listed; ++i) {
        EXPECT_EQ(ids[i], order[i]) << n << " " << top_n << " " << i;
        EXPECT_EQ(values[i], x[order[i]]);
      }
    }
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), kInf}) {
      for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
        std::vector<float> y = x;
        y[at] = bad;
        EXPECT_TRUE(std::isnan(cpu::LogSumExp(y.data(), n))) << n << " " << at;
      }
    }
  }
  const std::vector<float> masked(20, -kInf);
  EXPECT_EQ(cpu::LogSumExp(masked.data(), 20), -kInf);
  int32_t id = -1;
  float value = 0;
  EXPECT_EQ(cpu::TopN(masked.data(), 20, 1, &id, &value), 0);
}

}  // namespace
}  // namespace tpserve

// Weights held in AMX tile order (kernels/cpu/gemm_amx.h, DType::kBF16Tiles): the layout
// itself, and Linear on it (prefill tiles, decode dot products) against the reference.
// Skipped where the CPU has no AMX-BF16 (only the amx-bf16 path holds weights so).
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm_amx.h"
#include "tests/cpu_test_util.h"

namespace tpserve::cpu {
namespace {

using testing_util::AllClose;
using testing_util::RandomFloats;
using testing_util::Tolerance;

class AmxTilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!amx::Bf16Available()) GTEST_SKIP() << "no AMX-BF16 here: " << amx::Bf16Unavailable();
  }
};

std::vector<uint16_t> RandomBf16(size_t n, std::mt19937& rng) {
  std::vector<uint16_t> w(n);
  const std::vector<float> v = RandomFloats(n, rng);
  for (size_t i = 0; i < n; ++i) w[i] = F32ToBf16(v[i]);
  return w;
}

TEST_F(AmxTilesTest, PackPutsEachGroupsPairsInTileRowsAndUnpackRestoresTheRows) {
  std::mt19937 rng(1);
  const int64_t n = 48, k = 96, steps = k / 32;
  const std::vector<uint16_t> rows = RandomBf16(n * k, rng);
  std::vector<uint16_t> w = rows;
  amx::PackTiles(w.data(), n, k);
  for (int64_t g = 0; g < n / 16; ++g) {
    for (int64_t s = 0; s < steps; ++s) {
      for (int r = 0; r < 16; ++r) {
        for (int c = 0; c < 16; ++c) {
          const uint16_t* pair = w.data() + ((g * steps + s) * 16 + r) * 32 + 2 * c;
          const uint16_t* want = rows.data() + (g * 16 + c) * k + s * 32 + 2 * r;
          ASSERT_EQ(pair[0], want[0]) << "g=" << g << " s=" << s << " r=" << r << " c=" << c;
          ASSERT_EQ(pair[1], want[1]) << "g=" << g << " s=" << s << " r=" << r << " c=" << c;
        }
      }
    }
  }
  amx::UnpackTiles(w.data(), n, k);
  EXPECT_EQ(w, rows);
}

// Linear on the packed weights (any path: the dtype picks the kernels) against the fp64
// product of x rounded to bf16 and the weights, the tolerance of fp32 sums.
void CheckTiles(int64_t m, int64_t k, int64_t n, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "m=" << m << " k=" << k << " n=" << n);
  std::mt19937 rng(seed);
  const std::vector<float> x = RandomFloats(m * k, rng);
  const std::vector<uint16_t> rows = RandomBf16(n * k, rng);
  std::vector<uint16_t> w = rows;
  amx::PackTiles(w.data(), n, k);
  std::vector<float> y(m * n, std::numeric_limits<float>::quiet_NaN());
  Linear(GemmPath::kAmxBf16, x.data(), m, k, w.data(), DType::kBF16Tiles, n, y.data());
  std::vector<double> want(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < n; ++r) {
      double sum = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        sum += static_cast<double>(Bf16ToF32(F32ToBf16(x[i * k + kk]))) * Bf16ToF32(rows[r * k + kk]);
      }
      want[i * n + r] = sum;
    }
  }
  EXPECT_TRUE(AllClose(y, want, Tolerance{2e-6 * std::sqrt(static_cast<double>(k)), 1e-5}));
}

// Decode rows: 1..16 rows of x (in passes of 8), groups split between threads, an odd group.
TEST_F(AmxTilesTest, DecodeRowsMatchReference) {
  uint32_t seed = 10;
  for (const int64_t m : {1, 2, 3, 5, 8, 9, 16}) {
    for (const int64_t k : {32, 96, 2048}) {
      for (const int64_t n : {16, 48, 272}) CheckTiles(m, k, n, seed++);
    }
  }
}

// Prefill: x rows on both sides of the 32-row blocks (the ragged last block goes through the
// edge buffer), an odd last weight group (2 x 1 tiles), k in one pass or in 64-step chunks with
// the partial sums kept in y (a ragged last chunk), and groups of weights and of x.
TEST_F(AmxTilesTest, PrefillMatchesReferenceAcrossBlocksChunksAndGroups) {
  uint32_t seed = 100;
  for (const int64_t m : {17, 31, 32, 33, 64, 130}) {
    for (const int64_t k : {32, 2048, 2080}) {
      for (const int64_t n : {16, 32, 48}) CheckTiles(m, k, n, seed++);
    }
  }
  CheckTiles(530, 256, 336, 200);   // several x groups (8 pairs of 16 rows each)
  CheckTiles(100, 4160, 272, 201);  // 3 chunks, 9 pairs of groups over 2 threads' weight groups
}

}  // namespace
}  // namespace tpserve::cpu

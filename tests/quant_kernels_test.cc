// Tests for kernels/cpu/quant.h: QuantizeX's rounding and bsums, and every dot kernel (per
// weight type and per instruction-set path) against the dequantize-then-dot reference
// (kernels/cpu/dequantize.h) computed in double.
#include "kernels/cpu/quant.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/base.h"
#include "kernels/cpu/dequantize.h"

namespace tpserve {
void PrintTo(DType t, std::ostream* os) { *os << DTypeName(t); }

namespace cpu {
void PrintTo(QuantIsa isa, std::ostream* os) { *os << QuantIsaName(isa); }

namespace {

constexpr DType kDotTypes[] = {DType::kQ4_0, DType::kQ5_0, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
constexpr QuantIsa kIsas[] = {QuantIsa::kScalar, QuantIsa::kAvx2, QuantIsa::kAvx512Vnni};

bool IsKQuant(DType w) { return BlockElems(w) == 256; }

std::vector<float> RandomFloats(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// Byte offsets of a block's fp16 scales (d, and dmin for Q4_K / Q5_K).
std::vector<size_t> ScaleOffsets(DType w) {
  switch (w) {
    case DType::kQ4_K:
    case DType::kQ5_K: return {0, 2};
    case DType::kQ6_K: return {208};
    default: return {0};
  }
}

// `rows` weight rows of k elements: random quant bytes (every nibble, bit and 6-bit scale
// pattern), with fp16 scales in [1e-3, 1e-2] so that no block holds NaN or Inf. With `fill`
// >= 0 every quant byte is that value instead.
std::vector<uint8_t> RandomWeights(DType w, int64_t rows, int64_t k, std::mt19937& rng, int fill = -1) {
  std::vector<uint8_t> bytes(rows * RowBytes(w, k));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(fill >= 0 ? fill : byte(rng));
  std::uniform_real_distribution<float> scale(1e-3f, 1e-2f);
  for (size_t blk = 0; blk < bytes.size(); blk += BlockBytes(w)) {
    for (size_t off : ScaleOffsets(w)) {
      const uint16_t h = F32ToF16(scale(rng));
      std::memcpy(&bytes[blk + off], &h, 2);
    }
  }
  return bytes;
}

// The activation x_i exactly as the kernels see it, and each element's block scale d.
struct DequantizedX {
  std::vector<double> x;
  std::vector<double> d;
};

DequantizedX DequantizeX(DType w, const uint8_t* row, int64_t k) {
  DequantizedX out{std::vector<double>(k), std::vector<double>(k)};
  if (IsKQuant(w)) {
    const auto* blocks = reinterpret_cast<const BlockQ8K*>(row);
    for (int64_t j = 0; j < k; ++j) {
      out.d[j] = blocks[j / 256].d;
      out.x[j] = out.d[j] * blocks[j / 256].qs[j % 256];
    }
  } else {
    const auto* blocks = reinterpret_cast<const BlockQ8*>(row);
    for (int64_t j = 0; j < k; ++j) {
      out.d[j] = blocks[j / 32].d;
      out.x[j] = out.d[j] * blocks[j / 32].qs[j % 32];
    }
  }
  return out;
}

// ---- QuantizeX ----

TEST(QuantizeXTest, RoundTripWithinHalfAStep) {
  std::mt19937 rng(1);
  for (DType w : {DType::kQ8_0, DType::kQ4_K}) {
    const int64_t k = 1024, m = 3;
    std::vector<float> x = RandomFloats(m * k, rng, -3.0f, 3.0f);
    for (int64_t j = 256; j < 512; ++j) x[j] *= 1e-3f;  // a block of small values
    std::memset(&x[512], 0, 256 * sizeof(float));       // an all-zero (super-)block
    const size_t row_bytes = QuantizedXRowBytes(w, k);
    EXPECT_EQ(row_bytes, IsKQuant(w) ? k / 256 * sizeof(BlockQ8K) : k / 32 * sizeof(BlockQ8));
    std::vector<uint8_t> xq(m * row_bytes);
    QuantizeX(w, x.data(), m, k, xq.data());
    const int64_t block = IsKQuant(w) ? 256 : 32;
    for (int64_t i = 0; i < m; ++i) {
      const uint8_t* row = xq.data() + i * row_bytes;
      const DequantizedX dq = DequantizeX(w, row, k);
      for (int64_t b = 0; b < k / block; ++b) {
        const float* xb = &x[i * k + b * block];
        float amax = 0.0f;
        for (int64_t j = 0; j < block; ++j) amax = std::max(amax, std::fabs(xb[j]));
        const double d = dq.d[b * block];
        ASSERT_EQ(d, static_cast<double>(amax / 127.0f)) << DTypeName(w) << " row " << i << " block " << b;
        for (int64_t j = 0; j < block; ++j) {
          const int64_t e = b * block + j;
          const int q = static_cast<int>(std::lround(dq.x[e] / (d > 0 ? d : 1.0)));
          ASSERT_LE(std::abs(q), 127);
          // The rounding exactly as documented: round(x * (127 / amax)), ties away from zero.
          const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
          ASSERT_EQ(q, static_cast<int>(std::round(xb[j] * id))) << "element " << e;
          ASSERT_LE(std::abs(dq.x[e] - xb[j]), d / 2 * (1 + 1e-6) + 1e-30) << "element " << e;
        }
        if (amax == 0.0f) {
          for (int64_t j = 0; j < block; ++j) ASSERT_EQ(dq.x[b * block + j], 0.0);
        }
      }
      if (IsKQuant(w)) {
        const auto* blocks = reinterpret_cast<const BlockQ8K*>(row);
        for (int64_t b = 0; b < k / 256; ++b) {
          for (int g = 0; g < 16; ++g) {
            int sum = 0;
            for (int j = 0; j < 16; ++j) sum += blocks[b].qs[16 * g + j];
            ASSERT_EQ(blocks[b].bsums[g], sum) << "super-block " << b << " group " << g;
          }
        }
      }
    }
  }
}

TEST(QuantizeXTest, TiesRoundAwayFromZero) {
  // amax = 127 makes the step exactly 1, so x = n + 0.5 is a tie.
  for (DType w : {DType::kQ8_0, DType::kQ4_K}) {
    const int64_t k = BlockElems(w) == 256 ? 256 : 32;
    std::vector<float> x(k, 0.0f);
    x[0] = 127.0f;
    x[1] = 2.5f;
    x[2] = -3.5f;
    x[3] = 0.5f;
    x[4] = -0.5f;
    x[5] = 0.49999997f;
    x[6] = 126.5f;
    std::vector<uint8_t> xq(QuantizedXRowBytes(w, k));
    QuantizeX(w, x.data(), 1, k, xq.data());
    const int8_t* qs = IsKQuant(w) ? reinterpret_cast<BlockQ8K*>(xq.data())->qs : reinterpret_cast<BlockQ8*>(xq.data())->qs;
    EXPECT_EQ(qs[0], 127);
    EXPECT_EQ(qs[1], 3);
    EXPECT_EQ(qs[2], -4);
    EXPECT_EQ(qs[3], 1);
    EXPECT_EQ(qs[4], -1);
    EXPECT_EQ(qs[5], 0);
    EXPECT_EQ(qs[6], 127);
  }
}

// ---- Dot kernels ----

class QuantDotTest : public ::testing::TestWithParam<std::tuple<DType, QuantIsa>> {
 protected:
  void SetUp() override {
    const auto [w, isa] = GetParam();
    if (!QuantIsaAvailable(isa)) GTEST_SKIP() << QuantIsaName(isa) << " is not available on this CPU";
    dot_ = FindQuantDot(w, isa);
    ASSERT_NE(dot_, nullptr);
  }

  // Runs the kernel on each of `rows` weight rows against m rows of x and checks y against
  // the references: per row of w and x, |y - w . dequant(xq)| <= 1e-5 sum |w x| + 1e-6 (the
  // fp32 sums of exact block results), and |y - w . x| within x's int8 rounding on top.
  // `pad` extra bytes between x rows and `ldy` > 1 must be respected.
  void Check(const std::vector<uint8_t>& weights, int64_t rows, const std::vector<float>& x, int m, int64_t k,
             size_t pad = 0, int64_t ldy = 1) {
    const DType w = std::get<0>(GetParam());
    const size_t min_bytes = QuantizedXRowBytes(w, k), row_bytes = min_bytes + pad;
    std::vector<uint8_t> xq(m * row_bytes, 0xA5);  // the padding stays garbage
    for (int i = 0; i < m; ++i) QuantizeX(w, &x[i * k], 1, k, &xq[i * row_bytes]);
    std::vector<DequantizedX> dx;
    for (int i = 0; i < m; ++i) dx.push_back(DequantizeX(w, &xq[i * row_bytes], k));
    std::vector<float> wf(k);
    constexpr float kSentinel = -12345.0f;
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* w_row = &weights[r * RowBytes(w, k)];
      DequantizeRow(w, w_row, k, wf.data());
      std::vector<float> y(m * ldy, kSentinel);
      dot_(w_row, xq.data(), row_bytes, m, k, y.data(), ldy);
      for (int i = 0; i < m; ++i) {
        double want = 0, want_fp32 = 0, abs_sum = 0, rounding = 0;
        for (int64_t j = 0; j < k; ++j) {
          want += static_cast<double>(wf[j]) * dx[i].x[j];
          want_fp32 += static_cast<double>(wf[j]) * x[i * k + j];
          abs_sum += std::abs(static_cast<double>(wf[j]) * dx[i].x[j]);
          rounding += std::abs(static_cast<double>(wf[j])) * dx[i].d[j] / 2;
        }
        const double tol = 1e-5 * abs_sum + 1e-6;
        const double got = y[i * ldy];
        ASSERT_LE(std::abs(got - want), tol) << "w row " << r << ", x row " << i << " of " << m << ", k " << k
                                             << ": got " << got << " want " << want;
        ASSERT_LE(std::abs(got - want_fp32), tol + rounding * (1 + 1e-6))
            << "w row " << r << ", x row " << i << " against fp32 x";
        for (int64_t c = 1; c < ldy; ++c) ASSERT_EQ(y[i * ldy + c], kSentinel) << "wrote between rows of y";
      }
    }
  }

  QuantDotFn dot_ = nullptr;
};

TEST_P(QuantDotTest, MatchesDequantizedReference) {
  const DType w = std::get<0>(GetParam());
  std::mt19937 rng(7 + static_cast<int>(w));
  const std::vector<int64_t> ks = IsKQuant(w) ? std::vector<int64_t>{256, 512, 2304}
                                              : std::vector<int64_t>{256, 512, 32 * 7};
  for (int64_t k : ks) {
    for (int m : {1, 2, 3, 5, 16}) {
      SCOPED_TRACE("k " + std::to_string(k) + ", m " + std::to_string(m));
      constexpr int64_t kRows = 4;
      const std::vector<uint8_t> weights = RandomWeights(w, kRows, k, rng);
      // Rows of different magnitudes, so each has its own block scales.
      std::vector<float> x = RandomFloats(m * k, rng);
      for (int i = 0; i < m; ++i) {
        for (int64_t j = 0; j < k; ++j) x[i * k + j] *= static_cast<float>(1 + i);
      }
      Check(weights, kRows, x, m, k);
    }
  }
}

// The integer extremes of each format (every quant byte 0x00, 0xff, 0x80 or 0x7f) against x at
// +-amax: the largest products that vpmaddubsw's int16 pair sums and the int32 lanes must hold.
TEST_P(QuantDotTest, ExtremeQuantsDoNotOverflow) {
  const DType w = std::get<0>(GetParam());
  std::mt19937 rng(3);
  const int64_t k = IsKQuant(w) ? 512 : 64;
  for (int fill : {0x00, 0xff, 0x80, 0x7f}) {
    SCOPED_TRACE("fill " + std::to_string(fill));
    const std::vector<uint8_t> weights = RandomWeights(w, 1, k, rng, fill);
    for (float sign : {1.0f, -1.0f}) {
      const int m = 3;
      std::vector<float> x(m * k);
      for (int64_t j = 0; j < k; ++j) {
        x[j] = sign;                        // all +-amax
        x[k + j] = (j % 2 ? 1.0f : -1.0f);  // alternating
        x[2 * k + j] = (j % 3 ? sign : -sign);
      }
      Check(weights, 1, x, m, k);
    }
  }
}

TEST_P(QuantDotTest, RespectsStridesOfXAndY) {
  const DType w = std::get<0>(GetParam());
  std::mt19937 rng(11);
  const int64_t k = IsKQuant(w) ? 512 : 96;
  const std::vector<uint8_t> weights = RandomWeights(w, 2, k, rng);
  for (int m : {1, 3, 6, 9}) {
    SCOPED_TRACE("m " + std::to_string(m));
    const std::vector<float> x = RandomFloats(m * k, rng);
    Check(weights, 2, x, m, k, /*pad=*/64, /*ldy=*/3);
  }
}

// Every path equals the scalar one up to the order of fp32 sums (checked loosely here; each is
// checked tightly against the reference above).
TEST_P(QuantDotTest, AgreesWithScalar) {
  const DType w = std::get<0>(GetParam());
  std::mt19937 rng(5);
  const int64_t k = 2304 - (IsKQuant(w) ? 0 : 32);
  const int m = 4;
  const std::vector<uint8_t> weights = RandomWeights(w, 1, k, rng);
  const std::vector<float> x = RandomFloats(m * k, rng);
  std::vector<uint8_t> xq(m * QuantizedXRowBytes(w, k));
  QuantizeX(w, x.data(), m, k, xq.data());
  std::vector<float> y(m), y_scalar(m);
  dot_(weights.data(), xq.data(), QuantizedXRowBytes(w, k), m, k, y.data(), 1);
  FindQuantDot(w, QuantIsa::kScalar)(weights.data(), xq.data(), QuantizedXRowBytes(w, k), m, k, y_scalar.data(), 1);
  for (int i = 0; i < m; ++i) EXPECT_NEAR(y[i], y_scalar[i], 1e-4 * (std::abs(y_scalar[i]) + 1)) << "row " << i;
}

INSTANTIATE_TEST_SUITE_P(TypesAndPaths, QuantDotTest,
                         ::testing::Combine(::testing::ValuesIn(kDotTypes), ::testing::ValuesIn(kIsas)),
                         [](const ::testing::TestParamInfo<std::tuple<DType, QuantIsa>>& info) {
                           return std::string(DTypeName(std::get<0>(info.param))) + "_" +
                                  QuantIsaName(std::get<1>(info.param));
                         });

TEST(QuantDotLookupTest, OnlyTheSixTypesHaveKernels) {
  for (DType w : kDotTypes) {
    EXPECT_TRUE(HasQuantDot(w)) << DTypeName(w);
    EXPECT_NE(FindQuantDot(w, QuantIsa::kScalar), nullptr) << DTypeName(w);
  }
  for (DType w : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_1, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K}) {
    EXPECT_FALSE(HasQuantDot(w)) << DTypeName(w);
    for (QuantIsa isa : kIsas) {
      EXPECT_EQ(FindQuantDot(w, isa), nullptr) << DTypeName(w) << " " << QuantIsaName(isa);
    }
  }
}

TEST(QuantDotLookupTest, PathsFollowTheCpu) {
  EXPECT_TRUE(QuantIsaAvailable(QuantIsa::kScalar));
  EXPECT_TRUE(QuantIsaAvailable(BestQuantIsa()));
  EXPECT_STREQ(QuantIsaName(QuantIsa::kAvx512Vnni), "avx512_vnni");
  for (QuantIsa isa : kIsas) {
    if (!QuantIsaAvailable(isa)) {
      EXPECT_EQ(FindQuantDot(DType::kQ4_K, isa), nullptr) << QuantIsaName(isa);
      std::printf("note: %s is not available on this CPU; its tests are skipped\n", QuantIsaName(isa));
    }
  }
  if (QuantIsaAvailable(QuantIsa::kAvx512Vnni)) {
    EXPECT_EQ(BestQuantIsa(), QuantIsa::kAvx512Vnni);
  }
}

}  // namespace
}  // namespace cpu
}  // namespace tpserve

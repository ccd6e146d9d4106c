// Tests for kernels/cpu/quant.h: QuantizeX's rounding and bsums, and every dot kernel (per
// weight type and per instruction-set path) against the dequantize-then-dot reference
// (kernels/cpu/dequantize.h) computed in double; and dequantize.h's FP8 E4M3 conversions (all
// 256 codes, rounding against a brute-force search) and QuantizeRowF8E4M3.
#include "kernels/cpu/quant.h"

#include <algorithm>
#include <bit>
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

constexpr DType kDotTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                               DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                               DType::kF8_E4M3};
constexpr QuantIsa kIsas[] = {QuantIsa::kScalar, QuantIsa::kAvx2, QuantIsa::kAvx512Vnni};

bool IsKQuant(DType w) { return BlockElems(w) == 256; }
bool IsF8(DType w) { return w == DType::kF8_E4M3; }
// A row length of a few blocks that is an odd number of them (odd block counts end the
// two-block loops with one left over).
int64_t OddK(DType w) { return IsKQuant(w) ? 2304 : IsF8(w) ? 128 * 9 : 32 * 7; }

std::vector<float> RandomFloats(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// Byte offsets of a block's fp16 scales (d, and dmin for Q2_K / Q4_K / Q5_K, m for Q4_1 /
// Q5_1).
std::vector<size_t> ScaleOffsets(DType w) {
  switch (w) {
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K: return {0, 2};
    case DType::kQ2_K: return {80, 82};
    case DType::kQ3_K: return {108};
    case DType::kQ6_K: return {208};
    default: return {0};
  }
}

// `rows` weight rows of k elements: random quant bytes (every nibble, bit and 4- or 6-bit
// scale pattern; for FP8 every code but the NaNs 0x7f / 0xff, which become 0x7e / 0xfe), with
// scales in [1e-3, 1e-2] (fp16; FP8's fp32) so that no block holds NaN or Inf; Q4_1 / Q5_1's
// offsets m of either sign, as quantizers write them (m is a block's min). With `fill` >= 0
// every quant byte is that value instead.
std::vector<uint8_t> RandomWeights(DType w, int64_t rows, int64_t k, std::mt19937& rng, int fill = -1) {
  std::vector<uint8_t> bytes(rows * RowBytes(w, k));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : bytes) {
    b = static_cast<uint8_t>(fill >= 0 ? fill : byte(rng));
    if (IsF8(w) && fill < 0 && (b & 0x7f) == 0x7f) b ^= 1;
  }
  std::uniform_real_distribution<float> scale(1e-3f, 1e-2f);
  for (size_t blk = 0; blk < bytes.size(); blk += BlockBytes(w)) {
    if (IsF8(w)) {
      const float f = scale(rng);
      std::memcpy(&bytes[blk], &f, 4);
      continue;
    }
    for (size_t off : ScaleOffsets(w)) {
      const bool offset = off == 2 && (w == DType::kQ4_1 || w == DType::kQ5_1);
      const uint16_t h = F32ToF16(offset && rng() % 2 ? -scale(rng) : scale(rng));
      std::memcpy(&bytes[blk + off], &h, 2);
    }
  }
  return bytes;
}

// The activation x_i exactly as the kernels see it, and each element's block scale d (0 for
// FP8's fp32 x: no rounding).
struct DequantizedX {
  std::vector<double> x;
  std::vector<double> d;
};

DequantizedX DequantizeX(QuantX format, const uint8_t* row, int64_t k) {
  DequantizedX out{std::vector<double>(k), std::vector<double>(k)};
  // Block type B's d and qs (less `bias`), `elems` to a block.
  const auto widen = [&]<class B>(const B* blocks, int64_t elems, int bias = 0) {
    for (int64_t j = 0; j < k; ++j) {
      const int8_t stored = blocks[j / elems].qs[j % elems];
      const int q = bias != 0 ? static_cast<uint8_t>(stored) - bias : stored;
      out.d[j] = blocks[j / elems].d;
      out.x[j] = out.d[j] * q;
    }
  };
  switch (format) {
    case QuantX::kF32: {
      const auto* x = reinterpret_cast<const float*>(row);
      for (int64_t j = 0; j < k; ++j) out.x[j] = x[j];
      break;
    }
    case QuantX::kQ8K: widen(reinterpret_cast<const BlockQ8K*>(row), 256); break;
    case QuantX::kQ8_1: widen(reinterpret_cast<const BlockQ8_1*>(row), 32); break;
    case QuantX::kQ8: widen(reinterpret_cast<const BlockQ8*>(row), 32); break;
    case QuantX::kQ8U: widen(reinterpret_cast<const BlockQ8*>(row), 32, 128); break;
  }
  return out;
}

// ---- QuantizeX ----

TEST(QuantizeXTest, RoundTripWithinHalfAStep) {
  std::mt19937 rng(1);
  for (DType w : {DType::kQ8_0, DType::kQ4_1, DType::kQ4_K}) {
    const int64_t k = 1024, m = 3;
    std::vector<float> x = RandomFloats(m * k, rng, -3.0f, 3.0f);
    for (int64_t j = 256; j < 512; ++j) x[j] *= 1e-3f;  // a block of small values
    std::memset(&x[512], 0, 256 * sizeof(float));       // an all-zero (super-)block
    const size_t row_bytes = QuantizedXRowBytes(w, k);
    EXPECT_EQ(row_bytes, IsKQuant(w)               ? k / 256 * sizeof(BlockQ8K)
                         : w == DType::kQ4_1 ? k / 32 * sizeof(BlockQ8_1)
                                             : k / 32 * sizeof(BlockQ8));
    std::vector<uint8_t> xq(m * row_bytes);
    QuantizeX(w, QuantIsa::kScalar, x.data(), m, k, xq.data());
    const int64_t block = IsKQuant(w) ? 256 : 32;
    for (int64_t i = 0; i < m; ++i) {
      const uint8_t* row = xq.data() + i * row_bytes;
      const DequantizedX dq = DequantizeX(QuantXFor(w, QuantIsa::kScalar, m), row, k);
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
      if (w == DType::kQ4_1) {  // s = d * (sum of qs), rounded once
        const auto* blocks = reinterpret_cast<const BlockQ8_1*>(row);
        for (int64_t b = 0; b < k / 32; ++b) {
          int sum = 0;
          for (int j = 0; j < 32; ++j) sum += blocks[b].qs[j];
          ASSERT_EQ(blocks[b].s, blocks[b].d * static_cast<float>(sum)) << "block " << b;
        }
      }
    }
  }
}

TEST(QuantizeXTest, TiesRoundAwayFromZero) {
  // amax = 127 makes the step exactly 1, so x = n + 0.5 is a tie.
  for (DType w : {DType::kQ8_0, DType::kQ4_1, DType::kQ4_K}) {
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
    QuantizeX(w, QuantIsa::kScalar, x.data(), 1, k, xq.data());
    const int8_t* qs = IsKQuant(w)           ? reinterpret_cast<BlockQ8K*>(xq.data())->qs
                       : w == DType::kQ4_1 ? reinterpret_cast<BlockQ8_1*>(xq.data())->qs
                                           : reinterpret_cast<BlockQ8*>(xq.data())->qs;
    EXPECT_EQ(qs[0], 127);
    EXPECT_EQ(qs[1], 3);
    EXPECT_EQ(qs[2], -4);
    EXPECT_EQ(qs[3], 1);
    EXPECT_EQ(qs[4], -1);
    EXPECT_EQ(qs[5], 0);
    EXPECT_EQ(qs[6], 127);
    if (w == DType::kQ4_1) {
      EXPECT_EQ(reinterpret_cast<BlockQ8_1*>(xq.data())->s, 127 + 3 - 4 + 1 - 1 + 0 + 127);
    }
  }
}

TEST(QuantizeXTest, F8ActivationsAreCopied) {
  std::mt19937 rng(2);
  const int64_t k = 384, m = 3;
  const std::vector<float> x = RandomFloats(m * k, rng, -5.0f, 5.0f);
  ASSERT_EQ(QuantizedXRowBytes(DType::kF8_E4M3, k), static_cast<size_t>(4 * k));
  std::vector<float> xq(m * k, NAN);
  QuantizeX(DType::kF8_E4M3, QuantIsa::kScalar, x.data(), m, k, xq.data());
  EXPECT_EQ(0, std::memcmp(xq.data(), x.data(), x.size() * 4));
}

// The AVX-512 VNNI kernels of the signed 32-element types take x's bytes as q + 128 (kQ8U)
// over more than one row; every other path, type and one row, the blocks above. (A format, not
// a run: any CPU can write it.)
TEST(QuantizeXTest, TheVnniPathsSignedTypesTakeXPlus128) {
  std::mt19937 rng(3);
  const int64_t k = 256, m = 2;
  const std::vector<float> x = RandomFloats(m * k, rng, -3.0f, 3.0f);
  for (DType w : {DType::kQ4_0, DType::kQ5_0, DType::kQ8_0, DType::kQ4_1, DType::kQ4_K, DType::kF8_E4M3}) {
    const bool is_signed_legacy = w == DType::kQ4_0 || w == DType::kQ5_0 || w == DType::kQ8_0;
    EXPECT_EQ(QuantXFor(w, QuantIsa::kAvx512Vnni, m) == QuantX::kQ8U, is_signed_legacy) << DTypeName(w);
    EXPECT_NE(QuantXFor(w, QuantIsa::kAvx512Vnni, 1), QuantX::kQ8U) << DTypeName(w);  // one row: the sign trick
    EXPECT_NE(QuantXFor(w, QuantIsa::kAvx2, m), QuantX::kQ8U) << DTypeName(w);
    EXPECT_NE(QuantXFor(w, QuantIsa::kScalar, m), QuantX::kQ8U) << DTypeName(w);
    const size_t bytes = m * QuantizedXRowBytes(w, k);
    std::vector<uint8_t> plain(bytes), vnni(bytes);
    QuantizeX(w, QuantIsa::kScalar, x.data(), m, k, plain.data());
    QuantizeX(w, QuantIsa::kAvx512Vnni, x.data(), m, k, vnni.data());
    if (!is_signed_legacy) {
      EXPECT_EQ(plain, vnni) << DTypeName(w);
      continue;
    }
    for (int64_t b = 0; b < m * k / 32; ++b) {
      const BlockQ8& p = reinterpret_cast<const BlockQ8*>(plain.data())[b];
      const BlockQ8& v = reinterpret_cast<const BlockQ8*>(vnni.data())[b];
      ASSERT_EQ(p.d, v.d) << "block " << b;
      for (int j = 0; j < 32; ++j) {
        ASSERT_EQ(static_cast<uint8_t>(v.qs[j]), p.qs[j] + 128) << "block " << b << " element " << j;
      }
    }
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
  // fp32 sums of exact block results; FP8 2e-6), and |y - w . x| within x's int8 rounding on
  // top (none for FP8).
  // `pad` extra bytes between x rows and `ldy` > 1 must be respected.
  void Check(const std::vector<uint8_t>& weights, int64_t rows, const std::vector<float>& x, int m, int64_t k,
             size_t pad = 0, int64_t ldy = 1) {
    const DType w = std::get<0>(GetParam());
    const size_t min_bytes = QuantizedXRowBytes(w, k), row_bytes = min_bytes + pad;
    std::vector<uint8_t> xq(m * row_bytes, 0xA5);  // the padding stays garbage
    const QuantIsa isa = std::get<1>(GetParam());
    std::vector<uint8_t> dense(m * min_bytes);  // the m rows for one call, then spread out
    QuantizeX(w, isa, x.data(), m, k, dense.data());
    for (int i = 0; i < m; ++i) std::memcpy(&xq[i * row_bytes], &dense[i * min_bytes], min_bytes);
    std::vector<DequantizedX> dx;
    for (int i = 0; i < m; ++i) dx.push_back(DequantizeX(QuantXFor(w, isa, m), &xq[i * row_bytes], k));
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
        // FP8: the same fp32 weights and fp32 x as the reference; only the fp32 sums round.
        const double tol = (IsF8(w) ? 2e-6 : 1e-5) * abs_sum + 1e-6;
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
  const std::vector<int64_t> ks = {IsF8(w) ? 128 : 256, 512, OddK(w)};
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
// For FP8 (whose 0x7f / 0xff are NaN): +-0, +-448 and the smallest subnormals.
TEST_P(QuantDotTest, ExtremeQuantsDoNotOverflow) {
  const DType w = std::get<0>(GetParam());
  std::mt19937 rng(3);
  const int64_t k = IsKQuant(w) ? 512 : IsF8(w) ? 256 : 64;
  const std::vector<int> fills = IsF8(w) ? std::vector<int>{0x00, 0x80, 0x7e, 0xfe, 0x01, 0x81}
                                         : std::vector<int>{0x00, 0xff, 0x80, 0x7f};
  for (int fill : fills) {
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
  const int64_t k = IsKQuant(w) ? 512 : IsF8(w) ? 256 : 96;
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
  const int64_t k = IsF8(w) ? 2304 : 2304 - (IsKQuant(w) ? 0 : 32);
  const int m = 4;
  const std::vector<uint8_t> weights = RandomWeights(w, 1, k, rng);
  const std::vector<float> x = RandomFloats(m * k, rng);
  std::vector<uint8_t> xq(m * QuantizedXRowBytes(w, k)), xq_scalar(xq.size());
  QuantizeX(w, std::get<1>(GetParam()), x.data(), m, k, xq.data());
  QuantizeX(w, QuantIsa::kScalar, x.data(), m, k, xq_scalar.data());
  std::vector<float> y(m), y_scalar(m);
  dot_(weights.data(), xq.data(), QuantizedXRowBytes(w, k), m, k, y.data(), 1);
  FindQuantDot(w, QuantIsa::kScalar)(weights.data(), xq_scalar.data(), QuantizedXRowBytes(w, k), m, k, y_scalar.data(), 1);
  for (int i = 0; i < m; ++i) EXPECT_NEAR(y[i], y_scalar[i], 1e-4 * (std::abs(y_scalar[i]) + 1)) << "row " << i;
}

// The vector paths compute the same integers per 32-bit lane, and the same fp32 steps after
// them: the same bits. The signed 32-element types: AVX2's sign trick through vpmaddubsw, AVX-512
// VNNI's x + 128 through vpdpbusd less 128 times the weights' sums. Q4_K, Q5_K, Q6_K: the
// sub-block scales through vpmaddwd and an add on AVX2, vpdpwssd on AVX-512 VNNI.
TEST(QuantDotPathsTest, VectorPathsGiveTheSameBits) {
  if (!QuantIsaAvailable(QuantIsa::kAvx512Vnni)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::mt19937 rng(11);
  for (DType w : {DType::kQ4_0, DType::kQ5_0, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    const int64_t k = 2048 + BlockElems(w);  // an odd number of blocks
    for (int fill : {-1, 0x80, 0x7f}) {  // random bytes; the extreme bytes everywhere
      const std::vector<uint8_t> weights = RandomWeights(w, 1, k, rng, fill);
      for (int m : {1, 3, 8, 11}) {
        const std::vector<float> x = RandomFloats(m * k, rng);
        std::vector<float> y[2];
        int path = 0;
        for (QuantIsa isa : {QuantIsa::kAvx2, QuantIsa::kAvx512Vnni}) {
          std::vector<uint8_t> xq(m * QuantizedXRowBytes(w, k));
          QuantizeX(w, isa, x.data(), m, k, xq.data());
          y[path].assign(m, 0.0f);
          FindQuantDot(w, isa)(weights.data(), xq.data(), QuantizedXRowBytes(w, k), m, k, y[path].data(), 1);
          ++path;
        }
        EXPECT_EQ(std::memcmp(y[0].data(), y[1].data(), m * sizeof(float)), 0)
            << DTypeName(w) << " fill " << fill << " m " << m << ": " << y[0][0] << " vs " << y[1][0];
      }
    }
  }
}

// The row tiles (AVX-512 VNNI, signed 32-element types) give the QuantDotFn's bits for every row
// count, one block or an odd number of them, writing y's m rows and nothing else.
TEST(QuantTileTest, TilesGiveTheDotKernelsBitsAtEveryRowCount) {
  if (!QuantIsaAvailable(QuantIsa::kAvx512Vnni)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::mt19937 rng(13);
  constexpr float kSentinel = -12345.0f;
  constexpr int64_t kLdy = 3;
  for (DType w : {DType::kQ4_0, DType::kQ5_0, DType::kQ8_0}) {
    const QuantTileFn tile = FindQuantTile(w, QuantIsa::kAvx512Vnni);
    ASSERT_NE(tile, nullptr) << DTypeName(w);
    const QuantDotFn dot = FindQuantDot(w, QuantIsa::kAvx512Vnni);
    for (int64_t k : {int64_t{32}, int64_t{2048 + 32}}) {
      for (int fill : {-1, 0x80, 0x7f}) {  // random bytes; Q8_0's -128 and 127 everywhere
        const std::vector<uint8_t> weights = RandomWeights(w, 1, k, rng, fill);
        for (int m : {1, 2, 7, 8, 11, 16}) {
          const std::vector<float> x = RandomFloats(m * k, rng, -4.0f, 4.0f);
          std::vector<uint8_t> xq(m * QuantizedXRowBytes(w, k)), xt(QuantizedXTileBytes(w, k), 0xA5);
          QuantizeX(w, QuantIsa::kAvx512Vnni, x.data(), m, k, xq.data());
          QuantizeXTile(w, x.data(), m, k, xt.data());
          std::vector<float> want(m), got(kQuantTileRows * kLdy, kSentinel);
          dot(weights.data(), xq.data(), QuantizedXRowBytes(w, k), m, k, want.data(), 1);
          tile(weights.data(), xt.data(), m, k, got.data(), kLdy);
          for (int i = 0; i < kQuantTileRows * kLdy; ++i) {
            if (i % kLdy == 0 && i / kLdy < m) {
              EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i / kLdy]))
                  << DTypeName(w) << " k " << k << " fill " << fill << " m " << m << " row " << i / kLdy << ": "
                  << got[i] << " vs " << want[i / kLdy];
            } else {
              EXPECT_EQ(got[i], kSentinel) << DTypeName(w) << " m " << m << ": y[" << i << "] written";
            }
          }
        }
      }
    }
  }
}

TEST(QuantTileTest, OnlyTheSignedLegacyTypesOnTheVnniPathHaveTiles) {
  for (DType w : kDotTypes) {
    const bool signed_legacy = w == DType::kQ4_0 || w == DType::kQ5_0 || w == DType::kQ8_0;
    EXPECT_EQ(FindQuantTile(w, QuantIsa::kAvx512Vnni) != nullptr,
              signed_legacy && QuantIsaAvailable(QuantIsa::kAvx512Vnni))
        << DTypeName(w);
    EXPECT_EQ(FindQuantTile(w, QuantIsa::kAvx2), nullptr) << DTypeName(w);
    EXPECT_EQ(FindQuantTile(w, QuantIsa::kScalar), nullptr) << DTypeName(w);
  }
}

INSTANTIATE_TEST_SUITE_P(TypesAndPaths, QuantDotTest,
                         ::testing::Combine(::testing::ValuesIn(kDotTypes), ::testing::ValuesIn(kIsas)),
                         [](const ::testing::TestParamInfo<std::tuple<DType, QuantIsa>>& info) {
                           return std::string(DTypeName(std::get<0>(info.param))) + "_" +
                                  QuantIsaName(std::get<1>(info.param));
                         });

// ---- FP8 E4M3 ----

// The independent definition: (-1)^s 2^(e-7) (1 + m/8), or 2^-6 m/8 for e = 0; NaN for
// S.1111.111.
double E4M3Value(int code) {
  const int e = (code >> 3) & 15, m = code & 7;
  if ((code & 0x7f) == 0x7f) return NAN;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1 + m / 8.0, e - 7);
  return code & 0x80 ? -mag : mag;
}

TEST(F8E4M3Test, EveryCodeDecodesExactly) {
  for (int c = 0; c < 256; ++c) {
    const float f = F8E4M3ToF32(static_cast<uint8_t>(c));
    const double want = E4M3Value(c);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(f)) << "code " << c;
    } else {
      EXPECT_EQ(static_cast<double>(f), want) << "code " << c;
    }
    EXPECT_EQ(std::signbit(f), (c & 0x80) != 0) << "code " << c;  // -0 and -NaN too
  }
  EXPECT_EQ(F8E4M3ToF32(0x7e), 448.0f);
  EXPECT_EQ(F8E4M3ToF32(0x01), 0x1p-9f);
  EXPECT_EQ(F8E4M3ToF32(0x08), 0x1p-6f);
}

// Decode then encode is the identity on all 256 codes, -0 (0x80) and both NaNs included.
TEST(F8E4M3Test, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    EXPECT_EQ(F32ToF8E4M3(F8E4M3ToF32(static_cast<uint8_t>(c))), c) << "code " << c;
  }
}

// The code nearest to f among the 127 finite codes of f's sign, ties to the even code: the
// rounding F32ToF8E4M3 promises (saturation included: past 448 the nearest is 448).
int BruteForceE4M3(float f) {
  const int sign = std::signbit(f) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(f));
  int best = 0;
  double best_dist = INFINITY;
  for (int c = 0; c < 0x7f; ++c) {
    const double dist = std::fabs(std::fabs(E4M3Value(c)) - a);
    if (dist < best_dist || (dist == best_dist && c % 2 == 0)) {
      best = c;
      best_dist = dist;
    }
  }
  return sign | best;
}

TEST(F8E4M3Test, RoundsToTheNearestEvenAgainstBruteForce) {
  std::vector<float> fs;
  // Every midpoint between neighbouring codes (the ties), and the floats either side of it.
  for (int c = 0; c + 1 < 0x7f; ++c) {
    const double mid = (E4M3Value(c) + E4M3Value(c + 1)) / 2;
    ASSERT_EQ(static_cast<double>(static_cast<float>(mid)), mid);  // exact in fp32
    const float f = static_cast<float>(mid);
    for (float g : {f, std::nextafter(f, 0.0f), std::nextafter(f, INFINITY)}) {
      fs.push_back(g);
      fs.push_back(-g);
    }
  }
  // Around the top: 448, the midpoint to the missing 480 (464) and past it; fp32 extremes.
  for (float f : {448.0f, 463.99997f, 464.0f, 464.00003f, 479.99997f, 480.0f, 512.0f, 1e30f, 3.4028235e38f, INFINITY,
                  0.0f, 0x1p-10f, 0x1p-149f, 0x1p-126f, 0x1.8p-10f}) {
    fs.push_back(f);
    fs.push_back(-f);
  }
  // Random floats: exponents around E4M3's range (2^-12 .. 2^10), and any bit pattern.
  std::mt19937 rng(17);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffffffffu);
  std::uniform_int_distribution<uint32_t> exponent(127 - 12, 127 + 10);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t r = bits(rng);
    fs.push_back(std::bit_cast<float>((r & 0x807fffffu) | (exponent(rng) << 23)));
    if (!std::isnan(std::bit_cast<float>(r))) fs.push_back(std::bit_cast<float>(r));
  }
  for (float f : fs) {
    ASSERT_EQ(static_cast<int>(F32ToF8E4M3(f)), BruteForceE4M3(f))
        << "f = " << f << " (bits 0x" << std::hex << std::bit_cast<uint32_t>(f) << ")";
  }
}

TEST(F8E4M3Test, SaturatesAndKeepsNaN) {
  EXPECT_EQ(F32ToF8E4M3(464.0f), 0x7e);  // the tie with 480, which would be NaN
  EXPECT_EQ(F32ToF8E4M3(1e30f), 0x7e);
  EXPECT_EQ(F32ToF8E4M3(INFINITY), 0x7e);
  EXPECT_EQ(F32ToF8E4M3(-INFINITY), 0xfe);
  EXPECT_EQ(F32ToF8E4M3(NAN), 0x7f);
  EXPECT_EQ(F32ToF8E4M3(-NAN), 0xff);
  EXPECT_EQ(F32ToF8E4M3(-0.0f), 0x80);
  EXPECT_EQ(F32ToF8E4M3(0x1p-10f), 0x00);   // the tie between 0 and 2^-9: even
  EXPECT_EQ(F32ToF8E4M3(0x1.8p-9f), 0x02);  // 1.5 * 2^-9, the tie between codes 1 and 2: even
  EXPECT_EQ(F32ToF8E4M3(0x1.4p-8f), 0x02);  // 2.5 * 2^-9, the tie between codes 2 and 3: even
  EXPECT_EQ(F32ToF8E4M3(0x1.ep-7f), 0x08);  // 7.5 * 2^-9: rounds up into the first normal binade
  EXPECT_EQ(F32ToF8E4M3(0x1.fp0f), 0x40);   // 1.9375: carries into the exponent (2.0)
}

TEST(F8E4M3Test, QuantizeRowScalesByAmaxAndRoundsEachElement) {
  std::mt19937 rng(23);
  constexpr int64_t kBlocks = 8, n = 128 * kBlocks;
  std::vector<float> x = RandomFloats(n, rng, -1.0f, 1.0f);
  const float magnitudes[kBlocks] = {1.0f, 3e38f / 2, 1e-3f, 1e-37f, 1e-42f, 0.0f, 448.0f, -7.0f};
  for (int64_t b = 0; b < kBlocks; ++b) {
    for (int j = 0; j < 128; ++j) x[128 * b + j] *= magnitudes[b];
  }
  x[128 * 7 + 5] = 7.0f;  // a block whose amax is a single element
  std::vector<uint8_t> q(RowBytes(DType::kF8_E4M3, n));
  QuantizeRowF8E4M3(x.data(), n, q.data());
  std::vector<float> back(n);
  DequantizeRow(DType::kF8_E4M3, q.data(), n, back.data());
  for (int64_t b = 0; b < kBlocks; ++b) {
    const float* xb = &x[128 * b];
    const uint8_t* blk = &q[132 * b];
    float amax = 0.0f;
    for (int j = 0; j < 128; ++j) amax = std::max(amax, std::fabs(xb[j]));
    float scale;
    std::memcpy(&scale, blk, 4);
    ASSERT_EQ(scale, amax / 448.0f) << "block " << b;
    for (int j = 0; j < 128; ++j) {
      const uint8_t code = blk[4 + j];
      ASSERT_NE(code & 0x7f, 0x7f) << "NaN code, block " << b << " element " << j;
      if (scale == 0.0f) {
        ASSERT_EQ(code, 0) << "block " << b;
        continue;
      }
      ASSERT_EQ(code, F32ToF8E4M3(xb[j] / scale)) << "block " << b << " element " << j;
      if (std::fabs(xb[j]) == amax && scale >= 0x1p-126f) {
        ASSERT_EQ(code & 0x7f, 0x7e) << "block " << b;
      }
      ASSERT_EQ(back[128 * b + j], scale * F8E4M3ToF32(code));
    }
  }
}

// The FP8 kernels per path, beyond the shared tests above.
class F8DotTest : public ::testing::TestWithParam<QuantIsa> {
 protected:
  void SetUp() override {
    if (!QuantIsaAvailable(GetParam())) GTEST_SKIP() << QuantIsaName(GetParam()) << " is not available on this CPU";
    dot_ = FindQuantDot(DType::kF8_E4M3, GetParam());
    ASSERT_NE(dot_, nullptr);
  }
  QuantDotFn dot_ = nullptr;
};

// Against unit vectors x = e_j each output is one product w_j * 1 (the other terms are +-0):
// the kernels' weights are DequantizeRow's (scale * e4m3, rounded once) bit for bit, for every
// finite code, at scales from fp32 subnormals to 2^118, in every lane of a block.
TEST_P(F8DotTest, WeightsAreDequantizeRowsBitForBit) {
  std::vector<uint8_t> finite;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) != 0x7f) finite.push_back(static_cast<uint8_t>(c));
  }
  const int64_t k = 512;  // 4 blocks: the 254 finite codes in order, then in another order
  std::vector<uint8_t> w(RowBytes(DType::kF8_E4M3, k));
  for (int64_t j = 0; j < k; ++j) w[132 * (j / 128) + 4 + j % 128] = finite[(j < 256 ? j : 101 * j) % 254];
  for (float scale : {1.0f, 3.0f / 7.0f, 1e-3f, 0x1p-140f, 0x1.234p-127f, 0x1p118f, 1e-41f}) {
    SCOPED_TRACE("scale " + std::to_string(scale));
    for (int64_t b = 0; b < k / 128; ++b) std::memcpy(&w[132 * b], &scale, 4);
    std::vector<float> want(k);
    DequantizeRow(DType::kF8_E4M3, w.data(), k, want.data());
    // m rows of x per call, each a unit vector: 1 and 3 rows scale the block sums, 16 the
    // weights (DotF8Rows).
    for (int m : {1, 3, 16}) {
      for (int64_t j0 = 0; j0 + m <= k; j0 += m) {
        std::vector<float> x(m * k, 0.0f);
        for (int i = 0; i < m; ++i) x[i * k + j0 + i] = 1.0f;
        std::vector<float> y(m);
        dot_(w.data(), x.data(), 4 * k, m, k, y.data(), 1);
        for (int i = 0; i < m; ++i) {
          // The sign of a zero product may be lost to the +0 terms around it.
          ASSERT_EQ(std::bit_cast<uint32_t>(std::fabs(y[i])), std::bit_cast<uint32_t>(std::fabs(want[j0 + i])))
              << "m " << m << ", element " << j0 + i << ": got " << y[i] << " want " << want[j0 + i];
          if (want[j0 + i] != 0.0f) {
            ASSERT_EQ(y[i], want[j0 + i]) << "m " << m;
          }
        }
      }
    }
  }
}

// A NaN code gives NaN, as the math says (even against x = 0); the other weight row does not.
TEST_P(F8DotTest, NaNCodesGiveNaN) {
  const int64_t k = 384;
  std::mt19937 rng(29);
  for (uint8_t nan_code : {0x7f, 0xff}) {
    for (int64_t at : {int64_t{0}, int64_t{131}, k - 1}) {
      std::vector<uint8_t> w = RandomWeights(DType::kF8_E4M3, 2, k, rng);
      w[132 * (at / 128) + 4 + at % 128] = nan_code;  // row 0 only
      const std::vector<float> x = RandomFloats(3 * k, rng);
      std::vector<float> xz = x;
      xz[at] = 0.0f;
      for (const std::vector<float>* xs : {&x, const_cast<const std::vector<float>*>(&xz)}) {
        for (int m : {1, 3}) {
          std::vector<float> y(2 * m);
          dot_(w.data(), xs->data(), 4 * k, m, k, y.data(), 2);
          dot_(w.data() + RowBytes(DType::kF8_E4M3, k), xs->data(), 4 * k, m, k, y.data() + 1, 2);
          for (int i = 0; i < m; ++i) {
            EXPECT_TRUE(std::isnan(y[2 * i])) << "code " << int{nan_code} << " at " << at << ", m " << m;
            EXPECT_FALSE(std::isnan(y[2 * i + 1])) << "row without NaN";
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, F8DotTest, ::testing::ValuesIn(kIsas),
                         [](const ::testing::TestParamInfo<QuantIsa>& info) { return QuantIsaName(info.param); });

TEST(QuantDotLookupTest, OnlyTheDotTypesHaveKernels) {
  for (DType w : kDotTypes) {
    EXPECT_TRUE(HasQuantDot(w)) << DTypeName(w);
    EXPECT_NE(FindQuantDot(w, QuantIsa::kScalar), nullptr) << DTypeName(w);
  }
  for (DType w : {DType::kF32, DType::kF16, DType::kBF16}) {
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

// cpu::Linear and cpu::Embedding over block-quantized weights (kernels/cpu/quant.h): decode
// rows against the dequantize-then-dot reference on int8-rounded x (fp32 x for FP8), prefill against the same
// product on the widened weights (bit for bit on sgemm), for every type with dot kernels.
// The dot kernels themselves, per instruction set: tests/quant_kernels_test.cc.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/base.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/quant.h"

namespace tpserve::cpu {
namespace {

constexpr DType kTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K,
                            DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kF8_E4M3};

// Random blocks whose scales are small finite numbers (random bytes elsewhere; for FP8, whose
// scale is an fp32, random codes other than the NaNs 0x7f / 0xff).
std::vector<uint8_t> RandomBlocks(DType t, int64_t rows, int64_t k, std::mt19937& rng) {
  std::vector<uint8_t> w(rows * RowBytes(t, k));
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : w) b = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> scale(1e-3f, 1e-2f);
  const size_t bb = BlockBytes(t);
  const auto put = [&](size_t at, float v) {
    const uint16_t h = F32ToF16(v);
    std::memcpy(w.data() + at, &h, 2);
  };
  for (size_t b = 0; b < w.size() / bb; ++b) {
    const size_t at = b * bb;
    switch (t) {
      case DType::kF8_E4M3: {
        const float s = scale(rng);
        std::memcpy(w.data() + at, &s, 4);
        for (size_t j = at + 4; j < at + bb; ++j) {
          if ((w[j] & 0x7f) == 0x7f) w[j] ^= 1;
        }
        break;
      }
      case DType::kQ4_K:
      case DType::kQ5_K:
        put(at, scale(rng));
        put(at + 2, scale(rng));
        break;
      case DType::kQ4_1:
      case DType::kQ5_1:  // m, a block's min: negative here
        put(at, scale(rng));
        put(at + 2, -scale(rng));
        break;
      case DType::kQ2_K:
        put(at + 80, scale(rng));
        put(at + 82, scale(rng));
        break;
      case DType::kQ3_K: put(at + 108, scale(rng)); break;
      case DType::kQ6_K: put(at + 208, scale(rng)); break;
      default: put(at, scale(rng)); break;
    }
  }
  return w;
}

std::vector<float> Widen(DType t, const std::vector<uint8_t>& w, int64_t rows, int64_t k) {
  std::vector<float> out(rows * k);
  for (int64_t r = 0; r < rows; ++r) DequantizeRow(t, w.data() + r * RowBytes(t, k), k, out.data() + r * k);
  return out;
}

std::vector<float> RandomX(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

// x as the dot kernels see it: QuantizeX's blocks, widened (FP8's kernels take x as it is).
std::vector<double> RoundedX(DType t, const std::vector<float>& x, int64_t m, int64_t k) {
  if (t == DType::kF8_E4M3) return std::vector<double>(x.begin(), x.end());
  std::vector<uint8_t> xq(m * QuantizedXRowBytes(t, k));
  QuantizeX(t, QuantIsa::kScalar, x.data(), m, k, xq.data());  // the values every path's blocks hold
  std::vector<double> out(m * k);
  for (int64_t i = 0; i < m; ++i) {
    const uint8_t* row = xq.data() + i * QuantizedXRowBytes(t, k);
    for (int64_t j = 0; j < k; ++j) {
      if (QuantXFor(t, QuantIsa::kScalar, m) == QuantX::kQ8K) {
        const BlockQ8K& b = reinterpret_cast<const BlockQ8K*>(row)[j / 256];
        out[i * k + j] = static_cast<double>(b.d) * b.qs[j % 256];
      } else if (QuantXFor(t, QuantIsa::kScalar, m) == QuantX::kQ8_1) {
        const BlockQ8_1& b = reinterpret_cast<const BlockQ8_1*>(row)[j / 32];
        out[i * k + j] = static_cast<double>(b.d) * b.qs[j % 32];
      } else {
        const BlockQ8& b = reinterpret_cast<const BlockQ8*>(row)[j / 32];
        out[i * k + j] = static_cast<double>(b.d) * b.qs[j % 32];
      }
    }
  }
  return out;
}

TEST(QuantLinear, DecodeRowsMatchTheDequantizedProductOnRoundedX) {
  std::mt19937 rng(7);
  const int64_t k = 512, n = 37;  // n: uneven among threads
  for (DType t : kTypes) {
    ASSERT_TRUE(HasQuantDot(t)) << DTypeName(t);
    const std::vector<uint8_t> w = RandomBlocks(t, n, k, rng);
    const std::vector<float> wf = Widen(t, w, n, k);
    // The last two take QuantGemv's row tiles where the type has them (Q4_0, Q5_0, Q8_0).
    for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{kQuantTileRowsFrom}, int64_t{kQuantTileRows}}) {
      SCOPED_TRACE(::testing::Message() << DTypeName(t) << " m " << m);
      const std::vector<float> x = RandomX(m * k, rng);
      const std::vector<double> xr = RoundedX(t, x, m, k);
      for (GemmPath path : AvailableGemmPaths()) {
        std::vector<float> y(m * n, NAN);
        Linear(path, x.data(), m, k, w.data(), t, n, y.data());
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t r = 0; r < n; ++r) {
            double want = 0, mag = 0;
            for (int64_t j = 0; j < k; ++j) {
              want += wf[r * k + j] * xr[i * k + j];
              mag += std::abs(wf[r * k + j] * xr[i * k + j]);
            }
            EXPECT_NEAR(y[i * n + r], want, 1e-5 * mag + 1e-6) << GemmPathName(path) << " row " << i << " col " << r;
          }
        }
      }
    }
  }
}

// Prefill (more than kMaxStreamingRows rows) widens panels of blocks: on sgemm exactly the
// product of the widened weights; on onednn-bf16 and amx-bf16 that of the widened weights rounded
// to bf16. At k = 8192 onednn-bf16's ~4 MiB panels hold 256 rows, so its 300 rows are two
// panels, the second a partial one (at k = 768, one).
TEST(QuantLinear, PrefillIsTheProductOfTheWidenedWeights) {
  std::mt19937 rng(11);
  const int64_t n = 300, m = 40;
  for (const int64_t k : {int64_t{768}, int64_t{8192}})
  for (DType t : kTypes) {
    SCOPED_TRACE(absl::StrCat(std::string(DTypeName(t)), " k ", k));
    const std::vector<uint8_t> w = RandomBlocks(t, n, k, rng);
    const std::vector<float> wf = Widen(t, w, n, k);
    const std::vector<float> x = RandomX(m * k, rng);
    std::vector<float> got(m * n), want(m * n);
    Linear(GemmPath::kSgemm, x.data(), m, k, w.data(), t, n, got.data());
    Linear(GemmPath::kSgemm, x.data(), m, k, wf.data(), DType::kF32, n, want.data());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << "sgemm: not the widened product's bits";
    std::vector<uint16_t> wb(n * k);
    for (size_t i = 0; i < wb.size(); ++i) wb[i] = F32ToBf16(wf[i]);
    // The bf16 paths (where this CPU and build have them): the product of the widened weights
    // rounded to bf16 (amx-bf16 widens 32 rows at a time into its tiles).
    // The fp32 sums run in another order where the panels split the rows: within 1e-5 of the
    // norms' product (Cauchy-Schwarz's bound on the terms' absolute sum) besides 1e-4 relative.
    std::vector<double> x_norm(m, 0), w_norm(n, 0);
    for (int64_t i = 0; i < m * k; ++i) x_norm[i / k] += double{x[i]} * x[i];
    for (int64_t i = 0; i < n * k; ++i) w_norm[i / k] += double{wf[i]} * wf[i];
    for (const GemmPath path : AvailableGemmPaths()) {
      if (path == GemmPath::kSgemm) continue;
      Linear(path, x.data(), m, k, w.data(), t, n, got.data());
      Linear(path, x.data(), m, k, wb.data(), DType::kBF16, n, want.data());
      for (int64_t i = 0; i < m * n; ++i) {
        const double bound = 1e-4 * (1 + std::abs(want[i])) + 1e-5 * std::sqrt(x_norm[i / n] * w_norm[i % n]);
        ASSERT_NEAR(got[i], want[i], bound) << GemmPathName(path) << " element " << i;
      }
    }
  }
}

// The int8 prefill (QuantGemm) is the decode kernels' product chunk by chunk: every 16 rows of x
// give QuantGemv's bits for those rows alone, whatever the panels and threads. m = 61 ends
// in a chunk of 13 rows (row tiles where the type has them), m = 39 in one of 7 (dot kernels
// on the multi-row x layout), m = 33 in one row; n = 700 at k = 2048 is several panels of
// weight rows for every type, the last a partial one.
TEST(QuantLinear, Int8PrefillIsTheDecodeProductPerChunkOfRows) {
  std::mt19937 rng(13);
  const int64_t n = 700, k = 2048;
  for (DType t : kTypes) {
    const std::vector<uint8_t> w = RandomBlocks(t, n, k, rng);
    for (const int64_t m : {int64_t{61}, int64_t{39}, int64_t{33}}) {
      SCOPED_TRACE(absl::StrCat(std::string(DTypeName(t)), " m ", m));
      const std::vector<float> x = RandomX(m * k, rng);
      std::vector<float> got(m * n, NAN), want(m * n, NAN);
      QuantGemm(x.data(), m, k, w.data(), t, n, got.data());
      for (int64_t i0 = 0; i0 < m; i0 += kQuantTileRows) {
        QuantGemv(x.data() + i0 * k, std::min<int64_t>(kQuantTileRows, m - i0), k, w.data(), t, n,
                  want.data() + i0 * n);
      }
      for (int64_t i = 0; i < m * n; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
            << "row " << i / n << " col " << i % n << ": " << got[i] << " vs " << want[i];
      }
    }
  }
}

TEST(QuantLinear, EmbeddingRowsAreTheWidenedRowsScaled) {
  std::mt19937 rng(3);
  const int64_t dim = 512, rows = 9, vocab_start = 100;
  for (DType t : kTypes) {
    SCOPED_TRACE(DTypeName(t));
    const std::vector<uint8_t> table = RandomBlocks(t, rows, dim, rng);
    const std::vector<float> wide = Widen(t, table, rows, dim);
    const std::vector<int32_t> ids = {104, 3, 100, 108};  // 3: another rank's (zeros)
    std::vector<float> out(ids.size() * dim, NAN);
    Embedding(ids.data(), static_cast<int64_t>(ids.size()), table.data(), t, vocab_start, rows, dim, 0.5f,
              out.data());
    for (size_t i = 0; i < ids.size(); ++i) {
      const int64_t row = ids[i] - vocab_start;
      for (int64_t j = 0; j < dim; ++j) {
        const float want = row < 0 ? 0.f : wide[row * dim + j] * 0.5f;
        ASSERT_EQ(out[i * dim + j], want) << "token " << ids[i] << " element " << j;
      }
    }
  }
}

}  // namespace
}  // namespace tpserve::cpu

// Tests for kernels/cpu/cpu_kernels.h: each kernel against a naive double-precision
// reference written here, over sweeps of shapes and dtypes (PagedAttention: in
// tests/cpu_attention_test.cc).
#include "kernels/cpu/cpu_kernels.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/cpu_test_util.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm_amx.h"
#include "kernels/cpu/quant.h"

namespace tpserve {
// Names dtypes in parameterized test output.
void PrintTo(DType t, std::ostream* os) { *os << DTypeName(t); }

namespace cpu {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using testing_util::AllClose;
using testing_util::RandomFloats;
using testing_util::Tolerance;

// A tensor stored in `dtype`, with the exact values it decodes to for the references.
struct Stored {
  std::vector<uint8_t> bytes;
  std::vector<double> values;
};

Stored RandomStored(size_t n, DType dtype, std::mt19937& rng) {
  Stored s;
  s.bytes.resize(n * DTypeSize(dtype));
  s.values.resize(n);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (size_t i = 0; i < n; ++i) {
    const float f = dist(rng);
    if (dtype == DType::kF32) {
      std::memcpy(s.bytes.data() + 4 * i, &f, 4);
      s.values[i] = f;
    } else {
      const uint16_t h = dtype == DType::kBF16 ? F32ToBf16(f) : F32ToF16(f);
      std::memcpy(s.bytes.data() + 2 * i, &h, 2);
      s.values[i] = dtype == DType::kBF16 ? Bf16ToF32(h) : F16ToF32(h);
    }
  }
  return s;
}

// ---------------------------------------------------------------------------------------
// Linear

std::vector<double> RefLinear(const std::vector<float>& x, int64_t m, int64_t k,
                              const std::vector<double>& w, int64_t n) {
  std::vector<double> y(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = 0; r < n; ++r) {
      double sum = 0.0;
      for (int64_t kk = 0; kk < k; ++kk) sum += x[i * k + kk] * w[r * k + kk];
      y[i * n + r] = sum;
    }
  }
  return y;
}

// Inputs are exactly representable in every dtype, so the only error is fp32 accumulation,
// the same for all weight dtypes; it grows like sqrt(k) with |x|, |w| <= 1.
Tolerance LinearTolerance(int64_t k) { return {2e-6 * std::sqrt(static_cast<double>(k)), 1e-5}; }

void CheckLinear(int64_t m, int64_t k, int64_t n, DType dtype, uint32_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "m=" << m << " k=" << k << " n=" << n << " " << DTypeName(dtype));
  std::mt19937 rng(seed);
  const std::vector<float> x = RandomFloats(m * k, rng);
  const Stored w = RandomStored(n * k, dtype, rng);
  std::vector<float> y(m * n, kNaN);
  Linear(x.data(), m, k, w.bytes.data(), dtype, n, y.data());
  EXPECT_TRUE(AllClose(y, RefLinear(x, m, k, w.values, n), LinearTolerance(k)));
}

class LinearTest : public ::testing::TestWithParam<std::tuple<DType, int64_t>> {};

TEST_P(LinearTest, MatchesReferenceOverShapes) {
  const auto [dtype, m] = GetParam();
  uint32_t seed = 1;
  for (const int64_t k : {1, 8, 13, 67, 257, 1031}) {
    for (const int64_t n : {1, 13, 67, 257}) CheckLinear(m, k, n, dtype, seed++);
  }
}

// Big enough for the multi-threaded paths and several sgemm panels.
TEST_P(LinearTest, MatchesReferenceOnLargeShape) {
  const auto [dtype, m] = GetParam();
  CheckLinear(m, 2048, 1000, dtype, 99);
}

// Long rows: for batches x then exceeds the streaming kernel's cache budget and K is
// processed in blocks, the last one ragged.
TEST_P(LinearTest, MatchesReferenceWithLongRows) {
  const auto [dtype, m] = GetParam();
  CheckLinear(m, 5000, 37, dtype, 98);
  CheckLinear(m, 20000, 9, dtype, 97);
}

INSTANTIATE_TEST_SUITE_P(DtypesAndBatches, LinearTest,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16,
                                                              DType::kF16),
                                            ::testing::Values(1, 2, 3, 5, 6, 7, 16, 17, 64, 130)),
                         [](const auto& info) {
                           return std::string(DTypeName(std::get<0>(info.param))) + "_m" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Speculative verification scores K + 1 rows where plain decoding scores one: each row of
// a batch of up to kMaxStreamingRows must come out bit for bit as that row alone, whatever
// tile shape the batch size picks, and also where K is long enough to be cut into blocks
// (20000), on every GEMM path (each has its own decode GEMV for bf16).
TEST(Linear, BatchRowsEqualSingleRowsExactly) {
  for (const GemmPath path : AvailableGemmPaths()) {
    for (const DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
      for (const int64_t k : {640, 1000, 1536, 8192, 20000}) {
        std::mt19937 rng(static_cast<uint32_t>(k));
        const int64_t n = k > 8192 ? 40 : 300;
        const std::vector<float> x = RandomFloats(kMaxStreamingRows * k, rng);
        const Stored w = RandomStored(n * k, dtype, rng);
        std::vector<float> alone(kMaxStreamingRows * n);
        for (int64_t i = 0; i < kMaxStreamingRows; ++i) {
          Linear(path, x.data() + i * k, 1, k, w.bytes.data(), dtype, n, alone.data() + i * n);
        }
        for (int64_t m = 2; m <= kMaxStreamingRows; ++m) {
          std::vector<float> y(m * n, kNaN);
          Linear(path, x.data(), m, k, w.bytes.data(), dtype, n, y.data());
          EXPECT_EQ(0, std::memcmp(y.data(), alone.data(), sizeof(float) * m * n))
              << GemmPathName(path) << " " << DTypeName(dtype) << " k=" << k << " m=" << m;
        }
      }
    }
  }
}

// A decode GEMV computes whole tiles of weight rows and the rows past the last whole tile
// one by one; an output must not depend on which of the two computed it (each tile's sums
// are reduced together, the tail's alone). Swapping the first and the last of n = 4t + 1
// rows moves each between a tile and the tail: the outputs swap, bit for bit.
TEST(Linear, OutputsDoNotDependOnWhereTheTilingPutsTheirRow) {
  for (const GemmPath path : AvailableGemmPaths()) {
    for (const int64_t k : {640, 1000, 20000}) {
      for (const int64_t m : {int64_t{1}, int64_t{3}, int64_t{5}}) {
        std::mt19937 rng(static_cast<uint32_t>(k + m));
        const int64_t n = 9;
        const std::vector<float> x = RandomFloats(m * k, rng);
        const Stored w = RandomStored(n * k, DType::kBF16, rng);
        std::vector<uint8_t> swapped = w.bytes;
        const size_t row = static_cast<size_t>(k) * 2;
        std::copy_n(w.bytes.begin() + (n - 1) * row, row, swapped.begin());
        std::copy_n(w.bytes.begin(), row, swapped.begin() + (n - 1) * row);
        std::vector<float> y(m * n, kNaN), ys(m * n, kNaN);
        Linear(path, x.data(), m, k, w.bytes.data(), DType::kBF16, n, y.data());
        Linear(path, x.data(), m, k, swapped.data(), DType::kBF16, n, ys.data());
        for (int64_t i = 0; i < m; ++i) {
          EXPECT_EQ(0, std::memcmp(&y[i * n], &ys[i * n + n - 1], sizeof(float)))
              << GemmPathName(path) << " k=" << k << " m=" << m << " row " << i;
          EXPECT_EQ(0, std::memcmp(&y[i * n + n - 1], &ys[i * n], sizeof(float)))
              << GemmPathName(path) << " k=" << k << " m=" << m << " row " << i;
        }
      }
    }
  }
}

// onednn-bf16's decode GEMV on a CPU without AVX512-BF16 (x rounded to bf16, then the AVX2
// kernel): Linear takes it only on such CPUs, so it is called directly here, on every CPU.
TEST(Linear, RoundedBf16FallbackMatchesReferenceAndKeepsRowsExact) {
  uint32_t seed = 300;
  for (const int64_t k : {1, 13, 32, 33, 1031, 20000}) {
    for (const int64_t n : {1, 67, 300}) {
      std::mt19937 rng(seed++);
      const Stored w = RandomStored(n * k, DType::kBF16, rng);
      std::vector<float> x = RandomFloats(kMaxStreamingRows * k, rng);
      std::vector<float> alone(kMaxStreamingRows * n);
      for (int64_t i = 0; i < kMaxStreamingRows; ++i) {
        RoundedBf16LinearAvx2(x.data() + i * k, 1, k, w.bytes.data(), n, alone.data() + i * n);
      }
      for (const int64_t m : {int64_t{2}, int64_t{3}, int64_t{5}, int64_t{7}, kMaxStreamingRows}) {
        std::vector<float> y(m * n, kNaN);
        RoundedBf16LinearAvx2(x.data(), m, k, w.bytes.data(), n, y.data());
        EXPECT_EQ(0, std::memcmp(y.data(), alone.data(), sizeof(float) * m * n)) << "k=" << k << " n=" << n << " m=" << m;
      }
      for (float& v : x) v = Bf16ToF32(F32ToBf16(v));
      EXPECT_TRUE(AllClose(alone, RefLinear(x, kMaxStreamingRows, k, w.values, n), LinearTolerance(k)))
          << "k=" << k << " n=" << n;
    }
  }
}

TEST(Linear, ZeroKGivesZeros) {
  std::vector<float> y(6, kNaN);
  const float x = 0.0f;
  const float w = 0.0f;
  Linear(&x, 2, 0, &w, DType::kF32, 3, y.data());
  EXPECT_TRUE(AllClose(y, std::vector<double>(6, 0.0), {0, 0}));
}

// Every GEMM path against the reference, forced (the auto choice is one of them), for
// prefill products and decode batches. kOneDnnBf16 and kAmxBf16 round x to bf16 first for bf16
// weights, so its reference does too; the products of bf16 values are exact in fp32 and the
// sums are fp32, so the tolerance is the fp32 one.
// Paths this build or CPU lacks are skipped, saying so (oneDNN 2.x: AVX-512 machines).
class GemmPathTest : public ::testing::TestWithParam<std::tuple<GemmPath, DType>> {
 protected:
  void SetUp() override {
    const std::vector<GemmPath> paths = AvailableGemmPaths();
    if (std::find(paths.begin(), paths.end(), std::get<0>(GetParam())) == paths.end()) {
      GTEST_SKIP() << GemmPathName(std::get<0>(GetParam())) << " is not available here (CPU: "
                   << CpuFeaturesName(DetectCpuFeatures()) << ")";
    }
  }
  void Check(int64_t m, int64_t k, int64_t n, uint32_t seed) {
    const auto [path, dtype] = GetParam();
    SCOPED_TRACE(::testing::Message() << GemmPathName(path) << " m=" << m << " k=" << k
                                      << " n=" << n << " " << DTypeName(dtype));
    std::mt19937 rng(seed);
    std::vector<float> x = RandomFloats(m * k, rng);
    const Stored w = RandomStored(n * k, dtype, rng);
    std::vector<float> y(m * n, kNaN);
    Linear(path, x.data(), m, k, w.bytes.data(), dtype, n, y.data());
    if (RoundsXToBf16(path) && dtype == DType::kBF16) {
      for (float& v : x) v = Bf16ToF32(F32ToBf16(v));
    }
    EXPECT_TRUE(AllClose(y, RefLinear(x, m, k, w.values, n), LinearTolerance(k)));
  }
};

TEST_P(GemmPathTest, MatchesReferenceOverShapes) {
  uint32_t seed = 1;
  for (const int64_t m : {1, 2, 3, 5, 7, 16, 17, 33, 130}) {
    for (const int64_t k : {1, 8, 13, 31, 32, 33, 67, 1031}) {
      for (const int64_t n : {1, 13, 67, 257}) Check(m, k, n, seed++);
    }
  }
}

// Shapes around amx-bf16's tiles (16 x 32 steps, blocks of 32 x rows by 32 weight rows):
// k whole steps, x rows and weight rows on both sides of 16 and 32 (padded tiles, the
// zero-padded last weight block, masked stores).
TEST_P(GemmPathTest, MatchesReferenceAroundTileEdges) {
  uint32_t seed = 500;
  for (const int64_t m : {17, 31, 32, 33, 48, 63, 130}) {
    for (const int64_t k : {32, 64, 1056}) {
      for (const int64_t n : {1, 15, 16, 17, 31, 32, 33, 67, 257}) Check(m, k, n, seed++);
    }
  }
}

// amx-bf16's blocking (kernels/cpu/gemm_amx.cc): k above 4096 runs in chunks with partial sums
// kept between them (ragged last chunk, the zero-padded last block, several groups of blocks);
// k up to 4096 keeps the sums in tiles, over x in groups of rows (several groups at m = 530).
TEST_P(GemmPathTest, MatchesReferenceAcrossAmxChunksAndGroups) {
  if (std::get<0>(GetParam()) != GemmPath::kAmxBf16 || std::get<1>(GetParam()) != DType::kBF16) {
    GTEST_SKIP() << "amx-bf16's blocking (bf16 weights)";
  }
  Check(17, 4128, 17, 700);
  Check(130, 4128, 257, 701);
  Check(130, 4128, 1700, 702);  // 2 groups of 51 blocks' partial sums
  Check(530, 1056, 65, 703);    // x in groups of 480 rows
}

// Model-like shapes: several weight panels, threads, and the K blocks of big products.
TEST_P(GemmPathTest, MatchesReferenceOnLargeShapes) {
  Check(512, 1536, 600, 90);
  Check(77, 2048, 1000, 91);
  Check(40, 8192, 96, 92);
  // Decode batches: threads, the prefetched next block, K blocks with a ragged last one.
  Check(1, 1536, 1000, 93);
  Check(5, 20000, 37, 94);
  Check(16, 2048, 515, 95);
}

INSTANTIATE_TEST_SUITE_P(PathsAndDtypes, GemmPathTest,
                         ::testing::Combine(::testing::Values(GemmPath::kSgemm, GemmPath::kOneDnnBf16,
                                                              GemmPath::kAmxBf16),
                                            ::testing::Values(DType::kBF16, DType::kF16, DType::kF32)),
                         [](const auto& info) {
                           std::string path(GemmPathName(std::get<0>(info.param)));
                           std::replace(path.begin(), path.end(), '-', '_');
                           return path + "_" + std::string(DTypeName(std::get<1>(info.param)));
                         });

TEST(GemmChoice, AutoTakesBf16UnitsOnlyWhereTheCpuHasThem) {
  const CpuFeatures& cpu = DetectCpuFeatures();
  EXPECT_TRUE(cpu.avx2) << "the CPU kernels assume AVX2, FMA and F16C";
  EXPECT_TRUE(!cpu.amx_bf16 || cpu.avx512);
  EXPECT_TRUE(!cpu.avx512_bf16 || cpu.avx512);
  const auto choice = ChooseGemmPath("auto");
  ASSERT_TRUE(choice.ok()) << choice.status();
  const std::vector<GemmPath> paths = AvailableGemmPaths();
  EXPECT_NE(std::find(paths.begin(), paths.end(), choice->path), paths.end());
  if (!cpu.amx_bf16 && !cpu.avx512_bf16) {
    EXPECT_EQ(choice->path, GemmPath::kSgemm);
  }
  if (amx::Bf16Available()) {
    EXPECT_EQ(choice->path, GemmPath::kAmxBf16) << "AMX: auto takes our tiles";
  }
  EXPECT_NE(choice->description.find(GemmPathName(choice->path)), std::string::npos) << choice->description;
  std::printf("auto GEMM path: %s\n", choice->description.c_str());
}

TEST(GemmChoice, ForcedPathsAndErrors) {
  const auto sgemm = ChooseGemmPath("sgemm");
  ASSERT_TRUE(sgemm.ok()) << sgemm.status();
  EXPECT_EQ(sgemm->path, GemmPath::kSgemm);
  const std::vector<GemmPath> paths = AvailableGemmPaths();
  const bool have_onednn = std::find(paths.begin(), paths.end(), GemmPath::kOneDnnBf16) != paths.end();
  const auto onednn = ChooseGemmPath("onednn-bf16");
  EXPECT_EQ(onednn.ok(), have_onednn) << onednn.status();
  if (!onednn.ok()) {
    EXPECT_EQ(onednn.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(onednn.status().message().find("--cpu-gemm auto or sgemm"), std::string::npos);
  }
  const bool have_amx = std::find(paths.begin(), paths.end(), GemmPath::kAmxBf16) != paths.end();
  EXPECT_EQ(have_amx, DetectCpuFeatures().amx_bf16);
  const auto amx = ChooseGemmPath("amx-bf16");
  EXPECT_EQ(amx.ok(), have_amx) << amx.status();
  if (!amx.ok()) {
    EXPECT_EQ(amx.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(amx.status().message().find("--cpu-gemm auto or sgemm"), std::string::npos);
  }
  const auto bad = ChooseGemmPath("amx");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("auto, sgemm, onednn-bf16, amx-bf16"), std::string::npos);
}

// The quantized prefill: auto follows the measured rule (int8 with AVX-512 VNNI, off AMX and
// off AMD), the forced ones hold on every path, and the description says which was taken.
TEST(GemmChoice, QuantPrefillRuleAndErrors) {
  const CpuFeatures& cpu = DetectCpuFeatures();
  for (const GemmPath path : AvailableGemmPaths()) {
    const auto a = ChooseGemmPath(GemmPathName(path), "auto");
    ASSERT_TRUE(a.ok()) << a.status();
    const bool int8 = QuantIsaAvailable(QuantIsa::kAvx512Vnni) && path != GemmPath::kAmxBf16 && !cpu.amd;
    EXPECT_EQ(a->quant_prefill, int8 ? QuantPrefill::kInt8 : QuantPrefill::kWiden) << a->description;
    EXPECT_NE(a->description.find(absl::StrCat("quantized prefill: ", QuantPrefillName(a->quant_prefill))),
              std::string::npos)
        << a->description;
    for (const QuantPrefill q : {QuantPrefill::kWiden, QuantPrefill::kInt8}) {
      const auto forced = ChooseGemmPath(GemmPathName(path), QuantPrefillName(q));
      ASSERT_TRUE(forced.ok()) << forced.status();  // the CPU kernels assume AVX2 (above)
      EXPECT_EQ(forced->quant_prefill, q);
      EXPECT_EQ(forced->path, path);
    }
  }
  const auto bad = ChooseGemmPath("sgemm", "int4");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("auto, int8, widen"), std::string::npos) << bad.status();
}

// ---------------------------------------------------------------------------------------
// RmsNorm

TEST(RmsNorm, MatchesReferenceForEveryKind) {
  std::mt19937 rng(2);
  constexpr Tolerance kTol{1e-6, 1e-5};
  for (const int64_t dim : {1, 7, 8, 17, 64, 1000, 4096}) {
    for (const NormKind kind : {NormKind::kScale, NormKind::kOnePlusScale, NormKind::kNoScale}) {
      for (const bool in_place : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "dim=" << dim << " kind=" << static_cast<int>(kind)
                                          << " in_place=" << in_place);
        const int64_t rows = dim >= 1000 ? 33 : 3;
        const float eps = 1e-6f;
        std::vector<float> x = RandomFloats(rows * dim, rng, -3.0f, 3.0f);
        const std::vector<float> w = RandomFloats(dim, rng);
        std::vector<double> want(rows * dim);
        for (int64_t r = 0; r < rows; ++r) {
          double ss = 0.0;
          for (int64_t i = 0; i < dim; ++i)
            ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
          const double inv = 1.0 / std::sqrt(ss / dim + eps);
          for (int64_t i = 0; i < dim; ++i) {
            const double scale = kind == NormKind::kScale          ? w[i]
                                 : kind == NormKind::kOnePlusScale ? 1.0 + w[i]
                                                                   : 1.0;
            want[r * dim + i] = x[r * dim + i] * inv * scale;
          }
        }
        std::vector<float> out(rows * dim, kNaN);
        float* dst = in_place ? x.data() : out.data();
        RmsNorm(x.data(), kind == NormKind::kNoScale ? nullptr : w.data(), rows, dim, eps, kind,
                dst);
        EXPECT_TRUE(AllClose(in_place ? x : out, want, kTol));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Rope

TEST(Rope, MatchesReferenceWithPartialFrequenciesAndAttnFactor) {
  std::mt19937 rng(3);
  constexpr Tolerance kTol{2e-6, 1e-5};
  const std::vector<int32_t> positions = {0, 1, 17, 4095, 131071};
  const int64_t tokens = static_cast<int64_t>(positions.size());
  const int64_t heads = 3;
  for (const int64_t head_dim : {2, 16, 64, 128, 256}) {
    for (const bool partial : {false, true}) {
      for (const float attn_factor : {1.0f, 1.3f}) {
        SCOPED_TRACE(::testing::Message() << "head_dim=" << head_dim << " partial=" << partial
                                          << " attn_factor=" << attn_factor);
        const int64_t half = head_dim / 2;
        std::vector<float> inv_freq(half);
        for (int64_t i = 0; i < half; ++i) {
          inv_freq[i] = 1.0f / std::pow(10000.0f, 2.0f * i / head_dim);
          // Proportional RoPE: only the first quarter of the pairs rotate.
          if (partial && i >= (half + 3) / 4) inv_freq[i] = 0.0f;
        }
        std::vector<float> x = RandomFloats(tokens * heads * head_dim, rng);
        std::vector<double> want(x.size());
        for (int64_t t = 0; t < tokens; ++t) {
          for (int64_t h = 0; h < heads; ++h) {
            const float* xh = x.data() + (t * heads + h) * head_dim;
            double* wh = want.data() + (t * heads + h) * head_dim;
            for (int64_t i = 0; i < half; ++i) {
              const float angle = static_cast<float>(positions[t]) * inv_freq[i];  // fp32, as HF
              const double c = std::cos(static_cast<double>(angle)) * attn_factor;
              const double s = std::sin(static_cast<double>(angle)) * attn_factor;
              wh[i] = xh[i] * c - xh[i + half] * s;
              wh[i + half] = xh[i + half] * c + xh[i] * s;
            }
          }
        }
        Rope(x.data(), tokens, heads, head_dim, positions.data(), inv_freq.data(), attn_factor);
        EXPECT_TRUE(AllClose(x, want, kTol));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// GatedActivation, Softcap, Add, Scale

double RefSilu(double x) { return x / (1.0 + std::exp(-x)); }
double RefGeluTanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST(GatedActivation, MatchesReference) {
  std::mt19937 rng(4);
  constexpr Tolerance kTol{1e-6, 1e-5};
  for (const Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
    for (const int64_t dim : {1, 7, 8, 9, 33, 1000, 1024}) {
      SCOPED_TRACE(::testing::Message() << "act=" << static_cast<int>(act) << " dim=" << dim);
      const int64_t rows = dim >= 1000 ? 40 : 4;  // 40 rows: split among the threads
      std::vector<float> gate_up = RandomFloats(rows * 2 * dim, rng, -12.0f, 12.0f);
      // Extremes and the small-|x| branch of tanh.
      const float specials[] = {0.0f, -0.0f, 1e-4f, -1e-3f, 0.3f, -95.0f, 95.0f, 20.0f, -7.0f};
      for (size_t i = 0; i < std::size(specials) && i < static_cast<size_t>(dim); ++i) {
        gate_up[i] = specials[i];
      }
      std::vector<double> want(rows * dim);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < dim; ++i) {
          const double g = gate_up[r * 2 * dim + i];
          const double a = act == Activation::kSilu ? RefSilu(g) : RefGeluTanh(g);
          want[r * dim + i] = a * gate_up[r * 2 * dim + dim + i];
        }
      }
      std::vector<float> out(rows * dim, kNaN);
      GatedActivation(gate_up.data(), rows, dim, act, out.data());
      EXPECT_TRUE(AllClose(out, want, kTol));
      // In place (out = gate_up's first rows * dim floats): the same bits, whatever the
      // number of threads that split the columns.
      const int threads = omp_get_max_threads();
      for (const int n : {1, 2, 3, 7}) {
        omp_set_num_threads(n);
        std::vector<float> in_place = gate_up;
        GatedActivation(in_place.data(), rows, dim, act, in_place.data());
        in_place.resize(rows * dim);
        EXPECT_EQ(std::memcmp(in_place.data(), out.data(), out.size() * sizeof(float)), 0) << n << " threads";
      }
      omp_set_num_threads(threads);
    }
  }
}

TEST(Softcap, MatchesReference) {
  std::mt19937 rng(5);
  for (const float cap : {30.0f, 1.5f}) {
    for (const int64_t n : {1, 7, 8, 100, 1001}) {
      SCOPED_TRACE(::testing::Message() << "cap=" << cap << " n=" << n);
      std::vector<float> x = RandomFloats(n, rng, -100.0f, 100.0f);
      x[0] = 0.01f;  // inside tanh's polynomial branch
      std::vector<double> want(n);
      for (int64_t i = 0; i < n; ++i) want[i] = cap * std::tanh(x[i] / static_cast<double>(cap));
      Softcap(x.data(), n, cap);
      EXPECT_TRUE(AllClose(x, want, {1e-6, 1e-6}));
    }
  }
}

TEST(AddAndScale, ExactIncludingAliasing) {
  std::mt19937 rng(6);
  for (const int64_t n : {1, 13, 1 << 18}) {
    const std::vector<float> a = RandomFloats(n, rng);
    const std::vector<float> b = RandomFloats(n, rng);
    std::vector<double> sum(n), scaled(n);
    for (int64_t i = 0; i < n; ++i) {
      sum[i] = a[i] + b[i];  // float addition, the exact expected bits
      scaled[i] = sum[i] * 0.5;
    }
    std::vector<float> out(n, kNaN);
    Add(a.data(), b.data(), n, out.data());
    EXPECT_TRUE(AllClose(out, sum, {0, 0}));
    std::vector<float> alias = a;
    Add(alias.data(), b.data(), n, alias.data());
    EXPECT_TRUE(AllClose(alias, sum, {0, 0}));
    Scale(alias.data(), n, 0.5f);
    EXPECT_TRUE(AllClose(alias, scaled, {0, 0}));
  }
}

// ---------------------------------------------------------------------------------------
// Embedding, Argmax, WriteKv

TEST(Embedding, ShardRowsScaledAndOutOfShardIdsZero) {
  std::mt19937 rng(7);
  const int64_t vocab_start = 100;
  const int64_t vocab_rows = 50;
  const std::vector<int32_t> ids = {100, 149, 99, 150, -1, 125, 0, 1 << 30, 100};
  const int64_t tokens = static_cast<int64_t>(ids.size());
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const int64_t dim : {1, 7, 64, 300}) {
      for (const float scale : {1.0f, std::sqrt(static_cast<float>(dim))}) {
        SCOPED_TRACE(::testing::Message()
                     << DTypeName(dtype) << " dim=" << dim << " scale=" << scale);
        const Stored table = RandomStored(vocab_rows * dim, dtype, rng);
        std::vector<double> want(tokens * dim, 0.0);
        for (int64_t t = 0; t < tokens; ++t) {
          const int64_t row = ids[t] - vocab_start;
          if (row < 0 || row >= vocab_rows) continue;
          for (int64_t i = 0; i < dim; ++i) want[t * dim + i] = table.values[row * dim + i] * scale;
        }
        std::vector<float> out(tokens * dim, kNaN);
        Embedding(ids.data(), tokens, table.bytes.data(), dtype, vocab_start, vocab_rows, dim,
                  scale, out.data());
        EXPECT_TRUE(AllClose(out, want, {0, 1e-7}));
      }
    }
  }
}

TEST(Argmax, FirstIndexOnTies) {
  EXPECT_EQ(Argmax(std::vector<float>{5.0f}.data(), 1), 0);
  EXPECT_EQ(Argmax(std::vector<float>{1, 3, 3, 2}.data(), 4), 1);
  std::vector<float> v(100, -1.0f);
  v[50] = 2.0f;
  v[9] = 2.0f;
  v[99] = 2.0f;
  EXPECT_EQ(Argmax(v.data(), 100), 9);
  v.assign(19, -3.0f);
  v[18] = -2.0f;  // the maximum in the non-vector tail
  EXPECT_EQ(Argmax(v.data(), 19), 18);
  v.assign(37, -INFINITY);
  EXPECT_EQ(Argmax(v.data(), 37), 0);
  v.assign(37, 0.0f);
  v[3] = -0.0f;
  v[0] = -1.0f;
  EXPECT_EQ(Argmax(v.data(), 37), 1);  // -0 and +0 tie
}

TEST(Argmax, NanWinsAsInTorch) {
  std::vector<float> v(20, 1.0f);
  v[13] = kNaN;
  v[17] = kNaN;
  EXPECT_EQ(Argmax(v.data(), 20), 13);
}

TEST(Argmax, MatchesFirstMaxElementOnLargeInput) {
  std::mt19937 rng(8);
  for (const int64_t n : {8, 255, 262144 + 5}) {
    std::vector<float> v = RandomFloats(n, rng);
    // Coarse values make ties likely.
    for (float& f : v) f = std::round(f * 50.0f);
    const int64_t want = std::max_element(v.begin(), v.end()) - v.begin();
    EXPECT_EQ(Argmax(v.data(), n), want) << "n=" << n;
  }
}

TEST(WriteKv, WritesSlotsAndSkipsPadding) {
  std::mt19937 rng(9);
  for (const int64_t head_dim : {3, 128}) {
    const int64_t kv_heads = 2;
    const int64_t row = kv_heads * head_dim;
    const std::vector<int32_t> slots = {3, -1, 0, 7, 5};
    const int64_t tokens = static_cast<int64_t>(slots.size());
    const int64_t num_slots = 9;
    const std::vector<float> k = RandomFloats(tokens * row, rng);
    const std::vector<float> v = RandomFloats(tokens * row, rng);
    std::vector<float> k_cache(num_slots * row, 42.0f), v_cache(num_slots * row, 43.0f);
    std::vector<double> want_k(k_cache.begin(), k_cache.end()),
        want_v(v_cache.begin(), v_cache.end());
    for (int64_t t = 0; t < tokens; ++t) {
      if (slots[t] < 0) continue;
      for (int64_t i = 0; i < row; ++i) {
        want_k[slots[t] * row + i] = k[t * row + i];
        want_v[slots[t] * row + i] = v[t * row + i];
      }
    }
    WriteKv(k.data(), v.data(), slots.data(), tokens, kv_heads, head_dim, KvCacheDType::kF32, k_cache.data(),
            v_cache.data());
    EXPECT_TRUE(AllClose(k_cache, want_k, {0, 0}));
    EXPECT_TRUE(AllClose(v_cache, want_v, {0, 0}));
  }
}

// bf16 and FP8 caches: each written head is StoreKvHead's record at its slot (others
// untouched), and LoadKvHead gives the values back within the format's rounding: bf16 to
// 2^-8 relative; FP8 to 2^-4 of each value plus the smallest subnormal step (scale * 2^-9) of
// its head, with one scale per (slot, head) = amax / 448, so the largest value comes back to
// fp32 rounding.
TEST(WriteKv, Bf16AndFp8HeadsRoundTrip) {
  std::mt19937 rng(19);
  for (const KvCacheDType t : {KvCacheDType::kBf16, KvCacheDType::kFp8E4M3}) {
    for (const int64_t head_dim : {64, 256}) {
      SCOPED_TRACE(::testing::Message() << KvCacheDTypeName(t) << " head_dim " << head_dim);
      const int64_t kv_heads = 3, row = kv_heads * head_dim;
      const std::vector<int32_t> slots = {4, -1, 0, 2};
      const int64_t tokens = 4, num_slots = 6;
      std::vector<float> k = RandomFloats(tokens * row, rng, -4.0f, 4.0f);
      std::vector<float> v = RandomFloats(tokens * row, rng, -0.01f, 0.01f);
      std::fill_n(k.begin() + 3 * row, head_dim, 0.0f);  // token 3 head 0: all zero
      const int64_t slot_bytes = KvSlotBytes(t, kv_heads, head_dim), head_bytes = slot_bytes / kv_heads;
      EXPECT_EQ(head_bytes, t == KvCacheDType::kBf16 ? 2 * head_dim : 4 + head_dim);
      std::vector<uint8_t> kc(num_slots * slot_bytes, 0xab), vc(num_slots * slot_bytes, 0xcd);
      WriteKv(k.data(), v.data(), slots.data(), tokens, kv_heads, head_dim, t, kc.data(), vc.data());
      std::vector<uint8_t> want(head_bytes);
      std::vector<float> back(head_dim);
      for (int64_t tok = 0; tok < tokens; ++tok) {
        for (int64_t h = 0; h < kv_heads; ++h) {
          for (const auto& [x, cache] : {std::pair{&k, &kc}, std::pair{&v, &vc}}) {
            const float* src = x->data() + tok * row + h * head_dim;
            if (slots[tok] < 0) continue;
            const uint8_t* rec = cache->data() + slots[tok] * slot_bytes + h * head_bytes;
            StoreKvHead(t, src, head_dim, want.data());
            ASSERT_EQ(0, std::memcmp(rec, want.data(), head_bytes)) << "token " << tok << " head " << h;
            LoadKvHead(t, rec, head_dim, back.data());
            float amax = 0;
            for (int64_t d = 0; d < head_dim; ++d) amax = std::max(amax, std::fabs(src[d]));
            for (int64_t d = 0; d < head_dim; ++d) {
              const double tol = t == KvCacheDType::kBf16 ? std::ldexp(std::fabs(src[d]), -8)
                                                          : std::ldexp(std::fabs(src[d]), -4) + amax / 448 * 0x1p-9;
              ASSERT_LE(std::fabs(back[d] - src[d]), tol) << "token " << tok << " head " << h << " d " << d;
              if (std::fabs(src[d]) == amax && t == KvCacheDType::kFp8E4M3) {
                ASSERT_LE(std::fabs(back[d] - src[d]), std::ldexp(amax, -21));  // 448 * (amax / 448)
              }
            }
          }
        }
      }
      // Slots 1, 3 and 5 were not written.
      for (const int64_t s : {1, 3, 5}) {
        for (int64_t b = 0; b < slot_bytes; ++b) ASSERT_EQ(kc[s * slot_bytes + b], 0xab);
      }
    }
  }
}

}  // namespace
}  // namespace cpu
}  // namespace tpserve

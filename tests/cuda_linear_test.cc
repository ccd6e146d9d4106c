// y = x · W^T on the GPU against cpu::Linear: the GEMV kernel (decode rows, every weight
// dtype, odd K) and the cuBLASLt GEMM (prefill rows) at 31B-like shapes.
// GPU test (ctest -L gpu).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm.h"
#include "tests/cuda_test_util.h"

namespace tpserve {
namespace {

using cuda::bf16;
using testing::AllClose;
using testing::DeviceArray;
using testing::FromBf16;
using testing::RandomVector;
using testing::RoundBf16;
using testing::ToBf16;

// w as raw bytes of `dt` (values chosen so that bf16 rounding of the inputs is the only
// difference from the reference), and the same values as fp32 for the reference.
std::vector<uint8_t> WeightBytes(const std::vector<float>& w, DType dt) {
  std::vector<uint8_t> raw(w.size() * DTypeSize(dt));
  for (size_t i = 0; i < w.size(); ++i) {
    if (dt == DType::kF32) reinterpret_cast<float*>(raw.data())[i] = w[i];
    if (dt == DType::kBF16) reinterpret_cast<uint16_t*>(raw.data())[i] = F32ToBf16(w[i]);
    if (dt == DType::kF16) reinterpret_cast<uint16_t*>(raw.data())[i] = F32ToF16(w[i]);
  }
  return raw;
}

// Separate outputs of the given column counts for one GemvSplit launch, and the check that
// each holds its columns of `whole` ([m, sum(cols)]) bit for bit.
struct SplitOutputs {
  SplitOutputs(int64_t m, const std::vector<int64_t>& cols) : m(m), cols(cols) {
    for (int64_t c : cols) {
      parts.push_back(std::make_unique<DeviceArray<uint16_t>>(m * c));
      out.y[out.count] = reinterpret_cast<bf16*>(parts.back()->get());
      out.cols[out.count++] = c;
    }
  }
  void ExpectColumnsOf(const std::vector<uint16_t>& whole, const std::string& what) const {
    const int64_t n = static_cast<int64_t>(whole.size()) / m;
    int64_t c0 = 0;
    for (size_t p = 0; p < cols.size(); ++p) {
      std::vector<uint16_t> expect(m * cols[p]);
      for (int64_t r = 0; r < m; ++r) std::copy_n(&whole[r * n + c0], cols[p], &expect[r * cols[p]]);
      EXPECT_TRUE(testing::BitEqual(parts[p]->Download(), expect)) << what << " part " << p << " of " << cols.size();
      c0 += cols[p];
    }
  }
  int64_t m;
  std::vector<int64_t> cols;
  std::vector<std::unique_ptr<DeviceArray<uint16_t>>> parts;
  cuda::GemvOutputs out;
};

struct LinearCase {
  int64_t m, k, n;
};

class CudaGemvTest : public ::testing::TestWithParam<LinearCase> {};

TEST_P(CudaGemvTest, AllWeightDtypes) {
  TP_SKIP_WITHOUT_GPU();
  const auto [m, k, n] = GetParam();
  const std::vector<float> x = RoundBf16(RandomVector(m * k, 1));
  const std::vector<float> w = RandomVector(n * k, 2, -1.0f / std::sqrt(k), 1.0f / std::sqrt(k));
  DeviceArray<uint16_t> d_x(ToBf16(x)), d_y(m * n);
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    const std::vector<uint8_t> raw = WeightBytes(w, dt);
    std::vector<float> want(m * n);
    cpu::Linear(x.data(), m, k, raw.data(), dt, n, want.data());
    DeviceArray<uint8_t> d_w(raw);
    cuda::Gemv(reinterpret_cast<bf16*>(d_x.get()), m, k, d_w.get(), dt, n, reinterpret_cast<bf16*>(d_y.get()),
               nullptr);
    EXPECT_TRUE(AllClose(FromBf16(d_y.Download()), want, testing::kBf16Reduction)) << DTypeName(dt);
  }
}

// One launch into separate q, k, v outputs computes exactly what one output would hold.
TEST_P(CudaGemvTest, SplitOutputsMatchOneOutput) {
  TP_SKIP_WITHOUT_GPU();
  const auto [m, k, n] = GetParam();
  const std::vector<float> x = RoundBf16(RandomVector(m * k, 3));
  const std::vector<float> w = RandomVector(n * k, 4, -1.0f / std::sqrt(k), 1.0f / std::sqrt(k));
  const std::vector<uint8_t> raw = WeightBytes(w, DType::kBF16);
  DeviceArray<uint8_t> d_w(raw);
  DeviceArray<uint16_t> d_x(ToBf16(x)), whole(m * n);
  auto* xb = reinterpret_cast<bf16*>(d_x.get());
  cuda::Gemv(xb, m, k, d_w.get(), DType::kBF16, n, reinterpret_cast<bf16*>(whole.get()), nullptr);
  const std::vector<uint16_t> want = whole.Download();
  // Uneven parts, as q | k | v, and as q | k (K = V layers); one part of 1 feature.
  const std::vector<std::vector<int64_t>> splits = {{n / 2, n / 4, n - n / 2 - n / 4}, {n - 1, 1}, {n}};
  for (const auto& cols : splits) {
    const SplitOutputs split(m, cols);
    cuda::GemvSplit(xb, m, k, d_w.get(), DType::kBF16, split.out, nullptr);
    split.ExpectColumnsOf(want, "split");
  }
}

// The bulk-copy GEMV and programmatic launch (cuda::GemvLaunch) give the split kernel's
// bits, one output or three; shapes they do not take (m > 4, k % 8 != 0, rows over 48 KB,
// x and two stages beyond shared memory) fall back to the split kernel.
TEST_P(CudaGemvTest, BulkAndProgrammaticLaunchGiveTheSameBits) {
  TP_SKIP_WITHOUT_GPU();
  if (!cuda::GemvBulkSupported()) GTEST_SKIP() << "the bulk GEMV and programmatic launch need compute capability 9.0";
  const auto [m, k, n] = GetParam();
  const std::vector<float> x = RoundBf16(RandomVector(m * k, 7));
  const std::vector<float> w = RandomVector(n * k, 8, -1.0f / std::sqrt(k), 1.0f / std::sqrt(k));
  DeviceArray<uint8_t> d_w(WeightBytes(w, DType::kBF16));
  DeviceArray<uint16_t> d_x(ToBf16(x)), whole(m * n), got(m * n);
  auto* xb = reinterpret_cast<bf16*>(d_x.get());
  cuda::Gemv(xb, m, k, d_w.get(), DType::kBF16, n, reinterpret_cast<bf16*>(whole.get()), nullptr);
  const std::vector<uint16_t> want = whole.Download();
  int smem_optin = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (const cuda::GemvLaunch launch : {cuda::GemvLaunch{.bulk = true}, cuda::GemvLaunch{.pdl = true},
                                        cuda::GemvLaunch{.bulk = true, .pdl = true}}) {
    const std::string name = std::string(launch.bulk ? "bulk" : "split") + (launch.pdl ? "+pdl" : "");
    if (launch.bulk) {  // the shapes the bulk kernel takes (a fallback would pass unseen)
      // Rows of at most 48 KB, 4 / 2 / 1 of them a stage; x's rows and two stages within
      // the shared memory a block may opt into, less up to 2 KB of static shared memory
      // (the test's shapes are far from that edge).
      const int64_t row = k * 2, stage = (row * 4 <= 48 * 1024 ? 4 : row * 2 <= 48 * 1024 ? 2 : 1) * row;
      const int64_t x_bytes = (m * row + 127) / 128 * 128;
      const bool fits = x_bytes + 2 * stage <= static_cast<int64_t>(smem_optin) - 2048;
      EXPECT_EQ(cuda::GemvTakesBulk(m, k), m <= 4 && k % 8 == 0 && row <= 48 * 1024 && fits) << name;
    }
    ASSERT_EQ(cudaMemset(got.get(), 0xff, m * n * 2), cudaSuccess);  // no variant inherits the last one's output
    for (int rep = 0; rep < 3; ++rep) {  // the persistent blocks' stages are reused across calls
      cuda::Gemv(xb, m, k, d_w.get(), DType::kBF16, n, reinterpret_cast<bf16*>(got.get()), stream, launch);
    }
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << name;
    EXPECT_TRUE(testing::BitEqual(got.Download(), want)) << name;
    if (n < 3) continue;
    const SplitOutputs split(m, {n / 2, n / 4, n - n / 2 - n / 4});
    cuda::GemvSplit(xb, m, k, d_w.get(), DType::kBF16, split.out, stream, launch);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << name;
    split.ExpectColumnsOf(want, name);
  }
  cudaStreamDestroy(stream);
}

// Programmatic launch lets a GEMV start before the kernel it depends on is done; it must
// still read that kernel's output, and not overwrite what that kernel reads. A chain of
// dependent kernels (norm -> GEMV -> gated activation -> GEMV, then a norm reading `out`
// and a GEMV writing `out`, 6 times) fed a different input each round (a GEMV that read x
// early would see the round before's), eager and captured in a CUDA graph, gives the bits
// of the same chain launched plainly.
TEST(CudaGemvPdlTest, DependentChainsGiveThePlainChainsBits) {
  TP_SKIP_WITHOUT_GPU();
  if (!cuda::GemvBulkSupported()) GTEST_SKIP() << "programmatic launch needs compute capability 9.0";
  constexpr int64_t kHidden = 2048, kInter = 4096, kLayers = 6, kRounds = 8;
  const std::vector<float> w1 = RandomVector(2 * kInter * kHidden, 11, -0.05f, 0.05f);
  const std::vector<float> w2 = RandomVector(kHidden * kInter, 12, -0.03f, 0.03f);
  const std::vector<float> w3 = RandomVector(kHidden * kHidden, 13, -0.04f, 0.04f);
  DeviceArray<uint8_t> d_w1(WeightBytes(w1, DType::kBF16)), d_w2(WeightBytes(w2, DType::kBF16)),
      d_w3(WeightBytes(w3, DType::kBF16));
  DeviceArray<float> d_norm(std::vector<float>(kHidden, 1.0f));
  DeviceArray<uint16_t> in(kHidden), a(kHidden), gate_up(2 * kInter), act(kInter), out(kHidden);
  auto B = [](DeviceArray<uint16_t>& d) { return reinterpret_cast<bf16*>(d.get()); };
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  auto chain = [&](const cuda::GemvLaunch& launch) {
    const bf16* x = B(in);
    for (int64_t l = 0; l < kLayers; ++l) {
      cuda::RmsNorm(x, d_norm.get(), 1, kHidden, 1e-6f, cpu::NormKind::kScale, B(a), stream);
      cuda::Gemv(B(a), 1, kHidden, d_w1.get(), DType::kBF16, 2 * kInter, B(gate_up), stream, launch);
      cuda::GatedActivation(B(gate_up), 1, kInter, cpu::Activation::kSilu, B(act), stream);
      cuda::Gemv(B(act), 1, kInter, d_w2.get(), DType::kBF16, kHidden, B(out), stream, launch);
      // The norm reads `out`, the GEMV right after it writes `out`.
      cuda::RmsNorm(B(out), d_norm.get(), 1, kHidden, 1e-6f, cpu::NormKind::kScale, B(a), stream);
      cuda::Gemv(B(a), 1, kHidden, d_w3.get(), DType::kBF16, kHidden, B(out), stream, launch);
      x = B(out);
    }
  };
  std::vector<std::vector<uint16_t>> inputs, want;
  for (int r = 0; r < kRounds; ++r) {
    inputs.push_back(ToBf16(RoundBf16(RandomVector(kHidden, 100 + r))));
    in.Upload(inputs.back());
    chain(cuda::GemvLaunch{});
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    want.push_back(out.Download());
  }
  for (const cuda::GemvLaunch launch : {cuda::GemvLaunch{.pdl = true}, cuda::GemvLaunch{.bulk = true, .pdl = true}}) {
    const std::string name = launch.bulk ? "bulk+pdl" : "split+pdl";
    for (int r = 0; r < kRounds; ++r) {
      in.Upload(inputs[r]);
      chain(launch);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << name;
      EXPECT_TRUE(testing::BitEqual(out.Download(), want[r])) << name << " eager, round " << r;
    }
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    chain(launch);
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess) << name;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess) << name;
    for (int r = 0; r < kRounds; ++r) {
      ASSERT_EQ(cudaMemcpyAsync(in.get(), inputs[r].data(), kHidden * 2, cudaMemcpyHostToDevice, stream), cudaSuccess);
      ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess) << name;
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << name;
      EXPECT_TRUE(testing::BitEqual(out.Download(), want[r])) << name << " graph, round " << r;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  cudaStreamDestroy(stream);
}

// The block shapes cuda_kernels_bench sweeps give the production GEMV's bits exactly.
TEST(CudaGemvTuningTest, EveryTuningMatchesGemvBitForBit) {
  TP_SKIP_WITHOUT_GPU();
  for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{{4096, 5376}, {1030, 21504 / 8}, {7, 64}}) {
    const std::vector<float> x = RoundBf16(RandomVector(k, 5));
    const std::vector<float> w = RandomVector(n * k, 6, -1.0f / std::sqrt(k), 1.0f / std::sqrt(k));
    DeviceArray<uint8_t> d_w(WeightBytes(w, DType::kBF16));
    DeviceArray<uint16_t> d_x(ToBf16(x)), want(n), got(n);
    auto* xb = reinterpret_cast<bf16*>(d_x.get());
    cuda::Gemv(xb, 1, k, d_w.get(), DType::kBF16, n, reinterpret_cast<bf16*>(want.get()), nullptr);
    const std::vector<uint16_t> expect = want.Download();
    for (const cuda::GemvTuning& t : cuda::GemvTunings()) {
      cuda::GemvWithTuning(t, xb, k, reinterpret_cast<const bf16*>(d_w.get()), n, reinterpret_cast<bf16*>(got.get()),
                           nullptr);
      EXPECT_TRUE(testing::BitEqual(got.Download(), expect))
          << "tuning " << t.features << "/" << t.unroll << "/" << t.min_blocks << " n=" << n << " k=" << k;
    }
  }
}

// GemvLaunch::tuning (the block shape the backend's tuning picks per weight shape) gives
// the production launch's bits, into split outputs and under programmatic launch too.
TEST(CudaGemvTuningTest, TuningInTheLaunchGivesTheSameBits) {
  TP_SKIP_WITHOUT_GPU();
  const int64_t k = 5376;
  const std::vector<int64_t> cols = {2048, 1024, 1024};
  const int64_t n = 4096;
  const std::vector<float> x = RoundBf16(RandomVector(k, 15));
  const std::vector<float> w = RandomVector(n * k, 16, -1.0f / std::sqrt(k), 1.0f / std::sqrt(k));
  DeviceArray<uint8_t> d_w(WeightBytes(w, DType::kBF16));
  DeviceArray<uint16_t> d_x(ToBf16(x)), want(n), got(n);
  auto* xb = reinterpret_cast<bf16*>(d_x.get());
  cuda::Gemv(xb, 1, k, d_w.get(), DType::kBF16, n, reinterpret_cast<bf16*>(want.get()), nullptr);
  const std::vector<uint16_t> expect = want.Download();
  const bool pdl_too = cuda::GemvBulkSupported();
  const int count = static_cast<int>(cuda::GemvTunings().size());
  for (int t = 0; t < count; ++t) {
    for (bool pdl : {false, true}) {
      if (pdl && !pdl_too) continue;
      const cuda::GemvLaunch launch{.pdl = pdl, .tuning = t};
      cuda::Gemv(xb, 1, k, d_w.get(), DType::kBF16, n, reinterpret_cast<bf16*>(got.get()), nullptr, launch);
      EXPECT_TRUE(testing::BitEqual(got.Download(), expect)) << "tuning " << t << " pdl " << pdl;
      SplitOutputs split(1, cols);
      cuda::GemvSplit(xb, 1, k, d_w.get(), DType::kBF16, split.out, nullptr, launch);
      split.ExpectColumnsOf(expect, "tuning " + std::to_string(t) + " split");
    }
  }
  // Two rows: the tuning does not apply; the launch is the plain one.
  DeviceArray<uint16_t> x2(ToBf16(RoundBf16(RandomVector(2 * k, 17)))), want2(2 * n), got2(2 * n);
  cuda::Gemv(reinterpret_cast<bf16*>(x2.get()), 2, k, d_w.get(), DType::kBF16, n, reinterpret_cast<bf16*>(want2.get()),
             nullptr);
  cuda::Gemv(reinterpret_cast<bf16*>(x2.get()), 2, k, d_w.get(), DType::kBF16, n, reinterpret_cast<bf16*>(got2.get()),
             nullptr, cuda::GemvLaunch{.tuning = count - 1});
  EXPECT_TRUE(testing::BitEqual(got2.Download(), want2.Download()));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaGemvTest,
                         ::testing::Values(LinearCase{1, 5376, 4096},   // decode, 31B hidden
                                           LinearCase{2, 5376, 1000},
                                           LinearCase{3, 1024, 777},    // rows of the 4-row kernel unused
                                           LinearCase{4, 21504 / 8, 5376},
                                           LinearCase{13, 512, 300},    // several 8-row passes
                                           LinearCase{1, 21504, 5376},  // 31B down_proj: K over 3 passes
                                           LinearCase{1, 5376, 2050},   // features not a multiple of 4
                                           LinearCase{5, 4096, 1030},
                                           LinearCase{1, 100, 64},      // K not a multiple of 8
                                           LinearCase{1, 8192, 5376},   // bulk: 2 features a group
                                           LinearCase{2, 16384, 1000},  // bulk: 1 feature a group
                                           LinearCase{3, 21504, 260},   // bulk: 3 rows of down_proj fit
                                           LinearCase{4, 21504, 260},   // 4 rows + 2 stages do not: split
                                           LinearCase{1, 32768, 300}),  // rows over 48 KB: no bulk
                         [](const auto& info) {
                           return std::to_string(info.param.m) + "x" + std::to_string(info.param.k) + "x" +
                                  std::to_string(info.param.n);
                         });

class CudaGemmTest : public ::testing::TestWithParam<LinearCase> {};

TEST_P(CudaGemmTest, CublasLtMatchesCpu) {
  TP_SKIP_WITHOUT_GPU();
  const auto [m, k, n] = GetParam();
  const std::vector<float> x = RoundBf16(RandomVector(m * k, 3));
  const std::vector<float> w = RoundBf16(RandomVector(n * k, 4, -1.0f / std::sqrt(k), 1.0f / std::sqrt(k)));
  std::vector<float> want(m * n);
  cpu::Linear(x.data(), m, k, w.data(), DType::kF32, n, want.data());
  DeviceArray<uint16_t> d_x(ToBf16(x)), d_w(ToBf16(w)), d_y(m * n);
  cuda::Gemm gemm;
  for (int rep = 0; rep < 2; ++rep) {  // the second call reuses the cached plan
    gemm.Run(reinterpret_cast<bf16*>(d_x.get()), m, k, reinterpret_cast<bf16*>(d_w.get()), n,
             reinterpret_cast<bf16*>(d_y.get()), nullptr);
    EXPECT_TRUE(AllClose(FromBf16(d_y.Download()), want, testing::kBf16Reduction)) << "call " << rep;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaGemmTest,
                         ::testing::Values(LinearCase{5, 5376, 1024}, LinearCase{128, 5376, 4096 + 2 * 2048},
                                           LinearCase{300, 8192 / 4, 5376}, LinearCase{33, 64, 512}),
                         [](const auto& info) {
                           return std::to_string(info.param.m) + "x" + std::to_string(info.param.k) + "x" +
                                  std::to_string(info.param.n);
                         });

// Gemm::Choose: with use_tuned, every heuristic candidate chosen at one row count runs
// (where cublasLtMatmulAlgoCheck allows it) for products of that row count, fewer rows and
// more, within the reference tolerance; without use_tuned, the heuristic's first again.
TEST(CudaGemmTuneTest, EveryChosenCandidateMatchesCpu) {
  TP_SKIP_WITHOUT_GPU();
  const int64_t k = 2048, n = 5376, max_m = 100, tuned_m = 64;
  const std::vector<float> x = RoundBf16(RandomVector(max_m * k, 21));
  const std::vector<float> w = RoundBf16(RandomVector(n * k, 22, -1.0f / std::sqrt(k), 1.0f / std::sqrt(k)));
  DeviceArray<uint16_t> d_x(ToBf16(x)), d_w(ToBf16(w));
  auto* xb = reinterpret_cast<bf16*>(d_x.get());
  auto* wb = reinterpret_cast<bf16*>(d_w.get());
  std::map<int64_t, std::vector<float>> want;
  for (int64_t m : {40, 64, 100}) {
    want[m].resize(m * n);
    cpu::Linear(x.data(), m, k, w.data(), DType::kF32, n, want[m].data());
  }
  cuda::Gemm gemm;
  const int count = gemm.NumCandidates(tuned_m, n, k);
  ASSERT_GE(count, 1);
  gemm.set_use_tuned(true);
  for (int i = 0; i < count; ++i) {
    gemm.ClearChoices();
    gemm.Choose(tuned_m, n, k, i);
    EXPECT_EQ(gemm.UsesTunedChoice(tuned_m, n, k), i > 0) << "candidate " << i;  // its own shape: always runs
    for (const auto& [m, ref] : want) {
      DeviceArray<uint16_t> y(m * n);
      gemm.Run(xb, m, k, wb, n, reinterpret_cast<bf16*>(y.get()), nullptr);
      EXPECT_TRUE(AllClose(FromBf16(y.Download()), ref, testing::kBf16Reduction)) << "m=" << m << " candidate " << i;
    }
  }
  gemm.set_use_tuned(false);
  EXPECT_FALSE(gemm.UsesTunedChoice(tuned_m, n, k));
}

}  // namespace
}  // namespace tpserve

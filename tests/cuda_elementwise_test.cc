// The CUDA row-wise and elementwise kernels (embedding, RMSNorm, fused add+RMSNorm, RoPE,
// gated activations, softcap, add, scale, bias, gather) against their kernels/cpu
// references, at the 31B's shapes (hidden 5376, head_dim 256/512, 32 heads) and odd ones.
// GPU test (ctest -L gpu); skips without a device.
#include <cmath>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_kernels.h"
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

bf16* B(const DeviceArray<uint16_t>& a) { return reinterpret_cast<bf16*>(a.get()); }

TEST(CudaEmbeddingTest, AllTableDtypesAndOutOfShardIds) {
  TP_SKIP_WITHOUT_GPU();
  const int64_t rows = 50, dim = 5376, vocab_start = 100;
  const std::vector<int32_t> ids = {100, 149, 7, 120, 150, 100, 99};
  DeviceArray<int32_t> d_ids(ids);
  const std::vector<float> table = RandomVector(rows * dim, 1);
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    std::vector<uint8_t> raw(table.size() * DTypeSize(dt));
    for (size_t i = 0; i < table.size(); ++i) {
      if (dt == DType::kF32) reinterpret_cast<float*>(raw.data())[i] = table[i];
      if (dt == DType::kBF16) reinterpret_cast<uint16_t*>(raw.data())[i] = F32ToBf16(table[i]);
      if (dt == DType::kF16) reinterpret_cast<uint16_t*>(raw.data())[i] = F32ToF16(table[i]);
    }
    DeviceArray<uint8_t> d_table(raw);
    DeviceArray<uint16_t> out(ids.size() * dim);
    cuda::Embedding(d_ids.get(), ids.size(), d_table.get(), dt, vocab_start, rows, dim, 73.5f, B(out), nullptr);
    std::vector<float> want(ids.size() * dim);
    cpu::Embedding(ids.data(), ids.size(), raw.data(), dt, vocab_start, rows, dim, 73.5f, want.data());
    EXPECT_TRUE(AllClose(FromBf16(out.Download()), want, testing::kBf16Elementwise)) << DTypeName(dt);
  }
}

struct NormCase {
  int64_t rows, dim;
};

class CudaRmsNormTest : public ::testing::TestWithParam<NormCase> {};

TEST_P(CudaRmsNormTest, AllKindsAndInPlace) {
  TP_SKIP_WITHOUT_GPU();
  const auto [rows, dim] = GetParam();
  const std::vector<float> x = RoundBf16(RandomVector(rows * dim, 2, -3.0f, 3.0f));
  const std::vector<float> w = RandomVector(dim, 3, 0.5f, 1.5f);
  DeviceArray<float> d_w(w);
  for (cpu::NormKind kind : {cpu::NormKind::kScale, cpu::NormKind::kOnePlusScale, cpu::NormKind::kNoScale}) {
    std::vector<float> want(x.size());
    cpu::RmsNorm(x.data(), w.data(), rows, dim, 1e-6f, kind, want.data());
    DeviceArray<uint16_t> d_x(ToBf16(x)), out(x.size());
    const float* wp = kind == cpu::NormKind::kNoScale ? nullptr : d_w.get();
    cuda::RmsNorm(B(d_x), wp, rows, dim, 1e-6f, kind, B(out), nullptr);
    EXPECT_TRUE(AllClose(FromBf16(out.Download()), want, testing::kBf16Reduction)) << static_cast<int>(kind);
    cuda::RmsNorm(B(d_x), wp, rows, dim, 1e-6f, kind, B(d_x), nullptr);  // in place
    EXPECT_TRUE(AllClose(FromBf16(d_x.Download()), want, testing::kBf16Reduction)) << "in place";
  }
}

TEST_P(CudaRmsNormTest, FusedResidualAdd) {
  TP_SKIP_WITHOUT_GPU();
  const auto [rows, dim] = GetParam();
  const std::vector<float> h = RoundBf16(RandomVector(rows * dim, 4, -2.0f, 2.0f));
  const std::vector<float> o = RoundBf16(RandomVector(rows * dim, 5, -2.0f, 2.0f));
  const std::vector<float> w = RandomVector(dim, 6, 0.5f, 1.5f);
  std::vector<float> sum(h.size()), want(h.size());
  for (size_t i = 0; i < h.size(); ++i) sum[i] = Bf16ToF32(F32ToBf16(h[i] + o[i]));
  cpu::RmsNorm(sum.data(), w.data(), rows, dim, 1e-6f, cpu::NormKind::kScale, want.data());
  DeviceArray<uint16_t> d_h(ToBf16(h)), d_o(ToBf16(o)), out(h.size());
  DeviceArray<float> d_w(w);
  cuda::AddRmsNorm(B(d_o), B(d_h), d_w.get(), rows, dim, 1e-6f, cpu::NormKind::kScale, B(out), nullptr);
  EXPECT_TRUE(AllClose(FromBf16(d_h.Download()), sum, testing::kBf16Elementwise)) << "residual";
  EXPECT_TRUE(AllClose(FromBf16(out.Download()), want, testing::kBf16Reduction)) << "normed";
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaRmsNormTest,
                         ::testing::Values(NormCase{3, 5376},      // 31B hidden, block per row
                                           NormCase{7 * 32, 256},  // per-head q norm, sliding layers
                                           NormCase{5 * 4, 512},   // per-head k norm, global layers
                                           NormCase{9, 100},       // not a multiple of 8
                                           NormCase{1, 2048}),
                         [](const auto& info) {
                           return std::to_string(info.param.rows) + "x" + std::to_string(info.param.dim);
                         });

TEST(CudaRopeTest, MatchesCpuAtLargePositionsAndPartialRotation) {
  TP_SKIP_WITHOUT_GPU();
  for (int64_t head_dim : {16, 128, 256, 512}) {
    const int64_t tokens = 6, heads = 32;
    const std::vector<int32_t> pos = {0, 1, 17, 1000, 65535, 131071};
    std::vector<float> inv_freq(head_dim / 2);
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      // Proportional RoPE: only the first quarter of the pairs rotates.
      inv_freq[i] = i < head_dim / 8 ? std::pow(1e6f, -2.0f * i / head_dim) : 0.0f;
    }
    const std::vector<float> x = RoundBf16(RandomVector(tokens * heads * head_dim, 7));
    std::vector<float> want = x;
    cpu::Rope(want.data(), tokens, heads, head_dim, pos.data(), inv_freq.data(), 1.0f);
    DeviceArray<uint16_t> d_x(ToBf16(x));
    DeviceArray<int32_t> d_pos(pos);
    DeviceArray<float> d_f(inv_freq);
    cuda::Rope(B(d_x), tokens, heads, head_dim, d_pos.get(), d_f.get(), 1.0f, nullptr);
    EXPECT_TRUE(AllClose(FromBf16(d_x.Download()), want, testing::kBf16Elementwise)) << "head_dim " << head_dim;
  }
}

TEST(CudaGatedActivationTest, SiluAndGeluTanh) {
  TP_SKIP_WITHOUT_GPU();
  const int64_t rows = 3, dim = 21504 / 8;
  const std::vector<float> gu = RoundBf16(RandomVector(rows * 2 * dim, 8, -6.0f, 6.0f));
  DeviceArray<uint16_t> d_gu(ToBf16(gu)), out(rows * dim);
  for (cpu::Activation act : {cpu::Activation::kSilu, cpu::Activation::kGeluTanh}) {
    std::vector<float> want(rows * dim);
    cpu::GatedActivation(gu.data(), rows, dim, act, want.data());
    cuda::GatedActivation(B(d_gu), rows, dim, act, B(out), nullptr);
    EXPECT_TRUE(AllClose(FromBf16(out.Download()), want, testing::kBf16Elementwise)) << static_cast<int>(act);
  }
}

TEST(CudaElementwiseTest, SoftcapAddScaleBf16AndF32) {
  TP_SKIP_WITHOUT_GPU();
  const int64_t n = 100003;
  const std::vector<float> a = RoundBf16(RandomVector(n, 9, -60.0f, 60.0f));
  const std::vector<float> b = RoundBf16(RandomVector(n, 10, -5.0f, 5.0f));
  std::vector<float> cap = a, sum(n), scaled = a;
  cpu::Softcap(cap.data(), n, 30.0f);
  cpu::Add(a.data(), b.data(), n, sum.data());
  cpu::Scale(scaled.data(), n, 0.37f);
  {
    DeviceArray<uint16_t> d_a(ToBf16(a)), d_b(ToBf16(b)), d_out(n);
    cuda::Add(d_a.get(), d_b.get(), DType::kBF16, n, d_out.get(), nullptr);
    EXPECT_TRUE(AllClose(FromBf16(d_out.Download()), sum, testing::kBf16Elementwise)) << "add";
    cuda::Scale(d_b.get(), DType::kBF16, n, 1.0f, nullptr);
    cuda::Softcap(d_a.get(), DType::kBF16, n, 30.0f, nullptr);
    EXPECT_TRUE(AllClose(FromBf16(d_a.Download()), cap, testing::kBf16Elementwise)) << "softcap";
    d_a.Upload(ToBf16(a));
    cuda::Scale(d_a.get(), DType::kBF16, n, 0.37f, nullptr);
    EXPECT_TRUE(AllClose(FromBf16(d_a.Download()), scaled, testing::kBf16Elementwise)) << "scale";
  }
  {
    DeviceArray<float> d_a(a), d_b(b), d_out(n);
    cuda::Add(d_a.get(), d_b.get(), DType::kF32, n, d_out.get(), nullptr);
    EXPECT_TRUE(AllClose(d_out.Download(), sum, {1e-6, 1e-6})) << "add f32";
    cuda::Softcap(d_a.get(), DType::kF32, n, 30.0f, nullptr);
    EXPECT_TRUE(AllClose(d_a.Download(), cap, {1e-5, 1e-5})) << "softcap f32";
  }
}

TEST(CudaElementwiseTest, AddBiasAndGatherRows) {
  TP_SKIP_WITHOUT_GPU();
  const int64_t rows = 5, cols = 1000;
  const std::vector<float> y = RoundBf16(RandomVector(rows * cols, 11));
  const std::vector<float> bias = RandomVector(cols, 12);
  std::vector<float> want(y.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) want[r * cols + c] = y[r * cols + c] + bias[c];
  }
  DeviceArray<uint16_t> d_y(ToBf16(y));
  DeviceArray<float> d_bias(bias);
  cuda::AddBias(B(d_y), d_bias.get(), rows, cols, nullptr);
  EXPECT_TRUE(AllClose(FromBf16(d_y.Download()), want, testing::kBf16Elementwise));

  const std::vector<int32_t> pick = {4, 0, 4, 2};
  for (int64_t row_bytes : {int64_t{2000}, int64_t{14}}) {  // 16-byte path and byte path
    std::vector<uint8_t> x(rows * row_bytes);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(i * 7 + 3);
    DeviceArray<uint8_t> d_x(x), d_out(pick.size() * row_bytes);
    DeviceArray<int32_t> d_pick(pick);
    cuda::GatherRows(d_x.get(), row_bytes, d_pick.get(), pick.size(), d_out.get(), nullptr);
    const std::vector<uint8_t> got = d_out.Download();
    for (size_t i = 0; i < pick.size(); ++i) {
      for (int64_t b = 0; b < row_bytes; ++b) {
        ASSERT_EQ(got[i * row_bytes + b], x[pick[i] * row_bytes + b]) << "row " << i << " byte " << b;
      }
    }
  }
}

}  // namespace
}  // namespace tpserve

// The CUDA row-wise and elementwise kernels (embedding, RMSNorm, the fused residual joint,
// RoPE, the fused attention prologue, gated activations, softcap, add, scale, bias, gather) against their kernels/cpu
// references, at the 31B's shapes (hidden 5376, head_dim 256/512, 32 heads) and odd ones.
// GPU test (ctest -L gpu); skips without a device.
#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/timing.h"
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

// The fused residual joint against RmsNorm, Add, Scale and RmsNorm launched one by one
// (bit for bit) and against the CPU reference of that sequence (bf16 between the ops).
TEST_P(CudaRmsNormTest, ResidualNormIsTheOpByOpSequence) {
  TP_SKIP_WITHOUT_GPU();
  const auto [rows, dim] = GetParam();
  const int64_t n = rows * dim;
  const std::vector<float> h = RoundBf16(RandomVector(n, 4, -2.0f, 2.0f));
  const std::vector<float> o = RoundBf16(RandomVector(n, 5, -2.0f, 2.0f));
  const std::vector<float> post = RandomVector(dim, 6, 0.5f, 1.5f), next = RandomVector(dim, 7, 0.5f, 1.5f);
  DeviceArray<float> d_post(post), d_next(next);
  for (cpu::NormKind kind : {cpu::NormKind::kScale, cpu::NormKind::kOnePlusScale}) {
    for (bool with_post : {false, true}) {
      for (float scale : {1.0f, 0.75f}) {
        for (bool with_next : {false, true}) {
          const std::string what = "kind " + std::to_string(static_cast<int>(kind)) + " post " +
                                   std::to_string(with_post) + " scale " + std::to_string(scale) + " next " +
                                   std::to_string(with_next);
          const float* pw = with_post ? d_post.get() : nullptr;
          const float* nw = with_next ? d_next.get() : nullptr;
          // Op by op on the GPU.
          DeviceArray<uint16_t> o1(ToBf16(o)), h1(ToBf16(h)), x1(n);
          if (pw != nullptr) cuda::RmsNorm(B(o1), pw, rows, dim, 1e-6f, kind, B(o1), nullptr);
          cuda::Add(h1.get(), o1.get(), DType::kBF16, n, h1.get(), nullptr);
          if (scale != 1.0f) cuda::Scale(h1.get(), DType::kBF16, n, scale, nullptr);
          if (nw != nullptr) cuda::RmsNorm(B(h1), nw, rows, dim, 1e-6f, kind, B(x1), nullptr);
          // Fused.
          DeviceArray<uint16_t> o2(ToBf16(o)), h2(ToBf16(h)), x2(n);
          cuda::ResidualNorm(B(o2), pw, B(h2), scale, nw, rows, dim, 1e-6f, kind, B(x2), nullptr);
          EXPECT_TRUE(testing::BitEqual(h2.Download(), h1.Download())) << what << ": h";
          if (with_next) {
            EXPECT_TRUE(testing::BitEqual(x2.Download(), x1.Download())) << what << ": x";
          }
          // The CPU reference.
          std::vector<float> ro = o, rh(n), rx(n);
          if (with_post) ro = RoundBf16([&] {
            std::vector<float> t(n);
            cpu::RmsNorm(o.data(), post.data(), rows, dim, 1e-6f, kind, t.data());
            return t;
          }());
          for (int64_t i = 0; i < n; ++i) {
            rh[i] = Bf16ToF32(F32ToBf16(h[i] + ro[i]));
            if (scale != 1.0f) rh[i] = Bf16ToF32(F32ToBf16(rh[i] * scale));
          }
          EXPECT_TRUE(AllClose(FromBf16(h2.Download()), rh, testing::kBf16Reduction)) << what << ": h vs cpu";
          if (with_next) {
            cpu::RmsNorm(rh.data(), next.data(), rows, dim, 1e-6f, kind, rx.data());
            EXPECT_TRUE(AllClose(FromBf16(x2.Download()), rx, testing::kBf16Reduction)) << what << ": x vs cpu";
          }
        }
      }
    }
  }
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

struct PrologueCase {
  int64_t tokens, q_heads, kv_heads, head_dim;
  bool qk_norm, v_norm;
  cpu::NormKind kind;
};

class CudaAttentionPrologueTest : public ::testing::TestWithParam<PrologueCase> {};

// The fused q/k/v norms + RoPE + KV write against RmsNorm, Rope and WriteKv launched one
// by one (bit for bit, q and both caches, padding slots untouched) and against the CPU.
TEST_P(CudaAttentionPrologueTest, IsTheOpByOpSequence) {
  TP_SKIP_WITHOUT_GPU();
  const PrologueCase c = GetParam();
  const int64_t D = c.head_dim, T = c.tokens, qn = T * c.q_heads * D, kn = T * c.kv_heads * D;
  const int64_t num_slots = 2 * T + 3;
  std::vector<int32_t> pos(T), slots(T);
  for (int64_t t = 0; t < T; ++t) {
    pos[t] = static_cast<int32_t>(t == 0 ? 131071 : 37 * t);  // one large position
    slots[t] = t % 3 == 2 ? -1 : static_cast<int32_t>(num_slots - 1 - 2 * t);  // padding every third
  }
  std::vector<float> inv_freq(D / 2);
  for (int64_t i = 0; i < D / 2; ++i) inv_freq[i] = i < D / 8 ? std::pow(1e6f, -2.0f * i / D) : 0.0f;
  const std::vector<float> q = RoundBf16(RandomVector(qn, 20, -3.0f, 3.0f));
  const std::vector<float> k = RoundBf16(RandomVector(kn, 21, -3.0f, 3.0f));
  const std::vector<float> v = RoundBf16(RandomVector(kn, 22, -3.0f, 3.0f));
  const std::vector<float> qw = RandomVector(D, 23, 0.5f, 1.5f), kw = RandomVector(D, 24, 0.5f, 1.5f);
  const std::vector<float> cache0 = RoundBf16(RandomVector(num_slots * c.kv_heads * D, 25));
  DeviceArray<int32_t> d_pos(pos), d_slots(slots);
  DeviceArray<float> d_freq(inv_freq), d_qw(qw), d_kw(kw);
  const float* qwp = c.qk_norm ? d_qw.get() : nullptr;
  const float* kwp = c.qk_norm ? d_kw.get() : nullptr;

  // Op by op (the model's order before fusion).
  DeviceArray<uint16_t> q1(ToBf16(q)), k1(ToBf16(k)), v1(ToBf16(v)), kc1(ToBf16(cache0)), vc1(ToBf16(cache0));
  if (c.qk_norm) {
    cuda::RmsNorm(B(q1), qwp, T * c.q_heads, D, 1e-6f, c.kind, B(q1), nullptr);
    cuda::RmsNorm(B(k1), kwp, T * c.kv_heads, D, 1e-6f, c.kind, B(k1), nullptr);
  }
  if (c.v_norm) cuda::RmsNorm(B(v1), nullptr, T * c.kv_heads, D, 1e-6f, cpu::NormKind::kNoScale, B(v1), nullptr);
  cuda::Rope(B(q1), T, c.q_heads, D, d_pos.get(), d_freq.get(), 1.0f, nullptr);
  cuda::Rope(B(k1), T, c.kv_heads, D, d_pos.get(), d_freq.get(), 1.0f, nullptr);
  cuda::WriteKv(B(k1), B(v1), d_slots.get(), T, c.kv_heads, D, B(kc1), B(vc1), nullptr);

  // Fused.
  DeviceArray<uint16_t> q2(ToBf16(q)), k2(ToBf16(k)), v2(ToBf16(v)), kc2(ToBf16(cache0)), vc2(ToBf16(cache0));
  cuda::AttentionPrologueArgs a;
  a.q = B(q2);
  a.k = B(k2);
  a.v = B(v2);
  a.tokens = T;
  a.q_heads = c.q_heads;
  a.kv_heads = c.kv_heads;
  a.head_dim = D;
  a.q_norm = qwp;
  a.k_norm = kwp;
  a.v_norm = c.v_norm;
  a.norm_kind = c.kind;
  a.positions = d_pos.get();
  a.inv_freq = d_freq.get();
  a.slot_mapping = d_slots.get();
  a.k_cache = B(kc2);
  a.v_cache = B(vc2);
  cuda::AttentionPrologue(a, nullptr);
  EXPECT_TRUE(testing::BitEqual(q2.Download(), q1.Download())) << "q";
  EXPECT_TRUE(testing::BitEqual(kc2.Download(), kc1.Download())) << "k cache";
  EXPECT_TRUE(testing::BitEqual(vc2.Download(), vc1.Download())) << "v cache";
  EXPECT_TRUE(testing::BitEqual(k2.Download(), ToBf16(k))) << "k is read only";

  // The CPU reference, rounding to bf16 where the GPU stores.
  std::vector<float> rq = q, rk = k, rv = v, rkc = cache0, rvc = cache0;
  if (c.qk_norm) {
    cpu::RmsNorm(rq.data(), qw.data(), T * c.q_heads, D, 1e-6f, c.kind, rq.data());
    cpu::RmsNorm(rk.data(), kw.data(), T * c.kv_heads, D, 1e-6f, c.kind, rk.data());
    rq = RoundBf16(rq);
    rk = RoundBf16(rk);
  }
  if (c.v_norm) {
    cpu::RmsNorm(rv.data(), nullptr, T * c.kv_heads, D, 1e-6f, cpu::NormKind::kNoScale, rv.data());
    rv = RoundBf16(rv);
  }
  cpu::Rope(rq.data(), T, c.q_heads, D, pos.data(), inv_freq.data(), 1.0f);
  cpu::Rope(rk.data(), T, c.kv_heads, D, pos.data(), inv_freq.data(), 1.0f);
  cpu::WriteKv(rk.data(), rv.data(), slots.data(), T, c.kv_heads, D, cpu::KvCacheDType::kF32, rkc.data(), rvc.data());
  EXPECT_TRUE(AllClose(FromBf16(q2.Download()), rq, testing::kBf16Reduction)) << "q vs cpu";
  EXPECT_TRUE(AllClose(FromBf16(kc2.Download()), rkc, testing::kBf16Reduction)) << "k cache vs cpu";
  EXPECT_TRUE(AllClose(FromBf16(vc2.Download()), rvc, testing::kBf16Reduction)) << "v cache vs cpu";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttentionPrologueTest,
    ::testing::Values(PrologueCase{5, 32, 16, 256, true, false, cpu::NormKind::kScale},  // 31B sliding
                      PrologueCase{3, 32, 4, 512, true, true, cpu::NormKind::kScale},    // 31B global (K = V)
                      PrologueCase{1, 32, 16, 256, true, false, cpu::NormKind::kScale},  // batch-1 decode
                      PrologueCase{4, 8, 2, 128, false, false, cpu::NormKind::kScale},   // Llama: RoPE only
                      PrologueCase{7, 8, 4, 16, true, true, cpu::NormKind::kOnePlusScale}),  // half < a warp
    [](const auto& info) {
      const PrologueCase& c = info.param;
      return std::to_string(c.tokens) + "x" + std::to_string(c.q_heads) + "q" + std::to_string(c.kv_heads) + "kv" +
             std::to_string(c.head_dim) + (c.qk_norm ? "_qknorm" : "") + (c.v_norm ? "_vnorm" : "");
    });

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

// FillPattern against its host formula: a fixed hash of (index, seed) in [-1, 1).
TEST(CudaFillPatternTest, MatchesTheHostHash) {
  TP_SKIP_WITHOUT_GPU();
  const int64_t n = 100003;
  for (uint32_t seed : {1u, 77u}) {
    DeviceArray<uint16_t> d(n);
    cuda::FillPattern(reinterpret_cast<cuda::bf16*>(d.get()), n, seed, nullptr);
    const std::vector<float> got = FromBf16(d.Download());
    int64_t zeros = 0;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
      h ^= h >> 15;
      h *= 2246822519u;
      h ^= h >> 13;
      const float want = Bf16ToF32(F32ToBf16(static_cast<float>(h & 0xffff) / 32768.0f - 1.0f));
      ASSERT_EQ(got[i], want) << "index " << i << " seed " << seed;
      ASSERT_GE(got[i], -1.0f);
      ASSERT_LE(got[i], 1.0f);
      zeros += got[i] == 0.0f;
    }
    EXPECT_LT(zeros, n / 100);
  }
}

// TimeCandidates: a candidate that cannot run reads -1; eight times the work takes longer
// (each batch is timed on the GPU behind the hold kernel, not at the host's launch rate).
TEST(CudaTimeCandidatesTest, OrdersCandidatesByWork) {
  TP_SKIP_WITHOUT_GPU();
  const int64_t n = int64_t{1} << 24;
  DeviceArray<uint16_t> d(8 * n);
  auto* p = reinterpret_cast<cuda::bf16*>(d.get());
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const std::vector<double> us = cuda::TimeCandidates(stream, 3, [&](int i) {
    if (i == 1) return false;
    cuda::FillPattern(p, i == 0 ? n : 8 * n, 3, stream);
    return true;
  });
  ASSERT_EQ(us.size(), 3u);
  EXPECT_GT(us[0], 0.0);
  EXPECT_EQ(us[1], -1.0);
  EXPECT_GT(us[2], 2.0 * us[0]) << us[0] << " us vs " << us[2] << " us";
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace tpserve

// The CUDA paged-attention kernels (split-K decode and tiled prefill) and the KV-cache
// write against cpu::PagedAttention / cpu::WriteKv: GQA (31B shapes: 32 query heads over
// 16 KV heads at head_dim 256, over 4 at 512), sliding windows with freed blocks (-1),
// softcap, scrambled physical blocks, padding queries, chunked-prefill batches that mix
// sequences, long contexts that split into many partitions (one of 32k keys), and the
// decode kernel's edges (GQA groups 1-16, windows inside one key tile, short prefill
// chunks of one sequence). Cache slots no query may read hold NaN, so a stray read fails
// the test. GPU test (ctest -L gpu).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

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

struct SeqSpec {
  int32_t context;  // keys in the cache, the queries' own included
  int32_t queries;  // query tokens at the last positions of the context
};

struct AttnCase {
  std::string name;
  int32_t q_heads, kv_heads, head_dim, block_size, window;
  float softcap;
  std::vector<SeqSpec> seqs;
  bool padding_token = false;  // append one query with position -1
};

// A paged cache holding every sequence's keys in scrambled physical blocks, the query
// batch, and the CPU reference output.
struct Scenario {
  cpu::PagedAttentionParams p;
  int64_t tokens = 0;
  std::vector<float> q, k_cache, v_cache;  // bf16 values as floats (NaN where unreferenced)
  std::vector<int32_t> token_seq, token_pos, block_tables;
  std::vector<float> want;
};

Scenario Build(const AttnCase& c, uint32_t seed) {
  Scenario s;
  s.p.num_q_heads = c.q_heads;
  s.p.num_kv_heads = c.kv_heads;
  s.p.head_dim = c.head_dim;
  s.p.block_size = c.block_size;
  s.p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  s.p.sliding_window = c.window;
  s.p.softcap = c.softcap;
  int32_t max_blocks = 1, total_blocks = 0;
  for (const SeqSpec& q : c.seqs) {
    const int32_t nb = (q.context + c.block_size - 1) / c.block_size;
    max_blocks = std::max(max_blocks, nb);
    total_blocks += nb;
  }
  s.p.max_blocks_per_seq = max_blocks;
  std::mt19937 rng(seed);
  std::vector<int32_t> physical(total_blocks + 3);  // a few spare blocks nobody references
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  const int64_t row = static_cast<int64_t>(c.kv_heads) * c.head_dim;
  const int64_t slots = static_cast<int64_t>(physical.size()) * c.block_size;
  s.k_cache.assign(slots * row, NAN);
  s.v_cache.assign(slots * row, NAN);
  s.block_tables.assign(c.seqs.size() * max_blocks, -1);
  const std::vector<float> kv_values = RandomVector(2 * slots * row, seed + 1);
  int32_t next = 0;
  for (size_t si = 0; si < c.seqs.size(); ++si) {
    const SeqSpec& q = c.seqs[si];
    const int32_t nb = (q.context + c.block_size - 1) / c.block_size;
    // Blocks wholly before every query's window are freed (-1), as a scheduler would.
    const int32_t first_needed = c.window > 0 ? std::max(0, q.context - q.queries - c.window + 1) : 0;
    for (int32_t b = 0; b < nb; ++b) {
      const int32_t phys = physical[next++];
      if ((b + 1) * c.block_size <= first_needed) continue;
      s.block_tables[si * max_blocks + b] = phys;
      for (int32_t o = 0; o < c.block_size && b * c.block_size + o < q.context; ++o) {
        const int64_t slot = static_cast<int64_t>(phys) * c.block_size + o;
        for (int64_t e = 0; e < row; ++e) {
          s.k_cache[slot * row + e] = Bf16ToF32(F32ToBf16(kv_values[slot * row + e]));
          s.v_cache[slot * row + e] = Bf16ToF32(F32ToBf16(kv_values[slots * row + slot * row + e]));
        }
      }
    }
    for (int32_t t = q.context - q.queries; t < q.context; ++t) {
      s.token_seq.push_back(static_cast<int32_t>(si));
      s.token_pos.push_back(t);
    }
  }
  if (c.padding_token) {
    s.token_seq.push_back(0);
    s.token_pos.push_back(-1);
  }
  s.tokens = static_cast<int64_t>(s.token_seq.size());
  s.q = RoundBf16(RandomVector(s.tokens * c.q_heads * c.head_dim, seed + 2, -2.0f, 2.0f));
  s.want.assign(s.q.size(), 0.0f);
  cpu::PagedAttention(s.q.data(), s.k_cache.data(), s.v_cache.data(), s.token_seq.data(), s.token_pos.data(),
                      s.tokens, s.block_tables.data(), s.p, s.want.data());
  return s;
}

class CudaAttentionTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(CudaAttentionTest, DecodeAndPrefillKernelsMatchCpu) {
  TP_SKIP_WITHOUT_GPU();
  const AttnCase& c = GetParam();
  const Scenario s = Build(c, 42);
  for (float v : s.want) ASSERT_TRUE(std::isfinite(v)) << "the reference read an unreferenced slot";
  DeviceArray<uint16_t> q(ToBf16(s.q)), kc(ToBf16(s.k_cache)), vc(ToBf16(s.v_cache)), out(s.q.size());
  DeviceArray<int32_t> seq(s.token_seq), pos(s.token_pos), tables(s.block_tables);
  auto B = [](const DeviceArray<uint16_t>& a) { return reinterpret_cast<bf16*>(a.get()); };
  // Every kernel writes into NaNs (bf16 0xffff), so rows a kernel skips cannot pass on the
  // previous kernel's output.
  auto poison = [&] { return cudaMemset(out.get(), 0xff, s.q.size() * sizeof(uint16_t)) == cudaSuccess; };

  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  // The device's own partitioning, a single partition, and many partitions.
  for (int num_sms : {sms, 1, 8 * sms}) {
    const size_t ws_bytes = cuda::DecodeAttentionWorkspaceBytes(s.tokens, s.p, num_sms);
    DeviceArray<uint8_t> ws(ws_bytes);
    ASSERT_TRUE(poison());
    cuda::DecodeAttention(B(q), B(kc), B(vc), seq.get(), pos.get(), s.tokens, tables.get(), s.p, num_sms, ws.get(),
                          ws_bytes, B(out), nullptr);
    EXPECT_TRUE(AllClose(FromBf16(out.Download()), s.want, testing::kBf16Attention))
        << c.name << " decode kernel, num_sms " << num_sms;
  }
  const size_t ws_bytes = cuda::PrefillAttentionWorkspaceBytes(s.tokens);
  DeviceArray<uint8_t> ws(ws_bytes);
  ASSERT_TRUE(poison());
  cuda::PrefillAttention(B(q), B(kc), B(vc), seq.get(), pos.get(), s.tokens, tables.get(), s.p, ws.get(), ws_bytes,
                         B(out), nullptr);
  EXPECT_TRUE(AllClose(FromBf16(out.Download()), s.want, testing::kBf16Attention)) << c.name << " prefill kernel";
  // The tile shapes cuda_kernels_bench sweeps (head_dim 256 and 512) compute the same.
  for (const cuda::PrefillTuning& t : cuda::PrefillAttentionTunings(c.head_dim)) {
    ASSERT_TRUE(poison());
    cuda::PrefillAttentionWithTuning(t, B(q), B(kc), B(vc), seq.get(), pos.get(), s.tokens, tables.get(), s.p, ws.get(),
                                     ws_bytes, B(out), nullptr);
    EXPECT_TRUE(AllClose(FromBf16(out.Download()), s.want, testing::kBf16Attention))
        << c.name << " prefill tuning " << t.block_keys << "/" << t.row_warps;
  }
}

// The sm_90a prefill variants (1: S on wgmma; 2: P·V too), where built and the device runs
// them: the same cases at head_dim 256. Their own ctest target (cuda_attention_wgmma_test
// runs only this test, cuda_attention_test everything else), so that a crash here costs no
// other result. Variant 1 first: if only 2 fails, its P·V is what is wrong.
TEST_P(CudaAttentionTest, WgmmaPrefillMatchesCpu) {
  TP_SKIP_WITHOUT_GPU();
  const AttnCase& c = GetParam();
  const std::vector<cuda::PrefillTuning> variants = cuda::PrefillAttentionWgmmaTunings(c.head_dim);
  if (variants.empty()) GTEST_SKIP() << "no wgmma prefill kernel for head_dim " << c.head_dim << " on this build/device";
  const Scenario s = Build(c, 42);
  DeviceArray<uint16_t> q(ToBf16(s.q)), kc(ToBf16(s.k_cache)), vc(ToBf16(s.v_cache)), out(s.q.size());
  DeviceArray<int32_t> seq(s.token_seq), pos(s.token_pos), tables(s.block_tables);
  auto B = [](const DeviceArray<uint16_t>& a) { return reinterpret_cast<bf16*>(a.get()); };
  const size_t ws_bytes = cuda::PrefillAttentionWorkspaceBytes(s.tokens);
  DeviceArray<uint8_t> ws(ws_bytes);
  for (const cuda::PrefillTuning& t : variants) {
    ASSERT_EQ(cudaMemset(out.get(), 0xff, s.q.size() * sizeof(uint16_t)), cudaSuccess);  // NaNs: every row written
    cuda::PrefillAttentionWithTuning(t, B(q), B(kc), B(vc), seq.get(), pos.get(), s.tokens, tables.get(), s.p,
                                     ws.get(), ws_bytes, B(out), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << c.name << " wgmma variant " << t.wgmma;
    EXPECT_TRUE(AllClose(FromBf16(out.Download()), s.want, testing::kBf16Attention))
        << c.name << " prefill wgmma variant " << t.wgmma;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttentionTest,
    ::testing::Values(
        // Gemma 4 31B sliding layers at TP 1: 32 q heads over 16 KV heads, head_dim 256, window 1024.
        AttnCase{"g31b_sliding", 32, 16, 256, 16, 1024, 0.0f, {{1500, 1}, {40, 40}, {700, 1}}, true},
        // 31B global layers: 32 over 4 KV heads, head_dim 512, full attention.
        AttnCase{"g31b_global", 32, 4, 512, 16, 0, 0.0f, {{3000, 1}, {100, 37}, {1, 1}}},
        // 31B global at TP 8: one replicated KV head, 4 query heads.
        AttnCase{"g31b_global_tp8", 4, 1, 512, 16, 0, 0.0f, {{2000, 1}, {2000, 1}}},
        // Chunked prefill mixed with decodes in one batch (the prefill kernel's tile plan).
        AttnCase{"mixed_chunked", 16, 8, 128, 16, 0, 0.0f, {{300, 100}, {50, 1}, {51, 1}, {800, 64}}, true},
        // A long context split into many partitions.
        AttnCase{"long_context", 32, 8, 128, 16, 0, 0.0f, {{20000, 1}, {333, 2}}},
        // A group of 7 (28 over 4) does not divide the prefill tile's rows.
        AttnCase{"group7", 28, 4, 128, 16, 0, 0.0f, {{90, 90}, {17, 1}}},
        // The tiny fixtures' shapes: head_dim 16 and 32, block size 4, window 8, softcap.
        AttnCase{"tiny_d16_window_softcap", 8, 4, 16, 4, 8, 50.0f, {{24, 24}, {30, 5}}},
        AttnCase{"tiny_d32", 4, 2, 32, 16, 0, 0.0f, {{24, 24}, {3, 1}}},
        AttnCase{"mha_d64", 8, 8, 64, 16, 0, 0.0f, {{130, 130}}},
        AttnCase{"d256_window_small_blocks", 8, 2, 256, 4, 37, 30.0f, {{200, 70}, {61, 1}}},
        // The prefill kernel's edges (64 rows per tile: 32 tokens at group 2, 8 at group 8;
        // 32-key tiles at head_dim 256 and 512, 64 below).
        // Chunked prefill: 300 queries after 1800 keys of context, window 1024 over freed blocks.
        AttnCase{"prefill_chunk_d256", 32, 16, 256, 16, 1024, 0.0f, {{2100, 300}}},
        // Several whole sequences whose lengths are not multiples of the tile, plus a chunk.
        AttnCase{"prefill_ragged_seqs", 16, 8, 128, 16, 0, 0.0f, {{37, 37}, {129, 129}, {5, 5}, {300, 77}}},
        // Window 8 < a key tile, crossing 16-key blocks; the blocks behind it freed.
        AttnCase{"prefill_window8", 8, 4, 64, 16, 8, 0.0f, {{100, 100}, {40, 13}}},
        AttnCase{"prefill_window8_d512_softcap", 8, 2, 512, 16, 8, 30.0f, {{60, 60}, {33, 1}}},
        // Softcap at the 31B sliding shape.
        AttnCase{"prefill_softcap_d256", 32, 16, 256, 16, 1024, 50.0f, {{300, 300}}},
        // 31B global shape: a whole prompt and a chunk with context (8 tokens per tile).
        AttnCase{"prefill_global_d512", 32, 4, 512, 16, 0, 0.0f, {{300, 300}, {450, 130}}},
        // Prefill chunks and single decode tokens in one batch, both 31B layer shapes.
        AttnCase{"prefill_mixed_d512", 32, 4, 512, 16, 0, 0.0f, {{50, 1}, {257, 200}, {9, 1}, {130, 130}, {1000, 1}},
                 true},
        AttnCase{"prefill_mixed_d256_window", 32, 16, 256, 16, 1024, 0.0f, {{1200, 100}, {3, 1}, {70, 70}, {2000, 1}},
                 true},
        // Group 16 (4 tokens per tile) with odd block size 5 at head_dim 512.
        AttnCase{"prefill_group16_block5", 16, 1, 512, 5, 0, 0.0f, {{77, 45}, {12, 12}}},
        // The decode kernel's edges: one CTA holds a KV head's whole group (<= 16 query
        // heads as mma rows); key tiles of 16 (D 512), 32 (D 256), 64 (D <= 128)
        // keys; contexts off the tile; windows inside one tile; freed blocks; several query
        // tokens of one sequence (short prefill chunks); padding; softcap.
        AttnCase{"decode_group1_d64", 4, 4, 64, 16, 0, 0.0f, {{77, 1}, {1, 1}, {300, 1}}, true},
        AttnCase{"decode_group2_d256_window_lt_tile", 8, 4, 256, 16, 20, 0.0f, {{500, 1}, {33, 2}, {20, 1}, {5, 1}},
                 true},
        AttnCase{"decode_group8_d512_softcap", 16, 2, 512, 16, 0, 30.0f, {{1000, 1}, {17, 1}, {4099, 1}}},
        AttnCase{"decode_group16_d128_block8", 16, 1, 128, 8, 0, 0.0f, {{300, 1}, {129, 3}, {64, 1}}},
        AttnCase{"decode_group4_d32", 8, 2, 32, 16, 0, 0.0f, {{129, 1}, {300, 4}}, true},
        AttnCase{"decode_window10_d128_block4_softcap", 8, 2, 128, 4, 10, 20.0f, {{300, 5}, {9, 1}, {11, 1}}, true},
        AttnCase{"decode_window_d512_block16", 32, 4, 512, 16, 40, 0.0f, {{600, 1}, {41, 1}, {39, 1}}},
        // A short prefill chunk (48 tokens of one sequence) with decodes, 31B global shape.
        AttnCase{"decode_chunk48_d512", 32, 4, 512, 16, 0, 0.0f, {{700, 48}, {65, 1}, {2, 1}}, true},
        // Many sequences of the 31B sliding shape (more CTAs than the GPU holds at once).
        AttnCase{"decode_batch64_d256_window", 4, 2, 256, 16, 100, 0.0f, std::vector<SeqSpec>(64, SeqSpec{150, 1})},
        // One 32k-key sequence: many partitions and the merge kernel (31B global at TP 4).
        AttnCase{"decode_32k_d512", 8, 1, 512, 16, 0, 0.0f, {{32768, 1}}}),
    [](const auto& info) { return info.param.name; });

TEST(CudaKvCacheTest, WriteKvMatchesCpuAndSkipsPadding) {
  TP_SKIP_WITHOUT_GPU();
  const int64_t tokens = 5, kv_heads = 4, head_dim = 512, slots = 32;
  for (int64_t hd : {head_dim, int64_t{6}}) {  // vector and element copies
    const int64_t row = kv_heads * hd;
    const std::vector<float> k = RoundBf16(RandomVector(tokens * row, 1));
    const std::vector<float> v = RoundBf16(RandomVector(tokens * row, 2));
    const std::vector<int32_t> slot_mapping = {3, 31, -1, 0, 17};
    std::vector<float> k_want(slots * row, 0.0f), v_want(slots * row, 0.0f);
    cpu::WriteKv(k.data(), v.data(), slot_mapping.data(), tokens, kv_heads, hd, cpu::KvCacheDType::kF32, k_want.data(),
                 v_want.data());
    DeviceArray<uint16_t> dk(ToBf16(k)), dv(ToBf16(v)), kc(std::vector<uint16_t>(slots * row, 0)),
        vc(std::vector<uint16_t>(slots * row, 0));
    DeviceArray<int32_t> sm(slot_mapping);
    cuda::WriteKv(reinterpret_cast<bf16*>(dk.get()), reinterpret_cast<bf16*>(dv.get()), sm.get(), tokens, kv_heads, hd,
                  reinterpret_cast<bf16*>(kc.get()), reinterpret_cast<bf16*>(vc.get()), nullptr);
    EXPECT_EQ(FromBf16(kc.Download()), k_want);
    EXPECT_EQ(FromBf16(vc.Download()), v_want);
  }
}

}  // namespace
}  // namespace tpserve

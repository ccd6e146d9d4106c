// Tests for cpu::PagedAttention (kernels/cpu/attention.cc, attention_blocked.cc) against a
// double-precision reference over a shuffled paged cache: the token-by-token (decode) path,
// the blocked path of prefill runs, steps that mix both with padding, and bf16/FP8 caches.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cpu_test_util.h"
#include "kernels/cpu/attention_blocked.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"

namespace tpserve {
namespace cpu {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using testing_util::AllClose;
using testing_util::RandomFloats;
using testing_util::Tolerance;

// A batch over a shuffled paged cache. Every cache slot that holds no key is NaN, so a
// kernel that reads past a sequence's keys or through a wrong block id produces NaN.
struct AttentionCase {
  PagedAttentionParams p;
  std::vector<float> k_cache, v_cache, q;
  std::vector<int32_t> block_tables, token_seq, token_pos;
  int64_t tokens = 0;
};

AttentionCase MakeAttentionCase(int32_t head_dim, int32_t group, int32_t block_size,
                                const std::vector<int32_t>& seq_lens,
                                const std::vector<std::pair<int32_t, int32_t>>& queries,
                                std::mt19937& rng, int32_t kv_heads = 2) {
  AttentionCase c;
  c.p.num_kv_heads = kv_heads;
  c.p.num_q_heads = kv_heads * group;
  c.p.head_dim = head_dim;
  c.p.block_size = block_size;
  const int32_t max_len = *std::max_element(seq_lens.begin(), seq_lens.end());
  c.p.max_blocks_per_seq = (max_len + block_size - 1) / block_size + 1;  // a spare column
  c.p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int64_t num_seqs = static_cast<int64_t>(seq_lens.size());
  // Physical block 0 is left NaN and fills the unused block-table entries.
  int32_t blocks_used = 0;
  for (const int32_t len : seq_lens) blocks_used += (len + block_size - 1) / block_size;
  std::vector<int32_t> physical(blocks_used);
  std::iota(physical.begin(), physical.end(), 1);
  std::shuffle(physical.begin(), physical.end(), rng);
  c.block_tables.assign(num_seqs * c.p.max_blocks_per_seq, 0);
  const int64_t row = static_cast<int64_t>(kv_heads) * head_dim;
  const int64_t num_slots = static_cast<int64_t>(blocks_used + 1) * block_size;
  c.k_cache.assign(num_slots * row, kNaN);
  c.v_cache.assign(num_slots * row, kNaN);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  int32_t next = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    for (int32_t b = 0; b * block_size < seq_lens[s]; ++b) {
      c.block_tables[s * c.p.max_blocks_per_seq + b] = physical[next++];
    }
    for (int32_t pos = 0; pos < seq_lens[s]; ++pos) {
      const int64_t slot =
          static_cast<int64_t>(c.block_tables[s * c.p.max_blocks_per_seq + pos / block_size]) *
              block_size +
          pos % block_size;
      for (int64_t i = 0; i < row; ++i) {
        c.k_cache[slot * row + i] = dist(rng);
        c.v_cache[slot * row + i] = dist(rng);
      }
    }
  }
  for (const auto& [seq, pos] : queries) {
    c.token_seq.push_back(seq);
    c.token_pos.push_back(pos);
  }
  c.tokens = static_cast<int64_t>(queries.size());
  // Queries of a few units so that scores spread over several units and the softcap bites.
  c.q = RandomFloats(c.tokens * c.p.num_q_heads * head_dim, rng, -3.0f, 3.0f);
  return c;
}

std::vector<double> RefAttention(const AttentionCase& c) {
  const PagedAttentionParams& p = c.p;
  const int64_t hd = p.head_dim;
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  std::vector<double> out(c.tokens * p.num_q_heads * hd);
  for (int64_t t = 0; t < c.tokens; ++t) {
    const int32_t pos = c.token_pos[t];
    if (pos < 0) continue;  // a padding query: zeros
    const int32_t first = p.sliding_window > 0 ? std::max(0, pos - p.sliding_window + 1) : 0;
    for (int32_t h = 0; h < p.num_q_heads; ++h) {
      const int32_t kvh = h / group;
      const float* qh = c.q.data() + (t * p.num_q_heads + h) * hd;
      std::vector<double> scores;
      std::vector<int64_t> offsets;
      for (int32_t j = first; j <= pos; ++j) {
        const int64_t slot =
            static_cast<int64_t>(
                c.block_tables[c.token_seq[t] * p.max_blocks_per_seq + j / p.block_size]) *
                p.block_size +
            j % p.block_size;
        const int64_t off = (slot * p.num_kv_heads + kvh) * hd;
        double s = 0.0;
        for (int64_t d = 0; d < hd; ++d) s += static_cast<double>(qh[d]) * c.k_cache[off + d];
        s *= p.scale;
        if (p.softcap > 0.0f) s = p.softcap * std::tanh(s / p.softcap);
        scores.push_back(s);
        offsets.push_back(off);
      }
      const double max = *std::max_element(scores.begin(), scores.end());
      double denom = 0.0;
      for (double& s : scores) denom += (s = std::exp(s - max));
      double* o = out.data() + (t * p.num_q_heads + h) * hd;
      for (size_t j = 0; j < scores.size(); ++j) {
        // bf16_probabilities: each weight rounded to bf16 before it multiplies V, the sum not.
        const double w = p.bf16_probabilities ? Bf16ToF32(F32ToBf16(static_cast<float>(scores[j]))) : scores[j];
        for (int64_t d = 0; d < hd; ++d) o[d] += w / denom * c.v_cache[offsets[j] + d];
      }
    }
  }
  return out;
}

std::vector<float> RunAttention(const AttentionCase& c) {
  std::vector<float> out(c.q.size(), kNaN);
  PagedAttention(c.q.data(), c.k_cache.data(), c.v_cache.data(), c.token_seq.data(),
                 c.token_pos.data(), c.tokens, c.block_tables.data(), c.p, out.data());
  return out;
}

constexpr Tolerance kAttentionTol{2e-5, 1e-4};

// c's keys and values stored as `t` (WriteKv) give, bit for bit, what the fp32 kernel gives on
// the values they widen back to (LoadKvHead), and that is close to the double reference of them.
void ExpectStoredCacheMatchesFp32(AttentionCase& c, KvCacheDType t, int32_t head_dim) {
  const int64_t kv_heads = c.p.num_kv_heads, slots = static_cast<int64_t>(c.k_cache.size()) / (kv_heads * head_dim);
  const int64_t slot_bytes = KvSlotBytes(t, kv_heads, head_dim), head_bytes = slot_bytes / kv_heads;
  std::vector<uint8_t> kc(slots * slot_bytes), vc(slots * slot_bytes);
  std::vector<int32_t> all(slots);
  std::iota(all.begin(), all.end(), 0);
  WriteKv(c.k_cache.data(), c.v_cache.data(), all.data(), slots, kv_heads, head_dim, t, kc.data(), vc.data());
  for (int64_t s = 0; s < slots; ++s) {
    for (int64_t h = 0; h < kv_heads; ++h) {
      LoadKvHead(t, kc.data() + s * slot_bytes + h * head_bytes, head_dim, c.k_cache.data() + (s * kv_heads + h) * head_dim);
      LoadKvHead(t, vc.data() + s * slot_bytes + h * head_bytes, head_dim, c.v_cache.data() + (s * kv_heads + h) * head_dim);
    }
  }
  const std::vector<float> want = RunAttention(c);  // fp32 caches of the stored values
  std::vector<float> got(c.q.size(), kNaN);
  PagedAttentionParams p = c.p;
  p.kv_dtype = t;
  PagedAttention(c.q.data(), kc.data(), vc.data(), c.token_seq.data(), c.token_pos.data(), c.tokens,
                 c.block_tables.data(), p, got.data());
  ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4));
  EXPECT_TRUE(AllClose(got, RefAttention(c), kAttentionTol));
}

class PagedAttentionTest : public ::testing::TestWithParam<std::tuple<int32_t, int32_t>> {};

// Four sequences in one batch: a 7-token prefill chunk (positions 30..36 of 37 cached keys,
// so later keys must be masked) and three single decode tokens, in mixed order.
TEST_P(PagedAttentionTest, MixedPrefillAndDecodeBatch) {
  const auto [head_dim, group] = GetParam();
  std::mt19937 rng(10 + head_dim + group);
  const std::vector<int32_t> seq_lens = {37, 1, 100, 16};
  std::vector<std::pair<int32_t, int32_t>> queries = {{2, 99}};
  for (int32_t pos = 30; pos < 37; ++pos) queries.push_back({0, pos});
  queries.push_back({1, 0});
  queries.push_back({3, 15});
  for (const int32_t block_size : {1, 7, 16}) {
    for (const int32_t window : {0, 3, 40, 4096}) {
      for (const float softcap : {0.0f, 2.0f}) {
        SCOPED_TRACE(::testing::Message() << "block_size=" << block_size << " window=" << window
                                          << " softcap=" << softcap);
        AttentionCase c = MakeAttentionCase(head_dim, group, block_size, seq_lens, queries, rng);
        c.p.sliding_window = window;
        c.p.softcap = softcap;
        EXPECT_TRUE(AllClose(RunAttention(c), RefAttention(c), kAttentionTol));
      }
    }
  }
}

// One decode token over a long context: the case where its keys are split among tasks (and
// their partial softmaxes merged) and the online softmax runs over many chunks; at one
// thread too.
TEST_P(PagedAttentionTest, SingleDecodeTokenLongContext) {
  const auto [head_dim, group] = GetParam();
  std::mt19937 rng(20 + head_dim + group);
  AttentionCase c = MakeAttentionCase(head_dim, group, 16, {1000}, {{0, 999}}, rng);
  EXPECT_TRUE(AllClose(RunAttention(c), RefAttention(c), kAttentionTol));
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  EXPECT_TRUE(AllClose(RunAttention(c), RefAttention(c), kAttentionTol));
  c.p.sliding_window = 300;  // keys 700..999: ranges start mid-block
  EXPECT_TRUE(AllClose(RunAttention(c), RefAttention(c), kAttentionTol));
  omp_set_num_threads(threads);
  EXPECT_TRUE(AllClose(RunAttention(c), RefAttention(c), kAttentionTol));
}

// Caches held as bf16 / FP8: the same outputs, bit for bit, as the fp32 kernel on the caches'
// stored values (every head written with WriteKv, then widened back with LoadKvHead); NaN
// slots (no key) stay NaN through both, so a wrong slot still shows.
TEST_P(PagedAttentionTest, Bf16AndFp8CachesAreTheFp32KernelOnTheStoredValues) {
  const auto [head_dim, group] = GetParam();
  std::mt19937 rng(30 + head_dim + group);
  const std::vector<int32_t> seq_lens = {37, 100};
  // 1 query (a decode step: its keys split among tasks), 9 (each task widens the keys it
  // reads) and 33 (a prefill chunk: the step's visible blocks widened once).
  for (const auto& [chunk, t] : {std::pair{-1, KvCacheDType::kBf16}, std::pair{-1, KvCacheDType::kFp8E4M3},
                                 std::pair{7, KvCacheDType::kBf16}, std::pair{7, KvCacheDType::kFp8E4M3},
                                 std::pair{31, KvCacheDType::kBf16}, std::pair{31, KvCacheDType::kFp8E4M3}}) {
    SCOPED_TRACE(::testing::Message() << KvCacheDTypeName(t) << ", " << chunk + 2 << " queries");
    std::vector<std::pair<int32_t, int32_t>> queries = {{1, 99}};
    if (chunk > 0) queries.push_back({1, 5});
    for (int32_t pos = 37 - chunk; pos < 37 && chunk > 0; ++pos) queries.push_back({0, pos});
    AttentionCase c = MakeAttentionCase(head_dim, group, 7, seq_lens, queries, rng);
    c.p.sliding_window = chunk < 0 ? 0 : 40;  // the decode step: all 100 keys, in two ranges
    ExpectStoredCacheMatchesFp32(c, t, head_dim);
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDimsAndGroups, PagedAttentionTest,
                         ::testing::Combine(::testing::Values(16, 20, 64, 256, 512),
                                            ::testing::Values(1, 2, 4)),
                         [](const auto& info) {
                           return "hd" + std::to_string(std::get<0>(info.param)) + "_group" +
                                  std::to_string(std::get<1>(info.param));
                         });

// The blocked path (kernels/cpu/attention_blocked.cc): runs of at least 8 consecutive queries
// of one sequence, blocked by query rows and chunks of 64 keys. The cases reach every tile
// shape of its products: head_dim 20 and 24 (a ragged and an odd last vector of V), rows not a
// multiple of the 6-row tile, chunks not a multiple of 16 keys.
class PagedAttentionRunsTest : public ::testing::TestWithParam<std::tuple<int32_t, int32_t>> {};

// One sequence's prefill chunk of n tokens, from position 0 and after 45 earlier tokens (the
// chunk's own keys and the earlier ones cached); runs of 1 and 7 stay token by token.
TEST_P(PagedAttentionRunsTest, PrefillChunkFromZeroAndAfterEarlierChunks) {
  const auto [head_dim, group] = GetParam();
  std::mt19937 rng(40 + head_dim + group);
  for (const int32_t n : {1, 7, 8, 31, 97, 300}) {
    for (const int32_t start : {0, 45}) {
      for (const int32_t block_size : {16, 5}) {
        SCOPED_TRACE(::testing::Message() << n << " tokens from " << start << ", block_size " << block_size);
        std::vector<std::pair<int32_t, int32_t>> queries;
        for (int32_t pos = start; pos < start + n; ++pos) queries.push_back({0, pos});
        AttentionCase c = MakeAttentionCase(head_dim, group, block_size, {start + n}, queries, rng);
        EXPECT_TRUE(AllClose(RunAttention(c), RefAttention(c), kAttentionTol));
      }
    }
  }
}

// One step of five sequences: a 100-token chunk after 50 cached tokens, a 20-token chunk split
// into two runs by a padding token, a 5-token run (speculative verification: token by token),
// decode tokens and padding, in mixed order; sliding windows narrower and wider than the
// chunk, softcap, two block sizes; and the same step on one thread.
TEST_P(PagedAttentionRunsTest, MixedStepWithDecodeTokensAndPadding) {
  const auto [head_dim, group] = GetParam();
  std::mt19937 rng(50 + head_dim + group);
  const std::vector<int32_t> seq_lens = {150, 40, 1, 300, 20};
  std::vector<std::pair<int32_t, int32_t>> queries = {{0, -1}, {1, 39}};
  for (int32_t pos = 50; pos < 150; ++pos) queries.push_back({0, pos});
  queries.push_back({3, -1});
  queries.push_back({2, 0});
  for (int32_t pos = 0; pos < 20; ++pos) {
    if (pos == 10) queries.push_back({4, -1});
    queries.push_back({4, pos});
  }
  for (int32_t pos = 295; pos < 300; ++pos) queries.push_back({3, pos});
  queries.push_back({1, -1});
  for (const int32_t block_size : {16, 5}) {
    for (const int32_t window : {0, 16, 70}) {
      for (const float softcap : {0.0f, 5.0f}) {
        SCOPED_TRACE(::testing::Message() << "block_size=" << block_size << " window=" << window
                                          << " softcap=" << softcap);
        AttentionCase c = MakeAttentionCase(head_dim, group, block_size, seq_lens, queries, rng);
        c.p.sliding_window = window;
        c.p.softcap = softcap;
        EXPECT_TRUE(AllClose(RunAttention(c), RefAttention(c), kAttentionTol));
        if (block_size == 5 && window == 16 && softcap > 0.0f) {
          const int threads = omp_get_max_threads();
          omp_set_num_threads(1);
          EXPECT_TRUE(AllClose(RunAttention(c), RefAttention(c), kAttentionTol));
          omp_set_num_threads(threads);
        }
      }
    }
  }
}

// bf16 / FP8 caches through the blocked path: bit for bit the fp32 kernel on the stored
// values, both where the step's blocks are widened once (more than 16 tokens) and where the
// blocked path widens each chunk of keys itself (a 10-token run in a 12-token step).
TEST_P(PagedAttentionRunsTest, Bf16AndFp8CachesAreTheFp32KernelOnTheStoredValues) {
  const auto [head_dim, group] = GetParam();
  std::mt19937 rng(60 + head_dim + group);
  for (const int32_t run : {10, 58}) {
    for (const KvCacheDType t : {KvCacheDType::kBf16, KvCacheDType::kFp8E4M3}) {
      SCOPED_TRACE(::testing::Message() << KvCacheDTypeName(t) << ", a run of " << run);
      std::vector<std::pair<int32_t, int32_t>> queries = {{1, 99}};
      for (int32_t pos = 100 - run; pos < 100; ++pos) queries.push_back({0, pos});
      queries.push_back({1, -1});
      AttentionCase c = MakeAttentionCase(head_dim, group, 16, {100, 100}, queries, rng);
      c.p.sliding_window = 40;
      ExpectStoredCacheMatchesFp32(c, t, head_dim);
    }
  }
}

// bf16_probabilities: each softmax weight rounded to bf16 before it multiplies V, on both
// paths (a 40-token run and a 5-token one). Every row's keys fit one chunk of 64, so the
// kernel rounds exp(score - the row's final max), as the reference does. A weight within an
// ulp or two of a bf16 rounding boundary may round the other way in the reference (double exp,
// another summation order), moving an output by up to 2^-8 of that weight: so the check is on
// the mean error, which must be far below the rounding's own mean effect (the distance to the
// unrounded reference), and the maximum stays within the rounding's scale.
TEST_P(PagedAttentionRunsTest, Bf16ProbabilitiesRoundEachWeight) {
  const auto [head_dim, group] = GetParam();
  std::mt19937 rng(70 + head_dim + group);
  std::vector<std::pair<int32_t, int32_t>> queries;
  for (int32_t pos = 20; pos < 60; ++pos) queries.push_back({0, pos});
  for (int32_t pos = 55; pos < 60; ++pos) queries.push_back({1, pos});
  AttentionCase c = MakeAttentionCase(head_dim, group, 16, {60, 60}, queries, rng);
  c.p.bf16_probabilities = true;
  const std::vector<float> got = RunAttention(c);
  const std::vector<double> rounded = RefAttention(c);
  c.p.bf16_probabilities = false;
  const std::vector<double> exact = RefAttention(c);
  double err = 0, effect = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err += std::abs(got[i] - rounded[i]);
    effect += std::abs(exact[i] - rounded[i]);
  }
  err /= static_cast<double>(got.size());
  effect /= static_cast<double>(got.size());
  EXPECT_LT(err, effect / 20) << "mean error " << err << ", the rounding's mean effect " << effect;
  EXPECT_TRUE(AllClose(got, rounded, {1e-3, 1e-3}));
}

// One KV head for all query heads (Gemma 3 270M: 4 q heads, 1 KV head): blocks are then the
// only source of parallel tasks.
TEST_P(PagedAttentionRunsTest, OneKvHead) {
  const auto [head_dim, group] = GetParam();
  std::mt19937 rng(80 + head_dim + group);
  for (const int32_t n : {8, 40, 100}) {
    SCOPED_TRACE(::testing::Message() << n << " tokens");
    std::vector<std::pair<int32_t, int32_t>> queries;
    for (int32_t pos = 0; pos < n; ++pos) queries.push_back({0, pos});
    AttentionCase c = MakeAttentionCase(head_dim, group, 16, {n}, queries, rng, 1);
    EXPECT_TRUE(AllClose(RunAttention(c), RefAttention(c), kAttentionTol));
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDimsAndGroups, PagedAttentionRunsTest,
                         ::testing::Combine(::testing::Values(20, 24, 64, 128, 256),
                                            ::testing::Values(1, 2, 4, 8)),
                         [](const auto& info) {
                           return "hd" + std::to_string(std::get<0>(info.param)) + "_group" +
                                  std::to_string(std::get<1>(info.param));
                         });

// The blocked path's products at 16 lanes (AVX-512) give the AVX2 ones' bits: each element is
// the same chain of fused multiply-adds. Ragged head dims and score widths, every row tail.
TEST(AttentionTilesTest, Avx512TilesGiveTheAvx2Bits) {
  if (!DetectCpuFeatures().avx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  using namespace attention_tiles;
  std::mt19937 rng(77);
  for (const int64_t hd : {20, 24, 64, 72, 128, 256}) {
    const int64_t ldo = (hd + 7) / 8 * 8;
    for (const int rows : {1, 5, 6, 7, 13, 48}) {
      for (const int padded : {8, 16, 24, 56, 64}) {
        const int count = padded - (padded > 8 ? 3 : 0);
        const std::vector<float> q = RandomFloats(rows * hd, rng);
        const std::vector<float> kt = RandomFloats(hd * kChunkKeys, rng);
        std::vector<float> s2(rows * kChunkKeys, kNaN), s5(rows * kChunkKeys, kNaN);
        ScoresAvx2(q.data(), rows, hd, kt.data(), padded, s2.data());
        ScoresAvx512(q.data(), rows, hd, kt.data(), padded, s5.data());
        for (int r = 0; r < rows; ++r) {
          ASSERT_EQ(0, std::memcmp(s2.data() + r * kChunkKeys, s5.data() + r * kChunkKeys, padded * 4))
              << "scores hd " << hd << " rows " << rows << " padded " << padded << " row " << r;
        }
        const std::vector<float> prob = RandomFloats(rows * kChunkKeys, rng, 0.0f, 1.0f);
        std::vector<std::vector<float>> v(count);  // each row exactly hd floats: no read past it
        std::vector<const float*> v_rows(count);
        for (int c = 0; c < count; ++c) {
          v[c] = RandomFloats(hd, rng);
          v_rows[c] = v[c].data();
        }
        const std::vector<float> o0 = RandomFloats(rows * ldo, rng);
        std::vector<float> o2 = o0, o5 = o0;
        ValuesAvx2(prob.data(), rows, count, v_rows.data(), hd, o2.data(), ldo);
        ValuesAvx512(prob.data(), rows, count, v_rows.data(), hd, o5.data(), ldo);
        for (int r = 0; r < rows; ++r) {
          ASSERT_EQ(0, std::memcmp(o2.data() + r * ldo, o5.data() + r * ldo, hd * 4))
              << "values hd " << hd << " rows " << rows << " count " << count << " row " << r;
          ASSERT_NE(0, std::memcmp(o2.data() + r * ldo, o0.data() + r * ldo, hd * 4));  // it did add
        }
      }
    }
  }
}

}  // namespace
}  // namespace cpu
}  // namespace tpserve

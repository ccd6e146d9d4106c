// Block manager unit tests: allocation, freeing, reference counts, prefix reuse, LRU
// eviction and sliding-window freeing, each on a tiny pool whose state is checked exactly.
#include "coordinator/engine/block_manager.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

BlockManagerConfig Config(std::vector<int64_t> num_blocks, std::vector<int32_t> windows, int32_t block_size,
                          bool caching) {
  return BlockManagerConfig{std::move(num_blocks), std::move(windows), block_size, caching};
}

std::vector<int32_t> Range(int32_t begin, int32_t end) {
  std::vector<int32_t> v(end - begin);
  std::iota(v.begin(), v.end(), begin);
  return v;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Sequence Seq(std::vector<int32_t> tokens) { return Sequence(SequenceRequest{"r", std::move(tokens), SamplingParams{}}, 0); }

// Allocates and commits all of `seq`'s tokens (one chunk, as a prefill step would).
void RunAll(BlockManager& bm, Sequence& seq) {
  const int32_t n = bm.Allocate(seq, 1 << 20);
  ASSERT_EQ(seq.num_computed_tokens() + n, seq.num_tokens());
  bm.CommitComputed(seq, n);
}

void ExpectPoolsConsistent(const BlockManager& bm, const std::vector<const Sequence*>& seqs) {
  for (int32_t g = 0; g < bm.num_groups(); ++g) {
    const BlockPool& pool = bm.pool(g);
    EXPECT_TRUE(pool.CheckInvariants().ok()) << pool.CheckInvariants();
    std::vector<int32_t> refs(pool.num_blocks(), 0);
    for (const Sequence* s : seqs) {
      if (s->kv().block_tables.empty()) continue;
      for (int32_t b : s->kv().block_tables[g]) {
        if (b != -1) ++refs[b];
      }
    }
    for (int32_t b = 0; b < pool.num_blocks(); ++b) EXPECT_EQ(pool.ref_count(b), refs[b]) << "group " << g << " block " << b;
  }
}

TEST(BlockManagerConfigTest, RejectsBadConfigs) {
  EXPECT_TRUE(Config({8}, {0}, 16, true).Validate().ok());
  EXPECT_FALSE(Config({8}, {0, 4}, 16, true).Validate().ok());
  EXPECT_FALSE(Config({0}, {0}, 16, true).Validate().ok());
  EXPECT_FALSE(Config({8}, {0}, 0, true).Validate().ok());
  EXPECT_FALSE(Config({8}, {-1}, 16, true).Validate().ok());
  EXPECT_FALSE(Config({}, {}, 16, true).Validate().ok());
}

// num_touched counts distinct blocks ever handed out (the KV memory written so far): freed and
// re-allocated blocks once; with caching, free blocks are taken before cached ones are evicted,
// so distinct prompts touch every block before any is reused.
TEST(BlockPoolTest, CountsEachBlockTouchedOnce) {
  BlockPool pool(/*num_blocks=*/4, /*block_size=*/2, /*enable_caching=*/true);
  EXPECT_EQ(pool.num_touched(), 0);
  const int32_t a = pool.Allocate();
  EXPECT_EQ(pool.num_touched(), 1);
  pool.Unref(a);
  EXPECT_EQ(pool.Allocate(), a);  // the same block again (a stack): nothing new touched
  EXPECT_EQ(pool.num_touched(), 1);
  const std::vector<int32_t> tokens = {1, 2};
  pool.Register(a, /*hash=*/42, tokens);
  pool.Unref(a);  // cached, unreferenced: on the LRU list
  std::vector<int32_t> held;
  for (int i = 0; i < 3; ++i) held.push_back(pool.Allocate());  // free blocks before evicting a
  EXPECT_EQ(pool.num_touched(), 4);
  EXPECT_EQ(std::count(held.begin(), held.end(), a), 0);
  EXPECT_EQ(pool.Allocate(), a);  // now the cached one is evicted
  EXPECT_EQ(pool.num_touched(), 4);
}

TEST(BlockManagerTest, AllocatesBlocksForNewTokensAndFreesThem) {
  BlockManager bm(Config({8}, {0}, 4, false));
  Sequence s = Seq(Range(1, 11));  // 10 tokens: 3 blocks
  EXPECT_EQ(bm.Allocate(s, 100), 10);
  EXPECT_EQ(s.kv().block_tables[0], (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(bm.pool(0).num_free(), 5);
  bm.CommitComputed(s, 10);
  s.AppendToken(42);  // decode: token 10 goes into block 2, no new block
  EXPECT_EQ(bm.Allocate(s, 1), 1);
  EXPECT_EQ(bm.pool(0).num_free(), 5);
  bm.CommitComputed(s, 1);
  s.AppendToken(43);
  s.AppendToken(44);  // tokens 11, 12: block 2 is full, token 12 needs block 3
  EXPECT_EQ(bm.Allocate(s, 2), 2);
  EXPECT_EQ(s.kv().block_tables[0], (std::vector<int32_t>{0, 1, 2, 3}));
  ExpectPoolsConsistent(bm, {&s});
  bm.Free(s);
  EXPECT_TRUE(s.kv().block_tables.empty());
  EXPECT_EQ(s.num_computed_tokens(), 0);
  EXPECT_EQ(bm.pool(0).num_free(), 8);
  EXPECT_DOUBLE_EQ(bm.usage(0), 0.0);
  ExpectPoolsConsistent(bm, {});
}

TEST(BlockManagerTest, GrantsOnlyTheTokensFreeBlocksCover) {
  BlockManager bm(Config({2}, {0}, 4, false));
  Sequence s = Seq(Range(1, 11));
  EXPECT_EQ(bm.Allocate(s, 100), 8);  // two blocks: a chunk of 8
  bm.CommitComputed(s, 8);
  EXPECT_EQ(bm.Allocate(s, 100), 0);  // nothing free: nothing changes
  EXPECT_EQ(s.kv().block_tables[0].size(), 2u);
  EXPECT_EQ(s.num_computed_tokens(), 8);
  Sequence t = Seq(Range(1, 3));
  EXPECT_EQ(bm.Allocate(t, 100), 0);
  EXPECT_TRUE(t.kv().block_tables.empty());
  EXPECT_EQ(bm.Allocate(s, 0), 0);
  ExpectPoolsConsistent(bm, {&s, &t});
}

TEST(BlockManagerTest, ReusesTheLongestCachedPrefixAndCountsReferences) {
  BlockManager bm(Config({16}, {0}, 4, true));
  Sequence a = Seq(Range(1, 14));  // 13 tokens: 3 full blocks + 1 token
  RunAll(bm, a);
  EXPECT_EQ(bm.pool(0).num_cached(), 3);
  Sequence b = Seq(Concat(Range(1, 13), {99, 98}));  // same 12 tokens, then its own
  EXPECT_EQ(bm.Allocate(b, 100), 2);
  EXPECT_EQ(b.num_computed_tokens(), 12);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(b.kv().block_tables[0][i], a.kv().block_tables[0][i]);
    EXPECT_EQ(bm.pool(0).ref_count(a.kv().block_tables[0][i]), 2);
  }
  EXPECT_NE(b.kv().block_tables[0][3], a.kv().block_tables[0][3]);
  EXPECT_EQ(bm.prefix_query_tokens(), 13 + 14);
  EXPECT_EQ(bm.prefix_hit_tokens(), 12);
  ExpectPoolsConsistent(bm, {&a, &b});
  bm.Free(a);  // shared blocks stay with b
  for (int i = 0; i < 3; ++i) EXPECT_EQ(bm.pool(0).ref_count(b.kv().block_tables[0][i]), 1);
  ExpectPoolsConsistent(bm, {&b});
}

TEST(BlockManagerTest, NeverReusesTheWholePrompt) {
  BlockManager bm(Config({16}, {0}, 4, true));
  Sequence a = Seq(Range(1, 13));  // exactly 3 blocks
  RunAll(bm, a);
  Sequence b = Seq(Range(1, 13));
  EXPECT_EQ(bm.Allocate(b, 100), 4);  // the last block runs again for the logits
  EXPECT_EQ(b.num_computed_tokens(), 8);
  ExpectPoolsConsistent(bm, {&a, &b});
}

TEST(BlockManagerTest, PrefixMustMatchFromTheFirstBlock) {
  BlockManager bm(Config({16}, {0}, 4, true));
  Sequence a = Seq(Range(1, 14));
  RunAll(bm, a);
  Sequence b = Seq(Concat({77, 2, 3, 4}, Range(5, 14)));  // differs in block 0 only
  EXPECT_EQ(bm.Allocate(b, 100), 13);
  EXPECT_EQ(bm.prefix_hit_tokens(), 0);
}

TEST(BlockManagerTest, PrefixCachingOffSharesNothing) {
  BlockManager bm(Config({16}, {0}, 4, false));
  Sequence a = Seq(Range(1, 14));
  RunAll(bm, a);
  Sequence b = Seq(Range(1, 14));
  EXPECT_EQ(bm.Allocate(b, 100), 13);
  EXPECT_EQ(bm.pool(0).num_cached(), 0);
  bm.Free(a);
  EXPECT_EQ(bm.pool(0).num_free(), 12);
}

TEST(BlockManagerTest, IdenticalBlocksComputedTwiceAreCachedOnce) {
  BlockManager bm(Config({16}, {0}, 4, true));
  Sequence a = Seq(Range(1, 10));
  Sequence b = Seq(Range(1, 10));
  ASSERT_EQ(bm.Allocate(a, 100), 9);
  ASSERT_EQ(bm.Allocate(b, 100), 9);  // a has not run yet: no hit
  bm.CommitComputed(a, 9);
  bm.CommitComputed(b, 9);
  EXPECT_EQ(bm.pool(0).num_cached(), 2);
  bm.Free(b);  // b's copies were never cached: straight back to the free list
  EXPECT_EQ(bm.pool(0).num_free(), 16 - 3);
  bm.Free(a);
  EXPECT_EQ(bm.pool(0).num_free(), 16);
  ExpectPoolsConsistent(bm, {});
}

TEST(BlockManagerTest, FreedCachedBlocksWaitInLruOrderUntilNeeded) {
  BlockManager bm(Config({4}, {0}, 4, true));
  Sequence a = Seq(Range(1, 10));  // 9 tokens: blocks 0, 1 full (cached), block 2 partial
  RunAll(bm, a);
  bm.Free(a);
  EXPECT_EQ(bm.pool(0).num_free(), 4);
  EXPECT_EQ(bm.pool(0).num_cached(), 2);
  // Fresh blocks come from the never-cached ones first (2 and 3)...
  Sequence d = Seq(Range(100, 108));
  ASSERT_EQ(bm.Allocate(d, 100), 8);
  EXPECT_EQ(bm.pool(0).num_cached(), 2);
  EXPECT_EQ(bm.pool(0).num_evictions(), 0);
  // ...then from the LRU, tail block of the freed prefix first.
  Sequence e = Seq(Range(200, 202));
  ASSERT_EQ(bm.Allocate(e, 100), 2);
  EXPECT_EQ(e.kv().block_tables[0][0], 1);
  EXPECT_EQ(bm.pool(0).num_evictions(), 1);
  bm.Free(d);
  bm.Free(e);
  // The prefix is still cached up to the evicted block.
  Sequence f = Seq(Range(1, 10));
  EXPECT_EQ(bm.Allocate(f, 100), 5);
  EXPECT_EQ(f.num_computed_tokens(), 4);
  EXPECT_EQ(f.kv().block_tables[0][0], 0);
  ExpectPoolsConsistent(bm, {&f});
}

TEST(BlockManagerTest, RevivingAnUnreferencedCachedBlockCountsAgainstFreeBlocks) {
  BlockManager bm(Config({3}, {0}, 4, true));
  Sequence a = Seq(Range(1, 10));  // 3 blocks; 0 and 1 cached
  RunAll(bm, a);
  bm.Free(a);
  // b hits blocks 0 and 1 (both on the LRU) and needs 2 more for tokens 8..12: only 1 is
  // left once the hit is taken, so it gets a 4-token chunk, not one that evicts its hit.
  Sequence b = Seq(Range(1, 14));
  EXPECT_EQ(bm.Allocate(b, 100), 4);
  EXPECT_EQ(b.num_computed_tokens(), 8);
  EXPECT_EQ(bm.pool(0).num_evictions(), 0);
  ExpectPoolsConsistent(bm, {&b});
}

TEST(BlockManagerTest, SlidingGroupFreesBlocksThatLeftTheWindow) {
  // Group 0 full attention, group 1 window 8; blocks of 4 tokens.
  BlockManager bm(Config({16, 16}, {0, 8}, 4, false));
  Sequence s = Seq(Range(1, 31));  // 30 tokens
  ASSERT_EQ(bm.Allocate(s, 20), 20);
  bm.CommitComputed(s, 20);
  // The next query (position 20) reads keys 13..20: blocks 3 and up.
  EXPECT_EQ(s.kv().block_tables[0], (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(s.kv().block_tables[1], (std::vector<int32_t>{-1, -1, -1, 3, 4}));
  EXPECT_EQ(bm.pool(1).num_free(), 14);
  ASSERT_EQ(bm.Allocate(s, 10), 10);
  bm.CommitComputed(s, 10);  // next query 30 reads 23..30: blocks 5..7
  const std::vector<int32_t>& window = s.kv().block_tables[1];
  ASSERT_EQ(window.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(window[i] == -1, i < 5) << i;
  EXPECT_EQ(bm.pool(1).num_free(), 13);
  EXPECT_EQ(bm.pool(0).num_free(), 8);
  ExpectPoolsConsistent(bm, {&s});
  bm.Free(s);
  EXPECT_EQ(bm.pool(1).num_free(), 16);
  EXPECT_EQ(bm.pool(0).num_free(), 16);
}

TEST(BlockManagerTest, SlidingGroupDecodesForeverInAFewBlocks) {
  // Window 8 over blocks of 4: a query reads at most 3 blocks, its own included.
  BlockManager bm(Config({64, 3}, {0, 8}, 4, true));
  EXPECT_TRUE(bm.CheckFitsAlone(200).ok());
  Sequence s = Seq({1});
  for (int32_t step = 0; step < 200; ++step) {
    ASSERT_EQ(bm.Allocate(s, 1), 1) << "step " << step;
    bm.CommitComputed(s, 1);
    s.AppendToken(step % 7 + 2);
    ExpectPoolsConsistent(bm, {&s});
  }
}

// With the MTP drafter, whose sliding layers read the W + 1 positions [L - 1 - W, L - 1]
// before the newest token at L (the target's query at L reads only [L - W + 1, L]),
// sliding groups keep two more positions: every block the drafter reads is still held after
// each step's commit, at most one block more than without it, and the bound the KV split
// uses counts it. Without the lookback the drafter would read freed blocks.
TEST(BlockManagerTest, SlidingGroupKeepsWhatTheMtpDrafterReads) {
  constexpr int32_t kW = 8, kBs = 4;
  auto decode = [&](int32_t lookback, int32_t* max_held, int32_t* first_missing) {
    BlockManagerConfig c = Config({64, 8}, {0, kW}, kBs, true);
    c.sliding_lookback = lookback;
    BlockManager bm(c);
    Sequence s = Seq({1});
    *max_held = 0;
    *first_missing = -1;
    for (int32_t step = 0; step < 60; ++step) {
      ASSERT_EQ(bm.Allocate(s, 1), 1);
      const std::vector<int32_t>& table = s.kv().block_tables[1];
      int32_t held = 0;  // the peak: the step's own block allocated, none freed yet
      for (int32_t b : table) held += b != -1;
      *max_held = std::max(*max_held, held);
      bm.CommitComputed(s, 1);
      s.AppendToken(step % 7 + 2);
      // The newest token is at L = num_computed_tokens; the drafter reads [L - 1 - W, L - 1].
      const int32_t L = s.num_computed_tokens();
      for (int32_t pos = std::max(0, L - 1 - kW); pos <= L - 1; ++pos) {
        if (table[pos / kBs] == -1 && *first_missing < 0) *first_missing = L;
      }
      ExpectPoolsConsistent(bm, {&s});
    }
  };
  int32_t held = 0, missing = 0;
  decode(kMtpDrafterLookback, &held, &missing);
  EXPECT_EQ(missing, -1) << "the drafter reads a freed block at L = " << missing;
  // Held blocks at most: those under the drafter's reads plus the one the step writes to.
  EXPECT_EQ(held, SlidingWindowBlocksPerSequence(kW + kMtpDrafterLookback, kBs));
  int32_t held_without = 0;
  decode(0, &held_without, &missing);
  EXPECT_GT(missing, 0) << "without the lookback the drafter's first positions are freed";
  EXPECT_EQ(held_without, SlidingWindowBlocksPerSequence(kW, kBs));
  EXPECT_LE(held - held_without, 1);

  // CheckFitsAlone counts the wider window: 4 sliding blocks of 4 for W + 2 = 10, not 3.
  BlockManagerConfig c = Config({64, 3}, {0, kW}, kBs, true);
  EXPECT_TRUE(BlockManager(c).CheckFitsAlone(200).ok());
  c.sliding_lookback = kMtpDrafterLookback;
  EXPECT_EQ(BlockManager(c).CheckFitsAlone(200).code(), absl::StatusCode::kResourceExhausted);
  c.num_blocks = {64, 4};
  EXPECT_TRUE(BlockManager(c).CheckFitsAlone(200).ok());
}

TEST(BlockManagerTest, SlidingPrefixHitNeedsOnlyTheWindowBlocks) {
  // Window 12, blocks of 4: a query at position p reads blocks from (p - 11) / 4 on.
  BlockManager bm(Config({64, 10}, {0, 12}, 4, true));
  std::vector<const Sequence*> live;
  Sequence a = Seq(Range(1, 25));  // 24 tokens, 6 full blocks in both groups
  RunAll(bm, a);
  EXPECT_EQ(a.kv().block_tables[1], (std::vector<int32_t>{-1, -1, -1, 3, 4, 5}));
  bm.Free(a);  // sliding LRU: 0, 1, 2 (left the window), then 5, 4, 3
  // s takes the 20-token prefix; in the sliding group it needs blocks 2..4 only.
  Sequence s = Seq(Concat(Range(1, 21), {50}));
  ASSERT_EQ(bm.Allocate(s, 100), 1);
  EXPECT_EQ(s.num_computed_tokens(), 20);
  EXPECT_EQ(s.kv().block_tables[1], (std::vector<int32_t>{-1, -1, 2, 3, 4, 6}));
  // A filler takes the 3 never-used sliding blocks and evicts 0, 1 and 5.
  Sequence x = Seq(Range(100, 124));
  ASSERT_EQ(bm.Allocate(x, 100), 24);
  EXPECT_EQ(bm.pool(1).num_evictions(), 3);
  bm.Free(x);
  // b shares all 24 tokens with a, but the sliding block 5 under a 24-token hit is gone:
  // the hit shortens to 20 tokens, whose window (blocks 2..4) is still cached.
  Sequence b = Seq(Concat(Range(1, 25), {60}));
  ASSERT_EQ(bm.Allocate(b, 100), 5);
  EXPECT_EQ(b.num_computed_tokens(), 20);
  EXPECT_EQ(b.kv().block_tables[0][4], 4);  // full group: the whole 20-token prefix
  EXPECT_EQ(b.kv().block_tables[1][2], 2);
  EXPECT_EQ(b.kv().block_tables[1][0], -1);
  ExpectPoolsConsistent(bm, {&s, &b});
}

TEST(BlockManagerTest, HitIsZeroWhenASlidingGroupLostItsWindow) {
  BlockManager bm(Config({64, 4}, {0, 4}, 4, true));
  Sequence a = Seq(Range(1, 17));  // 16 tokens
  RunAll(bm, a);
  bm.Free(a);
  Sequence x = Seq(Range(100, 116));  // evicts every sliding block of a
  ASSERT_EQ(bm.Allocate(x, 100), 16);
  bm.Free(x);
  Sequence b = Seq(Range(1, 17));
  EXPECT_EQ(bm.Allocate(b, 100), 16);
  EXPECT_EQ(b.num_computed_tokens(), 0);
  ExpectPoolsConsistent(bm, {&b});
}

TEST(BlockManagerTest, CheckFitsAloneCountsWindowsAndSaysWhatToChange) {
  BlockManager bm(Config({4, 3}, {0, 8}, 4, true));
  EXPECT_TRUE(bm.CheckFitsAlone(16).ok());
  absl::Status st = bm.CheckFitsAlone(17);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("KV group 0"), absl::string_view::npos) << st;
  EXPECT_NE(st.message().find("max_tokens"), absl::string_view::npos) << st;
  BlockManager sliding_only(Config({2}, {8}, 4, true));
  EXPECT_FALSE(sliding_only.CheckFitsAlone(1000).ok());  // needs 3 blocks
  BlockManager sliding3(Config({3}, {8}, 4, true));
  EXPECT_TRUE(sliding3.CheckFitsAlone(1000).ok());
}

}  // namespace
}  // namespace tpserve

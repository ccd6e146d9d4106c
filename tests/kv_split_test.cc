// SplitKvBlocks: the KV budget split between sliding-window and full-attention groups
// (coordinator/engine/kv_split.h), on hand-computed cases, and its per-group bound checked
// against what the real Scheduler + BlockManager hold at their peak. Pure CPU.
#include "coordinator/engine/kv_split.h"

#include <algorithm>
#include <string>
#include <vector>

#include "coordinator/engine/scheduler.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

SequenceRequest MaxTokens(std::string id, std::vector<int32_t> prompt, int32_t max_tokens) {
  SamplingParams params;
  params.max_tokens = max_tokens;
  return SequenceRequest{std::move(id), std::move(prompt), std::move(params)};
}

// Gemma 4-like: group 0 full attention (cheap blocks), group 1 sliding, window 1024.
KvSplitInputs Gemma(int64_t budget) {
  KvSplitInputs in;
  in.budget_bytes = budget;
  in.bytes_per_block = {100, 1000};
  in.windows = {0, 1024};
  in.block_size = 16;
  in.max_model_len = 8193;  // 8192 tokens of KV: 512 blocks
  in.max_num_batched_tokens = 2048;  // 128 blocks
  return in;
}

TEST(KvSplitTest, GroupsRunOutAtTheSameNumberOfMaxLengthSequences) {
  // A max-length sequence: 512 full blocks; 65 sliding blocks ((1024 - 1) / 16 + 2) while
  // decoding; prefill chunks add 128 sliding blocks per step in all. N sequences take
  // 512 * 100 * N + (65 * N + 128) * 1000 = 116200 N + 128000 bytes.
  const KvSplitInputs in = Gemma(116200 * 10 + 128000 + 5000);
  EXPECT_EQ(KvBlocksNeeded(in, 0, 10), 5120);
  EXPECT_EQ(KvBlocksNeeded(in, 1, 10), 778);
  const std::vector<int64_t> blocks = SplitKvBlocks(in);
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[1], 778);  // exactly 10 sequences
  EXPECT_EQ(blocks[0], (in.budget_bytes - 778 * 1000) / 100);  // the rest: 5170
  EXPECT_GE(blocks[0], KvBlocksNeeded(in, 0, 10));
  EXPECT_LT(blocks[0], KvBlocksNeeded(in, 0, 11));
  EXPECT_LE(blocks[0] * 100 + blocks[1] * 1000, in.budget_bytes);
  // The same budget split evenly (the old rule) holds only 2 max-length sequences.
  EXPECT_EQ(in.budget_bytes / 1100 / 512, 2);
}

// The figure docs/serving.md quotes: Gemma 4 31B (gemma-4-31b preset) on one GPU with
// 60 GB of bf16 KV cache. Per token, a sliding layer keeps K and V of 16 heads x 256 and a
// full layer of 4 heads x 512, 2 bytes each: 50 sliding layers x 16384 B and 10 full
// layers x 8192 B; blocks of 16 tokens.
TEST(KvSplitTest, Gemma4At32kHoldsSixteenMaxLengthSequencesInsteadOfTwo) {
  KvSplitInputs in;
  in.budget_bytes = 60'000'000'000;
  in.bytes_per_block = {10 * 8192 * 16, 50 * 16384 * 16};  // full: 1.31 MB, sliding: 13.1 MB
  in.windows = {0, 1024};
  in.block_size = 16;
  in.max_model_len = 32768;
  in.max_num_batched_tokens = 2048;
  const std::vector<int64_t> blocks = SplitKvBlocks(in);
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[1], KvBlocksNeeded(in, 1, 16));  // 16 x 65 + 128 = 1168
  EXPECT_EQ(blocks[1], 1168);
  EXPECT_GE(blocks[0], KvBlocksNeeded(in, 0, 16));
  EXPECT_LT(blocks[0], KvBlocksNeeded(in, 0, 17));
  EXPECT_EQ(blocks[0], 34096);
  // The equal split: every group the same count, 60 GB / (1.31 + 13.1 MB) = 4161 blocks,
  // 2 sequences of 2048 full blocks.
  const int64_t equal = in.budget_bytes / (in.bytes_per_block[0] + in.bytes_per_block[1]);
  EXPECT_EQ(equal, 4161);
  EXPECT_EQ(equal / KvBlocksNeeded(in, 0, 1), 2);
  // At max_model_len 8192: 38 max-length sequences against 4161 / 512 = 8.
  in.max_model_len = 8192;
  const std::vector<int64_t> at8k = SplitKvBlocks(in);
  EXPECT_GE(at8k[0], KvBlocksNeeded(in, 0, 38));
  EXPECT_LT(at8k[0], KvBlocksNeeded(in, 0, 39));
  EXPECT_EQ(at8k[1], KvBlocksNeeded(in, 1, 38));
  EXPECT_EQ(equal / KvBlocksNeeded(in, 0, 1), 8);
}

TEST(KvSplitTest, WindowAtLeastTheModelLengthIsSizedLikeFullAttention) {
  KvSplitInputs in = Gemma(1 << 20);
  in.windows = {0, 16384};
  in.bytes_per_block = {1000, 1000};
  const std::vector<int64_t> blocks = SplitKvBlocks(in);
  // 512 blocks per sequence in both groups: 1 MiB / (512 * 2000) = 1 sequence.
  EXPECT_EQ(blocks[1], 512);
  EXPECT_EQ(blocks[0], ((1 << 20) - 512 * 1000) / 1000);
}

TEST(KvSplitTest, BelowOneMaxLengthSequenceSlidingGetsOneDecodingSequence) {
  // One max-length sequence takes 116200 + 128000 = 244200 bytes.
  const std::vector<int64_t> one = SplitKvBlocks(Gemma(244200));
  EXPECT_EQ(one[1], 65 + 128);
  EXPECT_EQ(one[0], 512);
  const std::vector<int64_t> small = SplitKvBlocks(Gemma(200000));
  EXPECT_EQ(small[1], 65);  // one decoding sequence
  EXPECT_EQ(small[0], (200000 - 65 * 1000) / 100);
  // Nothing fits: zeros, which StartEngine reports.
  EXPECT_EQ(SplitKvBlocks(Gemma(64000)), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(SplitKvBlocks(Gemma(0)), (std::vector<int64_t>{0, 0}));
}

TEST(KvSplitTest, OneFullGroupTakesTheWholeBudget) {
  KvSplitInputs in;
  in.budget_bytes = 1 << 20;
  in.bytes_per_block = {4096};
  in.windows = {0};
  in.max_model_len = 1 << 30;  // not even one max-length sequence: still every block
  EXPECT_EQ(SplitKvBlocks(in), (std::vector<int64_t>{256}));
}

// The sliding-group bound is what the scheduler really holds: N max-length sequences
// with long prompts, chunked prefill and decode, never take more than KvBlocksNeeded. With
// the MTP drafter's lookback the scheduler keeps two more positions per window, and the
// bound StartEngine computes for it (windows W + kMtpDrafterLookback) holds as well.
TEST(KvSplitTest, BoundHoldsAgainstTheScheduler) {
  for (const int32_t lookback : {0, kMtpDrafterLookback}) {
    for (const int32_t window : {5, 10, 16, 33}) {
      for (const int32_t budget : {7, 16, 40}) {
        KvSplitInputs in;
        in.windows = {0, window + lookback};
        in.block_size = 4;
        in.max_model_len = 200;
        in.max_num_batched_tokens = budget;
        constexpr int kSeqs = 5;
        SchedulerConfig c;
        c.vocab_size = 1000;
        c.max_num_seqs = kSeqs;
        c.max_num_batched_tokens = budget;
        c.max_model_len = 200;
        c.block_size = 4;
        c.enable_prefix_caching = false;
        c.num_kv_blocks = {1000, 1000};  // ample: measure the need, not the limit
        c.kv_group_windows = {0, window};
        c.sliding_lookback = lookback;
        Scheduler s(c);
        for (int i = 0; i < kSeqs; ++i) {
          std::vector<int32_t> prompt(120 + i);
          for (int k = 0; k < static_cast<int>(prompt.size()); ++k) prompt[k] = 1 + (i * 31 + k) % 50;
          ASSERT_TRUE(s.AddRequest(MaxTokens("r" + std::to_string(i), prompt, 79 - i)).ok());
        }
        int64_t peak[2] = {0, 0};
        while (s.has_unfinished()) {
          SchedulerOutput d = s.Schedule();
          for (int g = 0; g < 2; ++g) peak[g] = std::max<int64_t>(peak[g], s.block_manager().num_used(g));
          std::vector<int32_t> sampled(d.num_logit_rows(), 7);
          s.Update(d, sampled);
        }
        EXPECT_LE(peak[0], KvBlocksNeeded(in, 0, kSeqs)) << "window " << window << " budget " << budget;
        EXPECT_LE(peak[1], KvBlocksNeeded(in, 1, kSeqs))
            << "window " << window << " lookback " << lookback << " budget " << budget;
        EXPECT_EQ(s.stats().num_preemptions, 0);
      }
    }
  }
}

}  // namespace
}  // namespace tpserve

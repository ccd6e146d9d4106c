// How the KV cache budget is divided between KV groups (sliding-window and full-attention
// layers), as pure arithmetic for StartEngine. Tested by tests/kv_split_test.cc, which
// also checks the bound against what the scheduler really holds at its peak.
#pragma once

#include <cstdint>
#include <vector>

namespace tpserve {

struct KvSplitInputs {
  int64_t budget_bytes = 0;               // KV cache memory on this rank
  std::vector<int64_t> bytes_per_block;   // per group, on this rank (Model::KvBytesPerBlock)
  std::vector<int32_t> windows;           // per group (ModelConfig::kv_group_windows); 0 = full
  int32_t block_size = 16;                // tokens per block
  int64_t max_model_len = 0;              // prompt + output tokens of the longest sequence
  int32_t max_num_batched_tokens = 2048;  // the scheduler's tokens per step (prefill chunks)
};

// Blocks group `group` needs so that `num_seqs` sequences of max_model_len tokens can run
// at once (see SplitKvBlocks).
int64_t KvBlocksNeeded(const KvSplitInputs& in, int32_t group, int64_t num_seqs);

// Blocks per group. The rule: every group is sized for the same number N of concurrent
// max-length sequences, N as large as the budget allows, and the full-attention group
// gets whatever is left. A max-length sequence holds ceil((max_model_len - 1) /
// block_size) blocks of a full group (its last token needs no KV), but in a sliding
// group only the blocks under its window while it decodes (SlidingWindowBlocksPerSequence:
// BlockManager frees the rest once the window has passed them); prefill chunks add at
// most max_num_batched_tokens tokens per step over all sequences together, so that many
// blocks are added once, not per sequence. When not even one max-length sequence fits,
// sliding groups get what one decoding sequence needs and full groups the rest, so shorter
// sequences still run. Groups that get nothing come back as 0 (the budget is too small).
// Sizing for max-length sequences favours long requests: a workload far shorter than
// max_model_len fills the sliding groups first (docs/serving.md).
std::vector<int64_t> SplitKvBlocks(const KvSplitInputs& in);

}  // namespace tpserve

// The KV budget split between KV groups. Tested by tests/kv_split_test.cc.
#include "coordinator/engine/kv_split.h"

#include <algorithm>

#include "coordinator/engine/block_manager.h"

namespace tpserve {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t FullBlocksPerSequence(const KvSplitInputs& in) {
  return CeilDiv(std::max<int64_t>(in.max_model_len - 1, 1), in.block_size);
}

int64_t SlidingBlocksPerSequence(const KvSplitInputs& in, int32_t group) {
  return std::min(FullBlocksPerSequence(in), SlidingWindowBlocksPerSequence(in.windows[group], in.block_size));
}

// Whether every group's blocks for `num_seqs` max-length sequences fit the budget.
bool Fits(const KvSplitInputs& in, int64_t num_seqs) {
  int64_t left = in.budget_bytes;
  for (int32_t g = 0; g < static_cast<int32_t>(in.windows.size()); ++g) {
    const int64_t b = in.bytes_per_block[g];
    if (b <= 0) continue;
    const int64_t need = KvBlocksNeeded(in, g, num_seqs);
    if (need > left / b) return false;  // need * b > left, without overflow
    left -= need * b;
  }
  return true;
}

}  // namespace

int64_t KvBlocksNeeded(const KvSplitInputs& in, int32_t group, int64_t num_seqs) {
  if (num_seqs <= 0) return 0;
  const int64_t full = num_seqs * FullBlocksPerSequence(in);
  if (in.windows[group] == 0) return full;
  const int64_t chunks = CeilDiv(std::max(in.max_num_batched_tokens, 1), in.block_size);
  return std::min(full, num_seqs * SlidingBlocksPerSequence(in, group) + chunks);
}

std::vector<int64_t> SplitKvBlocks(const KvSplitInputs& in) {
  const int32_t groups = static_cast<int32_t>(in.windows.size());
  std::vector<int64_t> blocks(groups, 0);
  if (groups == 0 || in.block_size < 1 || in.budget_bytes <= 0 ||
      static_cast<int32_t>(in.bytes_per_block.size()) != groups) {
    return blocks;
  }
  int64_t bytes_per_seq = 0;  // a lower bound: every group needs >= 1 block per sequence
  int64_t full_bytes_per_block = 0;
  for (int32_t g = 0; g < groups; ++g) {
    bytes_per_seq += std::max<int64_t>(in.bytes_per_block[g], 0);
    if (in.windows[g] == 0) full_bytes_per_block += std::max<int64_t>(in.bytes_per_block[g], 0);
  }
  // The most max-length sequences that fit: Fits(lo), !Fits(hi).
  int64_t lo = 0, hi = in.budget_bytes / std::max<int64_t>(bytes_per_seq, 1) + 1;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (Fits(in, mid) ? lo : hi) = mid;
  }
  int64_t left = in.budget_bytes;
  for (int32_t g = 0; g < groups; ++g) {
    if (in.windows[g] == 0) continue;
    blocks[g] = lo > 0 ? KvBlocksNeeded(in, g, lo) : SlidingBlocksPerSequence(in, g);
    left -= blocks[g] * in.bytes_per_block[g];
  }
  if (left < 0) return std::vector<int64_t>(groups, 0);
  // Full groups share the rest, the same number of blocks each (each needs as many).
  for (int32_t g = 0; g < groups; ++g) {
    if (in.windows[g] == 0) blocks[g] = full_bytes_per_block > 0 ? left / full_bytes_per_block : 0;
  }
  return blocks;
}

}  // namespace tpserve

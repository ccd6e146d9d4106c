// The paged KV cache's bookkeeping on rank 0: one block pool per KV group, each
// sequence's block tables, sliding-window freeing and automatic prefix caching.
// Tested by tests/block_manager_test.cc (and tests/scheduler_test.cc end to end).
#pragma once

#include <cstdint>
#include <list>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "coordinator/engine/sequence.h"

namespace tpserve {

// Hash of a full block in a prefix-cache chain: its parent block's hash (0 for the
// first block) and its own token ids. Equal hashes mean equal prefixes (64-bit; the
// pool also compares the block's own tokens).
uint64_t BlockHash(uint64_t parent_hash, absl::Span<const int32_t> tokens);

// One KV group's physical blocks: a free list, reference counts, and the prefix cache
// (hash -> block). A cached block nobody references waits in an LRU list and is evicted
// only when a fresh block is needed and no never-cached free block is left.
class BlockPool {
 public:
  // `scramble`: hand blocks out in a scrambled order (tests: proves attention follows
  // the block tables); else low ids first.
  BlockPool(int32_t num_blocks, int32_t block_size, bool enable_caching, bool scramble = false);

  int32_t num_blocks() const { return num_blocks_; }
  // Blocks a sequence could take now: free ones plus cached ones nobody references.
  int32_t num_free() const { return static_cast<int32_t>(free_.size() + lru_.size()); }
  int32_t num_cached() const { return static_cast<int32_t>(cache_.size()); }
  int32_t ref_count(int32_t block) const { return ref_count_[block]; }
  int64_t num_evictions() const { return num_evictions_; }
  // Distinct blocks ever handed out: the share of the KV reservation whose memory the workers
  // have written (and so hold resident), since free blocks are used before cached ones are
  // evicted.
  int32_t num_touched() const { return num_touched_; }

  // A fresh block with reference count 1: a never-cached free block if there is one,
  // else the least recently freed cached block, evicted from the cache. Needs num_free() > 0.
  int32_t Allocate();
  // One more sequence uses a cached block (taking it off the LRU list if it was there).
  void Ref(int32_t block);
  // Drops a reference; the last one sends the block to the LRU list if cached, else to
  // the free list.
  void Unref(int32_t block);

  // The cached block holding `tokens` after the prefix whose chain hash is `hash`, or -1.
  int32_t Lookup(uint64_t hash, absl::Span<const int32_t> tokens) const;
  // Offers a full, computed block to the cache. Does nothing when caching is off or the
  // hash is cached already (the block then stays private to its sequence).
  void Register(int32_t block, uint64_t hash, absl::Span<const int32_t> tokens);

  // Every block is either referenced, free, or on the LRU list, exactly once, and the
  // cache index matches. For tests; O(num_blocks).
  absl::Status CheckInvariants() const;

 private:
  void Evict(int32_t block);

  int32_t num_blocks_;
  int32_t block_size_;
  bool enable_caching_;
  std::vector<int32_t> ref_count_;
  std::vector<int32_t> free_;  // never cached (or evicted); a stack
  std::list<int32_t> lru_;     // cached, unreferenced; front = evicted first
  std::vector<std::list<int32_t>::iterator> lru_pos_;
  absl::flat_hash_map<uint64_t, int32_t> cache_;  // chain hash -> block
  std::vector<uint64_t> hash_;                    // per block, valid while cached
  std::vector<bool> cached_;
  std::vector<int32_t> tokens_;                   // [num_blocks, block_size] when caching
  int64_t num_evictions_ = 0;
  std::vector<bool> touched_;
  int32_t num_touched_ = 0;
};

// Blocks a sequence holds at most in a sliding group of window `window` (> 0) while it
// decodes: those under its query's window plus the one the new token is written to.
// A prefill chunk of n tokens holds up to about n / block_size more.
inline int64_t SlidingWindowBlocksPerSequence(int32_t window, int32_t block_size) {
  return (window - 1) / block_size + 2;
}

// BlockManagerConfig::sliding_lookback with the MTP drafter.
inline constexpr int32_t kMtpDrafterLookback = 2;

struct BlockManagerConfig {
  std::vector<int64_t> num_blocks;  // per KV group (Model::num_kv_blocks())
  std::vector<int32_t> windows;     // per KV group, ModelConfig::kv_group_windows; 0 = full
  int32_t block_size = 16;          // tokens per block
  bool enable_prefix_caching = true;
  bool scramble_blocks = false;     // tests: BlockPool's scrambled order
  // Positions a sliding group keeps before each query's window, beyond the target's own
  // W - 1: 0, or kMtpDrafterLookback with the MTP drafter, whose sliding layers read the
  // W + 1 positions before the newest token at L (docs/mtp_drafter.md §5), i.e. from
  // L - 1 - W where the target's query at L reads from L - W + 1. A sliding group then
  // frees blocks as a window of W + 2 would.
  int32_t sliding_lookback = 0;

  absl::Status Validate() const;
};

// Gives sequences the blocks their next tokens need and takes them back. Full-attention
// groups keep every block of a sequence; a sliding group (window w) frees a block once
// every future query is more than w - 1 positions past its last token (w + 1 with the
// MTP drafter's lookback).
class BlockManager {
 public:
  explicit BlockManager(BlockManagerConfig config);  // config must be valid

  int32_t num_groups() const { return static_cast<int32_t>(pools_.size()); }
  int32_t block_size() const { return config_.block_size; }
  const BlockManagerConfig& config() const { return config_; }
  const BlockPool& pool(int32_t group) const { return pools_[group]; }
  double usage(int32_t group) const;  // fraction of the group's blocks referenced
  int32_t num_used(int32_t group) const { return pools_[group].num_blocks() - pools_[group].num_free(); }
  // Tokens of `seq` whose k/v group `group` must keep for the sequence's next query: all
  // computed tokens in a full group, at most window - 1 (+ sliding_lookback) of them in a
  // sliding group.
  int64_t NumLiveTokens(int32_t group, const Sequence& seq) const;

  // OK when a sequence computing KV for `num_kv_tokens` tokens could get its blocks with
  // the cache to itself; else ResourceExhausted saying what to change.
  absl::Status CheckFitsAlone(int64_t num_kv_tokens) const;

  // Gives `seq` blocks for up to `max_new_tokens` of its tokens from
  // num_computed_tokens() on (never past its newest token), as many as the free blocks
  // allow. A sequence holding no blocks first takes the longest cached prefix usable by
  // every group (its num_computed_tokens() jumps there). Returns how many tokens got
  // slots; 0 means nothing changed.
  int32_t Allocate(Sequence& seq, int32_t max_new_tokens);
  // Speculative decoding: `seq` holds the slot of its newest token (Allocate) and gets
  // slots for up to `num_tokens` positions after it, as far as free blocks allow while
  // every group keeps `keep_free` blocks free (a guess must not preempt anyone); returns
  // how many. Blocks it takes stay with the sequence (tables only grow at the end) and
  // hold its next tokens; only computed tokens are ever offered to the prefix cache.
  int32_t AllocateLookahead(Sequence& seq, int32_t num_tokens, int64_t keep_free);
  // The step ran: `num_tokens` more tokens of `seq` have k/v in the cache. Offers newly
  // full blocks to the prefix cache and frees sliding-window blocks no query will read.
  void CommitComputed(Sequence& seq, int32_t num_tokens);
  // Returns all of `seq`'s blocks (finish, cancel, preemption); its KV state resets.
  void Free(Sequence& seq);

  // Prefix-cache counters, in tokens, over every sequence admitted without blocks.
  int64_t prefix_query_tokens() const { return prefix_query_tokens_; }
  int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }

 private:
  struct PrefixHit {
    int32_t num_blocks = 0;
    std::vector<std::vector<int32_t>> blocks;  // [group][block]; -1: not needed
  };
  PrefixHit FindCachedPrefix(Sequence& seq) const;
  void ExtendHashes(Sequence& seq, int32_t num_blocks) const;
  // First block a query at `pos` reads in `group` (with sliding_lookback: that a draft
  // for a sequence whose newest token is at `pos` reads).
  int32_t FirstNeededBlock(int32_t group, int64_t pos) const;
  // The window blocks are freed by in `group`: its own plus sliding_lookback (0: full).
  int32_t KeptWindow(int32_t group) const;

  BlockManagerConfig config_;
  std::vector<BlockPool> pools_;
  int64_t prefix_query_tokens_ = 0;
  int64_t prefix_hit_tokens_ = 0;
};

}  // namespace tpserve

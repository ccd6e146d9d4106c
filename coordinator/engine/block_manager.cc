// Block pools, block tables, sliding-window freeing and prefix caching. Tested by
// tests/block_manager_test.cc.
#include "coordinator/engine/block_manager.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "kernels/base.h"

namespace tpserve {

uint64_t BlockHash(uint64_t parent_hash, absl::Span<const int32_t> tokens) {
  return absl::HashOf(parent_hash, tokens);
}

// ---- BlockPool ----

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size, bool enable_caching, bool scramble)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      enable_caching_(enable_caching),
      ref_count_(num_blocks, 0),
      lru_pos_(num_blocks),
      hash_(num_blocks, 0),
      cached_(num_blocks, false) {
  // Hand out low block ids first (stable, readable tests).
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
  if (scramble) {  // a fixed permutation: consecutive allocations get scattered blocks
    for (size_t i = 0; i < free_.size(); ++i) std::swap(free_[i], free_[(i * 7919 + 13) % free_.size()]);
  }
  if (enable_caching) tokens_.resize(static_cast<size_t>(num_blocks) * block_size);
  touched_.assign(num_blocks, false);
}

int32_t BlockPool::Allocate() {
  TP_CHECK(num_free() > 0);
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    b = lru_.front();
    lru_.pop_front();
    Evict(b);
  }
  ref_count_[b] = 1;
  if (!touched_[b]) {
    touched_[b] = true;
    ++num_touched_;
  }
  return b;
}

void BlockPool::Evict(int32_t block) {
  cache_.erase(hash_[block]);
  cached_[block] = false;
  ++num_evictions_;
}

void BlockPool::Ref(int32_t block) {
  if (ref_count_[block] == 0) {
    TP_CHECK(cached_[block]);  // an unreferenced uncached block is free: nobody may share it
    lru_.erase(lru_pos_[block]);
  }
  ++ref_count_[block];
}

void BlockPool::Unref(int32_t block) {
  TP_CHECK(ref_count_[block] > 0);
  if (--ref_count_[block] > 0) return;
  if (cached_[block]) {
    lru_pos_[block] = lru_.insert(lru_.end(), block);
  } else {
    free_.push_back(block);
  }
}

int32_t BlockPool::Lookup(uint64_t hash, absl::Span<const int32_t> tokens) const {
  auto it = cache_.find(hash);
  if (it == cache_.end()) return -1;
  const int32_t* stored = tokens_.data() + static_cast<size_t>(it->second) * block_size_;
  return std::equal(tokens.begin(), tokens.end(), stored) ? it->second : -1;
}

void BlockPool::Register(int32_t block, uint64_t hash, absl::Span<const int32_t> tokens) {
  if (!enable_caching_ || cached_[block] || cache_.contains(hash)) return;
  TP_CHECK(ref_count_[block] > 0 && static_cast<int32_t>(tokens.size()) == block_size_);
  cache_.emplace(hash, block);
  hash_[block] = hash;
  cached_[block] = true;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + static_cast<size_t>(block) * block_size_);
}

absl::Status BlockPool::CheckInvariants() const {
  std::vector<int32_t> where(num_blocks_, 0);  // 1: free list, 2: LRU list
  for (int32_t b : free_) {
    if (where[b] != 0 || ref_count_[b] != 0 || cached_[b]) {
      return absl::InternalError(absl::StrCat("free block ", b, " is listed twice, referenced or cached"));
    }
    where[b] = 1;
  }
  for (int32_t b : lru_) {
    if (where[b] != 0 || ref_count_[b] != 0 || !cached_[b]) {
      return absl::InternalError(absl::StrCat("LRU block ", b, " is listed twice, referenced or uncached"));
    }
    where[b] = 2;
  }
  int32_t num_cached = 0;
  for (int32_t b = 0; b < num_blocks_; ++b) {
    if (ref_count_[b] < 0) return absl::InternalError(absl::StrCat("block ", b, " has a negative ref count"));
    if (ref_count_[b] == 0 && where[b] == 0) {
      return absl::InternalError(absl::StrCat("block ", b, " is unreferenced but on no list (leaked)"));
    }
    if (cached_[b]) {
      ++num_cached;
      auto it = cache_.find(hash_[b]);
      if (it == cache_.end() || it->second != b) {
        return absl::InternalError(absl::StrCat("cached block ", b, " is missing from the index"));
      }
    }
  }
  if (num_cached != static_cast<int32_t>(cache_.size())) {
    return absl::InternalError("the cache index holds blocks that are not marked cached");
  }
  return absl::OkStatus();
}

// ---- BlockManager ----

absl::Status BlockManagerConfig::Validate() const {
  if (block_size < 1) return absl::InvalidArgumentError("block_size must be at least 1");
  if (num_blocks.empty() || num_blocks.size() != windows.size()) {
    return absl::InvalidArgumentError(absl::StrCat("KV cache: ", num_blocks.size(), " block counts for ",
                                                   windows.size(), " KV groups; give one per group"));
  }
  for (size_t g = 0; g < num_blocks.size(); ++g) {
    if (num_blocks[g] < 1 || num_blocks[g] > std::numeric_limits<int32_t>::max() / block_size) {
      return absl::InvalidArgumentError(absl::StrCat("KV group ", g, ": ", num_blocks[g],
                                                     " blocks; need at least 1 and slot ids must fit int32"));
    }
    if (windows[g] < 0) return absl::InvalidArgumentError(absl::StrCat("KV group ", g, ": negative window"));
  }
  if (sliding_lookback < 0) return absl::InvalidArgumentError("sliding_lookback must not be negative");
  return absl::OkStatus();
}

BlockManager::BlockManager(BlockManagerConfig config) : config_(std::move(config)) {
  TP_CHECK(config_.Validate().ok());
  for (int64_t n : config_.num_blocks) {
    pools_.emplace_back(static_cast<int32_t>(n), config_.block_size, config_.enable_prefix_caching,
                        config_.scramble_blocks);
  }
}

double BlockManager::usage(int32_t group) const {
  const BlockPool& p = pools_[group];
  return 1.0 - static_cast<double>(p.num_free()) / p.num_blocks();
}

int32_t BlockManager::KeptWindow(int32_t group) const {
  const int32_t w = config_.windows[group];
  return w == 0 ? 0 : w + config_.sliding_lookback;
}

int64_t BlockManager::NumLiveTokens(int32_t group, const Sequence& seq) const {
  const int32_t w = KeptWindow(group);
  const int64_t computed = seq.num_computed_tokens();
  return w == 0 ? computed : std::min<int64_t>(computed, w - 1);
}

int32_t BlockManager::FirstNeededBlock(int32_t group, int64_t pos) const {
  const int32_t w = KeptWindow(group);
  if (w == 0) return 0;
  return static_cast<int32_t>(std::max<int64_t>(0, pos - w + 1) / config_.block_size);
}

absl::Status BlockManager::CheckFitsAlone(int64_t num_kv_tokens) const {
  const int32_t bs = config_.block_size;
  for (int32_t g = 0; g < num_groups(); ++g) {
    int64_t need = (num_kv_tokens + bs - 1) / bs;
    const int32_t w = KeptWindow(g);
    if (w > 0) need = std::min<int64_t>(need, SlidingWindowBlocksPerSequence(w, bs));
    if (need > pools_[g].num_blocks()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the request needs ", need, " KV cache blocks of ", bs, " tokens in KV group ", g,
          w > 0 ? absl::StrCat(" (window ", w, ")") : "", " even with the cache to itself, and the group has ",
          pools_[g].num_blocks(), ": shorten the prompt, lower max_tokens, or give the KV cache more memory"));
    }
  }
  return absl::OkStatus();
}

void BlockManager::ExtendHashes(Sequence& seq, int32_t num_blocks) const {
  std::vector<uint64_t>& hashes = seq.kv().block_hashes;
  const int32_t bs = config_.block_size;
  const absl::Span<const int32_t> tokens(seq.token_ids());
  while (static_cast<int32_t>(hashes.size()) < num_blocks) {
    const size_t i = hashes.size();
    hashes.push_back(BlockHash(i == 0 ? 0 : hashes[i - 1], tokens.subspan(i * bs, bs)));
  }
}

BlockManager::PrefixHit BlockManager::FindCachedPrefix(Sequence& seq) const {
  PrefixHit hit;
  hit.blocks.resize(num_groups());
  if (!config_.enable_prefix_caching) return hit;
  const int32_t bs = config_.block_size;
  // Never the whole sequence: its last token must run to produce logits.
  int32_t limit = (seq.num_tokens() - 1) / bs;
  ExtendHashes(seq, limit);
  const std::vector<uint64_t>& hashes = seq.kv().block_hashes;
  const absl::Span<const int32_t> tokens(seq.token_ids());
  auto lookup = [&](int32_t g, int32_t i) { return pools_[g].Lookup(hashes[i], tokens.subspan(i * bs, bs)); };
  // Full-attention groups need every block of the prefix.
  for (int32_t g = 0; g < num_groups(); ++g) {
    if (config_.windows[g] != 0) continue;
    int32_t i = 0;
    for (int32_t b; i < limit && (b = lookup(g, i)) != -1; ++i) hit.blocks[g].push_back(b);
    limit = i;
  }
  // A sliding group needs only the blocks under the first new query's window: take the
  // longest prefix for which every sliding group still has those.
  std::vector<std::vector<int32_t>> run(num_groups());  // cached blocks ending at i, in a row
  for (int32_t g = 0; g < num_groups(); ++g) {
    if (config_.windows[g] == 0) continue;
    for (int32_t i = 0; i < limit; ++i) {
      hit.blocks[g].push_back(lookup(g, i));
      run[g].push_back(hit.blocks[g][i] == -1 ? 0 : (i > 0 ? run[g][i - 1] : 0) + 1);
    }
  }
  int32_t h = limit;
  for (; h > 0; --h) {
    bool ok = true;
    for (int32_t g = 0; g < num_groups() && ok; ++g) {
      if (config_.windows[g] != 0) ok = run[g][h - 1] >= h - FirstNeededBlock(g, static_cast<int64_t>(h) * bs);
    }
    if (ok) break;
  }
  hit.num_blocks = h;
  for (int32_t g = 0; g < num_groups(); ++g) {
    hit.blocks[g].resize(h);
    const int32_t first = FirstNeededBlock(g, static_cast<int64_t>(h) * bs);
    for (int32_t i = 0; i < first; ++i) hit.blocks[g][i] = -1;
  }
  return hit;
}

int32_t BlockManager::Allocate(Sequence& seq, int32_t max_new_tokens) {
  KvState& kv = seq.kv();
  const int32_t bs = config_.block_size;
  const bool fresh = kv.block_tables.empty();
  PrefixHit hit;
  if (fresh) hit = FindCachedPrefix(seq);
  const int32_t start = fresh ? hit.num_blocks * bs : kv.num_computed_tokens;
  int64_t n = std::min(max_new_tokens, seq.num_tokens() - start);
  for (int32_t g = 0; g < num_groups(); ++g) {
    const BlockPool& pool = pools_[g];
    int64_t held = fresh ? hit.num_blocks : static_cast<int64_t>(kv.block_tables[g].size());
    int64_t avail = pool.num_free();
    if (fresh) {
      // Reviving an unreferenced cached block takes it off the free count.
      for (int32_t b : hit.blocks[g]) avail -= (b != -1 && pool.ref_count(b) == 0);
    }
    n = std::min(n, (held + avail) * bs - start);
  }
  if (n <= 0) return 0;

  if (fresh) {
    kv.block_tables = std::move(hit.blocks);
    for (int32_t g = 0; g < num_groups(); ++g) {
      for (int32_t b : kv.block_tables[g]) {
        if (b != -1) pools_[g].Ref(b);
      }
    }
    kv.num_computed_tokens = start;
    kv.num_committed_blocks = hit.num_blocks;
    prefix_query_tokens_ += seq.num_tokens();
    prefix_hit_tokens_ += start;
  }
  const size_t num_blocks = (start + n + bs - 1) / bs;
  for (int32_t g = 0; g < num_groups(); ++g) {
    std::vector<int32_t>& table = kv.block_tables[g];
    while (table.size() < num_blocks) table.push_back(pools_[g].Allocate());
  }
  return static_cast<int32_t>(n);
}

int32_t BlockManager::AllocateLookahead(Sequence& seq, int32_t num_tokens, int64_t keep_free) {
  KvState& kv = seq.kv();
  const int32_t bs = config_.block_size;
  TP_CHECK(!kv.block_tables.empty() && static_cast<int64_t>(kv.block_tables[0].size()) * bs >= seq.num_tokens());
  int64_t n = num_tokens;
  for (int32_t g = 0; g < num_groups(); ++g) {
    const int64_t held = static_cast<int64_t>(kv.block_tables[g].size());
    const int64_t avail = std::max<int64_t>(0, pools_[g].num_free() - keep_free);
    n = std::min<int64_t>(n, (held + avail) * bs - seq.num_tokens());
  }
  if (n <= 0) return 0;
  const size_t num_blocks = (seq.num_tokens() + n + bs - 1) / bs;
  for (int32_t g = 0; g < num_groups(); ++g) {
    std::vector<int32_t>& table = kv.block_tables[g];
    while (table.size() < num_blocks) table.push_back(pools_[g].Allocate());
  }
  return static_cast<int32_t>(n);
}

void BlockManager::CommitComputed(Sequence& seq, int32_t num_tokens) {
  KvState& kv = seq.kv();
  const int32_t bs = config_.block_size;
  kv.num_computed_tokens += num_tokens;
  TP_CHECK(kv.num_computed_tokens <= seq.num_tokens());
  TP_CHECK(static_cast<int64_t>(kv.block_tables[0].size()) * bs >= kv.num_computed_tokens);
  if (config_.enable_prefix_caching) {
    const int32_t full = kv.num_computed_tokens / bs;
    ExtendHashes(seq, full);
    const absl::Span<const int32_t> tokens(seq.token_ids());
    for (int32_t i = kv.num_committed_blocks; i < full; ++i) {
      for (int32_t g = 0; g < num_groups(); ++g) {
        const int32_t b = kv.block_tables[g][i];
        if (b != -1) pools_[g].Register(b, kv.block_hashes[i], tokens.subspan(i * bs, bs));
      }
    }
    kv.num_committed_blocks = std::max(kv.num_committed_blocks, full);
  }
  // The next query is at num_computed_tokens; blocks wholly before its window are dead.
  for (int32_t g = 0; g < num_groups(); ++g) {
    if (config_.windows[g] == 0) continue;
    std::vector<int32_t>& table = kv.block_tables[g];
    const int32_t first =
        std::min<int32_t>(FirstNeededBlock(g, kv.num_computed_tokens), static_cast<int32_t>(table.size()));
    int32_t lo = first;  // held blocks are contiguous: walk back to the first one
    while (lo > 0 && table[lo - 1] != -1) --lo;
    for (int32_t i = lo; i < first; ++i) {
      pools_[g].Unref(table[i]);
      table[i] = -1;
    }
  }
}

void BlockManager::Free(Sequence& seq) {
  KvState& kv = seq.kv();
  for (int32_t g = 0; g < static_cast<int32_t>(kv.block_tables.size()); ++g) {
    const std::vector<int32_t>& table = kv.block_tables[g];
    // Tail first: the LRU evicts a prefix's last blocks before its first ones.
    for (auto it = table.rbegin(); it != table.rend(); ++it) {
      if (*it != -1) pools_[g].Unref(*it);
    }
  }
  kv.block_tables.clear();
  kv.num_computed_tokens = 0;
  kv.num_committed_blocks = 0;
}

}  // namespace tpserve

// StepDelta -> StepPlan on every rank. Tested by tests/persistent_batch_test.cc.
#include "worker/persistent_batch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/base.h"

namespace tpserve {
namespace {

// Slot numbers are below max_num_seqs; this only bounds memory against a corrupt message.
constexpr int32_t kMaxSlots = 1 << 20;

absl::Status Bad(auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat("step delta: ", parts...)); }

}  // namespace

PersistentBatch::PersistentBatch(int32_t num_kv_groups, int32_t block_size)
    : num_groups_(num_kv_groups), block_size_(block_size) {}

absl::Status PersistentBatch::CheckSlot(int32_t slot) const {
  if (slot < 0 || slot >= static_cast<int32_t>(slots_.size()) || !slots_[slot].live) {
    return Bad("slot ", slot, " holds no sequence");
  }
  return absl::OkStatus();
}

std::vector<int32_t> PersistentBatch::Table(int32_t slot, int32_t group) const {
  if (!CheckSlot(slot).ok() || group < 0 || group >= num_groups_) return {};
  return slots_[slot].tables[group];
}

int32_t PersistentBatch::num_live() const {
  return static_cast<int32_t>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.live; }));
}

absl::Status PersistentBatch::ApplyTableEdits(const std::vector<int32_t>& edits) {
  for (size_t i = 0; i < edits.size();) {
    if (edits.size() - i < 4) return Bad("truncated table edit");
    const int32_t slot = edits[i], group = edits[i + 1], freed = edits[i + 2], n = edits[i + 3];
    i += 4;
    if (absl::Status st = CheckSlot(slot); !st.ok()) return st;
    if (group < 0 || group >= num_groups_ || n < 0 || static_cast<int64_t>(edits.size() - i) < n) {
      return Bad("malformed table edit for slot ", slot);
    }
    std::vector<int32_t>& table = slots_[slot].tables[group];
    table.insert(table.end(), edits.begin() + i, edits.begin() + i + n);
    i += n;
    if (freed < 0 || freed > static_cast<int32_t>(table.size())) {
      return Bad("slot ", slot, " group ", group, ": ", freed, " freed blocks of ", table.size());
    }
    std::fill(table.begin(), table.begin() + freed, -1);
  }
  return absl::OkStatus();
}

absl::Status PersistentBatch::ApplyDraft(const DraftDelta& d, std::vector<KvGroupPlan>& kv) {
  if (absl::Status st = ApplyTableEdits(d.table_edits); !st.ok()) return st;
  kv.resize(num_groups_);
  for (int32_t g = 0; g < num_groups_; ++g) {
    KvGroupPlan& k = kv[g];
    k.slot_mapping.clear();
    k.max_blocks_per_seq = 0;
    for (int32_t slot : d.slots) {
      if (absl::Status st = CheckSlot(slot); !st.ok()) return st;
      k.max_blocks_per_seq = std::max(k.max_blocks_per_seq, static_cast<int32_t>(slots_[slot].tables[g].size()));
    }
    k.block_tables.assign(d.slots.size() * static_cast<size_t>(k.max_blocks_per_seq), -1);
    for (size_t r = 0; r < d.slots.size(); ++r) {
      const std::vector<int32_t>& table = slots_[d.slots[r]].tables[g];
      std::copy(table.begin(), table.end(), k.block_tables.begin() + r * static_cast<size_t>(k.max_blocks_per_seq));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<StepPlan> PersistentBatch::Apply(const StepDelta& d) {
  StepPlan plan;
  TP_RETURN_IF_ERROR(ApplyInto(d, plan));
  return plan;
}

absl::Status PersistentBatch::ApplyInto(const StepDelta& d, StepPlan& plan) {
  for (int32_t slot : d.removed_slots) {
    if (absl::Status st = CheckSlot(slot); !st.ok()) return st;
    slots_[slot] = Slot{};
  }
  for (int32_t slot : d.added_slots) {
    if (slot < 0 || slot >= kMaxSlots) return Bad("slot ", slot, " is out of range");
    if (slot >= static_cast<int32_t>(slots_.size())) slots_.resize(slot + 1);
    // A slot another engine left behind is taken over (one engine per executor at a time).
    slots_[slot] = Slot{true, std::vector<std::vector<int32_t>>(num_groups_)};
  }
  if (absl::Status st = ApplyTableEdits(d.table_edits); !st.ok()) return st;

  const size_t rows = d.slots.size();
  if (d.starts.size() != rows || d.num_tokens.size() != rows) return Bad("per-row arrays differ in length");
  if (!d.sampled_counts.empty() && d.sampled_counts.size() != d.sampled_rows.size()) {
    return Bad(d.sampled_counts.size(), " sample counts for ", d.sampled_rows.size(), " sampled rows");
  }
  plan.kind = StepPlan::Kind::kForward;
  plan.num_seqs = static_cast<int32_t>(rows);
  plan.kv.resize(num_groups_);
  for (KvGroupPlan& k : plan.kv) k.max_blocks_per_seq = 0;
  int64_t tokens = 0;
  for (size_t r = 0; r < rows; ++r) {
    if (absl::Status st = CheckSlot(d.slots[r]); !st.ok()) return st;
    if (d.num_tokens[r] < 1 || d.starts[r] < 0) return Bad("row ", r, " has no tokens or a negative start");
    tokens += d.num_tokens[r];
    for (int32_t g = 0; g < num_groups_; ++g) {
      plan.kv[g].max_blocks_per_seq =
          std::max(plan.kv[g].max_blocks_per_seq, static_cast<int32_t>(slots_[d.slots[r]].tables[g].size()));
    }
  }
  if (tokens != d.num_tokens_total()) return Bad(d.num_tokens_total(), " token ids for ", tokens, " tokens");
  for (KvGroupPlan& k : plan.kv) {
    k.block_tables.assign(rows * static_cast<size_t>(k.max_blocks_per_seq), -1);
    k.slot_mapping.clear();
  }
  plan.token_ids = d.token_ids;
  plan.positions.clear();
  plan.token_seq.clear();
  plan.logit_rows.clear();
  size_t sampled = 0;
  for (size_t r = 0; r < rows; ++r) {
    const Slot& s = slots_[d.slots[r]];
    for (int32_t g = 0; g < num_groups_; ++g) {
      std::copy(s.tables[g].begin(), s.tables[g].end(),
                plan.kv[g].block_tables.begin() + r * static_cast<size_t>(plan.kv[g].max_blocks_per_seq));
    }
    for (int32_t pos = d.starts[r]; pos < d.starts[r] + d.num_tokens[r]; ++pos) {
      plan.positions.push_back(pos);
      plan.token_seq.push_back(static_cast<int32_t>(r));
      for (int32_t g = 0; g < num_groups_; ++g) {
        const std::vector<int32_t>& table = s.tables[g];
        const size_t b = static_cast<size_t>(pos / block_size_);
        if (b >= table.size() || table[b] < 0) {
          return Bad("slot ", d.slots[r], " position ", pos, " has no block in KV group ", g);
        }
        plan.kv[g].slot_mapping.push_back(table[b] * block_size_ + pos % block_size_);
      }
    }
    if (sampled < d.sampled_rows.size() && d.sampled_rows[sampled] == static_cast<int32_t>(r)) {
      const int32_t count = d.sampled_counts.empty() ? 1 : d.sampled_counts[sampled];
      if (count < 1 || count > d.num_tokens[r]) {
        return Bad("row ", r, " samples ", count, " of its ", d.num_tokens[r], " tokens");
      }
      const int32_t end = static_cast<int32_t>(plan.positions.size());
      for (int32_t t = end - count; t < end; ++t) plan.logit_rows.push_back(t);
      ++sampled;
    }
  }
  if (sampled != d.sampled_rows.size()) return Bad("sampled rows are not ascending rows of the step");
  plan.sampling = d.sampling;
  plan.penalty_offsets = d.penalty_offsets;
  plan.penalty_tokens = d.penalty_tokens;
  plan.penalty_counts = d.penalty_counts;
  plan.return_logits = d.return_logits;
  plan.edits = d.edits;
  plan.host_sampling = d.samples_on_host();
  return absl::OkStatus();
}

}  // namespace tpserve

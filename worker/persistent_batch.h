// The sequences in flight as every rank keeps them between steps: per slot (chosen by
// rank 0's scheduler), its block tables. A StepDelta updates them and expands to the
// StepPlan the model runs, so that step messages carry only what changed. Tested by
// tests/persistent_batch_test.cc and every engine test.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/step.h"

namespace tpserve {

class PersistentBatch {
 public:
  PersistentBatch(int32_t num_kv_groups, int32_t block_size);

  // Applies the delta's removals, additions and table edits, then builds the step: rows
  // in the delta's order, dense block tables padded with -1, positions from the starts,
  // slots from the tables. An inconsistent delta (a slot not in the batch, a token whose
  // block is missing, an id stream that does not add up) is an error naming what is
  // wrong; the batch may then be partly updated and must not be used again.
  absl::StatusOr<StepPlan> Apply(const StepDelta& delta);
  // The same into `plan`, whose buffers are reused (no allocation in a steady decode).
  absl::Status ApplyInto(const StepDelta& delta, StepPlan& plan);
  // A DraftDelta's part: its table edits (StepDelta::table_edits' format), then the dense
  // block tables of its slots, one row each in order, padded with -1, into `kv` (one entry
  // per group; slot_mapping left empty). Errors as Apply's.
  absl::Status ApplyDraft(const DraftDelta& delta, std::vector<KvGroupPlan>& kv);

  // The slot's table of `group`; empty for a slot not in the batch (tests).
  std::vector<int32_t> Table(int32_t slot, int32_t group) const;
  int32_t num_live() const;

 private:
  struct Slot {
    bool live = false;
    std::vector<std::vector<int32_t>> tables;  // [group][logical block]
  };
  absl::Status CheckSlot(int32_t slot) const;
  absl::Status ApplyTableEdits(const std::vector<int32_t>& edits);

  int32_t num_groups_;
  int32_t block_size_;
  std::vector<Slot> slots_;
};

}  // namespace tpserve

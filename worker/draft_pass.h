// A draft model's pass on one rank, right after the target's step: a DraftDelta expanded
// with this rank's PersistentBatch into the MTP drafter's steps, num_steps of them
// batched over the drafting sequences, the first from the target's hidden rows of the
// step just run, each next from the drafter's projected state and the previous drafts.
// Rank 0 (StepExecutor::Draft) and every other rank (RunWorkerLoop) run the same code.
// Tested by tests/mtp_engine_test.cc.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model.h"
#include "worker/mtp_drafter.h"
#include "worker/persistent_batch.h"
#include "worker/step.h"

namespace tpserve {

class DraftPass {
 public:
  // Both must outlive the pass; `drafter` drafts for `target`.
  DraftPass(MtpDrafter& drafter, const Model& target);

  // Applies the delta's table edits to `batch` and builds the pass's first drafter step:
  // every sequence's tables, newest token, position and hidden row. An error names what
  // is wrong (a slot not in the batch, a hidden row the last forward did not produce, a
  // block the drafter would read that the sequence no longer holds); the batch may then be
  // partly updated and must not be used again.
  absl::Status Plan(PersistentBatch& batch, const DraftDelta& delta);
  // Runs the planned pass on every rank (collective: every rank runs the same plan) and
  // returns the drafts, [num_seqs, num_steps] row-major, on every rank. Reads the
  // target's hidden rows, so it must run before the target's next forward.
  absl::StatusOr<std::vector<int32_t>> Run(StepTimes* times);

 private:
  MtpDrafter& drafter_;
  const Model& target_;
  MtpDraftStep step_;
  int32_t num_steps_ = 0;
  std::vector<KvGroupPlan> tables_;  // ApplyDraft's output, buffers reused pass to pass
};

}  // namespace tpserve

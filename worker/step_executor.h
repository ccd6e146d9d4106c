// Rank 0's side of lockstep execution: each step (the engine's StepDelta, or a whole
// StepPlan from a test or benchmark) and each draft pass (a DraftDelta, with an MTP
// drafter) goes to every other rank, then rank 0 runs its own shard. The other ranks run
// RunWorkerLoop (worker/worker_loop.h). Tested by tests/model_test.cc,
// tests/persistent_batch_test.cc and tests/mtp_engine_test.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/communicator.h"
#include "worker/draft_pass.h"
#include "worker/model.h"
#include "worker/mtp_drafter.h"
#include "worker/persistent_batch.h"
#include "worker/step.h"

namespace tpserve {

class StepExecutor {
 public:
  // `drafter` (optional, every rank alike): the MTP drafter beside `model`, for Draft.
  StepExecutor(Model& model, Communicator& comm, MtpDrafter* drafter = nullptr);
  // Sends `delta` to every rank, which apply it to their batch and run the step; returns
  // rank 0's output (sampled ids, and logits where asked). One engine at a time per
  // executor: the batch's slots are that engine's.
  absl::StatusOr<StepOutput> Execute(const StepDelta& delta, StepTimes* times);
  // The same for a whole plan (tests, benchmarks): the batch is untouched.
  absl::StatusOr<StepOutput> Execute(const StepPlan& plan, StepTimes* times);
  // Right after a delta's Execute (before the next): sends `delta` to every rank, which
  // run the drafter's pass over the step's hidden rows (worker/draft_pass.h); returns the
  // drafts, [num_seqs, num_steps] row-major. FAILED_PRECONDITION without a drafter; a
  // delta that does not fit the batch or the KV blocks held is an error here, before any
  // rank runs it (and breaks the executor, as a bad StepDelta does).
  absl::StatusOr<std::vector<int32_t>> Draft(const DraftDelta& delta, StepTimes* times);
  bool has_drafter() const { return draft_ != nullptr; }
  // Tells every worker loop to return. Idempotent.
  void Shutdown();

 private:
  absl::StatusOr<StepOutput> Run(const StepPlan& plan, StepTimes* times);
  // A failure after the broadcast: the other ranks ran (or run) the same message and cannot
  // be resynchronized, so the job ends.
  void AbortIfShared(const absl::Status& st, const char* what);

  Model& model_;
  Communicator& comm_;
  PersistentBatch batch_;
  StepPlan plan_;  // the last delta expanded (buffers reused step to step)
  std::unique_ptr<DraftPass> draft_;  // with a drafter
  bool shut_down_ = false;
  absl::Status broken_;  // a delta rank 0 could not apply: the batches may differ
};

}  // namespace tpserve

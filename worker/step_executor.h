// Rank 0's side of lockstep execution: each step (the engine's StepDelta, or a whole
// StepPlan from a test or benchmark) goes to every other rank, then rank 0 runs its own
// shard. The other ranks run RunWorkerLoop (worker/worker_loop.h). Tested by
// tests/model_test.cc and tests/persistent_batch_test.cc.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "worker/communicator.h"
#include "worker/model.h"
#include "worker/persistent_batch.h"
#include "worker/step.h"

namespace tpserve {

class StepExecutor {
 public:
  StepExecutor(Model& model, Communicator& comm);
  // Sends `delta` to every rank, which apply it to their batch and run the step; returns
  // rank 0's output (sampled ids, and logits where asked). One engine at a time per
  // executor: the batch's slots are that engine's.
  absl::StatusOr<StepOutput> Execute(const StepDelta& delta, StepTimes* times);
  // The same for a whole plan (tests, benchmarks): the batch is untouched.
  absl::StatusOr<StepOutput> Execute(const StepPlan& plan, StepTimes* times);
  // Tells every worker loop to return. Idempotent.
  void Shutdown();

 private:
  absl::StatusOr<StepOutput> Run(const StepPlan& plan, StepTimes* times);

  Model& model_;
  Communicator& comm_;
  PersistentBatch batch_;
  StepPlan plan_;  // the last delta expanded (buffers reused step to step)
  bool shut_down_ = false;
  absl::Status broken_;  // a delta rank 0 could not apply: the batches may differ
};

}  // namespace tpserve

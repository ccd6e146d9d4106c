// Lockstep execution: rank 0 broadcasts each StepPlan and runs its own shard; every other
// rank loops receiving plans until a shutdown plan. Tested by tests/model_test.cc.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "worker/communicator.h"
#include "worker/model.h"
#include "worker/step.h"

namespace tpserve {

// Rank 0's side.
class StepExecutor {
 public:
  StepExecutor(Model& model, Communicator& comm) : model_(model), comm_(comm) {}
  // Sends `plan` to every rank and runs it; returns rank 0's output (logits or sampled ids).
  absl::StatusOr<StepOutput> Execute(const StepPlan& plan, StepTimes* times);
  // Tells every worker loop to return. Idempotent.
  void Shutdown();

 private:
  Model& model_;
  Communicator& comm_;
  bool shut_down_ = false;
};

// Every other rank's side: returns OK on a shutdown plan. A step that fails on a worker
// aborts the job, since rank 0 cannot be told mid-step and must not wait forever.
absl::Status RunWorkerLoop(Model& model, Communicator& comm);

}  // namespace tpserve

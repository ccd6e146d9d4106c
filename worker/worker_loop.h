// Every other rank's side of lockstep execution: receive each step from rank 0, expand a
// delta with this rank's PersistentBatch, run it (a forward, or the MTP drafter's pass),
// until a shutdown message. Rank 0's side is StepExecutor (worker/step_executor.h).
// Tested by tests/model_test.cc and tests/mtp_engine_test.cc.
#pragma once

#include "absl/status/status.h"
#include "worker/communicator.h"
#include "worker/model.h"
#include "worker/mtp_drafter.h"

namespace tpserve {

// Every other rank's side: returns OK on a shutdown plan. A step that fails on a worker
// aborts the job, since rank 0 cannot be told mid-step and must not wait forever.
// `drafter`: the MTP drafter beside `model` where rank 0's StepExecutor has one (a draft
// message without one aborts the job).
absl::Status RunWorkerLoop(Model& model, Communicator& comm, MtpDrafter* drafter = nullptr);

}  // namespace tpserve

// Rank 0's side of step execution: each step (the engine's StepDelta, or a whole StepPlan
// from a test or benchmark) and each draft pass (a DraftDelta, with an MTP drafter) goes
// to every other rank, then rank 0 runs its own shard. With pipeline stages the step goes
// to rank 0's stage and down the pipeline, and up to one step per stage is in flight
// (Submit, Collect): while the later stages run the older steps, rank 0 runs the next one's
// first stage. The other ranks run RunWorkerLoop (worker/worker_loop.h). Tested by
// tests/model_test.cc, tests/persistent_batch_test.cc, tests/engine_core_test.cc and
// tests/mtp_engine_test.cc.
#pragma once

#include <cstdint>
#include <deque>
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
  // executor: the batch's slots are that engine's. Submit then Collect, with nothing
  // else in flight.
  absl::StatusOr<StepOutput> Execute(const StepDelta& delta, StepTimes* times);
  // The same for a whole plan (tests, benchmarks): the batch is untouched.
  absl::StatusOr<StepOutput> Execute(const StepPlan& plan, StepTimes* times);
  // Starts a step: sends `delta` and runs rank 0's share (with one stage, the whole step).
  // At most max_in_flight() steps may be started and not collected; the steps of the
  // deltas in flight must not share a sequence (its next tokens depend on the older one).
  // `started` (optional): rank 0's times so far (the whole step with one stage; stage 0's
  // share with several).
  absl::Status Submit(const StepDelta& delta, StepTimes* started = nullptr);
  // The oldest started step's output, and its times (rank 0's time in it; with pipeline
  // stages the stages' work too). FAILED_PRECONDITION with nothing in flight.
  absl::StatusOr<StepOutput> Collect(StepTimes* times);
  // Steps that can be in flight: the pipeline's stages (1 without stages).
  int max_in_flight() const { return model_.pipeline().stages; }
  int in_flight() const { return static_cast<int>(in_flight_.size()); }
  // Right after a delta's Execute (before the next): sends `delta` to every rank, which
  // run the drafter's pass over the step's hidden rows (worker/draft_pass.h); returns the
  // drafts, [num_seqs, num_steps] row-major. FAILED_PRECONDITION without a drafter; a
  // delta that does not fit the batch or the KV blocks held is an error here, before any
  // rank runs it (and breaks the executor, as a bad StepDelta does).
  absl::StatusOr<std::vector<int32_t>> Draft(const DraftDelta& delta, StepTimes* times);
  bool has_drafter() const { return draft_ != nullptr; }
  // Collects the steps in flight, then tells every worker loop to return. Idempotent.
  void Shutdown();

 private:
  struct InFlight {
    StepPlan plan;
    StepTimes times;
    absl::StatusOr<StepOutput> output;  // one stage: the step ran whole in Start
  };
  bool pipelined() const { return model_.pipeline().stages > 1; }
  // The step message to every other rank: a broadcast, or with pipeline stages to rank 0's
  // stage and on to the next stage, sent without waiting (kept in message_ until the
  // next message).
  void Send(std::vector<uint8_t> bytes);
  // Runs rank 0's share of `f.plan` (all of it with one stage) and queues it.
  absl::Status Start(InFlight f);
  InFlight TakeSpare();  // an entry whose buffers are reused
  absl::StatusOr<StepOutput> Run(const StepPlan& plan, StepTimes* times);
  // A failure after the broadcast: the other ranks ran (or run) the same message and cannot
  // be resynchronized, so the job ends.
  void AbortIfShared(const absl::Status& st, const char* what);

  Model& model_;
  Communicator& comm_;
  PersistentBatch batch_;
  std::deque<InFlight> in_flight_;  // started, oldest first
  std::vector<StepPlan> spare_;     // collected steps' plans (buffers reused step to step)
  std::vector<uint8_t> message_;    // pipeline: the last step message, until sent
  std::unique_ptr<DraftPass> draft_;  // with a drafter
  bool shut_down_ = false;
  absl::Status broken_;  // a delta rank 0 could not apply: the batches may differ
};

}  // namespace tpserve

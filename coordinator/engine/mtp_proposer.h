// Drafts from Gemma 4's MTP drafter (worker/mtp_drafter.h), which runs on every rank
// beside the target: after each step, one draft pass over every sequence the step gave
// tokens, batched, planned by the scheduler (which rows, which blocks) and run by the
// executor on every rank (worker/draft_pass.h). Tested by tests/mtp_engine_test.cc.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "coordinator/engine/scheduler.h"
#include "coordinator/engine/speculative.h"
#include "worker/step_executor.h"

namespace tpserve {

class MtpProposer : public DraftProposer {
 public:
  // `executor` must have the drafter (StepExecutor::has_drafter) and outlive the proposer.
  explicit MtpProposer(StepExecutor& executor);

  // One pass of max(max_drafts) drafter steps over all requests (the drafter's steps are
  // sequential, so a pass is as long as its longest draft); each sequence keeps its first
  // max_drafts. Must run right after the step whose rows the requests name.
  absl::Status ProposeAll(absl::Span<const DraftRequest> requests, Scheduler& scheduler) override;

 private:
  StepExecutor& executor_;
};

}  // namespace tpserve

// The MTP drafter's proposer. Tested by tests/mtp_engine_test.cc.
#include "coordinator/engine/mtp_proposer.h"

#include <algorithm>
#include <vector>

#include "kernels/base.h"

namespace tpserve {

MtpProposer::MtpProposer(StepExecutor& executor) : executor_(executor) {}

absl::Status MtpProposer::ProposeAll(absl::Span<const DraftRequest> requests, Scheduler& scheduler) {
  if (requests.empty()) return absl::OkStatus();
  int32_t steps = 0;
  for (const DraftRequest& r : requests) steps = std::max(steps, r.max_drafts);
  if (steps == 0) return absl::OkStatus();
  const DraftDelta delta = scheduler.PlanDraftPass(requests, steps);
  TP_ASSIGN_OR_RETURN(const std::vector<int32_t> drafts, executor_.Draft(delta, nullptr));
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto first = drafts.begin() + static_cast<ptrdiff_t>(i) * steps;
    scheduler.SetDrafts(*requests[i].seq, std::vector<int32_t>(first, first + requests[i].max_drafts));
  }
  return absl::OkStatus();
}

}  // namespace tpserve

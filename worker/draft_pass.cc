// The MTP drafter's pass over a DraftDelta. Tested by tests/mtp_engine_test.cc.
#include "worker/draft_pass.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tpserve {

DraftPass::DraftPass(MtpDrafter& drafter, const Model& target) : drafter_(drafter), target_(target) {}

absl::Status DraftPass::Plan(PersistentBatch& batch, const DraftDelta& delta) {
  num_steps_ = 0;
  if (delta.num_steps < 1) return absl::InvalidArgumentError("draft delta: num_steps must be at least 1");
  TP_RETURN_IF_ERROR(batch.ApplyDraft(delta, tables_));
  const int64_t rows = target_.hidden_rows().rows;
  for (int32_t r : delta.hidden_rows) {
    if (r < 0 || r >= rows) {
      return absl::InvalidArgumentError(absl::StrCat("draft delta: hidden row ", r, ", but the last forward has ", rows,
                                                     " logit rows"));
    }
  }
  step_.token_ids = delta.token_ids;
  step_.positions = delta.positions;
  step_.hidden_rows = delta.hidden_rows;
  step_.return_logits = false;
  step_.kv.resize(tables_.size());
  for (size_t g = 0; g < tables_.size(); ++g) {
    step_.kv[g].max_blocks_per_seq = tables_[g].max_blocks_per_seq;
    step_.kv[g].block_tables.swap(tables_[g].block_tables);
  }
  TP_RETURN_IF_ERROR(drafter_.Validate(step_));
  num_steps_ = delta.num_steps;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> DraftPass::Run(StepTimes* times) {
  if (num_steps_ < 1) return absl::FailedPreconditionError("draft pass: nothing planned");
  const size_t n = step_.token_ids.size();
  std::vector<int32_t> drafts(n * num_steps_);
  StepTimes total, one;
  // The first step gathers each sequence's row of the target's hidden states; the next
  // ones read the drafter's own projected rows, already in sequence order.
  Tensor hidden = target_.hidden_rows();
  for (int32_t k = 0; k < num_steps_; ++k) {
    TP_ASSIGN_OR_RETURN(MtpDraftOutput out, drafter_.Step(step_, hidden, &one));
    total.total_us += one.total_us;
    total.allreduce_us += one.allreduce_us;
    for (size_t i = 0; i < n; ++i) drafts[i * num_steps_ + k] = out.token_ids[i];
    step_.token_ids = std::move(out.token_ids);
    step_.hidden_rows.clear();
    hidden = drafter_.projected();
  }
  num_steps_ = 0;
  if (times != nullptr) *times = total;
  return drafts;
}

}  // namespace tpserve

// Rank 0's side of lockstep step execution. Tested by tests/model_test.cc and
// tests/persistent_batch_test.cc.
#include "worker/step_executor.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace tpserve {

StepExecutor::StepExecutor(Model& model, Communicator& comm, MtpDrafter* drafter)
    : model_(model), comm_(comm), batch_(static_cast<int32_t>(model.num_kv_blocks().size()), model.block_size()) {
  if (drafter != nullptr) draft_ = std::make_unique<DraftPass>(*drafter, model);
}

void StepExecutor::AbortIfShared(const absl::Status& st, const char* what) {
  if (st.ok() || comm_.size() == 1) return;
  // Workers ran (or are running) the same message; we cannot resynchronize them safely.
  std::fprintf(stderr, "tpserve: rank 0 %s failed: %s\n", what, std::string(st.message()).c_str());
  comm_.Abort(1);
}

absl::StatusOr<StepOutput> StepExecutor::Run(const StepPlan& plan, StepTimes* times) {
  auto out = model_.Forward(plan, times);
  AbortIfShared(out.status(), "step");
  return out;
}

absl::StatusOr<std::vector<int32_t>> StepExecutor::Draft(const DraftDelta& delta, StepTimes* times) {
  if (shut_down_) return absl::FailedPreconditionError("the executor has shut down");
  if (draft_ == nullptr) {
    return absl::FailedPreconditionError("a draft pass needs an MTP drafter on every rank (none was loaded)");
  }
  TP_RETURN_IF_ERROR(broken_);
  // Planned on rank 0 first, as Execute does: a bad pass never reaches the workers.
  if (absl::Status planned = draft_->Plan(batch_, delta); !planned.ok()) {
    broken_ = absl::InternalError(absl::StrCat("a draft pass could not be planned; restart the engine: ",
                                               planned.message()));
    return planned;
  }
  if (comm_.size() > 1) {
    std::vector<uint8_t> bytes = delta.Serialize();
    comm_.BroadcastBytes(bytes, 0);
  }
  auto drafts = draft_->Run(times);
  AbortIfShared(drafts.status(), "draft pass");
  return drafts;
}

absl::StatusOr<StepOutput> StepExecutor::Execute(const StepDelta& delta, StepTimes* times) {
  if (shut_down_) return absl::FailedPreconditionError("the executor has shut down");
  TP_RETURN_IF_ERROR(broken_);
  // Expand and validate on rank 0 before broadcasting, so a bad step is an error here and
  // never reaches the workers.
  absl::Status planned = batch_.ApplyInto(delta, plan_);
  if (planned.ok()) planned = plan_.Validate(model_.num_kv_blocks(), model_.block_size());
  if (planned.ok()) planned = plan_.ValidateTokenIds(model_.config().vocab_size);
  if (!planned.ok()) {
    broken_ = absl::InternalError(absl::StrCat("a step could not be planned; restart the engine: ",
                                               planned.message()));
    return planned;
  }
  if (comm_.size() > 1) {
    std::vector<uint8_t> bytes = delta.Serialize();
    comm_.BroadcastBytes(bytes, 0);
  }
  return Run(plan_, times);
}

absl::StatusOr<StepOutput> StepExecutor::Execute(const StepPlan& plan, StepTimes* times) {
  if (shut_down_) return absl::FailedPreconditionError("the executor has shut down");
  // Validate before broadcasting, so a bad plan is an error on rank 0 and never reaches
  // the workers.
  TP_RETURN_IF_ERROR(plan.Validate(model_.num_kv_blocks(), model_.block_size()));
  TP_RETURN_IF_ERROR(plan.ValidateTokenIds(model_.config().vocab_size));
  if (comm_.size() > 1) {
    std::vector<uint8_t> bytes = plan.Serialize();
    comm_.BroadcastBytes(bytes, 0);
  }
  return Run(plan, times);
}

void StepExecutor::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (comm_.size() > 1) {
    StepPlan p;
    p.kind = StepPlan::Kind::kShutdown;
    std::vector<uint8_t> bytes = p.Serialize();
    comm_.BroadcastBytes(bytes, 0);
  }
}

}  // namespace tpserve

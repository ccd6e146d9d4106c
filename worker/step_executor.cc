// Rank 0's side of lockstep step execution. Tested by tests/model_test.cc and
// tests/persistent_batch_test.cc.
#include "worker/step_executor.h"

#include <cstdio>
#include <utility>

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
  if (pipelined()) return absl::FailedPreconditionError("a draft pass with pipeline stages is not supported");
  if (!in_flight_.empty()) return absl::FailedPreconditionError("a draft pass: collect the steps in flight first");
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

StepExecutor::InFlight StepExecutor::TakeSpare() {
  InFlight f;
  if (!spare_.empty()) {
    f.plan = std::move(spare_.back());
    spare_.pop_back();
  }
  return f;
}

void StepExecutor::Send(std::vector<uint8_t> bytes) {
  if (!pipelined()) {
    if (comm_.size() > 1) comm_.BroadcastBytes(bytes, 0);
    return;
  }
  Communicator& messages = *model_.step_messages();
  messages.WaitSends();  // the last message has left message_
  message_ = std::move(bytes);
  if (model_.stage_comm().size() > 1) model_.stage_comm().BroadcastBytes(message_, 0);
  messages.SendAsync(message_.data(), message_.size(), model_.StagePeer(1));
}

absl::Status StepExecutor::Start(InFlight f) {
  if (pipelined()) {
    const absl::Status st = model_.StartForward(f.plan, &f.times);
    AbortIfShared(st, "step");
    TP_RETURN_IF_ERROR(st);
  } else {
    f.output = Run(f.plan, &f.times);
  }
  in_flight_.push_back(std::move(f));
  return absl::OkStatus();
}

absl::Status StepExecutor::Submit(const StepDelta& delta, StepTimes* started) {
  if (shut_down_) return absl::FailedPreconditionError("the executor has shut down");
  TP_RETURN_IF_ERROR(broken_);
  if (in_flight() >= max_in_flight()) {
    return absl::FailedPreconditionError(absl::StrCat("Submit: ", in_flight(), " steps are in flight already, the most "
                                                      "this pipeline holds; Collect one first"));
  }
  InFlight f = TakeSpare();
  // Expand and validate on rank 0 before sending, so a bad step is an error here and
  // never reaches the workers.
  absl::Status planned = batch_.ApplyInto(delta, f.plan);
  if (planned.ok()) planned = f.plan.Validate(model_.num_kv_blocks(), model_.block_size());
  if (planned.ok()) planned = f.plan.ValidateTokenIds(model_.config().vocab_size);
  if (!planned.ok()) {
    broken_ = absl::InternalError(absl::StrCat("a step could not be planned; restart the engine: ",
                                               planned.message()));
    return planned;
  }
  Send(delta.Serialize());
  TP_RETURN_IF_ERROR(Start(std::move(f)));
  if (started != nullptr) *started = in_flight_.back().times;
  return absl::OkStatus();
}

absl::StatusOr<StepOutput> StepExecutor::Collect(StepTimes* times) {
  if (in_flight_.empty()) return absl::FailedPreconditionError("Collect: no step is in flight");
  InFlight f = std::move(in_flight_.front());
  in_flight_.pop_front();
  absl::StatusOr<StepOutput> out = std::move(f.output);
  if (pipelined()) {
    out = model_.FinishForward(f.plan, &f.times);
    AbortIfShared(out.status(), "step");
  }
  if (times != nullptr) *times = f.times;
  spare_.push_back(std::move(f.plan));
  return out;
}

absl::StatusOr<StepOutput> StepExecutor::Execute(const StepDelta& delta, StepTimes* times) {
  if (!in_flight_.empty()) return absl::FailedPreconditionError("Execute: steps are in flight; Collect them first");
  TP_RETURN_IF_ERROR(Submit(delta));
  return Collect(times);
}

absl::StatusOr<StepOutput> StepExecutor::Execute(const StepPlan& plan, StepTimes* times) {
  if (shut_down_) return absl::FailedPreconditionError("the executor has shut down");
  if (!in_flight_.empty()) return absl::FailedPreconditionError("Execute: steps are in flight; Collect them first");
  // Validate before sending, so a bad plan is an error on rank 0 and never reaches the
  // workers.
  TP_RETURN_IF_ERROR(plan.Validate(model_.num_kv_blocks(), model_.block_size()));
  TP_RETURN_IF_ERROR(plan.ValidateTokenIds(model_.config().vocab_size));
  Send(plan.Serialize());
  InFlight f = TakeSpare();
  f.plan = plan;
  TP_RETURN_IF_ERROR(Start(std::move(f)));
  return Collect(times);
}

void StepExecutor::Shutdown() {
  if (shut_down_) return;
  // The later stages finish the steps in flight and send their outputs, which rank 0 takes.
  while (!in_flight_.empty()) (void)Collect(nullptr);
  shut_down_ = true;
  if (comm_.size() > 1) {
    StepPlan p;
    p.kind = StepPlan::Kind::kShutdown;
    Send(p.Serialize());
    if (pipelined()) model_.step_messages()->WaitSends();
  }
}

}  // namespace tpserve

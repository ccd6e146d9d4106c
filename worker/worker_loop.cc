// The worker ranks' loop. Tested by tests/model_test.cc.
#include "worker/worker_loop.h"

#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "worker/draft_pass.h"
#include "worker/persistent_batch.h"

namespace tpserve {

absl::Status RunWorkerLoop(Model& model, Communicator& comm, MtpDrafter* drafter) {
  PersistentBatch batch(static_cast<int32_t>(model.num_kv_blocks().size()), model.block_size());
  std::unique_ptr<DraftPass> draft;
  if (drafter != nullptr) draft = std::make_unique<DraftPass>(*drafter, model);
  auto fail = [&](const absl::Status& st) {
    std::fprintf(stderr, "tpserve: rank %d: %s\n", comm.rank(), std::string(st.message()).c_str());
    comm.Abort(1);
  };
  StepPlan expanded;  // deltas expand here, its buffers reused step to step
  // With pipeline stages, each step message comes from rank 0 through its stage, and from
  // stage to stage: each stage passes it on before running the step, without waiting for
  // the next stage (busy with the step before), which gets the hidden states after it.
  const PipelineStage& stage = model.pipeline();
  Communicator* messages = model.step_messages();
  std::vector<uint8_t> bytes;
  while (true) {
    if (messages == nullptr) {
      comm.BroadcastBytes(bytes, 0);
    } else {
      messages->WaitSends();  // the last message has left `bytes`
      if (stage.first()) {
        model.stage_comm().BroadcastBytes(bytes, 0);
      } else {
        messages->RecvMessage(bytes, model.StagePeer(stage.stage - 1));
      }
      if (!stage.last()) messages->SendAsync(bytes.data(), bytes.size(), model.StagePeer(stage.stage + 1));
    }
    const StepPlan* plan = &expanded;
    absl::StatusOr<StepPlan> whole;
    if (StepMessageKind(bytes) == static_cast<int32_t>(StepPlan::Kind::kDraft)) {
      absl::StatusOr<DraftDelta> delta = DraftDelta::Deserialize(bytes);
      absl::Status st = delta.status();
      if (st.ok() && draft == nullptr) st = absl::FailedPreconditionError("a draft pass, but no MTP drafter is loaded");
      if (st.ok() && messages != nullptr) st = absl::FailedPreconditionError("a draft pass with pipeline stages");
      if (st.ok()) st = draft->Plan(batch, *delta);
      if (st.ok()) st = draft->Run(nullptr).status();
      if (!st.ok()) fail(absl::InternalError(absl::StrCat("draft pass failed: ", st.message())));
      continue;
    }
    if (StepMessageKind(bytes) == static_cast<int32_t>(StepPlan::Kind::kDelta)) {
      absl::StatusOr<StepDelta> delta = StepDelta::Deserialize(bytes);
      absl::Status st = delta.ok() ? batch.ApplyInto(*delta, expanded) : delta.status();
      if (!st.ok()) fail(st);
    } else {
      whole = StepPlan::Deserialize(bytes);
      if (!whole.ok()) fail(whole.status());
      plan = &*whole;
    }
    if (plan->kind == StepPlan::Kind::kShutdown) {
      if (messages != nullptr) messages->WaitSends();
      return absl::OkStatus();
    }
    auto out = model.Forward(*plan, nullptr);
    if (!out.ok()) fail(absl::InternalError(absl::StrCat("step failed: ", out.status().message())));
  }
}

}  // namespace tpserve

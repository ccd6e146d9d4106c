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
  while (true) {
    std::vector<uint8_t> bytes;
    comm.BroadcastBytes(bytes, 0);
    const StepPlan* plan = &expanded;
    absl::StatusOr<StepPlan> whole;
    if (StepMessageKind(bytes) == static_cast<int32_t>(StepPlan::Kind::kDraft)) {
      absl::StatusOr<DraftDelta> delta = DraftDelta::Deserialize(bytes);
      absl::Status st = delta.status();
      if (st.ok() && draft == nullptr) st = absl::FailedPreconditionError("a draft pass, but no MTP drafter is loaded");
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
    if (plan->kind == StepPlan::Kind::kShutdown) return absl::OkStatus();
    auto out = model.Forward(*plan, nullptr);
    if (!out.ok()) fail(absl::InternalError(absl::StrCat("step failed: ", out.status().message())));
  }
}

}  // namespace tpserve

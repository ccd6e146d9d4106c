// Lockstep step execution across ranks. Tested by tests/model_test.cc.
#include "worker/worker_loop.h"

#include <cstdio>

namespace tpserve {

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
  auto out = model_.Forward(plan, times);
  if (!out.ok() && comm_.size() > 1) {
    // Workers ran (or are running) the same plan; we cannot resynchronize them safely.
    std::fprintf(stderr, "tpserve: rank 0 step failed: %s\n", std::string(out.status().message()).c_str());
    comm_.Abort(1);
  }
  return out;
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

absl::Status RunWorkerLoop(Model& model, Communicator& comm) {
  while (true) {
    std::vector<uint8_t> bytes;
    comm.BroadcastBytes(bytes, 0);
    auto plan = StepPlan::Deserialize(bytes);
    if (!plan.ok()) {
      std::fprintf(stderr, "tpserve: rank %d: %s\n", comm.rank(), std::string(plan.status().message()).c_str());
      comm.Abort(1);
    }
    if (plan->kind == StepPlan::Kind::kShutdown) return absl::OkStatus();
    auto out = model.Forward(*plan, nullptr);
    if (!out.ok()) {
      std::fprintf(stderr, "tpserve: rank %d step failed: %s\n", comm.rank(), std::string(out.status().message()).c_str());
      comm.Abort(1);
    }
  }
}

}  // namespace tpserve

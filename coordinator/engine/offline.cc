// Offline generation over EngineCore. Tested by tests/engine_core_test.cc.
#include "coordinator/engine/offline.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kernels/base.h"

namespace tpserve {

absl::StatusOr<OfflineResult> GenerateOffline(EngineCore& core, const std::vector<std::vector<int32_t>>& prompts,
                                              const SamplingParams& params) {
  if (core.HasUnfinished()) return absl::FailedPreconditionError("the engine core is busy with other requests");
  OfflineResult result;
  result.outputs.resize(prompts.size());
  const absl::Time now = absl::Now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    absl::Status valid = core.Validate(prompts[i], params);
    if (!valid.ok()) return absl::Status(valid.code(), absl::StrCat("prompt ", i, ": ", valid.message()));
    result.outputs[i].prompt_ids = prompts[i];
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    TP_RETURN_IF_ERROR(core.AddRequest(absl::StrCat(i), prompts[i], params, now));
  }
  const SchedulerStats before = core.scheduler().stats();
  size_t finished = 0;
  while (finished < prompts.size()) {
    EngineStep step = core.Step();
    if (step.num_seqs > 0) {
      result.steps.push_back(step);  // the StepSummary part
    }
    for (EngineOutput& o : step.outputs) {
      size_t i = 0;
      TP_CHECK(absl::SimpleAtoi(o.request_id, &i) && i < prompts.size());
      if (o.finish == FinishReason::kError || o.finish == FinishReason::kCancelled) {
        // Leave the core idle for the next call.
        for (const std::string& id : core.UnfinishedIds()) (void)core.Abort(id);
        return absl::InternalError(absl::StrCat("prompt ", i, ": ", o.error.empty() ? "cancelled" : o.error));
      }
      GenerationOutput& g = result.outputs[i];
      g.output_ids.insert(g.output_ids.end(), o.token_ids.begin(), o.token_ids.end());
      for (TokenLogprob& lp : o.logprobs) {
        g.output_logprobs.push_back(lp.logprob);
        if (*params.logprobs > 0) g.top_logprobs.push_back(std::move(lp.top));
      }
      for (auto& row : o.logits) g.logits.push_back(std::move(row));
      if (o.finish != FinishReason::kNone) {
        g.finish_reason = FinishReasonName(o.finish);
        ++finished;
      }
    }
  }
  const SchedulerStats after = core.scheduler().stats();
  result.preemptions = after.num_preemptions - before.num_preemptions;
  result.spec = after.spec;
  result.spec.num_drafts -= before.spec.num_drafts;
  result.spec.num_draft_tokens -= before.spec.num_draft_tokens;
  result.spec.num_accepted_tokens -= before.spec.num_accepted_tokens;
  for (size_t i = 0; i < before.spec.accepted_per_pos.size(); ++i) {
    result.spec.accepted_per_pos[i] -= before.spec.accepted_per_pos[i];
  }
  return result;
}

}  // namespace tpserve

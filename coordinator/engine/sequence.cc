// Sequence state transitions. Tested by tests/scheduler_test.cc.
#include "coordinator/engine/sequence.h"

#include <utility>

#include "kernels/base.h"

namespace tpserve {

absl::string_view SequenceStatusName(SequenceStatus s) {
  switch (s) {
    case SequenceStatus::kWaiting: return "waiting";
    case SequenceStatus::kRunning: return "running";
    case SequenceStatus::kPreempted: return "preempted";
    case SequenceStatus::kFinished: return "finished";
  }
  return "?";
}

Sequence::Sequence(SequenceRequest request, int64_t arrival)
    : request_id_(std::move(request.request_id)),
      arrival_(arrival),
      params_(std::move(request.params)),
      seed_(request.seed),
      token_ids_(std::move(request.prompt_token_ids)),
      num_prompt_tokens_(static_cast<int32_t>(token_ids_.size())) {
  times_.arrival = request.arrival;
  if (params_.grammar != nullptr) grammar_.emplace(params_.grammar);
}

void Sequence::SetRunning() {
  TP_CHECK(status_ == SequenceStatus::kWaiting || status_ == SequenceStatus::kPreempted);
  status_ = SequenceStatus::kRunning;
}

void Sequence::SetPreempted() {
  TP_CHECK(status_ == SequenceStatus::kRunning);
  TP_CHECK(kv_.block_tables.empty() && kv_.num_computed_tokens == 0);
  status_ = SequenceStatus::kPreempted;
  draft_ids_.clear();  // it recomputes before it decodes again
}

void Sequence::Finish(FinishReason reason, std::string error_message) {
  TP_CHECK(status_ != SequenceStatus::kFinished && reason != FinishReason::kNone);
  status_ = SequenceStatus::kFinished;
  finish_reason_ = reason;
  error_message_ = std::move(error_message);
}

void DraftAcceptance::Observe(int32_t drafted, int32_t accepted) {
  if (drafted <= 0) return;
  positions_ = kDecay * positions_ + accepted + (accepted < drafted ? 1 : 0);
  accepted_ = kDecay * accepted_ + accepted;
}

void DraftAcceptance::Forget() {
  positions_ *= kForget;
  accepted_ *= kForget;
}

double DraftAcceptance::rate() const { return (accepted_ + 1.0) / (positions_ + 2.0); }

}  // namespace tpserve

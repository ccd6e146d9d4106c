// The one engine loop behind `tpserve generate`, `tpserve serve`, the benchmarks and the
// transformers parity tests. Each Step() is three stages: schedule (the Scheduler's
// output is the whole plan), execute (the plan on every rank; sampled ids and any
// requested logits back) and update (append tokens, token-level stops, free blocks,
// per-request outputs, and with speculative decoding the next step's drafts). Owned by
// one thread; no text work. Tested by tests/engine_core_test.cc,
// tests/mtp_engine_test.cc and, end to end, tests/model_test.cc.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "coordinator/engine/request.h"
#include "coordinator/engine/sampling_params.h"
#include "coordinator/engine/scheduler.h"
#include "coordinator/engine/speculative.h"
#include "worker/step_executor.h"

namespace tpserve {

// One request's part of one step, or its end without one (rejected, aborted, failed).
struct EngineOutput {
  std::string request_id;
  std::vector<int32_t> token_ids;                // new tokens
  std::vector<TokenLogprob> logprobs;            // one per new token, with params.logprobs
  std::vector<std::vector<float>> logits;        // one [vocab] row per new token, with params.return_logits
  FinishReason finish = FinishReason::kNone;     // kNone: more to come
  std::string error;                             // with kError (and a cancel's reason, if any)
  int32_t stop_token_id = -1;                    // with kStop by a stop_token_id (vLLM's stop_reason)
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;                 // so far
  RequestTimings timings;                        // set on the final output
};

// The size and time split of one Step().
struct StepSummary {
  int32_t num_seqs = 0;    // sequences in the forward; 0: nothing ran
  int32_t num_tokens = 0;  // tokens in the forward: one per decode, plus prefill chunks
  int32_t num_prefill_tokens = 0;
  // Steps in flight when this one was collected, itself included: 1, or with pipeline
  // stages up to one per stage.
  int32_t steps_in_flight = 0;
  // Wall time of the step split in three: the forward on rank 0 (all-reduce included),
  // drafting (draft_ms, below) and everything else the engine thread did in Step
  // (schedule, plan broadcast, update).
  double forward_ms = 0;
  double allreduce_ms = 0;
  double pipeline_ms = 0;  // part of forward_ms: rank 0 blocked on the pipeline's transfers (StepTimes::pipeline_us)
  // With pipeline stages: every stage's computing on this step and its all-reduces
  // (StepTimes::stages_busy_us, stages_allreduce_us). With S stages, the bubble over a run
  // is 1 - sum(stages_busy_ms) / (S x wall time).
  double stages_busy_ms = 0;
  double stages_allreduce_ms = 0;
  double output_ms = 0;  // part of forward_ms: the logits to rank 0 and sampling (StepTimes::output_us)
  double coordinator_ms = 0;
  // Speculative decoding: draft tokens verified, and of those accepted.
  int32_t num_draft_tokens = 0;
  int32_t num_accepted_tokens = 0;
  // Proposing the next step's drafts (part of the update stage, not of coordinator_ms):
  // n-gram lookup on rank 0, or the MTP drafter's pass on every rank.
  double draft_ms = 0;
};

// What one Step() did.
struct EngineStep : StepSummary {
  std::vector<EngineOutput> outputs;
  // Set when the forward failed: every unfinished request was ended with kError.
  absl::Status error;
};

// The scheduler settings for `model` (its KV pools, block size, windows, vocabulary and
// EOS ids) with these limits; max_model_len 0 or above the model's positions: the model's.
SchedulerConfig SchedulerConfigFor(const Model& model, int32_t max_num_seqs, int32_t max_num_batched_tokens,
                                   int64_t max_model_len = 0);

// `config` with speculative decoding's settings from `speculative`: the draft limit, and
// with the MTP drafter the sliding groups' lookback (kMtpDrafterLookback).
SchedulerConfig WithSpeculation(SchedulerConfig config, const SpeculativeConfig& speculative);

// The proposer `speculative` names (null when off): n-gram lookup, or the MTP drafter's
// (`executor` must then have the drafter, StepExecutor::has_drafter; it must outlive the
// proposer).
std::unique_ptr<DraftProposer> MakeDraftProposer(const SpeculativeConfig& speculative, StepExecutor& executor);

class EngineCore {
 public:
  // `config` must be valid (SchedulerConfig::Validate); `executor` runs plans on every
  // rank. `seed` (vLLM's --seed): requests without a seed get theirs from a generator
  // seeded with it, so a whole run repeats; unset: from the OS's entropy.
  // `proposer` (needs config.num_speculative_tokens > 0): speculative decoding; after
  // each step it guesses the next tokens of every sequence the step gave tokens, which the
  // next step verifies (coordinator/engine/speculative.h).
  EngineCore(StepExecutor& executor, SchedulerConfig config, std::optional<uint64_t> seed = std::nullopt,
             std::unique_ptr<DraftProposer> proposer = nullptr);

  // Thread-safe (reads only the config): INVALID_ARGUMENT naming the field for ids
  // outside the vocabulary, bad sampling parameters, or a prompt plus max_tokens longer
  // than max_model_len.
  absl::Status Validate(absl::Span<const int32_t> prompt_ids, const SamplingParams& params) const;
  // Queues a validated request; `arrival` starts its timings. ALREADY_EXISTS for an id
  // that is unfinished. A request that can never fit the KV cache ends with kError in
  // the next Step's outputs.
  absl::Status AddRequest(std::string request_id, std::vector<int32_t> prompt_ids, SamplingParams params,
                          absl::Time arrival);
  // Ends an unfinished request now (its KV blocks freed) with kCancelled and `error` as
  // the reason given; returns its final output. NotFound when it is not unfinished.
  absl::StatusOr<EngineOutput> Abort(const std::string& request_id, const std::string& error = "");
  // Ids of every unfinished request (waiting or running).
  std::vector<std::string> UnfinishedIds() const;

  // schedule -> execute -> update. Call only while HasUnfinished(). With pipeline stages
  // (StepExecutor::max_in_flight > 1), it schedules and starts steps until one per stage
  // is in flight, then collects and updates the oldest: the outputs are that step's.
  EngineStep Step();
  bool HasUnfinished() const { return scheduler_.has_unfinished() || !in_flight_.empty(); }

  const Scheduler& scheduler() const { return scheduler_; }
  const SchedulerConfig& config() const { return scheduler_.config(); }

 private:
  EngineOutput FinalOutput(const Sequence& seq, FinishReason reason, std::string error, absl::Time now) const;
  void Update(const SchedulerOutput& scheduled, const StepOutput& out, EngineStep& step);
  // Logit row r of a step as rank 0 sampled from it: `row` with the plan's edits applied
  // (valid until the next call).
  absl::Span<const float> EditedRow(const LogitEdits& edits, int32_t r, absl::Span<const float> row);
  // The update stage's end: the proposer's drafts for `requests` (collected by Update).
  void Propose(absl::Span<const DraftRequest> requests, EngineStep& step);
  void FailAll(const absl::Status& error, EngineStep& step);

  StepExecutor& executor_;
  Scheduler scheduler_;
  std::optional<std::mt19937_64> seeds_;  // with a seed: the requests' seeds
  std::unique_ptr<DraftProposer> proposer_;
  DraftLengthPolicy draft_policy_;  // used with SchedulerConfig::adaptive_drafts
  std::vector<float> edited_row_;  // EditedRow's
  struct Started {
    SchedulerOutput scheduled;
    double start_ms = 0;  // rank 0's forward time in Submit (the whole step with one stage)
  };
  std::deque<Started> in_flight_;  // started steps, oldest first (executor_.in_flight() of them)
};

}  // namespace tpserve

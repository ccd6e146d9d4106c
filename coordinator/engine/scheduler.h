// Continuous batching, first come first served, with chunked prefill and preemption by
// recompute. Its output is the whole step: which sequences, how many tokens each, which
// KV slots, which rows are sampled with which parameters (the StepPlan every rank runs).
// Update() applies the sampled tokens and the token-level stops. Tested by
// tests/scheduler_test.cc (including a randomized invariant test).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "coordinator/engine/block_manager.h"
#include "coordinator/engine/row_sampling_plan.h"
#include "coordinator/engine/sequence.h"
#include "worker/step.h"

namespace tpserve {

struct SchedulerConfig {
  int32_t max_num_seqs = 256;             // sequences running (holding KV) at once
  int32_t max_num_batched_tokens = 2048;  // tokens per step: decodes plus prefill chunks
  int32_t max_model_len = 8192;           // prompt + max_tokens, at most
  int32_t block_size = 16;                // tokens per KV cache block
  bool enable_prefix_caching = true;      // reuse cached full blocks of earlier requests
  // A waiting sequence is admitted only if every KV group keeps at least this fraction of
  // its blocks free after the admission (vLLM's watermark), so that running sequences
  // can grow for a while before one is preempted. [0, 1).
  double kv_watermark = 0.01;
  std::vector<int64_t> num_kv_blocks;     // per KV group: Model::num_kv_blocks()
  std::vector<int32_t> kv_group_windows;  // per KV group: ModelConfig::kv_group_windows
  bool scramble_blocks = false;           // tests: KV blocks handed out in a scrambled order
  int64_t vocab_size = 0;                 // the model's; > 0
  // The model's EOS ids: they end a sequence unless it ignores EOS, and are masked from
  // sampling while it is short of min_tokens.
  std::vector<int32_t> eos_token_ids;
  // Chunked prefill is always on: a prompt longer than the step's budget left runs over
  // several steps.
  // Speculative decoding: a decoding sequence's draft tokens (Sequence::draft_ids) verified
  // per step, at most. 0: drafts are ignored.
  int32_t num_speculative_tokens = 0;
  // SpeculativeConfig::adaptive: the engine drafts 0 ... num_speculative_tokens per sequence
  // and step (DraftLengthPolicy) instead of num_speculative_tokens whenever it can.
  bool adaptive_drafts = false;
  // BlockManagerConfig::sliding_lookback: kMtpDrafterLookback with the MTP drafter (its
  // sliding layers read further back than the target's), else 0.
  int32_t sliding_lookback = 0;
  // Steps in flight at once (pipeline stages: StepExecutor::max_in_flight, or fewer). Above 1, a
  // step leaves out the sequences of the steps in flight (Update has not given them their
  // next tokens) and takes at most 1/this of the unfinished sequences, so that each stage
  // gets a micro-batch of its own.
  int32_t max_steps_in_flight = 1;

  absl::Status Validate() const;
};

// One sequence's part of a step: tokens [start, start + num_tokens - num_draft) of its
// token list, then its first num_draft draft tokens (positions follow on).
struct ScheduledSequence {
  Sequence* seq = nullptr;
  int32_t start = 0;
  int32_t num_tokens = 0;
  // The chunk ends at its newest token: it gets a logit row, and one after each draft.
  bool sample = false;
  int32_t num_draft = 0;
};

// What one Schedule() call decided, and the plan every rank runs. Valid until the next
// Schedule(); hand it to Update() before that.
struct SchedulerOutput {
  std::vector<ScheduledSequence> scheduled;  // decodes first, then prefill chunks
  int32_t num_batched_tokens = 0;
  // The step as every rank gets it: what changed in the batch (sequences in and out,
  // new blocks), the scheduled rows and their tokens, and one sampling row per scheduled
  // sequence with sample set, in order.
  StepDelta plan;
  std::vector<std::string> preempted;  // request ids sent back to the waiting queue
  // Requests that finished without running (rejected at admission with reason error).
  struct Rejected {
    std::string request_id;
    std::string error_message;
  };
  std::vector<Rejected> rejected;

  bool empty() const { return scheduled.empty(); }
  int32_t num_logit_rows() const;  // a sampled sequence's 1 + num_draft each
};

// What happened to one sequence in Update().
struct SequenceOutput {
  Sequence* seq = nullptr;  // valid until the next Schedule()
  // The tokens this step gave it: the sampled token, or with drafts the accepted ones and
  // the sample after them (cut at the first that finishes the sequence).
  std::vector<int32_t> token_ids;
  FinishReason finish_reason = FinishReason::kNone;  // kNone: still running
  int32_t stop_token_id = -1;  // with kStop: the stop_token_id (not EOS) that ended it
  int32_t logit_row = -1;      // token_ids[i] was sampled from the step's logit row logit_row + i
  int32_t num_draft = 0;       // draft tokens verified
  int32_t num_accepted = 0;    // of those, accepted (the target sampled the same token)
};

// A sequence that a step gave tokens and that runs on: what a draft proposer drafts for
// (coordinator/engine/speculative.h), right after the step's Update.
struct DraftRequest {
  Sequence* seq = nullptr;  // running and decoding; its newest token was just sampled
  // The step's logit row that sampled the newest token: the target's final hidden state at
  // the position before it (Model::hidden_rows' row), a draft model's input.
  int32_t hidden_row = 0;
  int32_t max_drafts = 0;  // drafts its next step can verify at most (Scheduler::MaxDrafts), >= 1
};

// Speculative decoding's counters since start (vLLM's spec_decode_* metrics).
// How many leading drafts the grammar accepts after the sequence's output (structured
// output: a draft it refuses could never be sampled, so it and those after it are not
// verified).
int32_t GrammarDraftPrefix(const TokenMatcher& grammar, absl::Span<const int32_t> drafts);

struct SpecDecodeStats {
  int64_t num_drafts = 0;         // sequence-steps that verified at least one draft token
  int64_t num_draft_tokens = 0;
  int64_t num_accepted_tokens = 0;
  std::vector<int64_t> accepted_per_pos;  // [i]: drafts whose token i was accepted
  // Mean tokens a verifying sequence-step produced: 1 + accepted per draft.
  double mean_acceptance_length() const {
    return num_drafts == 0 ? 0.0 : 1.0 + static_cast<double>(num_accepted_tokens) / num_drafts;
  }
};

struct SchedulerStats {
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  std::vector<double> kv_usage;   // per KV group, fraction of blocks in use
  // Per KV group, between steps: blocks referenced.
  std::vector<int64_t> kv_blocks_used;
  // Per KV group: distinct blocks ever used (BlockPool::num_touched).
  std::vector<int64_t> kv_blocks_touched;
  int64_t num_preemptions = 0;    // since start
  int64_t prefix_query_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t num_scheduled_tokens = 0;  // since start
  int64_t num_steps = 0;
  SpecDecodeStats spec;
  double prefix_cache_hit_rate() const {
    return prefix_query_tokens == 0 ? 0.0 : static_cast<double>(prefix_hit_tokens) / prefix_query_tokens;
  }
};

// Owned by the one engine thread. Each step:
//   out = Schedule(); run out.plan on every rank; outputs = Update(out, sampled tokens);
// AddRequest() and Abort() go between steps (an Abort between Schedule and Update drops
// that sequence's result). With config.max_steps_in_flight > 1, up to that many Schedule()
// outputs may wait for their Update (in the order scheduled), each valid until then.
class Scheduler {
 public:
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(SchedulerConfig config);
  explicit Scheduler(SchedulerConfig config);  // config must be valid

  // Queues a request at the back of the waiting queue. A request that could never run
  // (empty prompt, max_tokens < 1, longer than max_model_len, more KV than the whole
  // cache) is finished with reason error at once and reported in the next decision's
  // `rejected`. Errors only for a request id that is already queued or running.
  absl::Status AddRequest(SequenceRequest request);
  // Finishes the request with `reason` (cancelled, or error when a step failed) wherever
  // it is, freeing its KV blocks at once. NotFound for an unknown or finished request.
  absl::Status Abort(absl::string_view request_id, FinishReason reason = FinishReason::kCancelled,
                     std::string error_message = "");

  // Speculative decoding: `seq`'s guesses at its next tokens, for its next step (a
  // running sequence's; replaced each step, dropped on preemption).
  void SetDrafts(Sequence& seq, std::vector<int32_t> draft_ids) { seq.set_draft_ids(std::move(draft_ids)); }
  // Drafts `seq`'s next step could verify: num_speculative_tokens, fewer near max_tokens
  // (every kept draft and the token after them are output tokens); 0 when it cannot draft.
  int32_t MaxDrafts(const Sequence& seq) const;
  // The message for a draft model's pass over `requests` (after Update, before the next
  // Schedule): their slots, newest tokens, positions and hidden rows, `num_steps` drafts
  // each, and the table edits (blocks Update freed) that bring every rank's batch up to
  // these sequences' tables, so that the drafter reads exactly the blocks they hold.
  DraftDelta PlanDraftPass(absl::Span<const DraftRequest> requests, int32_t num_steps);

  // Chooses this step's sequences and token counts, allocating their KV slots, and
  // builds the plan.
  SchedulerOutput Schedule();
  // The step ran. `sampled_token_ids[i]` is the token sampled from logit row i. Keeps a
  // sequence's draft tokens while each equals the token sampled at its position, then
  // the first sample that differs (or the one after the last draft); appends them one by
  // one and finishes the sequence at the first reason found: a stop_token_id or (unless
  // ignore_eos) an EOS id after min_tokens (stop), max_tokens (length). Rejected drafts'
  // KV slots are not counted as computed (their blocks stay with the sequence for its
  // next tokens). Frees finished sequences' blocks at once.
  std::vector<SequenceOutput> Update(const SchedulerOutput& output, absl::Span<const int32_t> sampled_token_ids);

  bool has_unfinished() const { return !running_.empty() || !waiting_.empty() || !rejected_.empty(); }
  SchedulerStats stats() const;
  // Per KV group: the tokens running sequences still need from it
  // (BlockManager::NumLiveTokens); 1 - live / (blocks used * block_size) is the paged
  // cache's waste. A pass over the running sequences: for benchmarks, not every step.
  std::vector<int64_t> KvLiveTokens() const;
  const SchedulerConfig& config() const { return config_; }
  const BlockManager& block_manager() const { return block_manager_; }
  const std::vector<Sequence*>& running() const { return running_; }  // oldest first
  const std::deque<Sequence*>& waiting() const { return waiting_; }   // next first
  const Sequence* Find(absl::string_view request_id) const;  // unfinished ones

 private:
  void Preempt(Sequence* seq, SchedulerOutput& out, int32_t& budget);
  // The newest running sequence that is not in flight (`asking` itself at the latest).
  Sequence* PreemptionVictim(Sequence* asking) const;
  void BuildStepPlan(SchedulerOutput& out);
  // Gives `seq` a batch slot / takes it back, announced in the next plan.
  void TakeSlot(Sequence* seq);
  void ReleaseSlot(Sequence* seq);
  // Appends the edits that bring the workers' copy of seq's tables up to date.
  void SendTableChanges(Sequence& seq, std::vector<int32_t>& table_edits);
  // Some KV group has fewer free blocks than config_.kv_watermark of its blocks.
  bool BelowWatermark() const;
  void FinishSequence(Sequence* seq, FinishReason reason, std::string error_message = "");
  void AddToRunning(Sequence* seq);
  void AddScheduled(Sequence* seq, int32_t num_tokens, SchedulerOutput& out, int32_t& budget);
  // Draft tokens `seq` (decoding, its newest token scheduled) verifies this step: bounded
  // by the config, the budget left, max_tokens and the free KV blocks (allocated here).
  int32_t ScheduleDrafts(Sequence& seq, int32_t budget);
  FinishReason TokenStop(const Sequence& seq, int32_t token, int32_t* stop_token_id) const;

  SchedulerConfig config_;
  BlockManager block_manager_;
  absl::flat_hash_map<std::string, std::unique_ptr<Sequence>> seqs_;  // unfinished
  std::vector<Sequence*> running_;  // sorted by arrival
  std::deque<Sequence*> waiting_;   // preempted ones at the front
  // Finished sequences live until the next Schedule() after their last step's Update: a
  // decision may still point at them.
  std::vector<std::unique_ptr<Sequence>> finished_;
  std::vector<SchedulerOutput::Rejected> rejected_;
  RowSamplingPlanner row_sampling_;
  std::vector<int32_t> free_slots_;     // batch slots to hand out again
  int32_t next_slot_ = 0;               // slots below this have been handed out before
  // Batch changes since the last plan (an empty step is not sent: they wait for the next).
  std::vector<int32_t> added_slots_, removed_slots_;
  int64_t next_arrival_ = 0;
  int64_t num_preemptions_ = 0;
  int64_t num_scheduled_tokens_ = 0;
  int64_t num_steps_ = 0;
  SpecDecodeStats spec_;
};

}  // namespace tpserve

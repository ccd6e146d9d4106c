// One request's life on the coordinator: its tokens, its state (docs/request_lifecycle.md)
// and its KV cache blocks. Tested by tests/scheduler_test.cc and tests/block_manager_test.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "absl/time/time.h"
#include "coordinator/engine/request.h"  // FinishReason: one enum, shared with the API front ends
#include "coordinator/engine/sampling_params.h"
#include "coordinator/structured/token_matcher.h"

namespace tpserve {

// A request as the engine core hands it to the scheduler: its tokens and its sampling
// and stopping settings, which the scheduler turns into each step's sampling rows and
// applies when tokens come back (EOS, stop_token_ids, min_tokens, max_tokens). Stop
// strings are text, matched off the engine thread (OutputProcessor).
struct SequenceRequest {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;  // validated (SamplingParams::Validate) by the caller
  uint64_t seed = 0;      // the random stream's key: ResolveSeed(params)
  absl::Time arrival = absl::InfinitePast();  // when the engine got it (timings)
};

// When the request arrived and first ran, for its timings (written by the engine core).
struct SequenceTimes {
  absl::Time arrival = absl::InfinitePast();
  absl::Time first_scheduled = absl::InfinitePast();
  absl::Time first_token = absl::InfinitePast();
};

// waiting -> running -> finished, with running -> preempted -> running on KV pressure.
// A running sequence is prefilling until only its newest token lacks KV, then decoding.
// Finished carries a FinishReason (coordinator/engine/request.h): stop, length, cancelled, error.
enum class SequenceStatus : uint8_t { kWaiting, kRunning, kPreempted, kFinished };

absl::string_view SequenceStatusName(SequenceStatus s);

// The sequence's KV cache state. The BlockManager reads and writes it; nobody else
// writes it.
struct KvState {
  int32_t num_computed_tokens = 0;  // leading tokens whose k/v are in the cache
  // [group][logical block]: physical block ids; -1 where the sequence holds no block (a
  // sliding-window block that fell out of the window, or one it never needed).
  std::vector<std::vector<int32_t>> block_tables;
  // Prefix-cache hash chain of the sequence's full blocks (tokens only ever append, so
  // entries stay valid across preemption), and how many leading blocks were offered to
  // the cache already.
  std::vector<uint64_t> block_hashes;
  int32_t num_committed_blocks = 0;
};

// What every rank's PersistentBatch holds of the sequence, as the scheduler last sent it.
struct BatchView {
  int32_t slot = -1;               // -1: not in the batch
  std::vector<int32_t> sent_len;   // per group: table entries sent
  std::vector<int32_t> sent_freed; // per group: leading entries sent as freed (-1)
};

// A sequence's recent acceptance of drafts, per draft position: decayed counts of the
// positions verified (the accepted ones and the first rejected one) and of those
// accepted, with a prior of 1/2.
class DraftAcceptance {
 public:
  void Observe(int32_t drafted, int32_t accepted);
  // A step without drafts: the counts fade towards the prior, so a sequence whose drafts
  // were refused is tried again after a while.
  void Forget();
  double rate() const;

 private:
  static constexpr double kDecay = 0.8;
  static constexpr double kForget = 0.9;
  double positions_ = 0;
  double accepted_ = 0;
};

class Sequence {
 public:
  Sequence(SequenceRequest request, int64_t arrival);  // takes the request's vectors

  const std::string& request_id() const { return request_id_; }
  int64_t arrival() const { return arrival_; }  // admission order; smaller is older
  int32_t max_tokens() const { return params_.max_tokens; }
  const SamplingParams& params() const { return params_; }
  uint64_t seed() const { return seed_; }
  SequenceTimes& times() { return times_; }
  const SequenceTimes& times() const { return times_; }

  // Prompt, then generated tokens. After a preemption the whole list is recomputed as
  // if it were the prompt; output_token_ids() still reports only generated tokens.
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  int32_t num_tokens() const { return static_cast<int32_t>(token_ids_.size()); }
  int32_t num_prompt_tokens() const { return num_prompt_tokens_; }
  int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens_; }
  absl::Span<const int32_t> prompt_token_ids() const {
    return absl::MakeConstSpan(token_ids_).first(num_prompt_tokens_);
  }
  absl::Span<const int32_t> output_token_ids() const {
    return absl::MakeConstSpan(token_ids_).subspan(num_prompt_tokens_);
  }
  void AppendToken(int32_t id) { token_ids_.push_back(id); }

  // Speculative decoding: guesses at the tokens after the newest one, verified in the
  // sequence's next decode step (then cleared). Never part of token_ids().
  const std::vector<int32_t>& draft_ids() const { return draft_ids_; }
  void set_draft_ids(std::vector<int32_t> ids) { draft_ids_ = std::move(ids); }
  // Its drafts' recent acceptance ("adaptive" speculation; EngineCore keeps it).
  DraftAcceptance& draft_acceptance() { return draft_acceptance_; }

  // Structured output: the grammar's state after the output so far (params().grammar);
  // null for free text. The scheduler masks the sequence's rows with it and advances it by
  // every appended token.
  TokenMatcher* grammar() { return grammar_ ? &*grammar_ : nullptr; }
  const TokenMatcher* grammar() const { return grammar_ ? &*grammar_ : nullptr; }

  SequenceStatus status() const { return status_; }
  bool is_finished() const { return status_ == SequenceStatus::kFinished; }
  bool is_running() const { return status_ == SequenceStatus::kRunning; }
  // Running and more than the newest token still lacks KV (prompt or recompute).
  bool is_prefill() const { return kv_.num_computed_tokens + 1 < num_tokens(); }
  FinishReason finish_reason() const { return finish_reason_; }
  const std::string& error_message() const { return error_message_; }

  // State transitions; an illegal one is a scheduler bug and aborts.
  void SetRunning();    // waiting or preempted -> running
  void SetPreempted();  // running -> preempted (KV already freed)
  void Finish(FinishReason reason, std::string error_message = "");  // any -> finished

  // In a step started and not yet updated (pipeline stages keep several in flight): the
  // scheduler leaves it out of the next steps, and never preempts it, until its Update.
  bool in_flight() const { return in_flight_; }
  void set_in_flight(bool on) { in_flight_ = on; }

  BatchView& batch() { return batch_; }
  KvState& kv() { return kv_; }
  const KvState& kv() const { return kv_; }
  int32_t num_computed_tokens() const { return kv_.num_computed_tokens; }

 private:
  std::string request_id_;
  int64_t arrival_;
  SamplingParams params_;
  uint64_t seed_;
  SequenceTimes times_;
  std::vector<int32_t> token_ids_;
  std::vector<int32_t> draft_ids_;
  DraftAcceptance draft_acceptance_;
  std::optional<TokenMatcher> grammar_;
  int32_t num_prompt_tokens_;
  SequenceStatus status_ = SequenceStatus::kWaiting;
  FinishReason finish_reason_ = FinishReason::kNone;
  std::string error_message_;
  KvState kv_;
  BatchView batch_;
  bool in_flight_ = false;
};

}  // namespace tpserve

// FCFS continuous batching over the paged KV cache. Tested by tests/scheduler_test.cc.
#include "coordinator/engine/scheduler.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/engine/speculative.h"
#include "kernels/base.h"

namespace tpserve {
namespace {

BlockManagerConfig BlockConfigOf(const SchedulerConfig& c) {
  return BlockManagerConfig{c.num_kv_blocks, c.kv_group_windows, c.block_size, c.enable_prefix_caching,
                            c.scramble_blocks, c.sliding_lookback};
}

}  // namespace

absl::Status SchedulerConfig::Validate() const {
  if (max_num_seqs < 1) return absl::InvalidArgumentError("max_num_seqs must be at least 1");
  if (max_num_batched_tokens < 1) return absl::InvalidArgumentError("max_num_batched_tokens must be at least 1");
  if (num_speculative_tokens < 0) return absl::InvalidArgumentError("num_speculative_tokens must not be negative");
  if (max_steps_in_flight < 1) return absl::InvalidArgumentError("max_steps_in_flight must be at least 1");
  if (max_model_len < 2) return absl::InvalidArgumentError("max_model_len must be at least 2");
  if (vocab_size < 1) return absl::InvalidArgumentError("vocab_size must be at least 1");
  for (int32_t id : eos_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("EOS id ", id, " is outside the vocabulary [0, ", vocab_size, ")"));
    }
  }
  if (!(kv_watermark >= 0.0 && kv_watermark < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("kv_watermark must be in [0, 1), got ", kv_watermark));
  }
  return BlockConfigOf(*this).Validate();
}

int32_t SchedulerOutput::num_logit_rows() const {
  int32_t n = 0;
  for (const ScheduledSequence& s : scheduled) n += s.sample ? 1 + s.num_draft : 0;
  return n;
}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(SchedulerConfig config) {
  TP_RETURN_IF_ERROR(config.Validate());
  return std::make_unique<Scheduler>(std::move(config));
}

Scheduler::Scheduler(SchedulerConfig config)
    : config_(std::move(config)),
      block_manager_(BlockConfigOf(config_)),
      row_sampling_(config_.vocab_size, config_.eos_token_ids) {
  TP_CHECK(config_.Validate().ok());
}

absl::Status Scheduler::AddRequest(SequenceRequest request) {
  if (seqs_.contains(request.request_id)) {
    return absl::AlreadyExistsError(absl::StrCat("request id '", request.request_id, "' is already in use"));
  }
  const int64_t prompt = static_cast<int64_t>(request.prompt_token_ids.size());
  const int64_t max_tokens = request.params.max_tokens;
  std::string error;
  if (prompt == 0) {
    error = "the prompt is empty";
  } else if (max_tokens < 1) {
    error = absl::StrCat("max_tokens is ", max_tokens, "; it must be at least 1");
  } else if (prompt + max_tokens > config_.max_model_len) {
    error = absl::StrCat("the prompt has ", prompt, " tokens and max_tokens is ", max_tokens,
                         ": together more than the ", config_.max_model_len,
                         " tokens of max_model_len; shorten the prompt or lower max_tokens");
  } else {
    // The last sampled token never needs KV.
    error = std::string(block_manager_.CheckFitsAlone(prompt + max_tokens - 1).message());
  }
  if (!error.empty()) {
    rejected_.push_back({std::move(request.request_id), std::move(error)});
    return absl::OkStatus();
  }
  auto seq = std::make_unique<Sequence>(std::move(request), next_arrival_++);
  waiting_.push_back(seq.get());
  const std::string id = seq->request_id();
  seqs_.emplace(id, std::move(seq));
  return absl::OkStatus();
}

absl::Status Scheduler::Abort(absl::string_view request_id, FinishReason reason, std::string error_message) {
  auto it = seqs_.find(request_id);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat("no unfinished request with id '", request_id, "'"));
  }
  FinishSequence(it->second.get(), reason, std::move(error_message));
  return absl::OkStatus();
}

const Sequence* Scheduler::Find(absl::string_view request_id) const {
  auto it = seqs_.find(request_id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

void Scheduler::FinishSequence(Sequence* seq, FinishReason reason, std::string error_message) {
  if (seq->is_running()) {
    running_.erase(std::find(running_.begin(), running_.end(), seq));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), seq));
  }
  block_manager_.Free(*seq);
  ReleaseSlot(seq);
  seq->Finish(reason, std::move(error_message));
  auto node = seqs_.extract(seq->request_id());
  finished_.push_back(std::move(node.mapped()));
}

void Scheduler::AddToRunning(Sequence* seq) {
  auto pos = std::upper_bound(running_.begin(), running_.end(), seq,
                              [](const Sequence* a, const Sequence* b) { return a->arrival() < b->arrival(); });
  running_.insert(pos, seq);
}

void Scheduler::AddScheduled(Sequence* seq, int32_t num_tokens, SchedulerOutput& decision, int32_t& budget) {
  const int32_t start = seq->num_computed_tokens();
  const bool sample = start + num_tokens == seq->num_tokens();
  const int32_t drafts = sample ? ScheduleDrafts(*seq, budget - num_tokens) : 0;
  decision.scheduled.push_back({seq, start, num_tokens + drafts, sample, drafts});
  decision.num_batched_tokens += num_tokens + drafts;
  budget -= num_tokens + drafts;
}

int32_t Scheduler::MaxDrafts(const Sequence& seq) const {
  // Every accepted draft and the sample after them are output tokens: max_tokens bounds
  // them, and with it the positions (prompt + max_tokens <= max_model_len).
  const int32_t room = seq.max_tokens() - seq.num_output_tokens() - 1;
  return std::max(0, std::min(config_.num_speculative_tokens, room));
}

int32_t Scheduler::ScheduleDrafts(Sequence& seq, int32_t budget) {
  if (seq.draft_ids().empty() || config_.num_speculative_tokens == 0) return 0;
  int32_t k = std::min({static_cast<int32_t>(seq.draft_ids().size()), MaxDrafts(seq), budget});
  if (seq.grammar() != nullptr) k = std::min(k, GrammarDraftPrefix(*seq.grammar(), seq.draft_ids()));
  // Each running sequence may need a fresh block for its own next token: keep one each.
  return k > 0 ? block_manager_.AllocateLookahead(seq, k, static_cast<int64_t>(running_.size())) : 0;
}

bool Scheduler::BelowWatermark() const {
  for (int32_t g = 0; g < block_manager_.num_groups(); ++g) {
    const BlockPool& pool = block_manager_.pool(g);
    if (pool.num_free() < config_.kv_watermark * pool.num_blocks()) return true;
  }
  return false;
}

// Recompute preemption: the sequence keeps its tokens (prompt and output) and loses its
// KV; when readmitted it prefills all of them (the prefix cache usually still has most).
Sequence* Scheduler::PreemptionVictim(Sequence* asking) const {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if (!(*it)->in_flight() || *it == asking) return *it;
  }
  return asking;
}

void Scheduler::Preempt(Sequence* seq, SchedulerOutput& decision, int32_t& budget) {
  TP_CHECK(!seq->in_flight());
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  auto it = std::find_if(decision.scheduled.begin(), decision.scheduled.end(),
                         [&](const ScheduledSequence& s) { return s.seq == seq; });
  if (it != decision.scheduled.end()) {
    budget += it->num_tokens;
    decision.num_batched_tokens -= it->num_tokens;
    decision.scheduled.erase(it);
  }
  block_manager_.Free(*seq);
  ReleaseSlot(seq);
  seq->SetPreempted();
  waiting_.push_front(seq);
  decision.preempted.push_back(seq->request_id());
  ++num_preemptions_;
}

SchedulerOutput Scheduler::Schedule() {
  finished_.erase(std::remove_if(finished_.begin(), finished_.end(),
                                 [](const std::unique_ptr<Sequence>& s) { return !s->in_flight(); }),
                  finished_.end());
  SchedulerOutput decision;
  decision.rejected = std::move(rejected_);
  rejected_.clear();
  int32_t budget = config_.max_num_batched_tokens;
  const int64_t preemptions_before = num_preemptions_;
  // Steps in flight: a share of the unfinished sequences each, those in flight left out.
  const int32_t depth = config_.max_steps_in_flight;
  const size_t max_seqs = depth > 1 ? (running_.size() + waiting_.size() + depth - 1) / depth : SIZE_MAX;
  auto room = [&] { return decision.scheduled.size() < max_seqs; };

  // Running sequences, oldest first: decodes (one token each) before prefill chunks, so
  // a long prompt never takes the budget decodes need. Short of KV blocks, the newest
  // running sequence is preempted (possibly the one asking), so the oldest always advances.
  for (const bool prefill : {false, true}) {
    for (size_t i = 0; i < running_.size() && budget > 0 && room(); ++i) {
      Sequence* seq = running_[i];
      if (seq->is_prefill() != prefill || seq->in_flight()) continue;
      int32_t n;
      while ((n = block_manager_.Allocate(*seq, budget)) == 0) {
        Sequence* victim = PreemptionVictim(seq);
        Preempt(victim, decision, budget);
        if (victim == seq) break;
      }
      if (n > 0) AddScheduled(seq, n, decision, budget);
    }
  }

  // Waiting sequences, in order, while budget, sequence slots and blocks last. Not in a
  // step that preempted: what was just freed is for the sequences still running.
  while (num_preemptions_ == preemptions_before && !waiting_.empty() && budget > 0 && room() &&
         static_cast<int32_t>(running_.size()) < config_.max_num_seqs) {
    Sequence* seq = waiting_.front();
    const int32_t n = block_manager_.Allocate(*seq, budget);
    if (n == 0 && running_.empty()) {
      // Admission checks make this unreachable; finishing beats waiting forever.
      const std::string error = "the request does not fit in the KV cache even alone; give the KV cache more memory";
      decision.rejected.push_back({seq->request_id(), error});
      FinishSequence(seq, FinishReason::kError, error);
      continue;
    }
    if (n == 0) break;
    if (!running_.empty() && BelowWatermark()) {
      block_manager_.Free(*seq);  // not now: leave room for the running sequences to grow
      break;
    }
    waiting_.pop_front();
    seq->SetRunning();
    TakeSlot(seq);
    AddToRunning(seq);
    AddScheduled(seq, n, decision, budget);
  }

  num_scheduled_tokens_ += decision.num_batched_tokens;
  if (!decision.empty()) {
    ++num_steps_;
    BuildStepPlan(decision);  // an empty step is not sent: its batch changes wait for the next
    if (depth > 1) {
      for (const ScheduledSequence& s : decision.scheduled) s.seq->set_in_flight(true);
    }
  }
  return decision;
}

void Scheduler::TakeSlot(Sequence* seq) {
  BatchView& v = seq->batch();
  TP_CHECK(v.slot < 0);
  if (free_slots_.empty()) {
    v.slot = next_slot_++;
  } else {
    v.slot = free_slots_.back();
    free_slots_.pop_back();
  }
  added_slots_.push_back(v.slot);
  v.sent_len.assign(block_manager_.num_groups(), 0);
  v.sent_freed.assign(block_manager_.num_groups(), 0);
}

void Scheduler::ReleaseSlot(Sequence* seq) {
  BatchView& v = seq->batch();
  if (v.slot < 0) return;
  // A slot taken since the last plan is simply not announced; else the workers drop it.
  auto pending = std::find(added_slots_.begin(), added_slots_.end(), v.slot);
  if (pending != added_slots_.end()) {
    added_slots_.erase(pending);
  } else {
    removed_slots_.push_back(v.slot);
  }
  free_slots_.push_back(v.slot);
  v = BatchView{};
}

void Scheduler::SendTableChanges(Sequence& seq, std::vector<int32_t>& table_edits) {
  BatchView& v = seq.batch();
  for (int32_t g = 0; g < block_manager_.num_groups(); ++g) {
    const std::vector<int32_t>& table = seq.kv().block_tables[g];
    const int32_t len = static_cast<int32_t>(table.size());
    // Tables grow at the end and lose blocks only at the front (a sliding window).
    int32_t freed = v.sent_freed[g];
    while (freed < len && table[freed] < 0) ++freed;
    if (freed == v.sent_freed[g] && len == v.sent_len[g]) continue;
    table_edits.insert(table_edits.end(), {v.slot, g, freed, len - v.sent_len[g]});
    table_edits.insert(table_edits.end(), table.begin() + v.sent_len[g], table.end());
    v.sent_freed[g] = freed;
    v.sent_len[g] = len;
  }
}

DraftDelta Scheduler::PlanDraftPass(absl::Span<const DraftRequest> requests, int32_t num_steps) {
  DraftDelta d;
  d.num_steps = num_steps;
  for (const DraftRequest& r : requests) {
    Sequence& seq = *r.seq;
    // Decoding: every token but the newest has its K/V, which the drafter reads.
    TP_CHECK(seq.is_running() && seq.batch().slot >= 0 && seq.num_computed_tokens() + 1 == seq.num_tokens());
    SendTableChanges(seq, d.table_edits);
    d.slots.push_back(seq.batch().slot);
    d.hidden_rows.push_back(r.hidden_row);
    d.token_ids.push_back(seq.token_ids().back());
    d.positions.push_back(seq.num_tokens() - 1);
  }
  return d;
}

void Scheduler::BuildStepPlan(SchedulerOutput& decision) {
  StepDelta& plan = decision.plan;
  plan.removed_slots = std::move(removed_slots_);
  plan.added_slots = std::move(added_slots_);
  removed_slots_.clear();
  added_slots_.clear();
  plan.slots.reserve(decision.scheduled.size());
  plan.starts.reserve(decision.scheduled.size());
  plan.num_tokens.reserve(decision.scheduled.size());
  plan.token_ids.reserve(decision.num_batched_tokens);
  for (size_t row = 0; row < decision.scheduled.size(); ++row) {
    const ScheduledSequence& s = decision.scheduled[row];
    Sequence& seq = *s.seq;
    SendTableChanges(seq, plan.table_edits);
    plan.slots.push_back(seq.batch().slot);
    plan.starts.push_back(s.start);
    plan.num_tokens.push_back(s.num_tokens);
    const auto own = seq.token_ids().begin() + s.start;
    plan.token_ids.insert(plan.token_ids.end(), own, own + (s.num_tokens - s.num_draft));
    plan.token_ids.insert(plan.token_ids.end(), seq.draft_ids().begin(), seq.draft_ids().begin() + s.num_draft);
    if (!s.sample) continue;
    plan.sampled_rows.push_back(static_cast<int32_t>(row));
    plan.sampled_counts.push_back(1 + s.num_draft);
    // The row after draft i samples output position num_output + i as if drafts 0..i-1
    // had been accepted (penalties, min_tokens, the draw index and the grammar all see them).
    // Without drafts the sequence's own matcher serves; with drafts a copy walks through them.
    std::optional<TokenMatcher> walked;
    if (seq.grammar() != nullptr && s.num_draft > 0) walked = *seq.grammar();
    const TokenMatcher* grammar = walked ? &*walked : seq.grammar();
    for (int32_t i = 0; i <= s.num_draft; ++i) {
      row_sampling_.AddRow(seq.params(), seq.seed(), seq.prompt_token_ids(), seq.output_token_ids(), plan,
                           absl::MakeConstSpan(seq.draft_ids()).first(i), grammar);
      if (walked && i < s.num_draft) TP_CHECK(walked->AcceptToken(seq.draft_ids()[i]));
    }
    if (seq.params().logprobs.has_value() || seq.params().return_logits) plan.return_logits = true;
  }
  // One logit row per sampled row: the compact form.
  if (std::all_of(plan.sampled_counts.begin(), plan.sampled_counts.end(), [](int32_t c) { return c == 1; })) {
    plan.sampled_counts.clear();
  }
}

int32_t GrammarDraftPrefix(const TokenMatcher& grammar, absl::Span<const int32_t> drafts) {
  TokenMatcher g = grammar;
  int32_t n = 0;
  while (n < static_cast<int32_t>(drafts.size()) && !g.IsTerminated() && g.AcceptToken(drafts[n])) ++n;
  return n;
}

FinishReason Scheduler::TokenStop(const Sequence& seq, int32_t token, int32_t* stop_token_id) const {
  const SamplingParams& p = seq.params();
  // The workers mask stop ids and EOS below min_tokens; this guards the rule itself.
  if (seq.num_output_tokens() > p.min_tokens) {
    if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end()) {
      *stop_token_id = token;
      return FinishReason::kStop;
    }
    const std::vector<int32_t>& eos = config_.eos_token_ids;
    if (!p.ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) return FinishReason::kStop;
  }
  // Admission sized the KV for max_tokens: the sequence may not grow past it.
  if (seq.num_output_tokens() >= seq.max_tokens()) return FinishReason::kLength;
  return FinishReason::kNone;
}

std::vector<SequenceOutput> Scheduler::Update(const SchedulerOutput& output,
                                              absl::Span<const int32_t> sampled_token_ids) {
  TP_CHECK(static_cast<int32_t>(sampled_token_ids.size()) == output.num_logit_rows());
  std::vector<SequenceOutput> outputs;
  int32_t row = 0;
  for (const ScheduledSequence& s : output.scheduled) {
    const int32_t first_row = row;
    row += s.sample ? 1 + s.num_draft : 0;
    Sequence* seq = s.seq;
    seq->set_in_flight(false);
    if (seq->is_finished()) continue;  // aborted after Schedule()
    TP_CHECK(seq->is_running() && seq->num_computed_tokens() == s.start);
    const int32_t own = s.num_tokens - s.num_draft;  // tokens of its own list, now computed
    if (!s.sample) {
      block_manager_.CommitComputed(*seq, own);
      continue;
    }
    const absl::Span<const int32_t> sampled = sampled_token_ids.subspan(first_row, 1 + s.num_draft);
    SequenceOutput o;
    o.seq = seq;
    o.logit_row = first_row;
    o.num_draft = s.num_draft;
    o.num_accepted = NumAcceptedDrafts(absl::MakeConstSpan(seq->draft_ids()).first(s.num_draft), sampled);
    std::string error;
    for (int32_t i = 0; i <= o.num_accepted && o.finish_reason == FinishReason::kNone; ++i) {
      seq->AppendToken(sampled[i]);
      o.token_ids.push_back(sampled[i]);
      o.finish_reason = TokenStop(*seq, sampled[i], &o.stop_token_id);
      if (TokenMatcher* grammar = seq->grammar()) {
        // The row's mask allowed only what the grammar accepts; a refusal is a sampling bug.
        if (!grammar->AcceptToken(sampled[i])) {
          o.finish_reason = FinishReason::kError;
          error = absl::StrCat("structured output: the sampled token ", sampled[i],
                               " does not fit the response_format grammar (no token of the model's vocabulary "
                               "can continue the output?)");
        } else if (grammar->IsTerminated() && o.finish_reason == FinishReason::kNone) {
          o.finish_reason = FinishReason::kStop;  // an end the grammar allows, not the engine's EOS
        }
      }
    }
    // The KV of its own tokens and of the drafts kept (each kept token but the newest).
    block_manager_.CommitComputed(*seq, own + static_cast<int32_t>(o.token_ids.size()) - 1);
    seq->set_draft_ids({});
    if (s.num_draft > 0) {
      ++spec_.num_drafts;
      spec_.num_draft_tokens += s.num_draft;
      spec_.num_accepted_tokens += o.num_accepted;
      if (static_cast<int32_t>(spec_.accepted_per_pos.size()) < s.num_draft) spec_.accepted_per_pos.resize(s.num_draft);
      for (int32_t i = 0; i < o.num_accepted; ++i) ++spec_.accepted_per_pos[i];
    }
    if (o.finish_reason != FinishReason::kNone) FinishSequence(seq, o.finish_reason, std::move(error));
    outputs.push_back(std::move(o));
  }
  return outputs;
}

std::vector<int64_t> Scheduler::KvLiveTokens() const {
  std::vector<int64_t> live(block_manager_.num_groups(), 0);
  for (int32_t g = 0; g < block_manager_.num_groups(); ++g) {
    for (const Sequence* seq : running_) live[g] += block_manager_.NumLiveTokens(g, *seq);
  }
  return live;
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  s.num_running = static_cast<int32_t>(running_.size());
  s.num_waiting = static_cast<int32_t>(waiting_.size());
  for (int32_t g = 0; g < block_manager_.num_groups(); ++g) {
    s.kv_usage.push_back(block_manager_.usage(g));
    s.kv_blocks_used.push_back(block_manager_.num_used(g));
    s.kv_blocks_touched.push_back(block_manager_.pool(g).num_touched());
  }
  s.num_preemptions = num_preemptions_;
  s.prefix_query_tokens = block_manager_.prefix_query_tokens();
  s.prefix_hit_tokens = block_manager_.prefix_hit_tokens();
  s.num_scheduled_tokens = num_scheduled_tokens_;
  s.num_steps = num_steps_;
  s.spec = spec_;
  return s;
}

}  // namespace tpserve

// The engine step: schedule -> execute -> update. Tested by tests/engine_core_test.cc.
#include "coordinator/engine/engine_core.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/engine/logprobs.h"
#include "coordinator/engine/mtp_proposer.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/base.h"

namespace tpserve {
namespace {

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

}  // namespace

SchedulerConfig SchedulerConfigFor(const Model& model, int32_t max_num_seqs, int32_t max_num_batched_tokens,
                                   int64_t max_model_len) {
  const ModelConfig& mc = model.config();
  int64_t len = mc.max_position_embeddings;
  if (max_model_len > 0) len = std::min(len, max_model_len);
  SchedulerConfig c;
  c.max_num_seqs = max_num_seqs;
  c.max_num_batched_tokens = max_num_batched_tokens;
  c.max_model_len = static_cast<int32_t>(std::min<int64_t>(len, int64_t{1} << 30));
  c.block_size = model.block_size();
  c.num_kv_blocks = model.num_kv_blocks();
  c.kv_group_windows = mc.kv_group_windows;
  c.vocab_size = mc.vocab_size;
  c.eos_token_ids = mc.eos_token_ids;
  c.max_steps_in_flight = model.pipeline().stages;
  return c;
}

SchedulerConfig WithSpeculation(SchedulerConfig config, const SpeculativeConfig& speculative) {
  config.num_speculative_tokens = speculative.enabled() ? speculative.num_speculative_tokens : 0;
  config.adaptive_drafts = speculative.enabled() && speculative.adaptive;
  config.sliding_lookback = speculative.method == SpeculativeConfig::Method::kMtp ? kMtpDrafterLookback : 0;
  return config;
}

std::unique_ptr<DraftProposer> MakeDraftProposer(const SpeculativeConfig& speculative, StepExecutor& executor) {
  switch (speculative.method) {
    case SpeculativeConfig::Method::kNgram:
      return std::make_unique<NgramProposer>(speculative.prompt_lookup_min, speculative.prompt_lookup_max);
    case SpeculativeConfig::Method::kMtp:
      TP_CHECK(executor.has_drafter());
      return std::make_unique<MtpProposer>(executor);
    case SpeculativeConfig::Method::kNone:
      break;
  }
  return nullptr;
}

EngineCore::EngineCore(StepExecutor& executor, SchedulerConfig config, std::optional<uint64_t> seed,
                       std::unique_ptr<DraftProposer> proposer)
    : executor_(executor), scheduler_(std::move(config)), proposer_(std::move(proposer)) {
  if (seed.has_value()) seeds_.emplace(*seed);
  TP_CHECK(proposer_ == nullptr || scheduler_.config().num_speculative_tokens > 0);
}

absl::Status EngineCore::Validate(absl::Span<const int32_t> prompt_ids, const SamplingParams& params) const {
  const SchedulerConfig& c = scheduler_.config();
  if (prompt_ids.empty()) return absl::InvalidArgumentError("prompt: must not be empty");
  for (int32_t id : prompt_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt: token id ", id, " is outside the vocabulary [0, ", c.vocab_size, ")"));
    }
  }
  TP_RETURN_IF_ERROR(params.Validate(c.vocab_size));
  const int64_t total = static_cast<int64_t>(prompt_ids.size()) + params.max_tokens;
  if (total > c.max_model_len) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens: the prompt (", prompt_ids.size(),
                                                   " tokens) plus max_tokens (", params.max_tokens, ") is ", total,
                                                   " tokens, more than max-model-len ", c.max_model_len));
  }
  return absl::OkStatus();
}

absl::Status EngineCore::AddRequest(std::string request_id, std::vector<int32_t> prompt_ids, SamplingParams params,
                                    absl::Time arrival) {
  const uint64_t seed = params.seed.has_value() || !seeds_ ? ResolveSeed(params) : (*seeds_)();
  return scheduler_.AddRequest(
      SequenceRequest{std::move(request_id), std::move(prompt_ids), std::move(params), seed, arrival});
}

std::vector<std::string> EngineCore::UnfinishedIds() const {
  std::vector<std::string> ids;
  for (const Sequence* s : scheduler_.running()) ids.push_back(s->request_id());
  for (const Sequence* s : scheduler_.waiting()) ids.push_back(s->request_id());
  return ids;
}

EngineOutput EngineCore::FinalOutput(const Sequence& seq, FinishReason reason, std::string error,
                                     absl::Time now) const {
  EngineOutput o;
  o.request_id = seq.request_id();
  o.finish = reason;
  o.error = std::move(error);
  o.num_prompt_tokens = seq.num_prompt_tokens();
  o.num_output_tokens = seq.num_output_tokens();
  const SequenceTimes& t = seq.times();
  o.timings.queue_ms = Ms((t.first_scheduled != absl::InfinitePast() ? t.first_scheduled : now) - t.arrival);
  if (t.first_token != absl::InfinitePast()) {
    o.timings.first_token_ms = Ms(t.first_token - t.arrival);
    o.timings.prefill_ms = Ms(t.first_token - t.first_scheduled);
    o.timings.decode_ms = Ms(now - t.first_token);
  }
  return o;
}

absl::StatusOr<EngineOutput> EngineCore::Abort(const std::string& request_id, const std::string& error) {
  const Sequence* seq = scheduler_.Find(request_id);
  if (seq == nullptr) return absl::NotFoundError(absl::StrCat("no unfinished request with id '", request_id, "'"));
  EngineOutput o = FinalOutput(*seq, FinishReason::kCancelled, error, absl::Now());
  TP_RETURN_IF_ERROR(scheduler_.Abort(request_id));
  return o;
}

void EngineCore::FailAll(const absl::Status& error, EngineStep& step) {
  step.error = error;
  const std::string message = absl::StrCat("the model step failed: ", error.message());
  const absl::Time now = absl::Now();
  for (const std::string& id : UnfinishedIds()) {
    step.outputs.push_back(FinalOutput(*scheduler_.Find(id), FinishReason::kError, message, now));
    (void)scheduler_.Abort(id, FinishReason::kError, message);
  }
}

EngineStep EngineCore::Step() {
  const absl::Time t0 = absl::Now();
  EngineStep step;
  // Schedule and start steps while the executor has room: one with a single stage; with
  // pipeline stages one per stage, each on sequences of its own, so that while the later
  // stages run the older steps rank 0 runs the next one's first stage.
  double started_ms = 0;  // rank 0's forward time in the steps started here (theirs when collected)
  const int max_in_flight = std::min(executor_.max_in_flight(), scheduler_.config().max_steps_in_flight);
  while (executor_.in_flight() < max_in_flight) {
    SchedulerOutput scheduled = scheduler_.Schedule();
    for (const auto& r : scheduled.rejected) {
      EngineOutput o;
      o.request_id = r.request_id;
      o.finish = FinishReason::kError;
      o.error = r.error_message;
      step.outputs.push_back(std::move(o));
    }
    if (scheduled.empty()) break;
    const absl::Time now = absl::Now();
    for (const ScheduledSequence& s : scheduled.scheduled) {
      SequenceTimes& t = s.seq->times();
      if (t.first_scheduled == absl::InfinitePast()) t.first_scheduled = now;
    }
    StepTimes started;
    const absl::Status submitted = executor_.Submit(scheduled.plan, &started);
    if (!submitted.ok()) {
      FailAll(submitted, step);
      break;
    }
    started_ms += started.total_us / 1000.0;
    in_flight_.push_back(Started{std::move(scheduled), started.total_us / 1000.0});
  }
  if (in_flight_.empty()) {
    step.coordinator_ms = Ms(absl::Now() - t0) - started_ms;
    return step;
  }
  // Collect the oldest step; update.
  SchedulerOutput scheduled = std::move(in_flight_.front().scheduled);
  const double start_ms = in_flight_.front().start_ms;
  in_flight_.pop_front();
  for (const ScheduledSequence& s : scheduled.scheduled) {
    if (s.seq->is_prefill() || !s.sample) step.num_prefill_tokens += s.num_tokens;
  }
  step.num_seqs = static_cast<int32_t>(scheduled.scheduled.size());
  step.num_tokens = scheduled.num_batched_tokens;
  step.steps_in_flight = executor_.in_flight();
  StepTimes times;
  absl::StatusOr<StepOutput> out = executor_.Collect(&times);
  step.forward_ms = times.total_us / 1000.0;
  const double collect_ms = step.forward_ms - start_ms;  // FinishForward's (0 with one stage)
  step.allreduce_ms = times.allreduce_us / 1000.0;
  step.pipeline_ms = times.pipeline_us / 1000.0;
  step.output_ms = times.output_us / 1000.0;
  step.stages_busy_ms = times.stages_busy_us / 1000.0;
  step.stages_allreduce_ms = times.stages_allreduce_us / 1000.0;
  if (!out.ok()) {
    FailAll(out.status(), step);
  } else if (static_cast<int64_t>(out->token_ids.size()) != scheduled.plan.num_logit_rows()) {
    FailAll(absl::InternalError(absl::StrCat("the step returned ", out->token_ids.size(), " token ids for ",
                                             scheduled.plan.num_logit_rows(), " logit rows")),
            step);
  } else {
    // Update.
    if (step.num_prefill_tokens == 0 && step.steps_in_flight == 1) {
      draft_policy_.ObserveStep(step.num_tokens, step.forward_ms);
    }
    Update(scheduled, *out, step);
  }
  // What the engine thread did beside the forwards (scheduling, the plan's message, the
  // update): this call's wall time less the forwards of the steps it started (counted when
  // they are collected) and the wait for this one's output.
  step.coordinator_ms = Ms(absl::Now() - t0) - started_ms - collect_ms - step.draft_ms;
  return step;
}

absl::Span<const float> EngineCore::EditedRow(const LogitEdits& e, int32_t r, absl::Span<const float> row) {
  edited_row_.assign(row.begin(), row.end());
  const int64_t V = static_cast<int64_t>(row.size());
  cpu::ApplyLogitEdits(edited_row_.data(), 1, V, e.bias_offsets.empty() ? nullptr : e.bias_offsets.data() + r,
                       e.bias_tokens.data(), e.bias_values.data(), e.mask_index.empty() ? nullptr : e.mask_index.data() + r,
                       e.masks.data(), LogitEdits::mask_words(V));
  return edited_row_;
}

void EngineCore::Update(const SchedulerOutput& scheduled, const StepOutput& out, EngineStep& step) {
  const StepDelta& plan = scheduled.plan;
  const int64_t V = scheduler_.config().vocab_size;
  const absl::Time now = absl::Now();
  std::vector<DraftRequest> drafting;  // sequences that go on, for the next step's drafts
  for (SequenceOutput& so : scheduler_.Update(scheduled, out.token_ids)) {
    Sequence& seq = *so.seq;
    const SamplingParams& p = seq.params();
    if (seq.times().first_token == absl::InfinitePast()) seq.times().first_token = now;
    EngineOutput o;
    if (so.finish_reason != FinishReason::kNone) {
      o = FinalOutput(seq, so.finish_reason, seq.error_message(), now);
      o.stop_token_id = so.stop_token_id;
    } else {
      o.request_id = seq.request_id();
      o.num_prompt_tokens = seq.num_prompt_tokens();
      o.num_output_tokens = seq.num_output_tokens();
    }
    o.token_ids = so.token_ids;
    step.num_draft_tokens += so.num_draft;
    step.num_accepted_tokens += so.num_accepted;
    if (scheduler_.config().adaptive_drafts) {  // the draft length policy's input, kept only where it is used
      if (so.num_draft > 0) {
        seq.draft_acceptance().Observe(so.num_draft, so.num_accepted);
      } else {
        seq.draft_acceptance().Forget();
      }
    }
    // A token whose logprobs cannot be given ends its request with an error (the
    // sequence may still be running: it is aborted).
    auto fail = [&](const std::string& message) {
      if (!seq.is_finished()) (void)scheduler_.Abort(seq.request_id(), FinishReason::kError, message);
      o = FinalOutput(seq, FinishReason::kError, message, now);
    };
    const bool wants_logits = p.logprobs.has_value() || p.return_logits;
    const int32_t last_row = so.logit_row + static_cast<int32_t>(so.token_ids.size()) - 1;
    if (wants_logits && out.logits.size() < static_cast<size_t>(last_row + 1) * V) {
      fail("the step returned no logits for a request that asked for logprobs");
    }
    for (size_t i = 0; i < so.token_ids.size() && o.finish != FinishReason::kError; ++i) {
      const int32_t r = so.logit_row + static_cast<int32_t>(i);
      if (p.logprobs.has_value()) {
        absl::Span<const float> row = absl::MakeConstSpan(out.logits).subspan(static_cast<size_t>(r) * V, V);
        if (!plan.edits.empty()) row = EditedRow(plan.edits, r, row);
        const int32_t e0 = plan.penalty_offsets[r], n = plan.penalty_offsets[r + 1] - e0;
        absl::StatusOr<TokenLogprob> lp = ComputeLogprobs(
            row, plan.sampling[r], absl::MakeConstSpan(plan.penalty_tokens).subspan(e0, n),
            absl::MakeConstSpan(plan.penalty_counts).subspan(e0, n), so.token_ids[i], *p.logprobs);
        if (!lp.ok()) {
          fail(absl::StrCat("sampling failed: ", lp.status().message()));
          break;
        }
        o.logprobs.push_back(std::move(*lp));
      }
      if (p.return_logits) {
        o.logits.emplace_back(out.logits.begin() + static_cast<size_t>(r) * V,
                              out.logits.begin() + static_cast<size_t>(r + 1) * V);
      }
    }
    if (o.finish == FinishReason::kError) o.logits.clear();
    if (proposer_ != nullptr && !seq.is_finished()) {
      int32_t max_drafts = scheduler_.MaxDrafts(seq);
      if (max_drafts > 0 && scheduler_.config().adaptive_drafts) {
        // The next step's other tokens: at least one per other sequence of this step.
        max_drafts = draft_policy_.Choose(seq.draft_acceptance().rate(), step.num_seqs - 1, max_drafts);
      }
      if (max_drafts > 0) drafting.push_back(DraftRequest{&seq, last_row, max_drafts});
    }
    step.outputs.push_back(std::move(o));
  }
  if (!drafting.empty()) Propose(drafting, step);
}

void EngineCore::Propose(absl::Span<const DraftRequest> requests, EngineStep& step) {
  const absl::Time t0 = absl::Now();
  const absl::Status proposed = proposer_->ProposeAll(requests, scheduler_);
  step.draft_ms = Ms(absl::Now() - t0);
  // A drafter model's pass failed on every rank (a bug, as a failed forward is): the step's
  // tokens are out; every unfinished request ends with the error.
  if (!proposed.ok()) FailAll(absl::Status(proposed.code(), absl::StrCat("drafting: ", proposed.message())), step);
}

}  // namespace tpserve

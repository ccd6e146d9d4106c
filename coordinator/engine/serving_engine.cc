// The coordinator loop: schedule -> run -> sample -> postprocess -> stream.
// Tested by tests/serving_engine_test.cc.
#include "coordinator/engine/serving_engine.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

double MsSince(absl::Time t0) { return absl::ToDoubleMilliseconds(absl::Now() - t0); }

SamplingParams ToSamplingParams(const RequestParams& p) {
  SamplingParams s;
  s.temperature = p.temperature;
  s.top_k = p.top_k;
  s.top_p = p.top_p;
  s.min_p = p.min_p;
  s.seed = p.seed;
  s.repetition_penalty = p.repetition_penalty;
  s.presence_penalty = p.presence_penalty;
  s.frequency_penalty = p.frequency_penalty;
  s.max_tokens = p.max_tokens;
  s.min_tokens = p.min_tokens;
  s.stop = p.stop;
  s.stop_token_ids = p.stop_token_ids;
  s.ignore_eos = p.ignore_eos;
  if (p.logprobs >= 0) s.logprobs = p.logprobs;
  return s;
}

}  // namespace

struct ServingEngine::Active {
  Active(const Tokenizer& tok, const SamplingParams& p, const std::vector<int32_t>& eos)
      : params(p), rng(SamplingRng::ForRequest(p)), decoder(tok, /*skip_special_tokens=*/true), stop(p, eos) {}
  std::shared_ptr<RequestStream> stream;
  SamplingParams params;
  SamplingRng rng;
  IncrementalDecoder decoder;
  StopChecker stop;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  absl::Time arrival, first_scheduled = absl::InfinitePast(), first_token = absl::InfinitePast();
  // This step's output, filled by the finish check.
  StopUpdate update;
  SampleResult sample;
  std::string sample_error;  // the sampler rejected this step's logits
};

ServingEngine::ServingEngine(StepExecutor& executor, const Tokenizer& tokenizer, ServingConfig config,
                             ModelInfo info)
    : executor_(executor),
      tokenizer_(tokenizer),
      config_(std::move(config)),
      info_(std::move(info)),
      scheduler_(std::make_unique<Scheduler>(config_.scheduler)),
      sampler_(config_.vocab_size, config_.eos_token_ids),
      row_sampling_(config_.vocab_size, config_.eos_token_ids) {}

ServingEngine::~ServingEngine() = default;

absl::StatusOr<std::shared_ptr<RequestStream>> ServingEngine::Submit(ServeRequest request) {
  if (draining_.load()) return absl::UnavailableError("the server is shutting down");
  if (request.prompt_ids.empty()) return absl::InvalidArgumentError("prompt: must not be empty");
  for (int32_t id : request.prompt_ids) {
    if (id < 0 || id >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prompt: token id ", id, " is outside the vocabulary [0, ",
                                                     config_.vocab_size, ")"));
    }
  }
  SamplingParams sp = ToSamplingParams(request.params);
  TP_RETURN_IF_ERROR(sp.Validate(config_.vocab_size));
  const int64_t total = static_cast<int64_t>(request.prompt_ids.size()) + request.params.max_tokens;
  if (total > config_.scheduler.max_model_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_tokens: the prompt (", request.prompt_ids.size(), " tokens) plus max_tokens (", request.params.max_tokens,
        ") is ", total, " tokens, more than max-model-len ", config_.scheduler.max_model_len));
  }
  auto stream = std::make_shared<RequestStream>(request.request_id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (waiting_estimate_ + static_cast<int64_t>(inbox_.size()) >= config_.max_queue) {
      return absl::ResourceExhaustedError(absl::StrCat("the waiting queue is full (", config_.max_queue,
                                                       " requests); retry later"));
    }
    inbox_.emplace_back(std::move(request), stream);
  }
  cv_.notify_one();
  return stream;
}

EngineStats ServingEngine::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void ServingEngine::Shutdown(absl::Duration drain_timeout) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!draining_.load()) drain_deadline_ = absl::Now() + drain_timeout;
    draining_.store(true);
  }
  cv_.notify_all();
}

void ServingEngine::AdmitNew() {
  std::deque<std::pair<ServeRequest, std::shared_ptr<RequestStream>>> batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    batch.swap(inbox_);
  }
  for (auto& [req, stream] : batch) {
    auto a = std::make_unique<Active>(tokenizer_, ToSamplingParams(req.params), config_.eos_token_ids);
    a->stream = stream;
    a->arrival = absl::Now();
    a->prompt_tokens = static_cast<int32_t>(req.prompt_ids.size());
    if (active_.count(req.request_id)) {
      OutputEvent e;
      e.finish = FinishReason::kError;
      e.error = absl::StrCat("request id \"", req.request_id, "\" is already in use");
      stream->Push(std::move(e));
      continue;
    }
    SequenceRequest sr;
    sr.request_id = req.request_id;
    sr.prompt_token_ids = std::move(req.prompt_ids);
    sr.max_tokens = req.params.max_tokens;
    absl::Status st = scheduler_->AddRequest(std::move(sr));
    if (!st.ok()) {
      OutputEvent e;
      e.finish = FinishReason::kError;
      e.error = std::string(st.message());
      stream->Push(std::move(e));
      continue;
    }
    prompt_tokens_ += a->prompt_tokens;
    active_[req.request_id] = std::move(a);
  }
}

void ServingEngine::Finish(Active& a, FinishReason reason, const std::string& error, std::vector<int32_t> tokens,
                           std::string text, std::vector<TokenLogprob> logprobs) {
  OutputEvent e;
  e.token_ids = std::move(tokens);
  e.text = std::move(text);
  e.logprobs = std::move(logprobs);
  e.finish = reason;
  e.error = error;
  e.prompt_tokens = a.prompt_tokens;
  e.completion_tokens = a.completion_tokens;
  const absl::Time now = absl::Now();
  if (a.first_scheduled != absl::InfinitePast()) {
    e.timings.queue_ms = absl::ToDoubleMilliseconds(a.first_scheduled - a.arrival);
  } else {
    e.timings.queue_ms = absl::ToDoubleMilliseconds(now - a.arrival);
  }
  if (a.first_token != absl::InfinitePast()) {
    e.timings.first_token_ms = absl::ToDoubleMilliseconds(a.first_token - a.arrival);
    e.timings.prefill_ms = absl::ToDoubleMilliseconds(a.first_token - a.first_scheduled);
    e.timings.decode_ms = absl::ToDoubleMilliseconds(now - a.first_token);
  }
  a.stream->Push(std::move(e));
  ++finished_;
}

void ServingEngine::HandleCancellations() {
  const bool past_deadline = draining_.load() && absl::Now() >= [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return drain_deadline_;
  }();
  for (auto it = active_.begin(); it != active_.end();) {
    Active& a = *it->second;
    if (a.stream->cancelled() || past_deadline) {
      (void)scheduler_->Abort(it->first);
      Finish(a, FinishReason::kCancelled, past_deadline ? "the server shut down before the request finished" : "",
             {}, a.stop.Flush(), {});
      it = active_.erase(it);
    } else {
      ++it;
    }
  }
}

void ServingEngine::FailAll(const std::string& error) {
  for (auto& [id, a] : active_) {
    (void)scheduler_->Abort(id);
    Finish(*a, FinishReason::kError, error, {}, "", {});
  }
  active_.clear();
}

// `t0`: when this loop iteration began (before admission); all of the iteration but the
// forward pass counts as coordinator time.
void ServingEngine::Step(absl::Time t0) {
  const absl::Time scheduled_at = absl::Now();
  ScheduleDecision decision = scheduler_->Schedule();
  for (const auto& r : decision.rejected) {
    auto it = active_.find(r.request_id);
    if (it == active_.end()) continue;
    Finish(*it->second, FinishReason::kError, r.error_message, {}, "", {});
    active_.erase(it);
  }
  if (decision.empty()) {
    scheduling_ms_ += MsSince(t0);
    return;
  }
  for (const auto& s : decision.scheduled) {
    auto it = active_.find(s.seq->request_id());
    if (it != active_.end() && it->second->first_scheduled == absl::InfinitePast()) {
      it->second->first_scheduled = scheduled_at;
    }
  }
  StepPlan plan = scheduler_->BuildStepPlan(decision);
  // Sample on the workers (device_sampling); a step with a logprobs request also brings
  // the logits back, and the host computes the logprobs of the tokens the workers chose,
  // so a seeded request's tokens never depend on what it is batched with.
  const bool on_workers = config_.device_sampling;
  if (on_workers) {
    for (const auto& s : decision.scheduled) {
      if (!s.sample) continue;
      const Active& a = *active_.at(s.seq->request_id());
      row_sampling_.AddRow(a.params, a.rng, s.seq->prompt_token_ids(), s.seq->output_token_ids(), plan);
      if (a.params.logprobs.has_value()) plan.return_logits = true;
    }
  }
  StepTimes times;
  auto out = executor_.Execute(plan, &times);
  const double forward_ms = times.total_us / 1000.0;
  if (!out.ok()) {
    FailAll(absl::StrCat("the model step failed: ", out.status().message()));
    scheduler_ = std::make_unique<Scheduler>(config_.scheduler);
    return;
  }
  compute_ms_ += (times.total_us - times.allreduce_us) / 1000.0;
  allreduce_ms_ += times.allreduce_us / 1000.0;

  // Sample every logit row.
  const int64_t V = config_.vocab_size;
  std::vector<int32_t> sampled;
  std::map<const Sequence*, Active*> by_seq;
  int row = 0;
  for (const auto& s : decision.scheduled) {
    if (!s.sample) continue;
    Active* a = active_.at(s.seq->request_id()).get();
    by_seq[s.seq] = a;
    a->sample_error.clear();
    const auto logits = [&] { return absl::MakeConstSpan(out->logits.data() + row * V, V); };
    absl::StatusOr<SampleResult> r;
    if (!on_workers) {
      r = sampler_.Sample(logits(), a->params, s.seq->prompt_token_ids(), s.seq->output_token_ids(), a->rng);
    } else if (a->params.logprobs.has_value()) {
      r = sampler_.Logprobs(logits(), a->params, s.seq->prompt_token_ids(), s.seq->output_token_ids(),
                            out->token_ids[row]);
    } else {
      r = SampleResult{};
      r->token_id = out->token_ids[row];
    }
    if (r.ok()) {
      a->sample = std::move(*r);
    } else {
      a->sample = SampleResult{};
      a->sample.token_id = 0;
      a->sample_error = std::string(r.status().message());
    }
    sampled.push_back(a->sample.token_id);
    ++row;
  }
  // Append, detokenize and check stops for each sampled token.
  auto finish_check = [&](const Sequence& seq) -> FinishReason {
    auto it = by_seq.find(&seq);
    if (it == by_seq.end()) return FinishReason::kError;
    Active& a = *it->second;
    if (!a.sample_error.empty()) return FinishReason::kError;
    const int32_t id = seq.output_token_ids().back();
    const std::string delta = a.decoder.Push(id);
    a.update = a.stop.Push(id, delta);
    return a.update.finish_reason;
  };
  std::vector<SequenceOutput> outs = scheduler_->Update(decision, sampled, finish_check);
  const absl::Time now = absl::Now();
  for (const SequenceOutput& o : outs) {
    auto it = active_.find(o.request_id);
    if (it == active_.end()) continue;
    Active& a = *it->second;
    if (!a.sample_error.empty()) {
      Finish(a, FinishReason::kError, "sampling failed: " + a.sample_error, {}, "", {});
      active_.erase(it);
      continue;
    }
    ++a.completion_tokens;
    ++generation_tokens_;
    if (a.first_token == absl::InfinitePast()) a.first_token = now;
    std::vector<TokenLogprob> lps;
    if (a.params.logprobs.has_value()) {
      lps.push_back(TokenLogprob{o.token_id, a.sample.logprob, std::move(a.sample.top_logprobs)});
    }
    if (o.finish_reason != FinishReason::kNone) {
      std::string text = a.update.text;
      if (a.update.finish_reason == FinishReason::kNone) {
        // Finished by the scheduler (length) rather than the stop checker.
        text += a.stop.Flush();
        text += a.decoder.Flush();
      }
      Finish(a, o.finish_reason, "", {o.token_id}, std::move(text), std::move(lps));
      active_.erase(it);
    } else {
      OutputEvent e;
      e.token_ids = {o.token_id};
      e.text = std::move(a.update.text);
      e.logprobs = std::move(lps);
      e.prompt_tokens = a.prompt_tokens;
      e.completion_tokens = a.completion_tokens;
      a.stream->Push(std::move(e));
    }
  }
  // The plan's validation, serialization and broadcast (inside Execute) count here too.
  const double coordinator_ms = MsSince(t0) - forward_ms;
  scheduling_ms_ += coordinator_ms;
  if (config_.on_step) {
    EngineStepStats st;
    st.num_seqs = static_cast<int32_t>(decision.scheduled.size());
    st.num_tokens = decision.num_batched_tokens;
    st.forward_ms = forward_ms;
    st.allreduce_ms = times.allreduce_us / 1000.0;
    st.coordinator_ms = coordinator_ms;
    st.scheduler = scheduler_->stats();
    st.kv_live_tokens = scheduler_->KvLiveTokens();
    config_.on_step(st);
  }
}

void ServingEngine::PublishStats() {
  const SchedulerStats s = scheduler_->stats();
  std::lock_guard<std::mutex> lock(mu_);
  stats_.running = s.num_running;
  stats_.waiting = s.num_waiting + static_cast<int32_t>(inbox_.size());
  waiting_estimate_ = s.num_waiting;
  stats_.kv_usage = 0;
  for (double u : s.kv_usage) stats_.kv_usage = std::max(stats_.kv_usage, u);
  stats_.preemptions = s.num_preemptions;
  stats_.prefix_cache_hit_rate = s.prefix_cache_hit_rate();
  stats_.prompt_tokens = prompt_tokens_;
  stats_.generation_tokens = generation_tokens_;
  stats_.requests_finished = finished_;
  stats_.steps = s.num_steps;
  stats_.compute_ms = compute_ms_;
  stats_.allreduce_ms = allreduce_ms_;
  stats_.scheduling_ms = scheduling_ms_;
}

void ServingEngine::Run() {
  while (true) {
    const absl::Time iteration_start = absl::Now();
    AdmitNew();
    HandleCancellations();
    PublishStats();
    if (active_.empty()) {
      std::unique_lock<std::mutex> lock(mu_);
      if (draining_.load() && inbox_.empty()) break;
      cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return !inbox_.empty() || draining_.load(); });
      continue;
    }
    Step(iteration_start);
  }
  PublishStats();
}

}  // namespace tpserve

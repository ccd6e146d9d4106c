// The engine thread's loop: admit, abort, step, hand outputs on. Tested by
// tests/serving_engine_test.cc.
#include "coordinator/engine/serving_engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tpserve {

void ServingEngine::Inbox::Abort(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(mu);
    aborts.push_back({request_id, steps_done.load()});
  }
  cv.notify_one();
}

ServingEngine::ServingEngine(StepExecutor& executor, const Tokenizer& tokenizer, ServingConfig config,
                             ModelInfo info)
    : config_(std::move(config)),
      info_(std::move(info)),
      core_(executor, WithSpeculation(config_.scheduler, config_.speculative), config_.seed,
            MakeDraftProposer(config_.speculative, executor)),
      outputs_(tokenizer, [inbox = inbox_](const std::string& id) { inbox->Abort(id); }) {}

ServingEngine::~ServingEngine() { outputs_.Close(); }

absl::StatusOr<std::shared_ptr<RequestStream>> ServingEngine::Submit(ServeRequest request) {
  if (failed_.load()) {
    std::lock_guard<std::mutex> lock(open_mu_);
    return failure_;
  }
  if (inbox_->draining.load()) return absl::UnavailableError("the server is shutting down");
  TP_RETURN_IF_ERROR(core_.Validate(request.prompt_ids, request.params));
  auto stream = std::make_shared<RequestStream>(request.request_id);
  stream->SetCancelHook([inbox = inbox_, id = request.request_id] { inbox->Abort(id); });
  {
    // Registered before the engine can see it: FailAll reaches every stream handed out.
    std::lock_guard<std::mutex> lock(open_mu_);
    if (!failure_.ok()) return failure_;
    if (open_.size() >= 2 * open_after_prune_ + 64) {  // amortized: finished streams leave
      std::erase_if(open_, [](const std::weak_ptr<RequestStream>& w) {
        std::shared_ptr<RequestStream> s = w.lock();
        return s == nullptr || s->finished();
      });
      open_after_prune_ = open_.size();
    }
    open_.push_back(stream);
  }
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    if (waiting_estimate_ + static_cast<int64_t>(inbox_->requests.size()) >= config_.max_queue) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the waiting queue is full (", config_.max_queue, " requests); retry later"));
    }
    inbox_->requests.push_back(Submitted{std::move(request), stream, absl::Now()});
  }
  inbox_->cv.notify_one();
  return stream;
}

EngineStats ServingEngine::Stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void ServingEngine::Shutdown(absl::Duration drain_timeout) {
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    if (!inbox_->draining.load()) inbox_->drain_deadline = absl::Now() + drain_timeout;
    inbox_->draining.store(true);
  }
  inbox_->cv.notify_all();
}

absl::Status ServingEngine::Health() const {
  if (failed_.load()) {
    std::lock_guard<std::mutex> lock(open_mu_);
    return failure_;
  }
  if (inbox_->draining.load()) return absl::UnavailableError("the server is draining (shutting down)");
  return absl::OkStatus();
}

void ServingEngine::FailAll(absl::Status why) {
  if (why.ok()) why = absl::InternalError("the engine failed");
  std::vector<std::weak_ptr<RequestStream>> open;
  {
    std::lock_guard<std::mutex> lock(open_mu_);
    if (!failure_.ok()) return;  // the first failure ended every stream already
    failure_ = why;
    failed_.store(true);
    open.swap(open_);
  }
  for (const std::weak_ptr<RequestStream>& w : open) {
    std::shared_ptr<RequestStream> stream = w.lock();
    if (stream == nullptr) continue;
    OutputEvent e;
    e.finish = FinishReason::kError;
    e.error = std::string(why.message());
    e.error_code = why.code();
    stream->Push(std::move(e));  // ignored by a stream that already finished
  }
}

void ServingEngine::Admit(std::deque<Submitted> requests) {
  for (auto& [req, stream, submitted] : requests) {
    if (core_.scheduler().Find(req.request_id) != nullptr) {
      OutputEvent e;
      e.finish = FinishReason::kError;
      e.error = absl::StrCat("request id \"", req.request_id, "\" is already in use");
      stream->Push(std::move(e));
      continue;
    }
    const int32_t prompt_tokens = static_cast<int32_t>(req.prompt_ids.size());
    outputs_.Add(req.request_id, stream, req.params, prompt_tokens);
    absl::Status st = core_.AddRequest(req.request_id, std::move(req.prompt_ids), std::move(req.params), submitted);
    if (!st.ok()) {
      EngineOutput o;
      o.request_id = req.request_id;
      o.finish = FinishReason::kError;
      o.error = std::string(st.message());
      outputs_.Process({std::move(o)});
      continue;
    }
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.prompt_tokens += prompt_tokens;
  }
}

void ServingEngine::PublishStats(const EngineStep* step) {
  const SchedulerStats s = core_.scheduler().stats();
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    waiting_estimate_ = s.num_waiting;
  }
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.running = s.num_running;
  stats_.waiting = s.num_waiting;
  stats_.kv_usage = 0;
  for (double u : s.kv_usage) stats_.kv_usage = std::max(stats_.kv_usage, u);
  stats_.kv_bytes_touched = 0;
  for (size_t g = 0; g < s.kv_blocks_touched.size() && g < info_.kv_bytes_per_block.size(); ++g) {
    stats_.kv_bytes_touched += s.kv_blocks_touched[g] * info_.kv_bytes_per_block[g];
  }
  stats_.preemptions = s.num_preemptions;
  stats_.prefix_cache_hit_rate = s.prefix_cache_hit_rate();
  stats_.prefix_cache_queries = s.prefix_query_tokens;
  stats_.prefix_cache_hits = s.prefix_hit_tokens;
  stats_.steps = s.num_steps;
  stats_.spec_num_drafts = s.spec.num_drafts;
  stats_.spec_num_draft_tokens = s.spec.num_draft_tokens;
  stats_.spec_num_accepted_tokens = s.spec.num_accepted_tokens;
  stats_.spec_accepted_per_pos = s.spec.accepted_per_pos;
  if (step == nullptr) return;
  stats_.compute_ms += step->forward_ms - step->allreduce_ms - step->pipeline_ms;
  stats_.allreduce_ms += step->allreduce_ms;
  stats_.pipeline_ms += step->pipeline_ms;
  stats_.stages_busy_ms += step->stages_busy_ms;
  stats_.scheduling_ms += step->coordinator_ms;
  stats_.draft_ms += step->draft_ms;
  for (const EngineOutput& o : step->outputs) {
    stats_.generation_tokens += static_cast<int64_t>(o.token_ids.size());
    if (o.finish != FinishReason::kNone) ++stats_.requests_finished;
  }
}

void ServingEngine::Run() {
  while (true) {
    std::deque<Submitted> requests;
    std::deque<Inbox::PendingAbort> aborts;
    bool past_deadline = false;
    {
      std::unique_lock<std::mutex> lock(inbox_->mu);
      // Idle: sleep until something arrives (no polling interval); draining and idle: done.
      if (!core_.HasUnfinished()) {
        inbox_->cv.wait(lock, [&] {
          return !inbox_->requests.empty() || !inbox_->aborts.empty() || inbox_->draining.load();
        });
        if (inbox_->requests.empty() && inbox_->draining.load()) break;
      }
      requests.swap(inbox_->requests);
      aborts.swap(inbox_->aborts);
      past_deadline = inbox_->draining.load() && absl::Now() >= inbox_->drain_deadline;
    }
    Admit(std::move(requests));
    std::vector<EngineOutput> ended;
    for (const Inbox::PendingAbort& a : aborts) {
      absl::StatusOr<EngineOutput> o = core_.Abort(a.request_id);
      if (!o.ok()) continue;  // it had finished meanwhile
      ended.push_back(std::move(*o));
      const int64_t late = inbox_->steps_done.load() - a.steps_done;
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.aborts;
      stats_.abort_delay_steps += late;
      stats_.abort_delay_steps_max = std::max(stats_.abort_delay_steps_max, late);
    }
    if (past_deadline) {
      for (const std::string& id : core_.UnfinishedIds()) {
        if (absl::StatusOr<EngineOutput> o = core_.Abort(id, "the server shut down before the request finished");
            o.ok()) {
          ended.push_back(std::move(*o));
        }
      }
    }
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      stats_.requests_finished += static_cast<int64_t>(ended.size());
    }
    outputs_.Process(std::move(ended));
    if (!core_.HasUnfinished()) {
      PublishStats(nullptr);
      continue;
    }
    EngineStep step = core_.Step();
    inbox_->steps_done.fetch_add(1);
    PublishStats(&step);
    if (config_.on_step && step.num_seqs > 0) {
      EngineStepStats st;
      static_cast<StepSummary&>(st) = step;  // the StepSummary part
      st.scheduler = core_.scheduler().stats();
      st.kv_live_tokens = core_.scheduler().KvLiveTokens();
      config_.on_step(st);
    }
    outputs_.Process(std::move(step.outputs));
  }
  outputs_.Close();  // every event sent before Run returns
  PublishStats(nullptr);
}

}  // namespace tpserve

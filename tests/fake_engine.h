// A fake EngineApi for the front-end tests: echoes the prompt's tokens with configurable
// delays, honors Cancel, validates like the engine, can be unready or reject Submit.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/engine/engine_api.h"
#include "coordinator/engine/request.h"
#include "coordinator/text/tokenizer.h"
#include "coordinator/text/tokenizer_incremental_decoder.h"

namespace tpserve {

struct FakeEngineOptions {
  absl::Duration first_token_delay = absl::Milliseconds(5);  // "prefill"
  absl::Duration token_delay = absl::Milliseconds(1);        // per later token
  int64_t max_model_len = 256;
  std::string served_model_name = "fake-model";
};

class FakeEngine : public EngineApi {
 public:
  // `tokenizer` decodes the echoed tokens into text; it must outlive the engine.
  FakeEngine(const Tokenizer& tokenizer, FakeEngineOptions options) : tokenizer_(tokenizer), options_(options) {
    info_.served_model_name = options.served_model_name;
    info_.architecture = "fake";
    info_.parameter_count = 1234;
    info_.dtype = "bfloat16";
    info_.tensor_parallel_size = 2;
    info_.ranks = {{0, "node-a"}, {1, "node-b"}};
    info_.max_model_len = options.max_model_len;
    info_.block_size = 16;
    info_.kv_blocks = {100, 50};
    info_.weights = "dummy";
    info_.engine_version = "test";
    info_.device = "CPU: fake";
    info_.max_num_seqs = 7;
    info_.speculative_config = R"({"method":"ngram","num_speculative_tokens":2})";
    info_.num_speculative_tokens = 2;
    info_.weight_bytes = 5678;
    info_.load_peak_rss_bytes = 9012;
    thread_ = std::thread([this] { Loop(); });
  }

  ~FakeEngine() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }

  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(ServeRequest request) override {
    if (absl::Notification* gate = submit_gate_.load()) {
      ++submits_waiting_;
      gate->WaitForNotification();
      --submits_waiting_;
    }
    if (!ready_.load()) return absl::UnavailableError("fake engine is not ready");
    // The real engine's validation of the parameters (EngineCore::Validate).
    if (absl::Status valid = request.params.Validate(tokenizer_.vocab_size()); !valid.ok()) return valid;
    if (request.prompt_ids.empty()) return absl::InvalidArgumentError("prompt must not be empty");
    absl::MutexLock lock(&mu_);
    if (!submit_error_.ok()) return submit_error_;
    auto stream = std::make_shared<RequestStream>(request.request_id);
    auto active = std::make_unique<Active>(tokenizer_);
    active->stream = stream;
    active->request = std::move(request);
    active->arrival = absl::Now();
    active->next = active->arrival + options_.first_token_delay;
    prompt_tokens_ += static_cast<int64_t>(active->request.prompt_ids.size());
    last_request_ = active->request;
    ++submitted_;
    active_.push_back(std::move(active));
    return stream;
  }

  EngineStats Stats() const override {
    absl::MutexLock lock(&mu_);
    EngineStats s;
    s.running = static_cast<int32_t>(active_.size());
    s.waiting = 0;
    s.kv_usage = 0.25;
    s.preemptions = 3;
    s.prefix_cache_hit_rate = 0.5;
    s.prefix_cache_queries = 40;
    s.prefix_cache_hits = 20;
    s.prompt_tokens = prompt_tokens_;
    s.generation_tokens = generation_tokens_;
    s.requests_finished = finished_;
    s.steps = steps_;
    s.compute_ms = 10;
    s.allreduce_ms = 2;
    s.scheduling_ms = 1;
    s.draft_ms = 3;
    s.spec_num_drafts = 6;
    s.spec_num_draft_tokens = 12;
    s.spec_num_accepted_tokens = 7;
    s.spec_accepted_per_pos = {5, 2};
    return s;
  }

  const ModelInfo& Info() const override { return info_; }
  bool Ready() const override { return ready_.load(); }

  // Test controls.
  void SetReady(bool ready) { ready_.store(ready); }
  void SetSubmitError(absl::Status status) {
    absl::MutexLock lock(&mu_);
    submit_error_ = std::move(status);
  }
  // Submit() waits for `gate` (null: no wait): holds the front end's render threads.
  void SetSubmitGate(absl::Notification* gate) { submit_gate_.store(gate); }
  int submits_waiting() const { return submits_waiting_.load(); }
  // Ends every running request at the next step with `reason` and `error`, as the real
  // engine does when a step fails (kError) or a drain cuts a request (kCancelled);
  // `code`: the kError's kind (UNAVAILABLE: a rank died, as ServingEngine::FailAll says).
  void EndAll(FinishReason reason, std::string error, absl::StatusCode code = absl::StatusCode::kInternal) {
    absl::MutexLock lock(&mu_);
    end_all_ = std::make_pair(reason, std::move(error));
    end_all_code_ = code;
  }
  int cancelled() const {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }
  int submitted() const {
    absl::MutexLock lock(&mu_);
    return submitted_;
  }
  int running() const {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(active_.size());
  }
  ServeRequest last_request() const {
    absl::MutexLock lock(&mu_);
    return last_request_;
  }
  // Waits until at least `n` requests were cancelled (and their final event pushed).
  bool WaitForCancelled(int n, absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return cancelled_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }

 private:
  struct Active {
    explicit Active(const Tokenizer& tokenizer) : decoder(tokenizer, /*skip_special_tokens=*/true) {}
    std::shared_ptr<RequestStream> stream;
    ServeRequest request;
    IncrementalDecoder decoder;
    int32_t generated = 0;
    absl::Time arrival, next, first_token = absl::InfinitePast();
  };

  void Loop() {
    absl::MutexLock lock(&mu_);
    while (!stop_) {
      // Sleep while idle; otherwise wake every millisecond for due tokens and cancels.
      auto idle_over = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !active_.empty(); };
      mu_.Await(absl::Condition(&idle_over));
      mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Milliseconds(1));
      const absl::Time now = absl::Now();
      ++steps_;
      std::vector<std::pair<std::shared_ptr<RequestStream>, OutputEvent>> out;
      for (auto it = active_.begin(); it != active_.end();) {
        Active& a = **it;
        OutputEvent e;
        e.prompt_tokens = static_cast<int32_t>(a.request.prompt_ids.size());
        if (end_all_.has_value()) {
          e.finish = end_all_->first;
          e.error = end_all_->second;
          e.error_code = end_all_code_;
          e.completion_tokens = a.generated;
        } else if (a.stream->cancelled()) {
          e.finish = FinishReason::kCancelled;
          e.completion_tokens = a.generated;
          ++cancelled_;
        } else if (now >= a.next) {
          Step(a, now, &e);
        } else {
          ++it;
          continue;
        }
        const bool finished = e.finish != FinishReason::kNone;
        out.emplace_back(a.stream, std::move(e));
        if (finished) {
          ++finished_;
          it = active_.erase(it);
        } else {
          ++it;
        }
      }
      end_all_.reset();
      // Push without the lock, as the real engine does: notify hooks run here.
      mu_.Unlock();
      for (auto& [stream, e] : out) stream->Push(std::move(e));
      mu_.Lock();
    }
  }

  void Step(Active& a, absl::Time now, OutputEvent* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::vector<int32_t>& prompt = a.request.prompt_ids;
    const int32_t id = prompt[a.generated % prompt.size()];
    if (a.generated == 0) a.first_token = now;
    ++a.generated;
    ++generation_tokens_;
    a.next = now + options_.token_delay;
    e->token_ids = {id};
    e->text = a.decoder.Push(id);
    TokenLogprob lp;
    lp.token_id = id;
    lp.logprob = -0.5f;
    for (int32_t k = 0; k < a.request.params.logprobs.value_or(0); ++k) lp.top.emplace_back(id + k, -0.5f - k);
    e->logprobs = {lp};
    e->completion_tokens = a.generated;
    const std::vector<int32_t>& stops = a.request.params.stop_token_ids;
    if (std::find(stops.begin(), stops.end(), id) != stops.end()) {
      e->finish = FinishReason::kStop;
      e->stop_token_id = id;
    } else if (a.generated >= a.request.params.max_tokens) {
      e->finish = FinishReason::kLength;
    }
    if (e->finish != FinishReason::kNone) {
      e->text += a.decoder.Flush();
      e->timings.queue_ms = 0.5;
      e->timings.prefill_ms = absl::ToDoubleMilliseconds(a.first_token - a.arrival) - 0.5;
      e->timings.first_token_ms = absl::ToDoubleMilliseconds(a.first_token - a.arrival);
      e->timings.decode_ms = absl::ToDoubleMilliseconds(now - a.first_token);
    }
  }

  const Tokenizer& tokenizer_;
  const FakeEngineOptions options_;
  ModelInfo info_;
  std::atomic<bool> ready_{true};
  std::thread thread_;

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<Active>> active_ ABSL_GUARDED_BY(mu_);
  absl::Status submit_error_ ABSL_GUARDED_BY(mu_);
  std::optional<std::pair<FinishReason, std::string>> end_all_ ABSL_GUARDED_BY(mu_);
  absl::StatusCode end_all_code_ ABSL_GUARDED_BY(mu_) = absl::StatusCode::kInternal;
  std::atomic<absl::Notification*> submit_gate_{nullptr};
  std::atomic<int> submits_waiting_{0};
  ServeRequest last_request_ ABSL_GUARDED_BY(mu_);
  int submitted_ ABSL_GUARDED_BY(mu_) = 0;
  int cancelled_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t finished_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t prompt_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t steps_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tpserve

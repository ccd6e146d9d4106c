// The serving engine behind the API front ends: the engine thread runs the EngineCore
// (schedule -> execute -> update) and hands each step's outputs to the OutputProcessor's
// thread, which detokenizes, matches stop strings and streams events. Front-end threads
// only call Submit/Stats/Info and read RequestStreams; a cancel reaches the engine
// through the stream's hook, a matched stop string through the processor: both end the
// sequence at the next step boundary. Tested by tests/serving_engine_test.cc.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/engine/engine_api.h"
#include "coordinator/engine/engine_core.h"
#include "coordinator/engine/output_processor.h"
#include "coordinator/engine/speculative.h"
#include "coordinator/text/tokenizer.h"
#include "worker/step_executor.h"

namespace tpserve {

// One engine step, as ServingConfig::on_step reports it: the step's size and time split,
// and the scheduler's state after it.
struct EngineStepStats : StepSummary {
  SchedulerStats scheduler;             // after the step: running, waiting, KV blocks per group
  std::vector<int64_t> kv_live_tokens;  // after the step, per group (Scheduler::KvLiveTokens)
};

struct ServingConfig {
  SchedulerConfig scheduler;  // limits, block size, prefix caching, KV pools, vocab, EOS ids
  int32_t max_queue = 1024;   // requests waiting (not yet running) at most; more: RESOURCE_EXHAUSTED
  std::optional<uint64_t> seed;  // --seed: the seeds of requests that bring none (EngineCore)
  // --speculative-config; its num_speculative_tokens goes to scheduler.num_speculative_tokens.
  SpeculativeConfig speculative;
  // Called on the engine thread after every step that ran (benchmarks); not counted in
  // the step's times. Must not call back into the engine.
  std::function<void(const EngineStepStats&)> on_step;
};

class ServingEngine : public EngineApi {
 public:
  // `executor` runs plans on every rank; `tokenizer` detokenizes outputs. `config` must be valid.
  ServingEngine(StepExecutor& executor, const Tokenizer& tokenizer, ServingConfig config, ModelInfo info);
  ~ServingEngine() override;

  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(ServeRequest request) override;
  EngineStats Stats() const override;
  const ModelInfo& Info() const override { return info_; }
  bool Ready() const override { return !inbox_->draining.load() && !failed_.load(); }
  // UNAVAILABLE naming FailAll's reason (a lost rank) or the drain.
  absl::Status Health() const override;

  // The engine loop; returns once Shutdown's drain finished (every request has a finish
  // reason and the output processor sent every event).
  void Run();
  // Thread-safe (a signal-handling thread may call it): stop accepting requests, let
  // in-flight ones finish for up to `drain_timeout`, then cancel the rest.
  void Shutdown(absl::Duration drain_timeout);
  // Thread-safe, and works while the engine thread is stuck (in a collective with a rank
  // that died): from now on Ready() is false and Submit refuses with `why`, and every open
  // stream ends at once, on the calling thread, with a kError event carrying `why`'s
  // message and code. The engine cannot recover: the caller ends the process.
  void FailAll(absl::Status why);

 private:
  struct Submitted {
    ServeRequest request;
    std::shared_ptr<RequestStream> stream;
    // When Submit() took it: the request's timings (queue_ms...) start here, so the wait
    // for the engine thread to pick it up counts as queue time.
    absl::Time submitted;
  };
  // What other threads hand the engine thread; shared with the streams' cancel hooks,
  // which may outlive the engine.
  struct Inbox {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Submitted> requests;
    // Cancelled streams and matched stop strings, with the engine steps completed when each
    // arrived (the steps completed between that and its application are its delay).
    struct PendingAbort {
      std::string request_id;
      int64_t steps_done = 0;
    };
    std::deque<PendingAbort> aborts;
    std::atomic<int64_t> steps_done{0};  // engine steps completed (EngineCore::Step returned)
    absl::Time drain_deadline = absl::InfiniteFuture();
    std::atomic<bool> draining{false};
    void Abort(const std::string& request_id);
  };
  void Admit(std::deque<Submitted> requests);
  void PublishStats(const EngineStep* step);

  const ServingConfig config_;
  const ModelInfo info_;
  EngineCore core_;  // engine thread only (Validate is const and thread-safe)
  std::shared_ptr<Inbox> inbox_ = std::make_shared<Inbox>();
  OutputProcessor outputs_;

  // Every stream Submit handed out and not yet seen finished, for FailAll.
  mutable std::mutex open_mu_;
  std::vector<std::weak_ptr<RequestStream>> open_;  // under open_mu_
  size_t open_after_prune_ = 0;                     // under open_mu_: open_.size() after the last prune
  absl::Status failure_;                            // under open_mu_: FailAll's `why`
  std::atomic<bool> failed_{false};

  mutable std::mutex stats_mu_;
  EngineStats stats_;
  int64_t waiting_estimate_ = 0;  // scheduler waiting as of the last step (under inbox_->mu)
};

}  // namespace tpserve

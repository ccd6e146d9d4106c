// The coordinator loop on rank 0: owns the scheduler, the block tables and every active
// request; each step it schedules, broadcasts the StepPlan (StepExecutor), samples,
// detokenizes, checks stops and streams events to the front ends. Front-end threads only
// call Submit/Stats/Info and read RequestStreams. Tested by tests/serving_engine_test.cc.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/engine/engine_api.h"
#include "coordinator/engine/row_sampling_plan.h"
#include "coordinator/engine/sampler.h"
#include "coordinator/engine/scheduler.h"
#include "coordinator/engine/stop_checker.h"
#include "coordinator/text/tokenizer.h"
#include "coordinator/text/tokenizer_incremental_decoder.h"
#include "worker/worker_loop.h"

namespace tpserve {

// One engine step, as ServingConfig::on_step reports it.
struct EngineStepStats {
  int32_t num_seqs = 0;    // sequences in the step
  int32_t num_tokens = 0;  // tokens in the step: one per decode, plus prefill chunks
  // The loop iteration's wall time split in two: the forward pass on rank 0 (all-reduce
  // included), and everything else the coordinator thread did (admission, cancellations,
  // scheduling, plan building and broadcast, sampling, detokenizing, stop checks, streaming).
  double forward_ms = 0;
  double allreduce_ms = 0;
  double coordinator_ms = 0;
  SchedulerStats scheduler;           // after the step: running, waiting, KV blocks per group
  std::vector<int64_t> kv_live_tokens;  // after the step, per group (Scheduler::KvLiveTokens)
};

struct ServingConfig {
  SchedulerConfig scheduler;  // limits, block size, prefix caching, KV pools
  int32_t max_queue = 1024;   // requests waiting (not yet running) at most; more: RESOURCE_EXHAUSTED
  int64_t vocab_size = 0;
  std::vector<int32_t> eos_token_ids;  // the model's (generation_config.json)
  // Sample on the workers (rank 0's GPU; kernels/row_sampling.h's rule): only token ids
  // cross to the host, plus the logit rows in a step with a request that wants logprobs
  // (the host computes them for the workers' choice). Off: Sampler on the host. Seeded
  // requests draw different (equally valid) tokens on the two paths (the workers' rule
  // has its own random stream), but on either path independently of their batch.
  bool device_sampling = false;
  // Called on the engine thread after every step that ran (benchmarks); not counted in
  // the step's times. Must not call back into the engine.
  std::function<void(const EngineStepStats&)> on_step;
};

class ServingEngine : public EngineApi {
 public:
  // `executor` runs plans on every rank; `tokenizer` detokenizes outputs.
  ServingEngine(StepExecutor& executor, const Tokenizer& tokenizer, ServingConfig config, ModelInfo info);
  ~ServingEngine() override;

  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(ServeRequest request) override;
  EngineStats Stats() const override;
  const ModelInfo& Info() const override { return info_; }
  bool Ready() const override { return ready_.load() && !draining_.load(); }

  // The loop; returns once Shutdown's drain finished (every request has a finish reason).
  void Run();
  // Thread-safe (a signal-handling thread may call it): stop accepting requests, let
  // in-flight ones finish for up to `drain_timeout`, then cancel the rest.
  void Shutdown(absl::Duration drain_timeout);

 private:
  struct Active;
  void AdmitNew();
  void HandleCancellations();
  void Step(absl::Time iteration_start);
  void Finish(Active& a, FinishReason reason, const std::string& error, std::vector<int32_t> tokens,
              std::string text, std::vector<TokenLogprob> logprobs);
  void FailAll(const std::string& error);
  void PublishStats();

  StepExecutor& executor_;
  const Tokenizer& tokenizer_;
  const ServingConfig config_;
  const ModelInfo info_;
  std::unique_ptr<Scheduler> scheduler_;
  Sampler sampler_;
  RowSamplingPlanner row_sampling_;

  // Shared with front-end threads.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<ServeRequest, std::shared_ptr<RequestStream>>> inbox_;
  int64_t waiting_estimate_ = 0;  // inbox + scheduler waiting, as of the last step
  EngineStats stats_;
  absl::Time drain_deadline_ = absl::InfiniteFuture();
  std::atomic<bool> ready_{true};
  std::atomic<bool> draining_{false};

  // Engine thread only.
  std::map<std::string, std::unique_ptr<Active>> active_;
  double compute_ms_ = 0, allreduce_ms_ = 0, scheduling_ms_ = 0;
  int64_t prompt_tokens_ = 0, generation_tokens_ = 0, finished_ = 0;
};

}  // namespace tpserve

// FrontendMetrics and RequestTracker. Tested by tests/frontend_test.cc.
#include "coordinator/api/frontend_metrics.h"

#include <vector>

#include "coordinator/api/process_info.h"

namespace tpserve {
namespace {

// Bucket bounds in seconds, as vLLM chose them for the same metrics.
const std::vector<double>& TtftBuckets() {
  static const auto* b = new std::vector<double>{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                                 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0};
  return *b;
}
const std::vector<double>& InterTokenBuckets() {
  static const auto* b = new std::vector<double>{0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                                 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
  return *b;
}
const std::vector<double>& RequestBuckets() {
  static const auto* b = new std::vector<double>{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                                                 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
  return *b;
}

constexpr char kFinished[] = "tpserve_requests_finished_total";
constexpr char kFinishedHelp[] = "Requests finished, by reason (stop, length, cancelled, error).";

}  // namespace

FrontendMetrics::FrontendMetrics(const EngineApi& engine, const std::string& model_name)
    : registry_(MetricLabels{{"model_name", model_name}}),
      time_to_first_token_s_(registry_.AddHistogram("tpserve_time_to_first_token_seconds",
                                                    "Arrival to first token (server side).", TtftBuckets())),
      inter_token_latency_s_(registry_.AddHistogram("tpserve_inter_token_latency_seconds",
                                                    "Time between successive output tokens, as the API "
                                                    "server receives them.",
                                                    InterTokenBuckets())),
      e2e_latency_s_(registry_.AddHistogram("tpserve_e2e_request_latency_seconds",
                                            "Arrival at the API server to the last token.", RequestBuckets())),
      queue_time_s_(registry_.AddHistogram("tpserve_request_queue_time_seconds",
                                           "Arrival to first scheduled.", RequestBuckets())),
      finished_stop_(registry_.AddCounter(kFinished, kFinishedHelp, {{"finished_reason", "stop"}})),
      finished_length_(registry_.AddCounter(kFinished, kFinishedHelp, {{"finished_reason", "length"}})),
      finished_cancelled_(registry_.AddCounter(kFinished, kFinishedHelp, {{"finished_reason", "cancelled"}})),
      finished_error_(registry_.AddCounter(kFinished, kFinishedHelp, {{"finished_reason", "error"}})) {
  // Pointers into the registry, which owns the metrics for as long as it lives.
  Gauge* running = &registry_.AddGauge("tpserve_num_requests_running", "Requests in the running batch.");
  Gauge* waiting = &registry_.AddGauge("tpserve_num_requests_waiting", "Requests waiting to be scheduled.");
  Gauge* kv_usage = &registry_.AddGauge("tpserve_kv_cache_usage_perc",
                                        "Fraction of KV cache blocks in use (the fullest group), 0 to 1.");
  Gauge* prefix_hit_rate = &registry_.AddGauge("tpserve_prefix_cache_hit_rate",
                                               "Prefix cache hit tokens / queried tokens since start.");
  Counter* preemptions = &registry_.AddCounter("tpserve_num_preemptions_total", "Requests preempted.");
  Counter* prompt_tokens = &registry_.AddCounter("tpserve_prompt_tokens_total", "Prompt tokens processed.");
  Counter* generation_tokens = &registry_.AddCounter("tpserve_generation_tokens_total", "Tokens generated.");
  Counter* steps = &registry_.AddCounter("tpserve_engine_steps_total", "Engine steps run.");
  constexpr char kStepTime[] = "tpserve_step_time_seconds_total";
  constexpr char kStepTimeHelp[] = "Time spent in engine steps, by phase.";
  Counter* compute_s = &registry_.AddCounter(kStepTime, kStepTimeHelp, {{"phase", "compute"}});
  Counter* allreduce_s = &registry_.AddCounter(kStepTime, kStepTimeHelp, {{"phase", "allreduce"}});
  Counter* scheduling_s = &registry_.AddCounter(kStepTime, kStepTimeHelp, {{"phase", "scheduling"}});
  Gauge* rss = &registry_.AddGauge("process_resident_memory_bytes", "Resident memory of rank 0's process.");
  Gauge* peak_rss = &registry_.AddGauge("tpserve_process_peak_resident_memory_bytes",
                                        "Peak resident memory of rank 0's process since start.");
  registry_.AddCollector([&engine, running, waiting, kv_usage, prefix_hit_rate, preemptions, prompt_tokens,
                          generation_tokens, steps, compute_s, allreduce_s, scheduling_s, rss, peak_rss] {
    const ProcessMemory memory = ReadProcessMemory();
    rss->Set(static_cast<double>(memory.rss_bytes));
    peak_rss->Set(static_cast<double>(memory.peak_rss_bytes));
    const EngineStats s = engine.Stats();
    running->Set(s.running);
    waiting->Set(s.waiting);
    kv_usage->Set(s.kv_usage);
    prefix_hit_rate->Set(s.prefix_cache_hit_rate);
    preemptions->Set(static_cast<double>(s.preemptions));
    prompt_tokens->Set(static_cast<double>(s.prompt_tokens));
    generation_tokens->Set(static_cast<double>(s.generation_tokens));
    steps->Set(static_cast<double>(s.steps));
    compute_s->Set(s.compute_ms / 1e3);
    allreduce_s->Set(s.allreduce_ms / 1e3);
    scheduling_s->Set(s.scheduling_ms / 1e3);
  });
}

RequestTracker::RequestTracker(FrontendMetrics* metrics, absl::Time arrival) : metrics_(metrics), start_(arrival) {}

void RequestTracker::OnEvent(const OutputEvent& e) {
  if (metrics_ == nullptr || finished_) return;
  const absl::Time now = absl::Now();
  const size_t n = e.token_ids.size();
  if (n > 0) {
    if (last_token_ != absl::InfinitePast()) {
      // Tokens that arrive together share the gap since the previous arrival.
      const double gap_s = absl::ToDoubleSeconds(now - last_token_) / static_cast<double>(n);
      for (size_t i = 0; i < n; ++i) metrics_->inter_token_latency_s_.Observe(gap_s);
    }
    last_token_ = now;
  }
  if (e.finish == FinishReason::kNone) return;
  finished_ = true;
  switch (e.finish) {
    case FinishReason::kStop:
      metrics_->finished_stop_.Increment();
      break;
    case FinishReason::kLength:
      metrics_->finished_length_.Increment();
      break;
    case FinishReason::kCancelled:
      metrics_->finished_cancelled_.Increment();
      return;  // a cancelled request's latencies describe the client, not the server
    case FinishReason::kError:
    case FinishReason::kNone:
      metrics_->finished_error_.Increment();
      return;
  }
  if (e.completion_tokens > 0) {
    metrics_->time_to_first_token_s_.Observe(e.timings.first_token_ms / 1e3);
  }
  metrics_->queue_time_s_.Observe(e.timings.queue_ms / 1e3);
  metrics_->e2e_latency_s_.Observe(absl::ToDoubleSeconds(now - start_));
}

void RequestTracker::OnClientGone() {
  if (metrics_ == nullptr || finished_) return;
  finished_ = true;
  metrics_->finished_cancelled_.Increment();
}

}  // namespace tpserve

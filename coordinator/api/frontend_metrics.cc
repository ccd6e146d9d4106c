// FrontendMetrics and RequestTracker. Tested by tests/frontend_http_test.cc.
#include "coordinator/api/frontend_metrics.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/api/process_info.h"

namespace tpserve {
namespace {

// Bucket bounds in seconds, vLLM's for the same metrics (vllm/v1/metrics/loggers.py), so
// that dashboards' histogram_quantile reads the same resolution.
std::vector<double> TtftBuckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> InterTokenBuckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> RequestBuckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,  2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}
// Token counts: 1, 2, 5, 10, 20, 50, ... as vLLM's build_1_2_5_buckets. vLLM stops at
// max_model_len; these metrics exist before the model (and so max_model_len) is loaded, so
// they go up to a million tokens, and the buckets past max_model_len stay empty.
std::vector<double> TokenCountBuckets() {
  constexpr int64_t kMax = 1000000;
  std::vector<double> out;
  for (int64_t scale = 1; scale <= kMax; scale *= 10) {
    for (int64_t m : {1, 2, 5}) {
      if (m * scale <= kMax) out.push_back(static_cast<double>(m * scale));
    }
  }
  return out;
}

// vLLM's per-series labels: the served model and the engine (data-parallel) index, always
// 0 here; `extra` after them.
MetricLabels Labels(const std::string& model_name, MetricLabels extra = {}) {
  MetricLabels labels{{"model_name", model_name}, {"engine", "0"}};
  for (auto& label : extra) labels.push_back(std::move(label));
  return labels;
}

constexpr char kSuccess[] = "vllm:request_success_total";
constexpr char kSuccessHelp[] = "Requests finished, by finished_reason (stop, length, abort, error).";

// The HttpServer's routes (http_server.cc); anything else is "none", as the instrumentator
// labels paths no route matched.
std::string HandlerLabel(absl::string_view path) {
  for (absl::string_view route :
       {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics", "/version"}) {
    if (path == route) return std::string(route);
  }
  if (absl::StartsWith(path, "/v1/models/")) return "/v1/models/{model}";
  return "none";
}

std::string MethodLabel(absl::string_view method) {
  for (absl::string_view known : {"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"}) {
    if (method == known) return std::string(known);
  }
  return "other";
}

}  // namespace

FrontendMetrics::FrontendMetrics(const EngineApi& engine, const std::string& model_name)
    : time_to_first_token_s_(registry_.AddHistogram(
          "vllm:time_to_first_token_seconds",
          "Arrival at the front end (first byte of the request) to its first token there.", TtftBuckets(),
          Labels(model_name))),
      inter_token_latency_s_(registry_.AddHistogram("vllm:inter_token_latency_seconds",
                                                    "Time between successive output tokens as the front end "
                                                    "receives them (tokens that arrive together share the gap).",
                                                    InterTokenBuckets(), Labels(model_name))),
      e2e_latency_s_(registry_.AddHistogram("vllm:e2e_request_latency_seconds",
                                            "Arrival at the front end to the request's final event there.",
                                            RequestBuckets(), Labels(model_name))),
      queue_time_s_(registry_.AddHistogram(
          "vllm:request_queue_time_seconds",
          "Arrival at the front end to first scheduled: parsing, rendering and tokenizing, then the "
          "engine's waiting queue.",
          RequestBuckets(), Labels(model_name))),
      prefill_time_s_(registry_.AddHistogram("vllm:request_prefill_time_seconds",
                                             "First scheduled to first token, in the engine.", RequestBuckets(),
                                             Labels(model_name))),
      decode_time_s_(registry_.AddHistogram("vllm:request_decode_time_seconds",
                                            "First token to last token, in the engine.", RequestBuckets(),
                                            Labels(model_name))),
      inference_time_s_(registry_.AddHistogram("vllm:request_inference_time_seconds",
                                               "First scheduled to last token, in the engine (prefill + decode).",
                                               RequestBuckets(), Labels(model_name))),
      prompt_tokens_(registry_.AddHistogram("vllm:request_prompt_tokens", "Prompt tokens per finished request.",
                                            TokenCountBuckets(), Labels(model_name))),
      generation_tokens_(registry_.AddHistogram("vllm:request_generation_tokens",
                                                "Generated tokens per finished request.",
                                                TokenCountBuckets(), Labels(model_name))),
      frontend_time_s_(registry_.AddHistogram(
          "tpserve_request_frontend_seconds",
          "Arrival at the front end to submission to the engine: reading the request, waiting for and "
          "running the parse, chat template and tokenizer (part of vllm:request_queue_time_seconds).",
          {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0},
          Labels(model_name))),
      finished_stop_(registry_.AddCounter(kSuccess, kSuccessHelp, Labels(model_name, {{"finished_reason", "stop"}}))),
      finished_length_(
          registry_.AddCounter(kSuccess, kSuccessHelp, Labels(model_name, {{"finished_reason", "length"}}))),
      finished_abort_(
          registry_.AddCounter(kSuccess, kSuccessHelp, Labels(model_name, {{"finished_reason", "abort"}}))),
      finished_error_(
          registry_.AddCounter(kSuccess, kSuccessHelp, Labels(model_name, {{"finished_reason", "error"}}))) {
  registry_.AddHistogramAlias("vllm:time_per_output_token_seconds",
                              "The same observations as vllm:inter_token_latency_seconds, under vLLM's older "
                              "(deprecated) name that vLLM's example Grafana dashboard still reads.",
                              inter_token_latency_s_, Labels(model_name));
  // Pointers into the registry, which owns the metrics for as long as it lives.
  const MetricLabels l = Labels(model_name);
  Gauge* running = &registry_.AddGauge("vllm:num_requests_running", "Requests in the running batch.", l);
  Gauge* waiting = &registry_.AddGauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.", l);
  Gauge* kv_usage = &registry_.AddGauge("vllm:kv_cache_usage_perc",
                                        "Fraction of KV cache blocks in use (the fullest group), 0 to 1.", l);
  Gauge* gpu_cache_usage = &registry_.AddGauge(
      "vllm:gpu_cache_usage_perc",
      "vllm:kv_cache_usage_perc under vLLM's older (deprecated) name that vLLM's example Grafana dashboard reads.", l);
  Gauge* kv_touched = &registry_.AddGauge(
      "tpserve_kv_cache_touched_bytes",
      "Bytes of rank 0's KV cache reservation that the blocks used so far cover (resident); free blocks are used "
      "before cached ones are evicted, so with prefix caching it grows towards the whole reservation.",
      l);
  Counter* prefix_queries = &registry_.AddCounter("vllm:prefix_cache_queries_total",
                                                  "Prompt tokens looked up in the prefix cache.", l);
  Counter* prefix_hits = &registry_.AddCounter("vllm:prefix_cache_hits_total",
                                               "Prompt tokens found in the prefix cache (not recomputed).", l);
  Counter* preemptions = &registry_.AddCounter("vllm:num_preemptions_total", "Requests preempted.", l);
  Counter* prompt_tokens = &registry_.AddCounter("vllm:prompt_tokens_total", "Prompt tokens processed.", l);
  Counter* generation_tokens = &registry_.AddCounter("vllm:generation_tokens_total", "Tokens generated.", l);
  Counter* steps = &registry_.AddCounter("tpserve_engine_steps_total", "Engine steps run.", l);
  Counter* aborts = &registry_.AddCounter(
      "tpserve_engine_aborts_total", "Cancelled requests and stop-string matches the engine applied.", l);
  Counter* abort_delay = &registry_.AddCounter(
      "tpserve_engine_abort_delay_steps_total",
      "Engine steps completed between an abort's arrival at the engine and its application, summed.", l);
  Gauge* abort_delay_max = &registry_.AddGauge(
      "tpserve_engine_abort_delay_steps_max",
      "The most engine steps completed between one abort's arrival at the engine and its application.", l);
  constexpr char kStepTime[] = "tpserve_step_time_seconds_total";
  constexpr char kStepTimeHelp[] = "Time spent in engine steps, by phase.";
  Counter* compute_s = &registry_.AddCounter(kStepTime, kStepTimeHelp, Labels(model_name, {{"phase", "compute"}}));
  Counter* allreduce_s =
      &registry_.AddCounter(kStepTime, kStepTimeHelp, Labels(model_name, {{"phase", "allreduce"}}));
  Counter* scheduling_s =
      &registry_.AddCounter(kStepTime, kStepTimeHelp, Labels(model_name, {{"phase", "scheduling"}}));
  Counter* pipeline_s =
      &registry_.AddCounter(kStepTime, kStepTimeHelp, Labels(model_name, {{"phase", "pipeline"}}));
  // Speculative decoding's proposing: n-gram lookup, or the MTP drafter's pass.
  Counter* draft_s = &registry_.AddCounter(kStepTime, kStepTimeHelp, Labels(model_name, {{"phase", "draft"}}));
  Counter* stages_busy_s = &registry_.AddCounter(
      "tpserve_pipeline_stages_busy_seconds_total",
      "Pipeline stages' computing time, summed over the stages; 1 - its rate / (stages x the step time's rate) is "
      "the pipeline bubble.",
      l);
  // Speculative decoding, under vLLM's names; per-position counters for K positions.
  Counter* spec_drafts = &registry_.AddCounter("vllm:spec_decode_num_drafts_total",
                                               "Sequence-steps that verified speculative draft tokens.", l);
  Counter* spec_draft_tokens =
      &registry_.AddCounter("vllm:spec_decode_num_draft_tokens_total", "Draft tokens verified.", l);
  Counter* spec_accepted = &registry_.AddCounter("vllm:spec_decode_num_accepted_tokens_total",
                                                 "Draft tokens accepted (the target sampled the same token).", l);
  std::vector<Counter*> spec_per_pos;
  for (int32_t i = 0; i < engine.Info().num_speculative_tokens; ++i) {
    spec_per_pos.push_back(&registry_.AddCounter("vllm:spec_decode_num_accepted_tokens_per_pos_total",
                                                 "Draft tokens accepted, by position in the draft.",
                                                 Labels(model_name, {{"position", absl::StrCat(i)}})));
  }
  // What the weights are stored as (vLLM's *_info gauges: constant 1, the facts in labels),
  // added at the first scrape once the engine is ready: `serve` builds these metrics before
  // the weights load (the front ends answer 503 meanwhile), when the engine cannot say yet.
  registry_.AddCollector([this, &engine, model_name] {
    if (!engine.Ready()) return;
    absl::MutexLock lock(&model_info_mu_);
    if (model_info_added_) return;
    const ModelInfo& info = engine.Info();
    registry_.AddGauge("tpserve_model_info", "The served model's weight and KV cache storage: constant 1.",
                       Labels(model_name, {{"quantization", info.quantization},
                                           {"dtype", info.dtype},
                                           {"kv_cache_dtype", info.kv_cache_dtype}}))
        .Set(1);
    model_info_added_ = true;
  });
  // The process collector's standard name (no labels), and our peak beside it.
  Gauge* rss = &registry_.AddGauge("process_resident_memory_bytes", "Resident memory of rank 0's process.");
  Gauge* peak_rss = &registry_.AddGauge("tpserve_process_peak_resident_memory_bytes",
                                        "Peak resident memory of rank 0's process since start.");
  registry_.AddCollector([&engine, running, waiting, kv_usage, gpu_cache_usage, kv_touched, prefix_queries, prefix_hits,
                          preemptions, prompt_tokens, generation_tokens, steps, aborts, abort_delay, abort_delay_max,
                          compute_s, allreduce_s, scheduling_s, pipeline_s, draft_s, stages_busy_s, rss, peak_rss,
                          spec_drafts, spec_draft_tokens, spec_accepted, spec_per_pos] {
    const ProcessMemory memory = ReadProcessMemory();
    rss->Set(static_cast<double>(memory.rss_bytes));
    peak_rss->Set(static_cast<double>(memory.peak_rss_bytes));
    const EngineStats s = engine.Stats();
    running->Set(s.running);
    waiting->Set(s.waiting);
    kv_usage->Set(s.kv_usage);
    gpu_cache_usage->Set(s.kv_usage);
    kv_touched->Set(static_cast<double>(s.kv_bytes_touched));
    prefix_queries->Set(static_cast<double>(s.prefix_cache_queries));
    prefix_hits->Set(static_cast<double>(s.prefix_cache_hits));
    preemptions->Set(static_cast<double>(s.preemptions));
    prompt_tokens->Set(static_cast<double>(s.prompt_tokens));
    generation_tokens->Set(static_cast<double>(s.generation_tokens));
    steps->Set(static_cast<double>(s.steps));
    aborts->Set(static_cast<double>(s.aborts));
    abort_delay->Set(static_cast<double>(s.abort_delay_steps));
    abort_delay_max->Set(static_cast<double>(s.abort_delay_steps_max));
    compute_s->Set(s.compute_ms / 1e3);
    allreduce_s->Set(s.allreduce_ms / 1e3);
    scheduling_s->Set(s.scheduling_ms / 1e3);
    pipeline_s->Set(s.pipeline_ms / 1e3);
    draft_s->Set(s.draft_ms / 1e3);
    stages_busy_s->Set(s.stages_busy_ms / 1e3);
    spec_drafts->Set(static_cast<double>(s.spec_num_drafts));
    spec_draft_tokens->Set(static_cast<double>(s.spec_num_draft_tokens));
    spec_accepted->Set(static_cast<double>(s.spec_num_accepted_tokens));
    for (size_t i = 0; i < spec_per_pos.size(); ++i) {
      spec_per_pos[i]->Set(i < s.spec_accepted_per_pos.size() ? static_cast<double>(s.spec_accepted_per_pos[i]) : 0);
    }
  });
}

void FrontendMetrics::CountHttpRequest(absl::string_view method, absl::string_view path, int status) {
  auto key = std::make_tuple(HandlerLabel(path), MethodLabel(method), absl::StrCat(status / 100, "xx"));
  Counter* counter = nullptr;
  {
    absl::MutexLock lock(&http_mu_);
    Counter*& c = http_requests_[key];
    if (c == nullptr) {
      // Registered on first use: the instrumentator shows only the series that occurred.
      c = &registry_.AddCounter("http_requests_total", "HTTP responses by handler (route), method and status class.",
                                {{"handler", std::get<0>(key)}, {"method", std::get<1>(key)},
                                 {"status", std::get<2>(key)}});
    }
    counter = c;
  }
  counter->Increment();
}

RequestTracker::RequestTracker(FrontendMetrics* metrics, absl::Time arrival) : metrics_(metrics), start_(arrival) {}

void RequestTracker::OnSubmitted(absl::Time submitted) {
  submitted_ = submitted;
  if (metrics_ != nullptr) metrics_->frontend_time_s_.Observe(absl::ToDoubleSeconds(submitted - start_));
}

void RequestTracker::OnEvent(const OutputEvent& e) {
  if (metrics_ == nullptr || finished_) return;
  const absl::Time now = absl::Now();
  const size_t n = e.token_ids.size();
  if (n > 0) {
    if (last_token_ == absl::InfinitePast()) {
      metrics_->time_to_first_token_s_.Observe(absl::ToDoubleSeconds(now - start_));
    } else {
      // Tokens that arrive together share the gap since the previous arrival.
      const double gap_s = absl::ToDoubleSeconds(now - last_token_) / static_cast<double>(n);
      for (size_t i = 0; i < n; ++i) {
        metrics_->inter_token_latency_s_.Observe(gap_s);
      }
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
      metrics_->finished_abort_.Increment();
      return;  // a cancelled request's latencies describe the client, not the server
    case FinishReason::kError:
    case FinishReason::kNone:
      metrics_->finished_error_.Increment();
      return;
  }
  // The engine's queue_ms starts at Submit; the front end's own time comes before it.
  const absl::Time submitted = submitted_ == absl::InfinitePast() ? start_ : submitted_;
  metrics_->queue_time_s_.Observe(absl::ToDoubleSeconds(submitted - start_) + e.timings.queue_ms / 1e3);
  metrics_->e2e_latency_s_.Observe(absl::ToDoubleSeconds(now - start_));
  metrics_->prefill_time_s_.Observe(e.timings.prefill_ms / 1e3);
  metrics_->decode_time_s_.Observe(e.timings.decode_ms / 1e3);
  metrics_->inference_time_s_.Observe((e.timings.prefill_ms + e.timings.decode_ms) / 1e3);
  metrics_->prompt_tokens_.Observe(e.prompt_tokens);
  metrics_->generation_tokens_.Observe(e.completion_tokens);
}

void RequestTracker::OnClientGone() {
  if (metrics_ == nullptr || finished_) return;
  finished_ = true;
  metrics_->finished_abort_.Increment();
}

}  // namespace tpserve

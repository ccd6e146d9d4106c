// The front ends' Prometheus metrics, under vLLM's names (vllm:..., docs/serving.md
// "Metrics" lists them): per-request latency histograms measured from the request's
// arrival at the front end, the engine's gauges and totals read at scrape time, and HTTP
// responses by route and status. Tested by tests/frontend_http_test.cc.
#pragma once

#include <map>
#include <string>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/api/metrics.h"
#include "coordinator/engine/engine_api.h"
#include "coordinator/engine/request.h"

namespace tpserve {

// Thread-safe; shared by both servers when they run in one process.
class FrontendMetrics {
 public:
  // `engine` must outlive this object; its Stats() is read once per scrape.
  FrontendMetrics(const EngineApi& engine, const std::string& model_name);

  std::string RenderPrometheus() const { return registry_.Render(); }

  // Counts one HTTP response as prometheus-fastapi-instrumentator (vLLM's) does:
  // http_requests_total{handler, method, status="2xx"}. `path` becomes the handler: one
  // of the HTTP server's routes ("/v1/models/{model}" for a model's page) or "none"; an
  // unusual `method` becomes "other", so the series stay few whatever clients send.
  void CountHttpRequest(absl::string_view method, absl::string_view path, int status);

 private:
  friend class RequestTracker;

  MetricsRegistry registry_;
  Histogram& time_to_first_token_s_;
  Histogram& inter_token_latency_s_;
  Histogram& e2e_latency_s_;
  Histogram& queue_time_s_;
  Histogram& prefill_time_s_;
  Histogram& decode_time_s_;
  Histogram& inference_time_s_;
  Histogram& prompt_tokens_;
  Histogram& generation_tokens_;
  Histogram& frontend_time_s_;  // arrival to submission: the front end's own share
  Counter& finished_stop_;
  Counter& finished_length_;
  Counter& finished_abort_;
  Counter& finished_error_;

  absl::Mutex model_info_mu_;
  bool model_info_added_ ABSL_GUARDED_BY(model_info_mu_) = false;  // tpserve_model_info, once ready

  absl::Mutex http_mu_;
  // (handler, method, status class) -> its series in registry_.
  std::map<std::tuple<std::string, std::string, std::string>, Counter*> http_requests_ ABSL_GUARDED_BY(http_mu_);
};

// Follows one request's events and records its latencies, all measured from `arrival` at
// the front end: TTFT when the first token reaches the front end, e2e at the final event,
// queue time up to the engine's first scheduling. One per request, used by one thread at
// a time (or under the caller's lock).
class RequestTracker {
 public:
  // `metrics` may be null (nothing recorded). `arrival`: when the request reached the API
  // server (HTTP: its first byte).
  explicit RequestTracker(FrontendMetrics* metrics, absl::Time arrival = absl::Now());
  // Call just before EngineApi::Submit: the engine's timings (queue_ms) start there, so
  // the queue time is (submitted - arrival) + queue_ms. Not called: arrival is used.
  // Also records the time from arrival to submission (tpserve_request_frontend_seconds).
  void OnSubmitted(absl::Time submitted = absl::Now());
  // A tracker for another choice of the same request (n > 1: each choice is an engine
  // request of its own, timed from the same arrival).
  RequestTracker ForAnotherChoice() const { return RequestTracker(metrics_, start_); }
  void OnEvent(const OutputEvent& e);
  // The client went away before the final event: counts the request as aborted.
  void OnClientGone();

 private:
  FrontendMetrics* metrics_;
  absl::Time start_;
  absl::Time submitted_ = absl::InfinitePast();
  absl::Time last_token_ = absl::InfinitePast();
  bool finished_ = false;
};

}  // namespace tpserve

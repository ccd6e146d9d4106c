// The front ends' Prometheus metrics: per-request latency histograms plus the engine's
// gauges and totals read at scrape time. Tested by tests/frontend_http_test.cc.
#pragma once

#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/engine/engine_api.h"
#include "coordinator/api/metrics.h"
#include "coordinator/engine/request.h"

namespace tpserve {

// Thread-safe; shared by both servers when they run in one process.
class FrontendMetrics {
 public:
  // `engine` must outlive this object; its Stats() is read once per scrape.
  FrontendMetrics(const EngineApi& engine, const std::string& model_name);

  std::string RenderPrometheus() const { return registry_.Render(); }

 private:
  friend class RequestTracker;

  MetricsRegistry registry_;
  Histogram& time_to_first_token_s_;
  Histogram& inter_token_latency_s_;
  Histogram& e2e_latency_s_;
  Histogram& queue_time_s_;
  Counter& finished_stop_;
  Counter& finished_length_;
  Counter& finished_cancelled_;
  Counter& finished_error_;
};

// Follows one request's events and records its latencies. One per request, used by one
// thread at a time (or under the caller's lock).
class RequestTracker {
 public:
  // `metrics` may be null (nothing recorded). `arrival`: when the API server received
  // the request.
  explicit RequestTracker(FrontendMetrics* metrics, absl::Time arrival = absl::Now());
  void OnEvent(const OutputEvent& e);
  // The client went away before the final event: counts the request as cancelled.
  void OnClientGone();

 private:
  FrontendMetrics* const metrics_;
  const absl::Time start_;
  absl::Time last_token_ = absl::InfinitePast();
  bool finished_ = false;
};

}  // namespace tpserve

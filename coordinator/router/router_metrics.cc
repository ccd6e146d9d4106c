// RouterMetrics: the series, registered up front for every configured backend and model so a
// scrape shows zeros rather than nothing. Tested by tests/router_metrics_test.cc.
#include "coordinator/router/router_metrics.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"
#include "kernels/base.h"

namespace tpserve {
namespace {

// Seconds: vLLM's time-to-first-token buckets (vllm/v1/metrics/loggers.py), 1 ms to 2560 s, for
// both histograms: a router's requests range from a cached 404 to a 600 s stream.
std::vector<double> LatencyBuckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}

constexpr char kRequests[] = "tpserve_router_backend_requests_total";
constexpr char kErrors[] = "tpserve_router_backend_errors_total";
constexpr char kRetries[] = "tpserve_router_backend_retries_total";
constexpr char kOpened[] = "tpserve_router_backend_connections_opened_total";
constexpr char kReused[] = "tpserve_router_backend_connections_reused_total";
constexpr char kStale[] = "tpserve_router_backend_connections_stale_total";
constexpr char kTurnedAway[] = "tpserve_router_backend_turned_away_total";
constexpr char kInFlight[] = "tpserve_router_backend_requests_in_flight";
constexpr char kHealthy[] = "tpserve_router_backend_healthy";
constexpr char kFirstByte[] = "tpserve_router_backend_time_to_first_byte_seconds";
constexpr char kLatency[] = "tpserve_router_backend_request_latency_seconds";
constexpr char kPromptTokens[] = "tpserve_router_backend_prompt_tokens_total";
constexpr char kCompletionTokens[] = "tpserve_router_backend_completion_tokens_total";
constexpr char kCost[] = "tpserve_router_backend_cost_usd_total";
constexpr char kUsageUnknown[] = "tpserve_router_backend_requests_without_usage_total";
constexpr char kOutcomes[] = "tpserve_router_requests_total";
constexpr char kModelInfo[] = "tpserve_router_grpc_model_info_total";
constexpr char kFallbacks[] = "tpserve_router_fallbacks_total";

constexpr const char* kErrorKinds[] = {"connect", "timeout", "http_5xx", "stream_broken", "busy"};
static_assert(std::size(kErrorKinds) == static_cast<size_t>(BackendErrorKind::kBusy) + 1);
constexpr const char* kOutcomeNames[] = {"success", "error", "client_gone"};
constexpr const char* kDoorNames[] = {"http", "grpc"};

}  // namespace

RouterMetrics::RouterMetrics(const std::map<std::string, std::unique_ptr<BackendPool>>& pools,
                             const std::vector<FrontDoor>& doors) {
  // (pool, series, the backend indices it covers) for the collector.
  struct Watched {
    const BackendPool* pool;
    BackendSeries* series;
    std::vector<size_t> indices;
  };
  std::vector<Watched> watched;
  for (const auto& [name, pool] : pools) {
    std::map<std::string, BackendSeries*> by_url;
    std::vector<BackendSeries*>& by_index = backends_[pool.get()];
    for (size_t i = 0; i < pool->model().backends.size(); ++i) {
      const std::string& url = pool->backend(i).url;
      BackendSeries*& s = by_url[url];
      if (s == nullptr) {
        const MetricLabels l = {{"model", name}, {"backend", url}};
        auto series = std::make_unique<BackendSeries>();
        series->requests = &registry_.AddCounter(kRequests, "Tries of this backend (a request's first or a retry's).", l);
        for (size_t k = 0; k < series->errors.size(); ++k) {
          MetricLabels lk = l;
          lk.emplace_back("kind", kErrorKinds[k]);
          series->errors[k] = &registry_.AddCounter(
              kErrors,
              "Failed tries of this backend, by kind: connect (no connection within 5 s), timeout (no response head "
              "or next body piece in time), http_5xx, stream_broken (the connection broke after it was made).",
              lk);
        }
        series->retries = &registry_.AddCounter(
            kRetries, "Requests that failed on this backend and went on to another (of the model or a fallback).", l);
        series->connections_opened = &registry_.AddCounter(
            kOpened, "Connections opened to this backend (a try that found no idle kept-alive connection).", l);
        series->connections_reused = &registry_.AddCounter(
            kReused, "Tries of this backend sent on an idle kept-alive connection from the pool.", l);
        series->connections_stale = &registry_.AddCounter(
            kStale,
            "Reused connections the backend had closed while idle (failed before any response byte); the try "
            "went on with a new connection, not counted as an error.",
            l);
        series->turned_away = &registry_.AddCounter(
            kTurnedAway,
            "Requests that found this backend at its max_in_flight and passed it over (to the next candidate, the "
            "fallback, or a 429); not tries.",
            l);
        series->prompt_tokens = &registry_.AddCounter(
            kPromptTokens,
            "Prompt tokens of the requests this backend answered, as its responses' usage says (requests whose "
            "response carried no usage are in " + std::string(kUsageUnknown) + ").",
            l);
        series->completion_tokens = &registry_.AddCounter(
            kCompletionTokens, "Completion tokens of the requests this backend answered, as its responses' usage says.",
            l);
        series->cost_usd = nullptr;
        series->usage_unknown = &registry_.AddCounter(
            kUsageUnknown,
            "Requests this backend answered successfully whose response carried no usage (a stream whose client did "
            "not ask for it with stream_options.include_usage): not in the token and cost counters.",
            l);
        series->first_byte_s = &registry_.AddHistogram(
            kFirstByte, "Start of a try of this backend (connecting) to its response head.", LatencyBuckets(), l);
        series->latency_s = &registry_.AddHistogram(
            kLatency,
            "Arrival of a request at the router to the end of this backend's whole response to it (answered "
            "requests only: failed, cut or abandoned ones are not observed).",
            LatencyBuckets(), l);
        series->in_flight = &registry_.AddGauge(kInFlight, "The router's requests to this backend in flight now.", l);
        series->healthy =
            &registry_.AddGauge(kHealthy,
                                "1: routable; 0: ejected now (failed within the cooldown) or failing its health probe.",
                                l);
        series->healthy->Set(1);
        s = series.get();
        backend_series_.push_back(std::move(series));
        watched.push_back({pool.get(), s, {}});
      }
      if (s->cost_usd == nullptr && CostUsd(pool->backend(i), 0, 0).has_value()) {
        s->cost_usd = &registry_.AddCounter(
            kCost,
            "USD the requests this backend answered cost at its price_per_mtok (input and output, per million "
            "tokens), from its responses' usage; priced backends only.",
            {{"model", name}, {"backend", url}});
      }
      by_index.push_back(s);
      for (Watched& w : watched) {
        if (w.series == s) w.indices.push_back(i);
      }
    }
    ModelSeries& m = models_[name];
    for (FrontDoor door : doors) {
      for (size_t k = 0; k < std::size(kOutcomeNames); ++k) {
        m.outcomes[static_cast<size_t>(door)][k] = &registry_.AddCounter(
            kOutcomes,
            "Requests to a configured model by the port they came in by (door: http, grpc) and final outcome: "
            "success (a response below 400 passed through whole), error (a 4xx passed through, every backend failed "
            "or was ejected, or a stream broke), client_gone.",
            {{"model", name}, {"door", kDoorNames[static_cast<size_t>(door)]}, {"outcome", kOutcomeNames[k]}});
      }
    }
    // Every model of the fallback chain (validated: no cycles, every name configured).
    for (std::string f = pool->model().fallback; !f.empty(); f = pools.at(f)->model().fallback) {
      m.fallbacks[f] = &registry_.AddCounter(
          kFallbacks, "Requests to model answered by a backend of the fallback model (its own or further down the chain).",
          {{"model", name}, {"fallback", f}});
    }
  }
  if (std::find(doors.begin(), doors.end(), FrontDoor::kGrpc) != doors.end()) {
    for (size_t k = 0; k < model_info_.size(); ++k) {
      model_info_[k] = &registry_.AddCounter(
          kModelInfo,
          "ModelInfo calls on the router's gRPC port by outcome: success (a backend's answer, or the list of models), "
          "error (refused, or no backend answered).",
          {{"outcome", k == 0 ? "success" : "error"}});
    }
  }
  registry_.AddCollector([watched = std::move(watched)] {
    const absl::Time now = absl::Now();
    for (const Watched& w : watched) {
      // A URL listed twice under one model: unhealthy when either listing is.
      bool healthy = true;
      for (size_t i : w.indices) healthy = healthy && w.pool->Healthy(i, now);
      w.series->healthy->Set(healthy ? 1 : 0);
      int64_t in_flight = 0;
      for (size_t i : w.indices) in_flight += w.pool->in_flight(i);
      w.series->in_flight->Set(static_cast<double>(in_flight));
    }
  });
}

RouterMetrics::BackendSeries& RouterMetrics::Series(const BackendPool& pool, size_t index) {
  auto it = backends_.find(&pool);
  TP_CHECK(it != backends_.end() && index < it->second.size());
  return *it->second[index];
}

void RouterMetrics::BackendStarted(const BackendPool& pool, size_t index) { Series(pool, index).requests->Increment(); }

void RouterMetrics::BackendFirstByte(const BackendPool& pool, size_t index, absl::Duration since_start) {
  Series(pool, index).first_byte_s->Observe(absl::ToDoubleSeconds(since_start));
}

void RouterMetrics::BackendFailed(const BackendPool& pool, size_t index, BackendErrorKind kind, bool moved_on) {
  BackendSeries& s = Series(pool, index);
  s.errors[static_cast<size_t>(kind)]->Increment();
  if (moved_on) s.retries->Increment();
}

void RouterMetrics::BackendAnswered(const BackendPool& pool, size_t index, absl::Duration latency) {
  Series(pool, index).latency_s->Observe(absl::ToDoubleSeconds(latency));
}

void RouterMetrics::BackendConnection(const BackendPool& pool, size_t index, bool reused) {
  BackendSeries& s = Series(pool, index);
  (reused ? s.connections_reused : s.connections_opened)->Increment();
}

void RouterMetrics::BackendStaleConnection(const BackendPool& pool, size_t index) {
  Series(pool, index).connections_stale->Increment();
}

void RouterMetrics::BackendTurnedAway(const BackendPool& pool, size_t index) {
  Series(pool, index).turned_away->Increment();
}

std::optional<double> RouterMetrics::BackendUsage(const BackendPool& pool, size_t index, int64_t prompt_tokens,
                                                  int64_t completion_tokens) {
  BackendSeries& s = Series(pool, index);
  s.prompt_tokens->Increment(static_cast<double>(prompt_tokens));
  s.completion_tokens->Increment(static_cast<double>(completion_tokens));
  const std::optional<double> cost = CostUsd(pool.backend(index), prompt_tokens, completion_tokens);
  if (cost.has_value()) s.cost_usd->Increment(*cost);
  return cost;
}

void RouterMetrics::BackendUsageUnknown(const BackendPool& pool, size_t index) {
  Series(pool, index).usage_unknown->Increment();
}

void RouterMetrics::RequestFinished(const std::string& model, FrontDoor door, RequestOutcome outcome) {
  auto it = models_.find(model);
  TP_CHECK(it != models_.end());
  Counter* c = it->second.outcomes[static_cast<size_t>(door)][static_cast<size_t>(outcome)];
  TP_CHECK(c != nullptr);  // a request came in by a door that is not open
  c->Increment();
}

void RouterMetrics::ModelInfoFinished(bool ok) {
  TP_CHECK(model_info_[0] != nullptr);
  model_info_[ok ? 0 : 1]->Increment();
}

void RouterMetrics::FallbackTaken(const std::string& model, const std::string& answering) {
  auto it = models_.find(model);
  TP_CHECK(it != models_.end());
  auto f = it->second.fallbacks.find(answering);
  TP_CHECK(f != it->second.fallbacks.end());
  f->second->Increment();
}

RouterMetrics::Totals RouterMetrics::totals() const {
  Totals t;
  for (const auto& [pool, series] : backends_) {
    for (size_t i = 0; i < series.size(); ++i) t.in_flight += pool->in_flight(i);
  }
  // A URL listed twice under one model is one series: each series counted once.
  for (const std::unique_ptr<BackendSeries>& s : backend_series_) {
    t.prompt_tokens += static_cast<int64_t>(s->prompt_tokens->value());
    t.completion_tokens += static_cast<int64_t>(s->completion_tokens->value());
  }
  for (const auto& [model, m] : models_) {
    for (const auto& by_outcome : m.outcomes) {
      for (const Counter* c : by_outcome) {
        if (c != nullptr) t.requests_finished += static_cast<int64_t>(c->value());
      }
    }
  }
  return t;
}

}  // namespace tpserve

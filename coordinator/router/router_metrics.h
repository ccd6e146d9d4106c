// `tpserve router`'s own Prometheus metrics (GET /metrics, docs/router.md "Metrics"), on the
// registry of coordinator/api/metrics.h: per backend (model, backend) requests started, errors
// by kind, retries, connections opened, reused and found stale, requests turned away at
// max_in_flight, requests in flight, health, time
// to first byte and latency, and the tokens the answers used and their cost; per model and front
// door the requests' final outcomes; per model the fallbacks taken; ModelInfo calls on the gRPC
// port. Thread-safe. Tested by tests/router_metrics_test.cc and the router's shell tests.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/api/metrics.h"
#include "coordinator/router/backend_pool.h"

namespace tpserve {

// Why one try of a backend failed (the label kind of tpserve_router_backend_errors_total).
enum class BackendErrorKind {
  kConnect,       // "connect": no connection within the connect timeout, or refused
  kTimeout,       // "timeout": connected, but no response head (or next body piece) in time
  kHttp5xx,       // "http_5xx": the backend answered 5xx
  kStreamBroken,  // "stream_broken": the connection broke after it was made
  kBusy,          // "busy": the backend answered 429 (over its queue limit): tried elsewhere, not ejected
};

// How a request to a configured model ended (the label outcome of tpserve_router_requests_total).
enum class RequestOutcome {
  kSuccess,     // "success": a response below 400 passed through whole
  kError,       // "error": 4xx passed through, every backend failed or was ejected, a stream broke
  kClientGone,  // "client_gone": the client disconnected first
};

// The port a request came in by (the label door of tpserve_router_requests_total).
enum class FrontDoor {
  kHttp,  // "http": the OpenAI HTTP API
  kGrpc,  // "grpc": tpserve.v1 on the router's gRPC port
};

class RouterMetrics {
 public:
  // `pools`: the router's models by name; they must outlive this object (their in-flight counts
  // and ejections are read at every scrape). A URL listed twice in one model is one series.
  // `doors`: the front doors that are open (their series exist from the start; the ModelInfo
  // counter with kGrpc only).
  RouterMetrics(const std::map<std::string, std::unique_ptr<BackendPool>>& pools, const std::vector<FrontDoor>& doors);
  RouterMetrics(const RouterMetrics&) = delete;
  RouterMetrics& operator=(const RouterMetrics&) = delete;

  std::string RenderPrometheus() const { return registry_.Render(); }

  // Backend `index` of `pool` (one of the pools given at construction): a try started; its
  // response head came `since_start` after the try started; the try failed (`moved_on`: the
  // request went on to another backend); its response reached the client whole, `latency`
  // after the request's arrival at the router.
  void BackendStarted(const BackendPool& pool, size_t index);
  void BackendFirstByte(const BackendPool& pool, size_t index, absl::Duration since_start);
  void BackendFailed(const BackendPool& pool, size_t index, BackendErrorKind kind, bool moved_on);
  void BackendAnswered(const BackendPool& pool, size_t index, absl::Duration latency);
  // A try of backend `index` got a connection: a new one, or one `reused` from the pool; a
  // reused one had been closed by the backend (stale: the try goes on with a new connection).
  void BackendConnection(const BackendPool& pool, size_t index, bool reused);
  void BackendStaleConnection(const BackendPool& pool, size_t index);
  // A request found backend `index` at its max_in_flight and passed it over (not a try).
  void BackendTurnedAway(const BackendPool& pool, size_t index);
  // Backend `index` answered a request whose response said it used `prompt_tokens` and
  // `completion_tokens` (its usage): their counts, and where the backend is priced their cost.
  // Returns the cost in USD (none: not priced).
  std::optional<double> BackendUsage(const BackendPool& pool, size_t index, int64_t prompt_tokens,
                                     int64_t completion_tokens);
  // Backend `index` answered a request successfully, but its response carried no usage (a
  // stream whose client did not ask for it): its tokens and cost are not counted.
  void BackendUsageUnknown(const BackendPool& pool, size_t index);

  // A request for `model` (configured) that came in by `door` ended.
  void RequestFinished(const std::string& model, FrontDoor door, RequestOutcome outcome);
  // A ModelInfo call on the gRPC port ended: OK, or any error (the router's or a backend's).
  void ModelInfoFinished(bool ok);
  // A request for `model` is answered by a backend of `answering` (another model in its
  // fallback chain).
  void FallbackTaken(const std::string& model, const std::string& answering);

  // The router's whole load, for its gRPC Stats (router_grpc_server.h): its requests to backends
  // in flight now, and since start the requests to configured models that ended (both doors,
  // every outcome) and the tokens its backends' answers reported (their usage).
  struct Totals {
    int64_t in_flight = 0;
    int64_t requests_finished = 0;
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
  };
  Totals totals() const;

 private:
  struct BackendSeries {
    Counter* requests;
    std::array<Counter*, 5> errors;  // by BackendErrorKind (kErrorKinds in router_metrics.cc)
    Counter* retries;
    Counter* connections_opened;
    Counter* connections_reused;
    Counter* connections_stale;
    Counter* turned_away;
    Counter* prompt_tokens;
    Counter* completion_tokens;
    Counter* cost_usd;  // null: no listing of the backend in the model is priced
    Counter* usage_unknown;
    Histogram* first_byte_s;
    Histogram* latency_s;
    Gauge* in_flight;
    Gauge* healthy;
  };
  struct ModelSeries {
    std::array<std::array<Counter*, 3>, 2> outcomes{};  // by FrontDoor, then RequestOutcome; null: door closed
    std::map<std::string, Counter*> fallbacks;  // by the answering model
  };
  BackendSeries& Series(const BackendPool& pool, size_t index);

  MetricsRegistry registry_;
  // Fixed after construction: read without a lock.
  std::map<const BackendPool*, std::vector<BackendSeries*>> backends_;  // by pool, then backend index
  std::vector<std::unique_ptr<BackendSeries>> backend_series_;
  std::map<std::string, ModelSeries> models_;
  std::array<Counter*, 2> model_info_{};  // ok, error; null without the gRPC door
};

}  // namespace tpserve

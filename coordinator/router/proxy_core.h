// The half of one routed request that does not care who the client is: the backends it may
// try (the model's, by policy, then each fallback model's), which one is being tried, why the
// others failed or were skipped, when failover must stop (the answer started reaching the
// client), what the client gets when every candidate failed, and the request's metrics (its
// tokens and their cost included) and request-log line. Its client sides: ProxyRequest (an
// OpenAI HTTP exchange, proxy_request.h) and GrpcFrontGenerate (a tpserve.v1 Generate call to
// the router's gRPC port, grpc_front_generate.h). Not thread-safe: a request's strand owns it. Tested through both by
// tests/router_grpc_test.cc, tests/router_grpc_front_test.cc and the router's shell tests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "coordinator/router/backend_pool.h"
#include "coordinator/router/grpc_backend.h"
#include "coordinator/router/request_log.h"
#include "coordinator/router/router_metrics.h"
#include "coordinator/router/upstream_call.h"
#include "coordinator/router/upstream_endpoint.h"

namespace tpserve {

// A backend a request may try: backend `index` of `pool`, reached through `endpoint` (its
// server and connection pool), or for a grpc:// backend through `grpc` (its channel).
struct ProxyCandidate {
  BackendPool* pool = nullptr;
  size_t index = 0;
  UpstreamEndpoint* endpoint = nullptr;
  GrpcBackend* grpc = nullptr;
};

// What candidate `c`, an http(s):// backend, is sent for an OpenAI request: `body` (its JSON,
// already naming the backend's model) POSTed on its endpoint to its base path + `path`
// ("/completions", "/chat/completions"), with its api_key as the bearer token and its connect
// and response timeouts. Both front ends' http(s):// tries (proxy_request.h,
// grpc_front_generate.h).
UpstreamRequest HttpBackendRequest(const ProxyCandidate& c, absl::string_view path, std::string body);

// How a request ended, for its metrics and its request-log line.
struct ProxyEnd {
  RequestOutcome outcome = RequestOutcome::kError;
  // What the client got: the HTTP status; for a gRPC call, the status serve's HTTP front end
  // gives the same code (ToHttpError: OK 200, INVALID_ARGUMENT 400, ...; 499 a client gone).
  int status = 0;
  std::string grpc_status = {};  // a gRPC call's code, e.g. "OK"; empty for an HTTP request
  std::string error = {};        // empty on success
  // The current backend's whole answer reached the client (success or a 4xx passed through):
  // its latency is observed.
  bool answered = false;
  // The answer's usage (both, or neither: not known); counted on the answering backend, and
  // priced where it has prices.
  std::optional<int64_t> prompt_tokens = std::nullopt;
  std::optional<int64_t> completion_tokens = std::nullopt;
};

class ProxyCore {
 public:
  // `model`: as the client asked (configured); `door`: the port it came in by; `candidates`:
  // not empty; `arrival`: the request's first byte; `log` may be null; `metrics` (covering the
  // candidates' pools) outlives the request.
  ProxyCore(std::string model, FrontDoor door, std::vector<ProxyCandidate> candidates, absl::Time arrival,
            RequestLog* log, RouterMetrics& metrics);

  const std::string& model() const { return model_; }
  absl::Time arrival() const { return arrival_; }

  // Makes the next candidate with room current (its place among its requests in flight taken,
  // until EndTry; one at its max_in_flight is skipped as busy) and returns it; null when none is
  // left (Exhausted() then says what the client gets).
  const ProxyCandidate* Next();
  // The current candidate: its backend, URL, and the model name it is sent (its `model`, else
  // the name of the model it is listed under).
  const RouterBackend& backend() const { return current_->pool->backend(current_->index); }
  const std::string& url() const { return backend().url; }
  std::string RemoteModel() const;

  // The current candidate cannot take the request (`why`: e.g. a field its API cannot carry):
  // not a try and not a failure; the first such reason is kept for Exhausted().
  void Skip(const absl::Status& why);
  // A try of the current candidate starts (its requests metric, the time to first byte's start).
  void BeginTry();
  // Its connection is up (reused: an idle kept-alive one); a reused one was stale (a new one is
  // being opened: a failure to connect it is "connect").
  void Connected(bool reused);
  void Stale();
  bool connected() const { return connected_; }
  // Its response head (a gRPC backend's first message or final status) came: time to first byte.
  void FirstByte();
  // The try failed before anything reached the client: it ends, the backend is ejected (unless
  // `eject` is false: a busy one) and `error` is kept for the client's error; the caller goes on
  // with Next(), which finds no candidate left when the failed backend's max_retries is spent
  // (the request's retries so far reached it).
  void TryFailed(const std::string& error, BackendErrorKind kind, bool eject = true);
  // An http(s):// backend's response head came with HTTP `status` (FirstByte): true when that
  // fails the try (TryFailed: a 5xx ejects the backend, a 429 is busy and does not) and the
  // caller cancels the call and goes on with Next(); false for an answer that is the client's.
  bool HttpHead(int status);
  // The try ends without failing (its answer ended, or the client went away), or never began
  // (the candidate could not take the request): its place is given back. Idempotent.
  void EndTry();
  // The current backend's answer starts reaching the client: no failover any more; a fallback
  // is counted when the backend is a fallback model's.
  void Answering();
  bool answering() const { return answering_; }
  // Once Answering: the fallback model whose backend answers; "" when the requested model's own.
  std::string fallback_model() const;
  // The backend broke after part of its answer reached the client: ejected, counted as `kind`
  // (not a retry).
  void BrokeWhileAnswering(BackendErrorKind kind);
  // The request's request_timeout_s passed during the current try (before or after its answer
  // began): the try ends, counted as a `timeout` error of its backend, neither ejected (earlier
  // tries may have spent the time) nor a retry; no candidate is tried after it. Returns the
  // client's message: the limit, and whether the backend was `streaming` or had not answered.
  std::string RequestTimedOut(bool streaming);
  // The current candidate's request_timeout_s counted from the arrival; InfiniteFuture: none.
  absl::Time request_deadline() const;

  // No candidate is left: what the client gets. The first Skip reason when no candidate was
  // tried; RESOURCE_EXHAUSTED when every one tried was busy; else UNAVAILABLE (the HTTP side
  // answers 502). The message names each backend and what failed, and where a max_retries
  // stopped the request, the cap and the candidates not tried.
  absl::Status Exhausted() const;
  // Some candidate was tried and failed (else Exhausted() is the first Skip reason).
  bool any_failed() const { return !errors_.empty(); }

  // The request ended: its outcome counted, the answering backend's latency observed (when
  // `end.answered`) and its tokens and cost counted (when `end` has them; a success without
  // them as usage unknown), its log line written. Only the first call counts.
  void Finish(ProxyEnd end);
  bool finished() const { return finished_; }

 private:
  const std::string model_;
  const FrontDoor door_;
  const std::vector<ProxyCandidate> candidates_;
  const absl::Time arrival_;
  RequestLog* const log_;
  RouterMetrics& metrics_;
  size_t next_ = 0;  // the next candidate to try
  const ProxyCandidate* current_ = nullptr;
  bool holds_place_ = false;  // the current candidate's in-flight count holds this request (Next..EndTry)
  absl::Time try_start_;    // the current try's start (time to first byte)
  bool connected_ = false;  // the current try's connection is up (a failure is not "connect")
  bool answering_ = false;
  std::vector<std::string> errors_;  // "URL: what failed", per candidate tried
  int busy_ = 0;                     // candidates that were busy (HTTP 429, RESOURCE_EXHAUSTED)
  int64_t retries_ = 0;              // failed tries the request moved on from
  // Where a failed backend's max_retries ended the request's tries: that cap, and the candidates
  // left untried (by URL).
  std::optional<int64_t> retries_cap_;
  std::vector<std::string> untried_;
  absl::Status skipped_;             // why the first skipped candidate was skipped; OK: none
  bool finished_ = false;
};

// A request refused before any backend was tried (no model, an unknown one, a body that does
// not parse, every backend out of routing): its log line, when `log` is not null. `grpc`: it
// came to the gRPC port (`status` is then serve's HTTP status for the code).
void LogRefusedRequest(RequestLog* log, const std::string& model, absl::Time arrival, const absl::Status& error,
                       bool grpc);

}  // namespace tpserve

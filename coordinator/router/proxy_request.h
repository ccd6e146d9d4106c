// One client request through the router: the backends it may try (the model's, by policy,
// then each fallback model's), one UpstreamCall at a time (an HTTP request, or a grpc://
// backend's Generate call relayed as OpenAI JSON), failing over while nothing was sent to the
// client, and the response passed through (whole, or SSE piece by piece). Lives on a strand of
// the router's proxy io_context. Tested by tests/router_test.sh and tests/router_grpc_test.*.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/api/http_transport.h"
#include "coordinator/router/backend_pool.h"
#include "coordinator/router/grpc_backend.h"
#include "coordinator/router/request_log.h"
#include "coordinator/router/router_metrics.h"
#include "coordinator/router/upstream_call.h"
#include "nlohmann/json.hpp"

namespace tpserve {

struct ProxyTimeouts {
  absl::Duration connect = absl::Seconds(5);
  // Until a backend's response head, and between its body pieces.
  absl::Duration response = absl::Seconds(600);
};

// A backend a request may try: backend `index` of `pool`, reached through `endpoint` (its
// server and connection pool), or for a grpc:// backend through `grpc` (its channel).
struct ProxyCandidate {
  BackendPool* pool = nullptr;
  size_t index = 0;
  UpstreamEndpoint* endpoint = nullptr;
  GrpcBackend* grpc = nullptr;
};

class ProxyRequest : public std::enable_shared_from_this<ProxyRequest> {
 public:
  // `body`: the client's parsed JSON body; `path_suffix`: the route after "/v1" (e.g.
  // "/chat/completions"); `log` may be null; `metrics` (covering the candidates' pools) outlives
  // the request. `candidates` is not empty.
  ProxyRequest(Strand strand, std::shared_ptr<HttpExchange> exchange, nlohmann::json body, std::string model,
               std::string path_suffix, std::vector<ProxyCandidate> candidates, ProxyTimeouts timeouts,
               RequestLog* log, RouterMetrics& metrics);
  // Tries the first candidate (on the strand) and watches for the client going away. Keeps
  // itself alive until the response ended or the client is gone.
  void Start();

 private:
  void Begin();
  void TryNext();
  // The current candidate's call: an HTTP request, or a grpc:// backend's Generate call (null,
  // with refusal_ set, when the request cannot be sent to it).
  std::shared_ptr<UpstreamCall> StartHttp(const RouterBackend& b, const std::string& remote_model);
  std::shared_ptr<UpstreamCall> StartGrpc(const RouterBackend& b, const std::string& remote_model);
  UpstreamCallbacks Callbacks();
  void OnHead(int status, std::string content_type);
  void OnData(std::string piece);
  void OnEnd(absl::Status status);
  void OnClientGone();
  // The current backend failed before anything reached the client: eject it, try the next.
  void FailOver(const std::string& error, BackendErrorKind kind);
  // The same without ejecting it where `eject` is false (a busy backend: 429).
  void MoveOn(const std::string& error, BackendErrorKind kind, bool eject);
  // The current backend's response starts reaching the client: counts a fallback taken.
  void Answering();
  void Finish(int status, RequestOutcome outcome, std::string error);

  const Strand strand_;
  const std::shared_ptr<HttpExchange> exchange_;
  nlohmann::json body_;
  const std::string model_;
  const std::string path_suffix_;
  const std::vector<ProxyCandidate> candidates_;
  const ProxyTimeouts timeouts_;
  RequestLog* const log_;
  RouterMetrics& metrics_;
  const bool stream_;
  // Strand-only state.
  size_t next_ = 0;  // the next candidate to try
  std::shared_ptr<UpstreamCall> call_;
  const ProxyCandidate* current_ = nullptr;
  absl::Time try_start_;    // the current try's start (time to first byte)
  bool connected_ = false;  // the current try's connection is up (a failure is not "connect")
  int status_ = 0;
  std::string content_type_;
  bool streaming_ = false;  // the SSE response started: no failover any more
  std::string whole_;       // a non-streamed response's body, until it ends
  std::vector<std::string> errors_;  // "URL: what failed", per candidate tried
  int busy_ = 0;                     // candidates that answered 429
  // Why the request could not go to a grpc:// candidate (a field the gRPC API cannot carry:
  // such candidates are skipped, not tried); OK: none was skipped.
  absl::Status refusal_;
  bool finished_ = false;
  std::shared_ptr<ProxyRequest> self_;  // kept alive until finished
};

}  // namespace tpserve

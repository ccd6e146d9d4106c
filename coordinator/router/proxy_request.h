// One OpenAI HTTP request through the router: the HTTP client's side of a ProxyCore (the
// candidates, failover, metrics and log: proxy_core.h). One UpstreamCall at a time (an HTTP
// request, or a grpc:// backend's Generate call relayed as OpenAI JSON), failing over while
// nothing was sent to the client, and the response passed through (whole, or SSE piece by
// piece). Lives on a strand of the router's proxy io_context. Tested by tests/router_test.sh and
// tests/router_grpc_test.*.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/api/http_transport.h"
#include "coordinator/router/deadline_timer.h"
#include "coordinator/router/proxy_core.h"
#include "coordinator/router/request_log.h"
#include "coordinator/router/router_metrics.h"
#include "coordinator/router/stream_usage.h"
#include "coordinator/router/upstream_call.h"
#include "nlohmann/json.hpp"

namespace tpserve {

class ProxyRequest : public std::enable_shared_from_this<ProxyRequest> {
 public:
  // `body`: the client's parsed JSON body; `path_suffix`: the route after "/v1" (e.g.
  // "/chat/completions"); `log` may be null; `metrics` (covering the candidates' pools) outlives
  // the request. `candidates` is not empty.
  ProxyRequest(Strand strand, std::shared_ptr<HttpExchange> exchange, nlohmann::json body, std::string model,
               std::string path_suffix, std::vector<ProxyCandidate> candidates, RequestLog* log,
               RouterMetrics& metrics);
  // Tries the first candidate (on the strand) and watches for the client going away. Keeps
  // itself alive until the response ended or the client is gone. Cheapest on the exchange's
  // I/O thread (the HTTP handler): the watch is then registered without a hop.
  void Start();

 private:
  void Begin();
  // Starts the next candidate that can take the request, or answers the client's error when
  // none is left.
  void TryNext();
  // The current candidate's call: an HTTP request, or a grpc:// backend's Generate call (null,
  // after ProxyCore::Skip, when the request cannot be sent to it).
  std::shared_ptr<UpstreamCall> StartHttp(const ProxyCandidate& c);
  std::shared_ptr<UpstreamCall> StartGrpc(const ProxyCandidate& c);
  UpstreamCallbacks Callbacks();
  // An answer's headers: `headers`, the answering backend (x-tpserve-backend) and, where a
  // fallback model's backend answers, its name (x-tpserve-fallback). After core_.Answering().
  std::vector<HttpHeader> AnswerHeaders(std::vector<HttpHeader> headers) const;
  void OnHead(int status, std::string content_type);
  void OnData(std::string piece);
  void OnEnd(absl::Status status);
  // Ends a stream that reached the client before its backend ended it: the unfinished choices'
  // finish_reason "error" chunk, the router's error event and [DONE].
  void EndStreamWithError(const std::string& message);
  void OnClientGone();
  // Sets request_timer_ to the current candidate's request_timeout_s (ProxyCore::
  // request_deadline), when that differs from what it is set to.
  void ArmRequestTimeout();
  // The request's request_timeout_s passed: the backend's call is cancelled; the client gets 504
  // when nothing reached it yet, else the stream ends with an error event.
  void OnRequestTimeout();
  void Finish(ProxyEnd end);

  const Strand strand_;
  const std::shared_ptr<HttpExchange> exchange_;
  const nlohmann::json body_;
  const std::string path_suffix_;
  const bool stream_;
  // Strand-only state.
  ProxyCore core_;
  std::shared_ptr<UpstreamCall> call_;
  int status_ = 0;  // the current try's HTTP status
  std::string content_type_;
  bool streaming_ = false;  // the SSE response started: no failover any more
  std::string whole_;       // a non-streamed response's body, until it ends
  StreamUsage usage_;       // a streamed one's usage chunk
  // The current try asked the backend for the stream's usage on the client's behalf
  // (RouterBackend::connection.request_usage): usage_ strips it from the client's stream.
  bool strip_usage_ = false;
  // The answer's tokens as the call itself counted them (grpc:// backends; UpstreamCallbacks::
  // usage), for a stream without a usage chunk.
  std::optional<UsageTokens> call_usage_;
  // request_timeout_s: fires at request_deadline_ (InfiniteFuture: not set).
  DeadlineTimer request_timer_;
  absl::Time request_deadline_ = absl::InfiniteFuture();
  std::shared_ptr<ProxyRequest> self_;  // kept alive until finished
};

}  // namespace tpserve

// One Generate call to the router's own gRPC port: the gRPC client's side of a ProxyCore
// (proxy_core.h). The GenerateRequest is routed by its `model`. To a grpc:// backend it goes
// unchanged but for `model` (the backend's name for it), and the backend's messages come back
// unchanged, one write in flight (the next backend read waits for the client's write: a slow
// client holds one message, and the backend merges what it produces meanwhile). To an http(s)://
// backend it goes as the OpenAI request grpc_to_openai.h writes (a field that request cannot
// carry is INVALID_ARGUMENT naming it, when no other candidate can take the request), and the
// backend's server-sent events come back as GenerateResponse messages; those that arrive while
// a write is in flight wait (merged where they are text of the same choice). The client's
// deadline goes with each grpc:// backend call (what is left of it), and cancels an http(s)://
// one when it passes. Before the first message the router fails over as for HTTP clients; after
// it, the backend's final status (or the failure of its stream) is the client's. Lives on a
// strand of the router's proxy io_context; gRPC's reactions only post to it. Tested by
// tests/router_grpc_front_test.cc and tests/router_grpc_front_test.sh.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "boost/asio/io_context.hpp"
#include "coordinator/router/deadline_timer.h"
#include "coordinator/router/grpc_generate_call.h"
#include "coordinator/router/grpc_to_openai.h"
#include "coordinator/router/proxy_core.h"
#include "coordinator/router/request_log.h"
#include "coordinator/router/router_metrics.h"
#include "coordinator/router/router_routes.h"
#include "coordinator/router/upstream_call.h"
#include "grpcpp/grpcpp.h"
#include "proto/tpserve.pb.h"

namespace tpserve {

// The text cache_aware matches a GenerateRequest's prompt on: PromptText of the same request
// sent as OpenAI JSON (a chat's messages, a text prompt, token ids).
std::string PromptText(const v1::GenerateRequest& request);

class GrpcFrontGenerate : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                          public std::enable_shared_from_this<GrpcFrontGenerate> {
 public:
  // What every call shares; outlives the calls (the router's gRPC server waits for them).
  struct Context {
    boost::asio::io_context& proxy_io;
    RouterRoutes& routes;
    RouterMetrics& metrics;
    RequestLog* log;  // may be null
  };
  // Returns the reactor for gRPC to drive; `wire`: the serialized GenerateRequest; `server`:
  // the call's context (its initial metadata names the answering backend). Parsing, routing
  // and the backend call happen on a new strand.
  static grpc::ServerWriteReactor<grpc::ByteBuffer>* Start(const Context& context, grpc::CallbackServerContext* server,
                                                           std::string wire, absl::Time arrival);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  GrpcFrontGenerate(const Context& context, grpc::CallbackServerContext* server, absl::Time arrival);
  // Strand-only from here.
  void Begin(const std::string& wire);
  // Ends a call refused before any backend was tried (logged).
  void Refuse(const std::string& model, const absl::Status& status);
  // Starts the next candidate that can take the request, or ends the call when none is left.
  void TryNext();
  // An http(s):// candidate: false (after ProxyCore::Skip) when the request cannot be sent to it.
  bool StartHttp(const ProxyCandidate& c);
  void OnMessage(v1::GenerateResponse message);
  // The http(s):// backend's response head, body pieces and end.
  void OnHttpHead(int status);
  void OnHttpData(std::string piece);
  void OnHttpEnd(const absl::Status& status);
  // The http(s):// try ended with `status` (its stream's end or failure).
  void HttpEnded(const absl::Status& status);
  // A message for the client: written, or queued while a write is in flight.
  void Send(v1::GenerateResponse message);
  void Write(const v1::GenerateResponse& message);
  // The current try ended with `status`: failover while nothing reached the client, else the
  // client's status.
  void OnBackendEnd(const absl::Status& status);
  // A try's failure as the router names it: "gRPC CODE: message" for a grpc:// backend, the
  // HTTP call's own message for an http(s):// one.
  std::string DescribeFailure(const absl::Status& status) const;
  void WriteDone(bool ok);
  void ClientGone();
  // The client's deadline passed: the backend's call is cancelled (if gRPC has not ended it
  // already), and the call ends DEADLINE_EXCEEDED, the backend not counted as failed.
  void DeadlinePassed();
  // The current candidate's request_timeout_s passed (a grpc:// backend's call, given it as its
  // deadline, ended DEADLINE_EXCEEDED; an http(s):// backend's, cancelled by request_timer_): the
  // call ends DEADLINE_EXCEEDED, before or after the first message, counted as the backend's
  // `timeout` without ejecting it.
  void RequestTimedOut();
  // An http(s):// try: request_timer_ set to request_deadline_ (an HTTP call has no deadline of
  // its own to carry it); any other try: the timer's earlier setting void.
  void ArmRequestTimer(bool http);
  // The backend's answer (a message, or a refusal passed through) starts reaching the client.
  void Answering();
  // Cancels the backend's call (either kind) and drops the messages waiting for the client.
  void CancelBackendCall();
  // Cancels the http(s):// backend's call, if one runs.
  void CancelHttpCall();
  // Ends the call with `status` once no write is in flight (and the waiting messages went),
  // after `end` went to the core.
  void Complete(const absl::Status& status, std::optional<ProxyEnd> end);

  const Context& context_;
  grpc::CallbackServerContext* const server_;
  const absl::Time arrival_;
  // The client's gRPC deadline (InfiniteFuture: none), passed on to each backend call.
  const absl::Time deadline_;
  const Strand strand_;
  std::shared_ptr<GrpcFrontGenerate> self_;  // from Start until OnDone
  DeadlineTimer request_timer_;  // on strand_
  // The current try's request_timeout_s deadline (ProxyCore::request_deadline); InfiniteFuture:
  // none. Strand-only.
  absl::Time request_deadline_ = absl::InfiniteFuture();
  // Strand-only.
  std::optional<ProxyCore> core_;  // once routed
  v1::GenerateRequest request_;    // as the client sent it
  std::shared_ptr<GrpcGenerateCall> call_;
  // The current try is an http(s):// backend's: its call, its stream read back, its response's
  // HTTP status and (not 200) body.
  bool http_try_ = false;
  std::shared_ptr<UpstreamCall> http_call_;
  std::optional<GenerateFromOpenAiStream> http_stream_;
  int http_status_ = 0;
  std::string http_error_body_;
  grpc::ByteBuffer wire_;  // the write in flight (gRPC reads it until OnWriteDone)
  bool write_in_flight_ = false;
  std::deque<v1::GenerateResponse> pending_;  // messages waiting for the write in flight
  std::optional<grpc::Status> ending_;  // decided; Finish once no write is in flight
  bool finished_ = false;               // Finish called
  int64_t prompt_tokens_ = -1;          // from the messages' usage
  std::map<int32_t, int64_t> completion_tokens_;  // by choice
};

}  // namespace tpserve

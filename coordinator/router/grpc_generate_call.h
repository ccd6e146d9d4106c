// One streaming Generate call from the router to a grpc:// backend, on gRPC's callback API: no
// router thread waits on it. Its reactions only post to the request's strand, where its
// messages are handed on one at a time and its timeouts kept. Two readers use it: the relay to
// an OpenAI HTTP client (grpc_upstream_call.h: every message read as soon as it arrives) and the
// router's own gRPC port (grpc_front_generate.h: the next message is read only once the client
// took the last one, so that a slow client holds one message, and the backend merges what it
// produces meanwhile). Tested through the router by tests/router_grpc_test.cc,
// tests/router_grpc_front_test.cc and the router's gRPC shell tests.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/router/grpc_backend.h"
#include "coordinator/router/upstream_call.h"
#include "proto/tpserve.pb.h"

namespace tpserve {

struct GrpcGenerateRequest {
  GrpcBackend* backend = nullptr;  // where to; outlives the call
  v1::GenerateRequest request;
  std::string authorization;  // the "authorization" metadata's value; empty: none
  // Until the backend's connection is up; then until its first message, and between messages
  // (while a read is outstanding: not while the reader holds a message).
  absl::Duration connect_timeout = absl::Seconds(5);
  absl::Duration response_timeout = absl::Seconds(600);
  // Read each message as soon as the last one was handed on; false: only on ReadNext().
  bool read_ahead = true;
  // The call's gRPC deadline, sent to the backend (which stops the request when it passes) and
  // kept by gRPC (the call ends DEADLINE_EXCEEDED then): the router's gRPC client's own
  // deadline, passed on. InfiniteFuture: none.
  absl::Time deadline = absl::InfiniteFuture();
};

// Called on the strand, in this order: connected (reused: the channel's connection was up
// already) once the backend answered; message for each GenerateResponse; end once, with the
// call's status as the backend sent it, or UNAVAILABLE (no connection within the connect
// timeout, the router stopping) or DEADLINE_EXCEEDED (no message within the response timeout)
// made by the router. None after Cancel().
struct GrpcGenerateCallbacks {
  std::function<void(bool reused)> connected;
  std::function<void(v1::GenerateResponse message)> message;
  std::function<void(absl::Status status)> end;
};

// What a call's end status says of the backend: true for the codes a server that breaks, is
// unreachable or stops answering ends a call with (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED,
// UNKNOWN: gRPC's own, or tpserve's for "this server can serve nothing now"), as against one that
// answered about the request (INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED, INTERNAL: the
// engine failed it, ...). The router fails over on the first kind.
bool GrpcBackendBroke(absl::StatusCode code);
// "gRPC CODE: message": a backend call's failure as the router names it to its clients and log.
std::string DescribeGrpcFailure(const absl::Status& status);

class GrpcGenerateCall {
 public:
  // Starts the call; must be called on `strand`.
  static std::shared_ptr<GrpcGenerateCall> Start(Strand strand, GrpcGenerateRequest request,
                                                 GrpcGenerateCallbacks callbacks);
  virtual ~GrpcGenerateCall() = default;
  // Without read_ahead: reads the next message (after each message callback). On the strand.
  virtual void ReadNext() = 0;
  // Cancels the call (the backend cancels its request); no callback runs afterwards. On the
  // strand.
  virtual void Cancel() = 0;
};

}  // namespace tpserve

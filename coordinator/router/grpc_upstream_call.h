// One OpenAI HTTP request relayed to a grpc:// backend as a streaming Generate call
// (grpc_generate_call.h: gRPC's callback API, posting to the request's strand), where the
// responses become the client's OpenAI body or SSE chunks (grpc_relay.h) and reach the proxy
// through the same callbacks as an HTTP backend's response (upstream_call.h), each message as
// it arrives. Tested through the router by tests/router_grpc_test.cc and
// tests/router_grpc_test.sh.
#pragma once

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "coordinator/router/grpc_backend.h"
#include "coordinator/router/grpc_relay.h"
#include "coordinator/router/upstream_call.h"
#include "proto/tpserve.pb.h"

namespace tpserve {

struct GrpcUpstreamRequest {
  GrpcBackend* backend = nullptr;  // where to; outlives the call
  v1::GenerateRequest request;
  std::unique_ptr<GrpcRelay> relay;  // the responses' translation
  std::string authorization;         // the "authorization" metadata's value; empty: none
  // Until the backend's connection is up; then until its first message, and between messages.
  absl::Duration connect_timeout = absl::Seconds(5);
  absl::Duration response_timeout = absl::Seconds(600);
};

// The callbacks run on `strand` as for an HTTP backend: connected (reused: the channel's
// connection was up already) once the backend answered; head once, with the first message
// (a stream: 200 "text/event-stream") or at the end (the whole body's status: 200, or the
// HTTP error serve would answer, e.g. 400 for INVALID_ARGUMENT, 429 for RESOURCE_EXHAUSTED);
// data with each message's SSE events, or the whole body; end (OK, or UNAVAILABLE /
// DEADLINE_EXCEEDED when the backend broke, could not be reached or timed out). None after
// Cancel(), which cancels the call (the backend cancels its request).
std::shared_ptr<UpstreamCall> StartGrpcCall(Strand strand, GrpcUpstreamRequest request, UpstreamCallbacks callbacks);

}  // namespace tpserve

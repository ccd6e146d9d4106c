// The gRPC side of `--api-key`: a call's "authorization" metadata checked against the server's
// keys, for serve's gRPC port (grpc_service.h) and the router's (coordinator/router/
// router_grpc_server.h). Tested through both by tests/frontend_test.cc and
// tests/router_grpc_front_test.cc.
#pragma once

#include "absl/status/status.h"
#include "coordinator/api/api_keys.h"
#include "grpcpp/grpcpp.h"

namespace tpserve {

// OK when `keys` is empty or the call carries "authorization: Bearer K" with K one of them;
// else UNAUTHENTICATED saying what is missing (ApiKeys::Check).
absl::Status AuthorizeGrpcCall(const ApiKeys& keys, const grpc::CallbackServerContext& context);

}  // namespace tpserve

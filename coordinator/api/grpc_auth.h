// The gRPC side of `--api-key`: a call's "authorization" metadata checked against the server's
// keys, for serve's gRPC port (grpc_service.h) and the router's (coordinator/router/
// router_grpc_server.h). Tested through both by tests/frontend_test.cc and
// tests/router_grpc_front_test.cc.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "coordinator/api/api_keys.h"
#include "grpcpp/grpcpp.h"

namespace tpserve {

// OK when `keys` is empty or the call carries "authorization: Bearer K" with K one of them;
// else UNAUTHENTICATED saying what is missing (ApiKeys::Check).
absl::Status AuthorizeGrpcCall(const ApiKeys& keys, const grpc::CallbackServerContext& context);

// How every Generate handler (serve's and the router's) starts: the call's key checked, then its
// serialized request copied out of gRPC's buffer into *wire. Returns a reactor that finishes the
// call with the refusal, or null when the call may go on.
grpc::ServerWriteReactor<grpc::ByteBuffer>* AcceptGenerateCall(const ApiKeys& keys,
                                                               const grpc::CallbackServerContext& context,
                                                               const grpc::ByteBuffer& request, std::string* wire);

}  // namespace tpserve

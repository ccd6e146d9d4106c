// One start-up and one shutdown for tpserve's two gRPC servers, serve's (grpc_server.h) and the
// router's (router/router_grpc_server.h): listening options, credentials, grpc.health.v1 and
// server reflection set in one place. Tested through both: tests/frontend_test.cc,
// tests/router_grpc_front_test.cc and tests/router_grpc_front_test.sh.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace tpserve {

// Where and how a gRPC server listens: the same for serve's and the router's.
struct GrpcListenOptions {
  std::string address = "0.0.0.0:50051";  // host:port; port 0 picks a free port (StartedGrpcServer::port)
  // Larger requests fail with RESOURCE_EXHAUSTED (gRPC's own check). The HTTP side's
  // --max-body-bytes; gRPC takes an int, so a larger value is held to INT_MAX.
  size_t max_receive_message_bytes = size_t{4} << 20;
};

struct StartedGrpcServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;  // the bound port
};

// Builds and starts a plaintext server of `service` (which must outlive it) with gRPC's default
// grpc.health.v1 service and server reflection. The caller sets the health status
// (SetGrpcServing). UNAVAILABLE when the address cannot be bound, the message starting with
// `name` (what the user set the address with: "gRPC", "router: --grpc-port").
absl::StatusOr<StartedGrpcServer> StartGrpcServer(absl::string_view name, const GrpcListenOptions& options,
                                                  grpc::Service& service);

// The health status of the whole server ("") and of tpserve.v1.TpServe.
void SetGrpcServing(grpc::Server& server, bool serving);

// Health goes NOT_SERVING for good, calls in flight get `grace` to finish before they are
// cancelled, and it returns once every call has ended.
void StopGrpcServer(grpc::Server& server, absl::Duration grace);

}  // namespace tpserve

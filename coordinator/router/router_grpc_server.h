// `tpserve router --grpc-port Q`: the router's gRPC front end, serving tpserve.v1.TpServe as
// `tpserve serve` does, so that a gRPC client talks to the router as to one server. Generate is
// routed by its `model` to the model's backends, grpc:// and http(s):// (grpc_front_generate.h);
// ModelInfo is answered by a routable grpc:// backend of the model; Stats answers the router's
// own numbers (its requests at backends now, the requests that ended and their tokens, its
// memory; the engine's fields zero). With API keys, every method needs "authorization: Bearer
// KEY" metadata (serve's check). grpc.health.v1 answers SERVING until shutdown; server
// reflection is on. Tested by tests/router_grpc_front_test.cc and tests/router_grpc_front_test.sh.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/api/api_keys.h"
#include "coordinator/api/grpc_server_start.h"
#include "coordinator/router/grpc_front_generate.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace tpserve {

class RouterGrpcService;

struct RouterGrpcOptions {
  GrpcListenOptions listen;  // as serve's gRPC port: address (port 0: see port()) and the largest request
  std::vector<std::string> api_keys;  // empty: no key needed
};

class RouterGrpcServer {
 public:
  // `context`'s references outlive the server.
  RouterGrpcServer(GrpcFrontGenerate::Context context, RouterGrpcOptions options);
  ~RouterGrpcServer();  // Shutdown()
  RouterGrpcServer(const RouterGrpcServer&) = delete;
  RouterGrpcServer& operator=(const RouterGrpcServer&) = delete;

  // Binds and starts serving. UNAVAILABLE when the address cannot be bound.
  absl::Status Start();
  int port() const { return port_; }
  // Health goes NOT_SERVING; calls in flight are cancelled (their backend calls too), and it
  // returns once each has ended. The proxy io_context must run until then. Idempotent.
  void Shutdown();

 private:
  const RouterGrpcOptions options_;
  std::unique_ptr<RouterGrpcService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool stopped_ = false;
};

}  // namespace tpserve

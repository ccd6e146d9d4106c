// StartGrpcServer, SetGrpcServing and StopGrpcServer. Tested through serve's and the router's
// gRPC servers: tests/frontend_test.cc, tests/router_grpc_front_test.cc and .sh.
#include "coordinator/api/grpc_server_start.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "proto/grpc/health/v1/health.pb.h"

namespace tpserve {
namespace {

constexpr char kServiceName[] = "tpserve.v1.TpServe";

}  // namespace

absl::StatusOr<StartedGrpcServer> StartGrpcServer(absl::string_view name, const GrpcListenOptions& options,
                                                  grpc::Service& service) {
  // Process-wide switch, read when the server is built.
  grpc::EnableDefaultHealthCheckService(true);
  // Server reflection (`grpcurl list`, `grpcurl describe` without the .proto). Calling the
  // plugin's init also keeps libgrpc++_reflection linked in (it registers itself statically).
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  // The built-in health service is not generated code, so reflection would list it but
  // could not describe it (grpcurl: "does not expose service"); naming a generated health
  // message links health.pb.cc, whose descriptors reflection then finds.
  grpc::health::v1::HealthCheckRequest::descriptor();
  StartedGrpcServer started;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, grpc::InsecureServerCredentials(), &started.port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(
      std::min<size_t>(options.max_receive_message_bytes, std::numeric_limits<int>::max())));
  builder.RegisterService(&service);
  started.server = builder.BuildAndStart();
  if (started.server == nullptr || started.port == 0) {
    return absl::UnavailableError(absl::StrCat(name, ": cannot listen on ", options.address,
                                               " (in use, or not a host:port of this machine)"));
  }
  return started;
}

void SetGrpcServing(grpc::Server& server, bool serving) {
  grpc::HealthCheckServiceInterface* health = server.GetHealthCheckService();
  health->SetServingStatus("", serving);
  health->SetServingStatus(kServiceName, serving);
}

void StopGrpcServer(grpc::Server& server, absl::Duration grace) {
  server.GetHealthCheckService()->Shutdown();  // everything NOT_SERVING from now on
  server.Shutdown(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(grace));
  server.Wait();
}

}  // namespace tpserve

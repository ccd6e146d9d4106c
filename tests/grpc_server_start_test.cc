// StartGrpcServer, SetGrpcServing and StopGrpcServer (coordinator/api/grpc_server_start.h), the
// start-up serve's and the router's gRPC servers share, on loopback ports with TpServe's generated
// callback service (every method UNIMPLEMENTED) and gRPC's own health service.
#include "coordinator/api/grpc_server_start.h"

#include <chrono>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/tpserve.grpc.pb.h"

namespace tpserve {
namespace {

using ::grpc::health::v1::HealthCheckResponse;
using ::testing::StartsWith;

std::shared_ptr<grpc::Channel> Connect(int port) {
  return grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
}

// A ModelInfo call whose request is about `bytes` long (its model name): UNIMPLEMENTED (the
// generated service) within the server's limit, RESOURCE_EXHAUSTED past it.
grpc::StatusCode ModelInfoOfSize(int port, size_t bytes) {
  auto stub = v1::TpServe::NewStub(Connect(port));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::ModelInfoRequest request;
  request.set_model(std::string(bytes, 'm'));
  v1::ModelInfoResponse response;
  return stub->ModelInfo(&context, request, &response).error_code();
}

HealthCheckResponse::ServingStatus Health(int port, const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(Connect(port));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response.status();
}

TEST(GrpcServerStartTest, PortZeroBindsAFreePortAndHealthFollowsSetGrpcServing) {
  v1::TpServe::CallbackService service;
  absl::StatusOr<StartedGrpcServer> started = StartGrpcServer("gRPC", {.address = "127.0.0.1:0"}, service);
  ASSERT_TRUE(started.ok()) << started.status();
  ASSERT_GT(started->port, 0);
  for (bool serving : {false, true}) {
    SetGrpcServing(*started->server, serving);
    const auto want = serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
    EXPECT_EQ(Health(started->port, ""), want);
    EXPECT_EQ(Health(started->port, "tpserve.v1.TpServe"), want);
  }
  EXPECT_EQ(ModelInfoOfSize(started->port, 10), grpc::StatusCode::UNIMPLEMENTED);
  StopGrpcServer(*started->server, absl::ZeroDuration());
}

TEST(GrpcServerStartTest, LargerRequestsAreResourceExhausted) {
  v1::TpServe::CallbackService service;
  absl::StatusOr<StartedGrpcServer> started =
      StartGrpcServer("gRPC", {.address = "127.0.0.1:0", .max_receive_message_bytes = 1024}, service);
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_EQ(ModelInfoOfSize(started->port, 1000), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(ModelInfoOfSize(started->port, 2048), grpc::StatusCode::RESOURCE_EXHAUSTED);
  StopGrpcServer(*started->server, absl::ZeroDuration());
}

// gRPC takes an int: a limit past INT_MAX is held there, not wrapped (2^32 + 1024 as an int
// would be 1024 bytes).
TEST(GrpcServerStartTest, ALimitPastIntMaxIsHeldThere) {
  v1::TpServe::CallbackService service;
  const size_t limit = (size_t{1} << 32) + 1024;
  absl::StatusOr<StartedGrpcServer> started =
      StartGrpcServer("gRPC", {.address = "127.0.0.1:0", .max_receive_message_bytes = limit}, service);
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_EQ(ModelInfoOfSize(started->port, 64 << 10), grpc::StatusCode::UNIMPLEMENTED);
  StopGrpcServer(*started->server, absl::ZeroDuration());
}

// 192.0.2.1 (TEST-NET-1, RFC 5737) is no address of this machine.
TEST(GrpcServerStartTest, AnAddressItCannotBindIsUnavailableNamingTheServer) {
  v1::TpServe::CallbackService service;
  absl::StatusOr<StartedGrpcServer> started =
      StartGrpcServer("router: --grpc-port", {.address = "192.0.2.1:0"}, service);
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(started.status().message()), StartsWith("router: --grpc-port: cannot listen on 192.0.2.1:0 ("));
}

}  // namespace
}  // namespace tpserve

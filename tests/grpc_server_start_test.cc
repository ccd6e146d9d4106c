// StartGrpcServer, SetGrpcServing and StopGrpcServer (coordinator/api/grpc_server_start.h), the
// start-up serve's and the router's gRPC servers share, on loopback ports with TpServe's generated
// callback service (every method UNIMPLEMENTED) and gRPC's own health service; TLS with
// certificates made by openssl at test time (the client trusts the server's CA, or another; a
// client CA requires a client certificate) and TLS options that must stop the start.
#include "coordinator/api/grpc_server_start.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "proto/tpserve.grpc.pb.h"

// The options below are written as designated initializers naming only what each case sets;
// the members left out take their defaults, which is the point (GCC's -Wextra asks otherwise).
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace tpserve {
namespace {

using ::grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;
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

// A CA ("ca", "other") and certificates for localhost ("server" by ca, "client" by ca for client
// auth), made with openssl in a scratch directory.
class GrpcServerTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(absl::StrCat(::testing::TempDir(), "/grpc_tls_", getpid()));
    const std::string d = *dir_;
    const std::string script = absl::StrCat(
        "mkdir -p ", d, " && cd ", d, " && (set -e; ",
        "for ca in ca other; do openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=$ca -keyout $ca.key "
        "-out $ca.pem -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign; done; ",
        "for c in server:serverAuth client:clientAuth; do n=${c%%:*}; ",
        "openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout $n.key -out $n.csr; ",
        "printf 'subjectAltName=DNS:localhost\\nextendedKeyUsage=%s\\n' ${c#*:} > $n.ext; ",
        "openssl x509 -req -in $n.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile $n.ext -out $n.pem; ",
        "done) > ", d, "/openssl.log 2>&1");
    ASSERT_EQ(std::system(script.c_str()), 0) << "openssl failed: see " << d << "/openssl.log";
  }
  static void TearDownTestSuite() {
    std::system(absl::StrCat("rm -rf ", *dir_).c_str());
    delete dir_;
  }

  static std::string File(const std::string& name) { return absl::StrCat(*dir_, "/", name); }
  static std::string Read(const std::string& name) {
    std::ifstream in(File(name));
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // A Health check of "" over `credentials` to localhost:port: its status code.
  static grpc::StatusCode Check(int port, const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
    auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(absl::StrCat("localhost:", port), credentials));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::health::v1::HealthCheckRequest request;
    HealthCheckResponse response;
    return stub->Check(&context, request, &response).error_code();
  }

  static std::shared_ptr<grpc::ChannelCredentials> Trusting(const std::string& ca, bool client_certificate = false) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = Read(ca);
    if (client_certificate) {
      ssl.pem_cert_chain = Read("client.pem");
      ssl.pem_private_key = Read("client.key");
    }
    return grpc::SslCredentials(ssl);
  }

  static std::string* dir_;
};

std::string* GrpcServerTlsTest::dir_ = nullptr;

TEST_F(GrpcServerTlsTest, ServesClientsThatTrustItsCaOverTlsOnly) {
  v1::TpServe::CallbackService service;
  absl::StatusOr<StartedGrpcServer> started = StartGrpcServer(
      "gRPC", {.address = "127.0.0.1:0", .tls = {.cert_file = File("server.pem"), .key_file = File("server.key")}},
      service);
  ASSERT_TRUE(started.ok()) << started.status();
  SetGrpcServing(*started->server, true);
  EXPECT_EQ(Check(started->port, Trusting("ca.pem")), grpc::StatusCode::OK);
  EXPECT_EQ(Check(started->port, Trusting("other.pem")), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Check(started->port, grpc::InsecureChannelCredentials()), grpc::StatusCode::UNAVAILABLE);
  StopGrpcServer(*started->server, absl::ZeroDuration());
}

TEST_F(GrpcServerTlsTest, AClientCaRequiresAClientCertificateItSigned) {
  v1::TpServe::CallbackService service;
  absl::StatusOr<StartedGrpcServer> started =
      StartGrpcServer("gRPC",
                      {.address = "127.0.0.1:0",
                       .tls = {.cert_file = File("server.pem"), .key_file = File("server.key"),
                               .client_ca_file = File("ca.pem")}},
                      service);
  ASSERT_TRUE(started.ok()) << started.status();
  SetGrpcServing(*started->server, true);
  EXPECT_EQ(Check(started->port, Trusting("ca.pem", /*client_certificate=*/true)), grpc::StatusCode::OK);
  EXPECT_EQ(Check(started->port, Trusting("ca.pem")), grpc::StatusCode::UNAVAILABLE);
  StopGrpcServer(*started->server, absl::ZeroDuration());
}

TEST_F(GrpcServerTlsTest, BadTlsOptionsAreInvalidArgumentNamingTheFlag) {
  v1::TpServe::CallbackService service;
  struct Case {
    GrpcServerTlsOptions tls;
    std::string error;
  };
  const Case cases[] = {
      {{.cert_file = "/nonexistent/cert.pem", .key_file = File("server.key")},
       "serve: --grpc-tls-certfile: cannot read /nonexistent/cert.pem"},
      {{.cert_file = File("server.pem")}, "serve: TLS needs both --grpc-tls-certfile"},
      {{.key_file = File("server.key")}, "serve: TLS needs both --grpc-tls-certfile"},
      {{.client_ca_file = File("ca.pem")}, "serve: --grpc-tls-client-ca-file needs TLS on the port"},
      {{.cert_file = File("server.key"), .key_file = File("server.key")},
       "serve: --grpc-tls-certfile: " + File("server.key") + " is not a PEM file of CERTIFICATE"},
      {{.cert_file = File("server.pem"), .key_file = File("server.pem")},
       "serve: --grpc-tls-keyfile " + File("server.pem") + " holds no PEM private key"},
      {{.cert_file = File("server.pem"), .key_file = File("server.key"), .client_ca_file = File("server.key")},
       "serve: --grpc-tls-client-ca-file: " + File("server.key") + " is not a PEM file of CERTIFICATE"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(std::string(CheckGrpcServerTls("serve", c.tls).message()), HasSubstr(c.error));
    absl::StatusOr<StartedGrpcServer> started = StartGrpcServer("serve", {.address = "127.0.0.1:0", .tls = c.tls},
                                                                service);
    ASSERT_FALSE(started.ok()) << c.error;
    EXPECT_EQ(started.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(started.status().message()), HasSubstr(c.error));
  }
}

// gRPC itself refuses a key that is not the certificate's.
TEST_F(GrpcServerTlsTest, AKeyOfAnotherCertificateCannotListen) {
  v1::TpServe::CallbackService service;
  absl::StatusOr<StartedGrpcServer> started = StartGrpcServer(
      "gRPC", {.address = "127.0.0.1:0", .tls = {.cert_file = File("server.pem"), .key_file = File("client.key")}},
      service);
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(started.status().message()), HasSubstr("do they belong together?"));
}

}  // namespace
}  // namespace tpserve

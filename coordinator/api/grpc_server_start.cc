// StartGrpcServer, SetGrpcServing and StopGrpcServer. Tested through serve's and the router's
// gRPC servers: tests/frontend_test.cc, tests/router_grpc_front_test.cc and .sh.
#include "coordinator/api/grpc_server_start.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <limits>
#include <sstream>
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

// The credentials options.tls asks for: insecure, or TLS with the files read.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(absl::string_view name,
                                                                     const GrpcServerTlsOptions& tls) {
  if (!tls.enabled()) {
    if (!tls.client_ca_file.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": --grpc-tls-client-ca-file needs TLS on the port: give ",
                                                     "--grpc-tls-certfile and --grpc-tls-keyfile too"));
    }
    return grpc::InsecureServerCredentials();
  }
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": TLS needs both --grpc-tls-certfile (the certificate) ",
                                                   "and --grpc-tls-keyfile (its private key)"));
  }
  absl::StatusOr<std::string> cert = ReadPemFile(absl::StrCat(name, ": --grpc-tls-certfile"), tls.cert_file,
                                                 "CERTIFICATE");
  if (!cert.ok()) return cert.status();
  // "PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY".
  absl::StatusOr<std::string> key = ReadPemFile(absl::StrCat(name, ": --grpc-tls-keyfile"), tls.key_file, "");
  if (!key.ok()) return key.status();
  if (key->find("PRIVATE KEY-----") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": --grpc-tls-keyfile ", tls.key_file,
                                                   " holds no PEM private key (-----BEGIN PRIVATE KEY-----)"));
  }
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  ssl.pem_key_cert_pairs.push_back({*std::move(key), *std::move(cert)});
  if (!tls.client_ca_file.empty()) {
    absl::StatusOr<std::string> cas = ReadPemFile(absl::StrCat(name, ": --grpc-tls-client-ca-file"),
                                                  tls.client_ca_file, "CERTIFICATE");
    if (!cas.ok()) return cas.status();
    ssl.pem_root_certs = *std::move(cas);
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

}  // namespace

absl::StatusOr<std::string> ReadPemFile(absl::string_view what, const std::string& path, absl::string_view kind) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in.is_open() || in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": cannot read ", path, "; it must be a readable PEM file"));
  }
  const std::string begin = absl::StrCat("-----BEGIN ", kind);
  if (text.str().find(begin) == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", path, " is not a PEM file of ",
                                                   kind.empty() ? "anything" : kind, " (no \"", begin,
                                                   kind.empty() ? "" : "-----", "\" line)"));
  }
  return text.str();
}

absl::Status CheckGrpcServerTls(absl::string_view name, const GrpcServerTlsOptions& tls) {
  return Credentials(name, tls).status();
}

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
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = Credentials(name, options.tls);
  if (!credentials.ok()) return credentials.status();
  StartedGrpcServer started;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, *credentials, &started.port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(
      std::min<size_t>(options.max_receive_message_bytes, std::numeric_limits<int>::max())));
  builder.RegisterService(&service);
  started.server = builder.BuildAndStart();
  if (started.server == nullptr || started.port == 0) {
    return absl::UnavailableError(absl::StrCat(
        name, ": cannot listen on ", options.address, " (in use, or not a host:port of this machine",
        options.tls.enabled() ? absl::StrCat("; or gRPC refused the TLS certificate ", options.tls.cert_file,
                                             " with the key ", options.tls.key_file, ": do they belong together?")
                              : "",
        ")"));
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

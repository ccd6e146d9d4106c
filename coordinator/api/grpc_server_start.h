// One start-up and one shutdown for tpserve's two gRPC servers, serve's (grpc_server.h) and the
// router's (router/router_grpc_server.h): listening options, credentials (plaintext or TLS, with
// optional client-certificate verification), grpc.health.v1 and server reflection set in one
// place. Tested by tests/grpc_server_start_test.cc and through both servers:
// tests/frontend_test.cc, tests/router_grpc_front_test.cc, tests/grpc_tls_test.sh.
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

// TLS on a gRPC port (--grpc-tls-certfile, --grpc-tls-keyfile, --grpc-tls-client-ca-file). Both
// files empty: plaintext.
struct GrpcServerTlsOptions {
  std::string cert_file;  // PEM: the server's certificate chain, its own certificate first
  std::string key_file;   // PEM: its private key
  // PEM CA certificates; set: every client must present a certificate signed by one of them
  // (mutual TLS), else the handshake fails. Empty: clients are not asked for one.
  std::string client_ca_file;
  bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
};

// Where and how a gRPC server listens: the same for serve's and the router's.
struct GrpcListenOptions {
  std::string address = "0.0.0.0:50051";  // host:port; port 0 picks a free port (StartedGrpcServer::port)
  // Larger requests fail with RESOURCE_EXHAUSTED (gRPC's own check). The HTTP side's
  // --max-body-bytes; gRPC takes an int, so a larger value is held to INT_MAX.
  size_t max_receive_message_bytes = size_t{4} << 20;
  GrpcServerTlsOptions tls;  // default: plaintext
};

struct StartedGrpcServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;  // the bound port
};

// Builds and starts a server of `service` (which must outlive it), plaintext or TLS
// (options.tls), with gRPC's default grpc.health.v1 service and server reflection. The caller
// sets the health status (SetGrpcServing). INVALID_ARGUMENT naming the flag when a TLS file is
// missing, unreadable or not PEM of the right kind, or only one of the certificate and key is
// given; UNAVAILABLE when the address cannot be bound (or gRPC refuses the certificate and key,
// e.g. a key that does not match). Messages start with `name` (what the user set the address
// with: "gRPC", "router: --grpc-port").
absl::StatusOr<StartedGrpcServer> StartGrpcServer(absl::string_view name, const GrpcListenOptions& options,
                                                  grpc::Service& service);

// What StartGrpcServer checks of options.tls before it binds (the files read, both or neither of
// the certificate and key), for main to call before a slow start-up (serve loads its model
// first). The same errors.
absl::Status CheckGrpcServerTls(absl::string_view name, const GrpcServerTlsOptions& tls);

// The health status of the whole server ("") and of tpserve.v1.TpServe.
void SetGrpcServing(grpc::Server& server, bool serving);

// Health goes NOT_SERVING for good, calls in flight get `grace` to finish before they are
// cancelled, and it returns once every call has ended.
void StopGrpcServer(grpc::Server& server, absl::Duration grace);

// The text of the PEM file `path`, which must hold a "-----BEGIN `kind`" block (kind e.g.
// "CERTIFICATE", or "" for any PEM block). INVALID_ARGUMENT starting with `what` (the flag or
// config key that named the file) when it cannot be read or holds no such block.
absl::StatusOr<std::string> ReadPemFile(absl::string_view what, const std::string& path, absl::string_view kind);

}  // namespace tpserve

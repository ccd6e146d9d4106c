// `tpserve router --config FILE`: one OpenAI-compatible HTTP door (and with --grpc-port one
// tpserve.v1 gRPC door) in front of many backends (coordinator/router/router_server.h); SIGTERM
// or SIGINT stop it. Tested by tests/router_test.sh and tests/router_grpc_front_test.sh.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/api/grpc_server_start.h"
#include "coordinator/api/http_transport.h"
#include "coordinator/router/router_config.h"

namespace tpserve {

struct RouterCommandOptions {
  RouterConfig config;  // parsed, validated, backend keys resolved (main)
  // Where and how it listens (--host, --http-port: 0 a free port, logged and written to
  // port_file, -1 none (gRPC only); serve's --http-threads, --max-connections, --max-body-bytes
  // and timeouts).
  HttpTransportOptions transport;
  // --grpc-port: the tpserve.v1 gRPC front end on transport.host (0: a free port); -1: off.
  int grpc_port = -1;
  // --metrics-port: GET /metrics and /health on a port of their own (0: a free port); -1: off.
  int metrics_port = -1;
  GrpcServerTlsOptions grpc_tls;  // TLS on the gRPC port (--grpc-tls-*); default: plaintext
  // Where the router listens, as serve's --port-file: {"http": P, "grpc": Q or null}, with
  // "metrics": M where it has a metrics port; empty: off.
  std::string port_file;
  std::vector<std::string> api_keys;  // the router's own (--api-key); empty: open
  std::string request_log;            // JSON lines; empty: off
};

// Reads and parses the config file (ParseRouterConfig); the error names the file.
absl::StatusOr<RouterConfig> LoadRouterConfig(const std::string& path);

// Serves until SIGTERM or SIGINT; returns the process exit code (non-zero when it cannot start).
int RunRouter(const RouterCommandOptions& options);

}  // namespace tpserve

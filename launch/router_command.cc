// RunRouter: start the router's front end, log where it listens, wait for a stop signal.
// Tested by tests/router_test.sh.
#include "launch/router_command.h"

#include <signal.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/router/router_server.h"
#include "launch/port_file.h"
#include "launch/serve_command.h"

namespace tpserve {

absl::StatusOr<RouterConfig> LoadRouterConfig(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("router: --config FILE is required (the models and backends)");
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("router: --config ", path, ": cannot read the file"));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<RouterConfig> config = ParseRouterConfig(text.str());
  if (!config.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--config ", path, ": ", config.status().message()));
  }
  return config;
}

int RunRouter(const RouterCommandOptions& o) {
  BlockDrainSignals();  // main did, before any thread; again for callers that did not
  RouterOptions options;
  options.transport = o.transport;
  options.grpc_port = o.grpc_port;
  options.metrics_port = o.metrics_port;
  options.grpc_tls = o.grpc_tls;
  options.api_keys = o.api_keys;
  options.request_log = o.request_log;
  options.log = [](const std::string& line) {
    std::fprintf(stderr, "tpserve: router: %s\n", line.c_str());
    std::fflush(stderr);
  };
  const std::vector<std::string> names = o.config.model_names();
  RouterServer server(o.config, options);
  if (absl::Status started = server.Start(); !started.ok()) {
    std::fprintf(stderr, "tpserve: router: %s\n", std::string(started.message()).c_str());
    return 1;
  }
  const ListeningPorts ports{server.port(), server.grpc_port(), server.metrics_port()};
  std::fprintf(stderr, "tpserve: router serving %s\n%s", absl::StrJoin(names, ", ").c_str(),
               ListeningLines(o.transport.host, ports).c_str());
  if (ports.http < 0 && ports.metrics >= 0) {
    std::fprintf(stderr, "tpserve: router: no HTTP port (--http-port -1): /metrics and /health on the metrics port "
                         "only; the gRPC port answers grpc.health.v1\n");
  } else if (ports.http < 0) {
    std::fprintf(stderr, "tpserve: router: no HTTP port (--http-port -1): no /metrics or /health (give "
                         "--metrics-port P for them); the gRPC port answers grpc.health.v1\n");
  }
  if (!o.port_file.empty()) {
    if (absl::Status written = WritePortFile(o.port_file, ports); !written.ok()) {
      std::fprintf(stderr, "tpserve: router: %s\n", std::string(written.message()).c_str());
      return 1;
    }
  }
  const sigset_t set = DrainSignals();
  for (;;) {
    timespec ts{0, 200 * 1000 * 1000};
    int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig <= 0) sig = TakeStraySignal();
    if (sig == SIGTERM || sig == SIGINT) break;
  }
  std::fprintf(stderr, "tpserve: router: stopping\n");
  server.Shutdown();
  return 0;
}

}  // namespace tpserve

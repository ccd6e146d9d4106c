// Active health probes (a model's "health_check"): each probed backend is sent GET `path` (a
// grpc:// backend: the Stats RPC, which a tpserve server answers from its engine's counters)
// every interval on the router's proxy io_context; a probe that cannot connect, has no whole
// answer within the timeout or answers other than 2xx (gRPC: OK) marks the backend failing in its BackendPool
// (out of routing) until a probe passes. Each change is logged, once. Tested by
// tests/router_health_test.sh.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "boost/asio/io_context.hpp"
#include "coordinator/router/backend_pool.h"
#include "coordinator/router/grpc_backend.h"
#include "coordinator/router/router_config.h"
#include "coordinator/router/upstream_endpoint.h"

namespace tpserve {

// Backend `index` of `pool`, probed through `endpoint` (its server and connections), or for a
// grpc:// backend through `grpc` (its channel) with the Stats RPC.
struct HealthProbeTarget {
  BackendPool* pool = nullptr;
  size_t index = 0;
  UpstreamEndpoint* endpoint = nullptr;
  GrpcBackend* grpc = nullptr;
  HealthCheckOptions options;
};

class HealthProber {
 public:
  // The targets' pools and endpoints outlive the prober's probes (which run on `io` until it
  // stops). `log` gets one line per change of a backend's probe state.
  HealthProber(boost::asio::io_context& io, std::vector<HealthProbeTarget> targets,
               std::function<void(const std::string&)> log);
  // Sends every target's first probe now.
  void Start();

 private:
  class Probe;
  std::vector<std::shared_ptr<Probe>> probes_;
};

}  // namespace tpserve

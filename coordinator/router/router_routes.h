// How a request's model becomes the backends it may try: what the router's gRPC front end
// (router_grpc_server.h) asks of the router. RouterServer implements it over its models'
// BackendPools and its backends' connections, and routes its HTTP requests through the same
// code. Tested through both front ends by tests/router_grpc_test.cc,
// tests/router_grpc_front_test.cc and the router's shell tests.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/router/proxy_core.h"

namespace tpserve {

class RouterRoutes {
 public:
  virtual ~RouterRoutes() = default;

  // The configured model names, sorted.
  virtual const std::vector<std::string>& model_names() const = 0;
  // A request for `model`: the model's routable backends in its policy's order (`prompt`:
  // PromptText, for cache_aware), then each fallback model's. NOT_FOUND naming the available
  // models when `model` is not configured; UNAVAILABLE naming the ejected backends and those
  // failing their probe when none is routable (counted as the model's failed request that came
  // in by `door`).
  virtual absl::StatusOr<std::vector<ProxyCandidate>> Candidates(const std::string& model, absl::string_view prompt,
                                                                 FrontDoor door) = 0;
  // A question about `model` rather than a request (ModelInfo): its routable backends and its
  // fallbacks', in the config's order; nothing counted, no policy turn taken. The same errors.
  virtual absl::StatusOr<std::vector<ProxyCandidate>> Backends(const std::string& model) = 0;
};

}  // namespace tpserve

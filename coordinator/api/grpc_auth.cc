// AuthorizeGrpcCall. Tested by tests/frontend_test.cc and tests/router_grpc_front_test.cc.
#include "coordinator/api/grpc_auth.h"

namespace tpserve {

absl::Status AuthorizeGrpcCall(const ApiKeys& keys, const grpc::CallbackServerContext& context) {
  if (!keys.enabled()) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  if (it == metadata.end()) return keys.Check(absl::string_view());
  return keys.Check(absl::string_view(it->second.data(), it->second.size()));
}

}  // namespace tpserve

// AuthorizeGrpcCall. Tested by tests/frontend_test.cc and tests/router_grpc_front_test.cc.
#include "coordinator/api/grpc_auth.h"

#include <vector>

#include "coordinator/api/grpc_status.h"

namespace tpserve {
namespace {

// A Generate call refused before it started: finishes at once with `status`.
class RefusedGenerate : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit RefusedGenerate(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

absl::Status AuthorizeGrpcCall(const ApiKeys& keys, const grpc::CallbackServerContext& context) {
  if (!keys.enabled()) return absl::OkStatus();
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("authorization");
  if (it == metadata.end()) return keys.Check(absl::string_view());
  return keys.Check(absl::string_view(it->second.data(), it->second.size()));
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* AcceptGenerateCall(const ApiKeys& keys,
                                                               const grpc::CallbackServerContext& context,
                                                               const grpc::ByteBuffer& request, std::string* wire) {
  if (absl::Status key = AuthorizeGrpcCall(keys, context); !key.ok()) return new RefusedGenerate(key);
  wire->clear();
  std::vector<grpc::Slice> slices;
  if (request.Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices) wire->append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return nullptr;
}

}  // namespace tpserve

// tpserve.v1.TpServe implemented with gRPC's callback API: Generate streams through a
// GenerateReactor; ModelInfo and Stats answer at once. With API keys set, every method needs
// the metadata "authorization: Bearer KEY", else UNAUTHENTICATED. Tested by
// tests/frontend_test.cc.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "coordinator/api/api_keys.h"
#include "coordinator/engine/engine_api.h"
#include "coordinator/api/frontend_metrics.h"
#include "coordinator/api/generate_proto.h"
#include "coordinator/api/request_builder.h"
#include "coordinator/api/task_pool.h"
#include "grpcpp/grpcpp.h"
#include "proto/tpserve.grpc.pb.h"

namespace tpserve {

// A serialized GenerateRequest, parsed: INVALID_ARGUMENT naming a string field that is not
// UTF-8 (before the parser sees it: proto3's parser would refuse it and log an ERROR), or
// when the bytes are not a GenerateRequest.
absl::StatusOr<v1::GenerateRequest> ParseGenerateRequest(absl::string_view wire);

// Generate takes its request as bytes (the raw callback method), so that a request gRPC's
// parser would refuse, and answer UNIMPLEMENTED, is refused here as INVALID_ARGUMENT instead.
using TpServeServiceBase = v1::TpServe::WithRawCallbackMethod_Generate<
    v1::TpServe::WithCallbackMethod_ModelInfo<v1::TpServe::WithCallbackMethod_Stats<v1::TpServe::Service>>>;

class TpServeService final : public TpServeServiceBase {
 public:
  // All references must outlive the service; `metrics` may be null. `pump_pool` runs the
  // response writing that engine events trigger; `render_pool` builds requests. `api_keys`:
  // what every call must present (none: no key needed).
  TpServeService(EngineApi& engine, const RequestBuilder& builder, FrontendMetrics* metrics,
                 std::weak_ptr<TaskPool> pump_pool, std::weak_ptr<TaskPool> render_pool, ApiKeys api_keys);

  // `request`: a serialized v1::GenerateRequest; the responses are serialized v1::GenerateResponses.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* ModelInfo(grpc::CallbackServerContext* context, const v1::ModelInfoRequest* request,
                                      v1::ModelInfoResponse* response) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* context, const v1::StatsRequest* request,
                                  v1::StatsResponse* response) override;

 private:
  EngineApi& engine_;
  const RequestBuilder& builder_;
  FrontendMetrics* const metrics_;
  const std::weak_ptr<TaskPool> pump_pool_;
  const std::weak_ptr<TaskPool> render_pool_;
  const ApiKeys api_keys_;
};

}  // namespace tpserve

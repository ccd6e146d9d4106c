// tpserve.v1.TpServe implemented with gRPC's callback API: Generate streams through a
// GenerateReactor; ModelInfo and Stats answer at once. Tested by tests/frontend_test.cc.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "coordinator/engine/engine_api.h"
#include "coordinator/api/frontend_metrics.h"
#include "coordinator/api/request_builder.h"
#include "coordinator/api/task_pool.h"
#include "grpcpp/grpcpp.h"
#include "proto/tpserve.grpc.pb.h"

namespace tpserve {

// A GenerateRequest as the front ends' common input. INVALID_ARGUMENT (naming the field)
// when no prompt is set.
absl::StatusOr<GenerateInput> GenerateInputFromProto(const v1::GenerateRequest& request);

class TpServeService final : public v1::TpServe::CallbackService {
 public:
  // All references must outlive the service; `metrics` may be null. `pump_pool` runs the
  // response writing that engine events trigger; `render_pool` builds requests.
  TpServeService(EngineApi& engine, const RequestBuilder& builder, FrontendMetrics* metrics,
                 std::weak_ptr<TaskPool> pump_pool, std::weak_ptr<TaskPool> render_pool);

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(grpc::CallbackServerContext* context,
                                                           const v1::GenerateRequest* request) override;
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
};

}  // namespace tpserve

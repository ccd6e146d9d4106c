// GrpcServer: builds the gRPC server and keeps its health status in step with Ready().
// Tested by tests/frontend_test.cc.
#include "coordinator/api/grpc_server.h"

#include <utility>

#include "coordinator/api/grpc_service.h"
#include "grpcpp/grpcpp.h"

namespace tpserve {

GrpcServer::GrpcServer(EngineApi& engine, const Tokenizer& tokenizer, const ModelChatTemplate* chat_template,
                       GrpcServerOptions options)
    : engine_(engine),
      options_(std::move(options)),
      builder_(engine, tokenizer, chat_template, options_.frontend.served_model_names,
               options_.frontend.generation_defaults, options_.frontend.tool_call_parser),
      pump_pool_(std::make_shared<TaskPool>(options_.pump_threads)),
      render_pool_(options_.frontend.render_pool != nullptr
                       ? options_.frontend.render_pool
                       : std::make_shared<TaskPool>(options_.frontend.render_threads,
                                                    static_cast<size_t>(std::max(1, options_.frontend.max_pending_renders)),
                                                    "tpserve-render")),
      service_(std::make_unique<TpServeService>(engine, builder_, options_.frontend.metrics, pump_pool_, render_pool_,
                                                ApiKeys(options_.frontend.api_keys))) {}

GrpcServer::~GrpcServer() { Shutdown(); }

absl::Status GrpcServer::Start() {
  absl::StatusOr<StartedGrpcServer> started = StartGrpcServer("gRPC", options_.listen, *service_);
  if (!started.ok()) return started.status();
  server_ = std::move(started->server);
  port_ = started->port;
  const bool ready = engine_.Ready();
  SetGrpcServing(*server_, ready);
  health_thread_ = std::thread([this, ready] { PollHealth(ready); });
  return absl::OkStatus();
}

void GrpcServer::PollHealth(bool serving) {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const bool ready = engine_.Ready();
    if (ready != serving) {
      serving = ready;
      SetGrpcServing(*server_, serving);
    }
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.health_poll_interval);
  }
}

void GrpcServer::Shutdown(absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (health_thread_.joinable()) health_thread_.join();
  if (server_ != nullptr) StopGrpcServer(*server_, grace);
  // Every call is done; what is still queued finds its reactor finished.
  pump_pool_->Stop();
}

}  // namespace tpserve

// GrpcServer: builds the gRPC server and keeps its health status in step with Ready().
// Tested by tests/frontend_test.cc.
#include "coordinator/api/grpc_server.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/api/grpc_service.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "proto/grpc/health/v1/health.pb.h"

namespace tpserve {
namespace {

constexpr char kServiceName[] = "tpserve.v1.TpServe";

}  // namespace

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
  // Process-wide switch, read when the server is built.
  grpc::EnableDefaultHealthCheckService(true);
  // Server reflection (`grpcurl list`, `grpcurl describe` without the .proto). Calling the
  // plugin's init also keeps libgrpc++_reflection linked in (it registers itself statically).
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  // The built-in health service is not generated code, so reflection would list it but
  // could not describe it (grpcurl: "does not expose service"); naming a generated health
  // message links health.pb.cc, whose descriptors reflection then finds.
  grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.address, grpc::InsecureServerCredentials(), &port_);
  builder.SetMaxReceiveMessageSize(options_.max_receive_message_bytes);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    server_.reset();
    return absl::UnavailableError(
        absl::StrCat("gRPC: cannot listen on ", options_.address, " (in use, or not a host:port of this machine)"));
  }
  const bool ready = engine_.Ready();
  SetServing(ready);
  health_thread_ = std::thread([this, ready] { PollHealth(ready); });
  return absl::OkStatus();
}

void GrpcServer::SetServing(bool serving) {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  health->SetServingStatus("", serving);
  health->SetServingStatus(kServiceName, serving);
}

void GrpcServer::PollHealth(bool serving) {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const bool ready = engine_.Ready();
    if (ready != serving) {
      serving = ready;
      SetServing(serving);
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
  if (server_ != nullptr) {
    server_->GetHealthCheckService()->Shutdown();  // everything NOT_SERVING from now on
    server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoNanoseconds(grace));
    server_->Wait();
  }
  // Every call is done; what is still queued finds its reactor finished.
  pump_pool_->Stop();
}

}  // namespace tpserve

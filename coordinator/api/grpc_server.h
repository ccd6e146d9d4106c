// The gRPC front end: tpserve.v1.TpServe on the callback API, plus grpc.health.v1 (NOT_SERVING
// while the engine is not Ready()) and server reflection. Tested by tests/frontend_test.cc.
#pragma once

#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/text/chat_template_loader.h"
#include "coordinator/engine/engine_api.h"
#include "coordinator/api/frontend_metrics.h"
#include "coordinator/api/frontend_options.h"
#include "coordinator/api/grpc_server_start.h"
#include "coordinator/api/request_builder.h"
#include "coordinator/api/task_pool.h"
#include "coordinator/text/tokenizer.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace tpserve {

class TpServeService;

struct GrpcServerOptions {
  GrpcListenOptions listen;  // address (port 0: see port()) and the largest request
  // How often Ready() is polled for the health service.
  absl::Duration health_poll_interval = absl::Milliseconds(250);
  // Threads that build and write responses as the engine produces tokens (the engine's
  // thread only posts to them).
  int pump_threads = 2;
  // What the HTTP server shares (served names, render pool, metrics, defaults, tool-call
  // syntax, API keys): the same block for both.
  FrontendOptions frontend;
};

class GrpcServer {
 public:
  // `chat_template` may be null (chat requests then fail). All references must outlive
  // the server.
  GrpcServer(EngineApi& engine, const Tokenizer& tokenizer, const ModelChatTemplate* chat_template,
             GrpcServerOptions options);
  ~GrpcServer();  // Shutdown()
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  // Binds and starts serving. UNAVAILABLE when the address cannot be bound.
  absl::Status Start();
  // The bound port; valid after Start().
  int port() const { return port_; }
  // Health goes NOT_SERVING, then calls in flight get `grace` to finish before they are
  // cancelled (which cancels their engine requests). Idempotent.
  void Shutdown(absl::Duration grace = absl::ZeroDuration());

 private:
  void PollHealth(bool serving);

  EngineApi& engine_;
  const GrpcServerOptions options_;
  const RequestBuilder builder_;
  // Shared so that engine notify hooks can hold weak references to it.
  std::shared_ptr<TaskPool> pump_pool_;
  std::shared_ptr<TaskPool> render_pool_;
  std::unique_ptr<TpServeService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::thread health_thread_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tpserve

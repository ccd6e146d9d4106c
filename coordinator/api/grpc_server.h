// The gRPC front end: tpserve.v1.TpServe on the callback API, plus grpc.health.v1 (NOT_SERVING
// while the engine is not Ready()) and server reflection. Tested by tests/frontend_test.cc.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/text/chat_template_loader.h"
#include "coordinator/engine/engine_api.h"
#include "coordinator/api/frontend_metrics.h"
#include "coordinator/api/request_builder.h"
#include "coordinator/api/task_pool.h"
#include "coordinator/text/tokenizer.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace tpserve {

class TpServeService;

struct GrpcServerOptions {
  std::string address = "0.0.0.0:50051";  // host:port; port 0 picks a free port (see port())
  // Names clients may put in "model"; the first is the default. Empty: the engine's
  // Info().served_model_name.
  std::vector<std::string> served_model_names;
  // Larger requests fail with RESOURCE_EXHAUSTED (gRPC's own check).
  int max_receive_message_bytes = 4 << 20;
  // How often Ready() is polled for the health service.
  absl::Duration health_poll_interval = absl::Milliseconds(250);
  // Threads that build and write responses as the engine produces tokens (the engine's
  // thread only posts to them).
  int pump_threads = 2;
  // Where Generate requests are parsed, rendered and tokenized before submission; share the
  // HTTP server's (one budget for both). Null: the server makes its own of render_threads
  // threads and max_pending_renders waiting requests.
  std::shared_ptr<TaskPool> render_pool;
  int render_threads = 2;
  int max_pending_renders = 1024;
  // Request latencies are recorded here (shared with the HTTP server, which exports them);
  // null: not recorded. Must outlive the server.
  FrontendMetrics* metrics = nullptr;  // What requests that leave a sampling field unset get (--generation-config); empty: the
  // neutral SamplingParams defaults.
  GenerationDefaults generation_defaults;
  // How the model writes tool calls (--tool-call-parser); unset: the chat template's syntax.
  std::optional<ToolCallFormat> tool_call_parser;
  // --api-key: tpserve.v1.TpServe's methods need the metadata "authorization: Bearer K" with K
  // one of these, else UNAUTHENTICATED. grpc.health.v1 and server reflection stay open (as
  // HTTP /health does). Empty: no key needed.
  std::vector<std::string> api_keys;
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
  void SetServing(bool serving);

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

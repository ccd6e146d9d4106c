// The OpenAI-compatible HTTP front end over the event-driven transport (http_transport.h):
// completions and chat completions (JSON or SSE), /v1/models[/{id}], /version, /health,
// /metrics; with API keys set, every route but /health needs one. Requests are parsed, rendered and tokenized on a bounded pool (a full queue is
// a 429), never on the I/O threads; responses are written as the engine's events arrive.
// Tested by tests/frontend_http_test.cc.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/api/api_keys.h"
#include "coordinator/api/frontend_metrics.h"
#include "coordinator/api/frontend_options.h"
#include "coordinator/api/http_transport.h"
#include "coordinator/api/openai_json.h"
#include "coordinator/api/request_builder.h"
#include "coordinator/text/tool_calls.h"
#include "coordinator/api/task_pool.h"
#include "coordinator/engine/engine_api.h"
#include "coordinator/text/chat_template_loader.h"
#include "coordinator/text/tokenizer.h"

namespace tpserve {

struct HttpServerOptions {
  // host, port (0: a free one), I/O threads, connection limit, deadlines, body limit.
  HttpTransportOptions transport;
  // What the gRPC server shares (served names, render pool, metrics, defaults, tool-call
  // syntax, API keys): the same block for both.
  FrontendOptions frontend;
};

class HttpServer {
 public:
  // `chat_template` may be null (chat requests then fail with 400). All references must
  // outlive the server.
  HttpServer(EngineApi& engine, const Tokenizer& tokenizer, const ModelChatTemplate* chat_template,
             HttpServerOptions options);
  ~HttpServer();  // Shutdown()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts serving. UNAVAILABLE when it cannot bind.
  absl::Status Start();
  // The bound port; valid after Start().
  int port() const { return transport_.port(); }
  // Stops accepting, finishes the requests being rendered, ends open responses (cancelling
  // their requests) and joins the server's threads. Idempotent.
  void Shutdown();

 private:
  void Handle(std::shared_ptr<HttpExchange> exchange);
  void Generate(OpenAiEndpoint endpoint, const std::shared_ptr<HttpExchange>& exchange);
  void Reply(HttpExchange& exchange, const absl::Status& error);

  EngineApi& engine_;
  const HttpServerOptions options_;
  const RequestBuilder builder_;
  const ApiKeys api_keys_;
  std::unique_ptr<FrontendMetrics> own_metrics_;
  FrontendMetrics* const metrics_;
  const int64_t started_unix_s_;
  std::atomic<bool> stopping_{false};
  const std::shared_ptr<TaskPool> render_pool_;
  HttpTransport transport_;  // last: its threads call into the members above
};

}  // namespace tpserve

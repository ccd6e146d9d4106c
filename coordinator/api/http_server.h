// The OpenAI-compatible HTTP front end (cpp-httplib): completions, chat completions (JSON or
// SSE), models, /health, /metrics. Tested by tests/frontend_http_test.cc.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/text/chat_template_loader.h"
#include "coordinator/engine/engine_api.h"
#include "coordinator/api/frontend_metrics.h"
#include "coordinator/api/openai_json.h"
#include "coordinator/api/request_builder.h"
#include "coordinator/text/tokenizer.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace tpserve {

struct HttpServerOptions {
  std::string host = "0.0.0.0";
  int port = 8000;  // 0 picks a free port (see port())
  // Names clients may put in "model"; the first is the default and the one responses
  // name. Empty: the engine's Info().served_model_name.
  std::vector<std::string> served_model_names;
  // Larger request bodies get HTTP 400 before they are read.
  size_t max_body_bytes = size_t{4} << 20;
  // Connections served at once (httplib's thread pool); each open response stream holds
  // one, and further connections wait for a free thread.
  int threads = 64;
  // While a response waits for tokens, this often it checks that the client is still
  // connected (a disconnect cancels the request).
  absl::Duration disconnect_poll_interval = absl::Milliseconds(100);
  // How long an idle keep-alive connection is held open; also bounds Shutdown().
  int keep_alive_timeout_s = 5;
  // Where request latencies are recorded and /metrics reads from. Null: the server keeps
  // its own. Must outlive the server.
  FrontendMetrics* metrics = nullptr;
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

  // Binds and starts serving on a thread of its own. UNAVAILABLE when it cannot bind.
  absl::Status Start();
  // The bound port; valid after Start().
  int port() const { return port_; }
  // Stops accepting, ends open responses (cancelling their requests) and joins the
  // server's threads. Idempotent.
  void Shutdown();

 private:
  void Route();
  void HandleGenerate(OpenAiEndpoint endpoint, const httplib::Request& req, httplib::Response& res);
  void HandleError(const httplib::Request& req, httplib::Response& res);

  EngineApi& engine_;
  const HttpServerOptions options_;
  const RequestBuilder builder_;
  std::unique_ptr<FrontendMetrics> own_metrics_;
  FrontendMetrics* const metrics_;
  const int64_t started_unix_s_;
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::thread listen_thread_;
  // Shared with the response streams, which may outlive a handler call.
  std::shared_ptr<std::atomic<bool>> stopping_;
};

}  // namespace tpserve

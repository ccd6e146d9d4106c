// HttpServer: routes, error mapping and the streaming of one response per request.
// Tested by tests/frontend_test.cc.
#include "coordinator/api/http_server.h"

#include <sys/socket.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/api/openai_response.h"
#include "httplib.h"

namespace tpserve {
namespace {

constexpr char kJson[] = "application/json";

void SendError(httplib::Response& res, const absl::Status& status) {
  HttpError e = ToHttpError(status);
  res.status = e.status;
  res.set_content(e.body, kJson);
}

// One response being produced: httplib calls Provide() on the connection's thread until
// the request finishes; each call waits briefly for events, so that a client that went
// away is noticed (sink.is_writable() peeks at the socket) and its request cancelled.
class ResponseStream {
 public:
  ResponseStream(std::shared_ptr<RequestStream> stream, OpenAiResponseBuilder builder, bool sse,
                 RequestTracker tracker, absl::Duration poll, std::shared_ptr<std::atomic<bool>> stopping)
      : stream_(std::move(stream)),
        builder_(std::move(builder)),
        sse_(sse),
        tracker_(std::move(tracker)),
        poll_(poll),
        stopping_(std::move(stopping)) {}

  bool Provide(httplib::DataSink& sink) {
    OutputEvent e;
    if (stopping_->load()) return Abandon();
    if (!stream_->Next(&e, poll_)) return sink.is_writable() ? true : Abandon();
    std::string out;
    do {  // everything available, in one write
      tracker_.OnEvent(e);
      if (sse_) {
        out += builder_.Chunks(e);
      } else {
        builder_.Accumulate(e);
      }
    } while (e.finish == FinishReason::kNone && stream_->TryNext(&e));
    if (!sse_ && builder_.finished()) out = builder_.Body();
    if (!out.empty() && !sink.write(out.data(), out.size())) return Abandon();
    if (builder_.finished()) {
      done_ = true;
      sink.done();
    }
    return true;
  }

  // httplib is done with the response, successfully or not.
  void Release() {
    if (!done_) Abandon();
  }

 private:
  bool Abandon() {
    if (!done_) {
      done_ = true;
      stream_->Cancel();
      tracker_.OnClientGone();
    }
    return false;
  }

  const std::shared_ptr<RequestStream> stream_;
  OpenAiResponseBuilder builder_;
  const bool sse_;
  RequestTracker tracker_;
  const absl::Duration poll_;
  const std::shared_ptr<std::atomic<bool>> stopping_;
  bool done_ = false;
};

}  // namespace

HttpServer::HttpServer(EngineApi& engine, const Tokenizer& tokenizer, const ModelChatTemplate* chat_template,
                       HttpServerOptions options)
    : engine_(engine),
      options_(std::move(options)),
      builder_(engine, tokenizer, chat_template, options_.served_model_names),
      own_metrics_(options_.metrics != nullptr
                       ? nullptr
                       : std::make_unique<FrontendMetrics>(engine, builder_.served_model_names().front())),
      metrics_(options_.metrics != nullptr ? options_.metrics : own_metrics_.get()),
      started_unix_s_(absl::ToUnixSeconds(absl::Now())),
      server_(std::make_unique<httplib::Server>()),
      stopping_(std::make_shared<std::atomic<bool>>(false)) {
  Route();
}

HttpServer::~HttpServer() { Shutdown(); }

void HttpServer::Route() {
  httplib::Server& s = *server_;
  const size_t threads = static_cast<size_t>(std::max(1, options_.threads));
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_payload_max_length(options_.max_body_bytes);
  s.set_keep_alive_timeout(options_.keep_alive_timeout_s);
  s.set_error_handler([this](const httplib::Request& req, httplib::Response& res) { HandleError(req, res); });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    SendError(res, absl::InternalError(absl::StrCat("internal error: ", what)));
  });

  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGenerate(OpenAiEndpoint::kCompletions, req, res);
  });
  s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGenerate(OpenAiEndpoint::kChatCompletions, req, res);
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(ModelListJson(builder_.served_model_names(), started_unix_s_, engine_.Info().max_model_len),
                    kJson);
  });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (!engine_.Ready()) SendError(res, absl::UnavailableError("the engine is not ready (loading or draining)"));
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_->RenderPrometheus(), "text/plain; version=0.0.4; charset=utf-8");
  });
}

// Errors httplib raises itself (unknown route, oversize body, unparsable request) get
// the same JSON shape as ours; responses that already have a body are left alone.
void HttpServer::HandleError(const httplib::Request& req, httplib::Response& res) {
  if (!res.body.empty()) return;
  switch (res.status) {
    case 413:  // reported as the 400 our API promises for bad input
      SendError(res, absl::InvalidArgumentError(absl::StrCat("request body exceeds the limit of ",
                                                             options_.max_body_bytes, " bytes")));
      break;
    case 400:
      SendError(res, absl::InvalidArgumentError("malformed HTTP request"));
      break;
    case 404: {
      auto body = ErrorJson(absl::NotFoundError(absl::StrCat("no route for ", req.method, " ", req.path)));
      body["error"]["code"] = nullptr;
      res.set_content(body.dump(), kJson);
      break;
    }
    default:
      res.set_content(ErrorJson(absl::UnknownError(absl::StrCat("HTTP status ", res.status))).dump(), kJson);
      break;
  }
}

void HttpServer::HandleGenerate(OpenAiEndpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  RequestTracker tracker(metrics_);  // the clock starts now
  absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(endpoint, req.body);
  if (!parsed.ok()) return SendError(res, parsed.status());
  const std::string model = builder_.ResolveModel(parsed->input.model);
  absl::StatusOr<ServeRequest> request =
      builder_.Build(parsed->input, endpoint == OpenAiEndpoint::kCompletions ? "cmpl-" : "chatcmpl-");
  if (!request.ok()) return SendError(res, request.status());
  std::string id = request->request_id;
  absl::StatusOr<std::shared_ptr<RequestStream>> stream = engine_.Submit(*std::move(request));
  if (!stream.ok()) return SendError(res, stream.status());

  OpenAiResponseBuilder response(*parsed, std::move(id), model, absl::ToUnixSeconds(absl::Now()),
                                 builder_.tokenizer());
  auto body = std::make_shared<ResponseStream>(*std::move(stream), std::move(response), parsed->stream,
                                               std::move(tracker), options_.disconnect_poll_interval, stopping_);
  if (parsed->stream) res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      parsed->stream ? "text/event-stream" : kJson,
      [body](size_t /*offset*/, httplib::DataSink& sink) { return body->Provide(sink); },
      [body](bool /*success*/) { body->Release(); });
}

absl::Status HttpServer::Start() {
  // Debian's libcpp-httplib listens with a backlog of 5, so a burst of connections overflows
  // the accept queue (dropped handshakes, 1 s retries, resets). Remember the listening
  // socket as it is created and raise its backlog once it is bound.
  int listen_fd = -1;
  server_->set_socket_options([&listen_fd](int sock) {
    httplib::default_socket_options(sock);
    listen_fd = sock;
  });
  port_ = options_.port == 0 ? server_->bind_to_any_port(options_.host)
                             : (server_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  server_->set_socket_options(httplib::default_socket_options);  // drop the reference to listen_fd
  if (port_ <= 0) {
    port_ = 0;
    return absl::UnavailableError(
        absl::StrCat("HTTP: cannot listen on ", options_.host, ":", options_.port, " (in use, or not an address of "
                     "this machine)"));
  }
  if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);  // on Linux, a second listen() resizes the queue
  auto listening_ended = std::make_shared<std::atomic<bool>>(false);
  listen_thread_ = std::thread([this, listening_ended] {
    server_->listen_after_bind();
    listening_ended->store(true);
  });
  // stop() is a no-op until the accept loop runs, so Shutdown() must not come earlier.
  while (!server_->is_running() && !listening_ended->load()) absl::SleepFor(absl::Milliseconds(1));
  return absl::OkStatus();
}

void HttpServer::Shutdown() {
  if (stopping_->exchange(true)) return;
  server_->stop();
  if (listen_thread_.joinable()) listen_thread_.join();
}

}  // namespace tpserve

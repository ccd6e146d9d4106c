// HttpServer: routes, error mapping, and one ResponsePump per request that turns its
// engine events into a JSON body or SSE chunks. Tested by tests/frontend_http_test.cc.
#include "coordinator/api/http_server.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "coordinator/api/choice_streams.h"
#include "coordinator/api/openai_response.h"
#include "coordinator/engine/field_error.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

constexpr char kJson[] = "application/json";

// %XX escapes decoded (RFC 3986); anything else, a malformed escape included, as it is.
std::string PercentDecode(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// Every whole response goes through here (a stream is counted at StartStream), so each is
// counted once in http_requests_total.
void Respond(FrontendMetrics& metrics, HttpExchange& exchange, int status, absl::string_view content_type,
             std::string body, std::vector<HttpHeader> headers = {}) {
  metrics.CountHttpRequest(exchange.request().method, exchange.request().path, status);
  exchange.Respond(status, content_type, std::move(body), std::move(headers));
}

// Turns one request's engine events into its response, on the connection's strand: woken by
// the streams (SetNotify) and by the client going away. Keeps itself alive until the
// response is complete or the client is gone. With n > 1, choice i is engine request i
// (ChoiceStreams: choices 1.. follow choice 0's first event).
class ResponsePump : public std::enable_shared_from_this<ResponsePump> {
 public:
  ResponsePump(std::shared_ptr<HttpExchange> exchange, EngineApi& engine, std::shared_ptr<RequestStream> first,
               std::vector<ServeRequest> later, OpenAiResponseBuilder builder, bool sse, RequestTracker tracker,
               FrontendMetrics& metrics)
      : exchange_(std::move(exchange)),
        choices_(engine, std::move(first), std::move(tracker), std::move(later),
                 [this](RequestStream& stream) { Watch(stream); }),
        builder_(std::move(builder)),
        sse_(sse),
        metrics_(metrics) {}

  // From any thread: one trip to the connection's strand starts the response (a stream's
  // head goes out at once, with whatever events are already there in the same write).
  void Start() {
    self_ = shared_from_this();
    scheduled_.store(true);  // Begin pumps: notifications until then need no Pump of their own
    Watch(choices_.stream(0));
    exchange_->Post([self = self_] { self->Begin(); });
  }

 private:
  void Begin() {
    if (sse_) {
      metrics_.CountHttpRequest(exchange_->request().method, exchange_->request().path, 200);
      exchange_->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    }
    std::weak_ptr<ResponsePump> weak = self_;
    exchange_->OnClientGone([weak] {
      if (auto p = weak.lock()) p->ClientGone();
    });
    scheduled_.store(false);  // before Pump: later events schedule another
    Pump();
  }

  void Watch(RequestStream& stream) {
    std::weak_ptr<ResponsePump> weak = self_;
    stream.SetNotify([weak] {
      if (auto p = weak.lock()) p->Schedule();
    });
  }

  void Schedule() {
    if (scheduled_.exchange(true)) return;  // the pending Pump will see this event too
    exchange_->Post([self = shared_from_this()] {
      self->scheduled_.store(false);  // before Pump: later events schedule another
      self->Pump();
    });
  }

  void Add(const OutputEvent& e, size_t index) {
    if (sse_) {
      out_ += builder_.Chunks(e, static_cast<int>(index));
    } else {
      builder_.Accumulate(e, static_cast<int>(index));
    }
  }

  void Pump() {
    if (done_) return;
    OutputEvent e;
    for (size_t i = 0; i < choices_.num_submitted() && !builder_.finished(); ++i) {
      while (!builder_.finished() && choices_.Next(i, &e)) {
        Add(e, i);
        if (i != 0) continue;
        // A later choice the engine refuses fails the response.
        if (absl::Status later = choices_.SubmitLater(); !later.ok()) {
          Add(RefusedChoiceEvent(later), choices_.num_submitted());
        }
      }
    }
    if (!builder_.finished()) {
      if (sse_ && !out_.empty()) exchange_->Write(std::exchange(out_, ""));
      return;
    }
    if (sse_) {
      exchange_->End(std::exchange(out_, ""));
    } else if (absl::Status failure = builder_.status(); !failure.ok()) {
      Respond(metrics_, *exchange_, ToHttpError(failure).status, kJson, builder_.Body());
    } else {
      Respond(metrics_, *exchange_, 200, kJson, builder_.Body());
    }
    Done();  // a failed choice ends the response: the others are cancelled
  }

  void ClientGone() {
    if (done_) return;
    choices_.OnClientGone();
    Done();
  }

  void Done() {
    done_ = true;
    choices_.CancelUnfinished();
    self_.reset();
  }

  const std::shared_ptr<HttpExchange> exchange_;
  ChoiceStreams choices_;  // strand-only once Start() returned
  OpenAiResponseBuilder builder_;
  const bool sse_;
  FrontendMetrics& metrics_;
  std::atomic<bool> scheduled_{false};
  // Strand-only.
  std::string out_;  // SSE text not yet written
  bool done_ = false;
  std::shared_ptr<ResponsePump> self_;
};

}  // namespace

HttpServer::HttpServer(EngineApi& engine, const Tokenizer& tokenizer, const ModelChatTemplate* chat_template,
                       HttpServerOptions options)
    : engine_(engine),
      options_(std::move(options)),
      builder_(engine, tokenizer, chat_template, options_.frontend.served_model_names,
               options_.frontend.generation_defaults, options_.frontend.tool_call_parser),
      api_keys_(options_.frontend.api_keys),
      own_metrics_(options_.frontend.metrics != nullptr
                       ? nullptr
                       : std::make_unique<FrontendMetrics>(engine, builder_.served_model_names().front())),
      metrics_(options_.frontend.metrics != nullptr ? options_.frontend.metrics : own_metrics_.get()),
      started_unix_s_(absl::ToUnixSeconds(absl::Now())),
      render_pool_(options_.frontend.render_pool != nullptr
                       ? options_.frontend.render_pool
                       : std::make_shared<TaskPool>(options_.frontend.render_threads,
                                                    static_cast<size_t>(std::max(1, options_.frontend.max_pending_renders)),
                                                    "tpserve-render")),
      transport_(
          options_.transport, [this](std::shared_ptr<HttpExchange> e) { Handle(std::move(e)); },
          [](int, const absl::Status& error) { return ToHttpError(error).body; }) {}

HttpServer::~HttpServer() { Shutdown(); }

absl::Status HttpServer::Start() { return transport_.Start(); }

void HttpServer::Shutdown() {
  if (stopping_.exchange(true)) return;
  render_pool_->Stop();  // requests being rendered are submitted (or refused) first
  transport_.Shutdown();
}

void HttpServer::Reply(HttpExchange& exchange, const absl::Status& error) {
  HttpError e = ToHttpError(error);
  Respond(*metrics_, exchange, e.status, kJson, std::move(e.body));
}

// On an I/O thread: cheap routes are answered here, generation goes to the render pool.
void HttpServer::Handle(std::shared_ptr<HttpExchange> exchange) {
  const HttpRequest& req = exchange->request();
  // /health stays open (load balancers and probes send no key), as vLLM's does.
  if (req.path != "/health") {
    if (absl::Status key = api_keys_.Check(req.authorization); !key.ok()) {
      HttpError e = ToHttpError(key);
      return Respond(*metrics_, *exchange, e.status, kJson, std::move(e.body), {{"WWW-Authenticate", "Bearer"}});
    }
  }
  const bool get = req.method == "GET", post = req.method == "POST";
  if (post && (req.path == "/v1/completions" || req.path == "/v1/chat/completions")) {
    const OpenAiEndpoint endpoint =
        req.path == "/v1/completions" ? OpenAiEndpoint::kCompletions : OpenAiEndpoint::kChatCompletions;
    if (stopping_.load()) return Reply(*exchange, absl::UnavailableError("the server is shutting down"));
    const bool heavy = req.body.size() >= kHeavyRenderBytes;
    if (!render_pool_->Post([this, endpoint, exchange] { Generate(endpoint, exchange); }, heavy)) {
      return Reply(*exchange,
                   absl::ResourceExhaustedError(
                       "the server is busy: as many requests as --max-pending-renders already wait to be rendered "
                       "and tokenized; retry later"));
    }
    return;
  }
  if (get && req.path == "/health") {
    if (absl::Status health = engine_.Health(); !health.ok()) return Reply(*exchange, health);
    return Respond(*metrics_, *exchange, 200, kJson, "{}");
  }
  if (get && req.path == "/metrics") {
    return Respond(*metrics_, *exchange, 200, "text/plain; version=0.0.4; charset=utf-8", metrics_->RenderPrometheus());
  }
  if (get && req.path == "/v1/models") {
    return Respond(*metrics_, *exchange, 200, kJson,
                   ModelListJson(builder_.served_model_names(), started_unix_s_, engine_.Info().max_model_len));
  }
  constexpr absl::string_view kModel = "/v1/models/";
  const bool model_path = absl::StartsWith(req.path, kModel) && req.path.size() > kModel.size();
  if (get && model_path) {
    // Clients percent-encode the id (the openai SDK: "/" in a path-like model name is %2F).
    const std::string id = PercentDecode(absl::string_view(req.path).substr(kModel.size()));
    if (absl::Status known = builder_.CheckModel(id); !known.ok()) return Reply(*exchange, known);
    return Respond(*metrics_, *exchange, 200, kJson, ModelJson(id, started_unix_s_, engine_.Info().max_model_len));
  }
  if (get && req.path == "/version") {
    return Respond(*metrics_, *exchange, 200, kJson, nlohmann::json{{"version", engine_.Info().engine_version}}.dump());
  }
  // A known route asked with another method: 405 naming the route's own.
  const bool post_route = req.path == "/v1/completions" || req.path == "/v1/chat/completions";
  const bool get_route = req.path == "/health" || req.path == "/metrics" || req.path == "/v1/models" ||
                         req.path == "/version" || model_path;
  if (post_route || get_route) {
    const char* allowed = post_route ? "POST" : "GET";
    nlohmann::ordered_json body = ErrorJson(absl::InvalidArgumentError(
        absl::StrCat("method ", req.method, " is not allowed for ", req.path, "; use ", allowed)));
    return Respond(*metrics_, *exchange, 405, kJson, body.dump(), {{"Allow", allowed}});
  }
  nlohmann::ordered_json body = ErrorJson(absl::NotFoundError(absl::StrCat("no route for ", req.method, " ", req.path)));
  body["error"]["code"] = nullptr;
  Respond(*metrics_, *exchange, 404, kJson, body.dump());
}

// On the render pool: parse, render, tokenize, submit; then the pump streams the response.
void HttpServer::Generate(OpenAiEndpoint endpoint, const std::shared_ptr<HttpExchange>& exchange) {
  RequestTracker tracker(metrics_, exchange->request().arrival);
  absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(endpoint, exchange->request().body);
  if (!parsed.ok()) return Reply(*exchange, parsed.status());
  const std::string model = builder_.ResolveModel(parsed->input.model);
  absl::StatusOr<ServeRequest> request =
      builder_.Build(parsed->input, endpoint == OpenAiEndpoint::kCompletions ? "cmpl-" : "chatcmpl-");
  if (!request.ok()) return Reply(*exchange, request.status());
  std::string id = request->request_id;
  std::vector<ServeRequest> later = MoreChoices(*request, parsed->input.n);
  tracker.OnSubmitted();
  absl::StatusOr<std::shared_ptr<RequestStream>> stream = engine_.Submit(*std::move(request));
  if (!stream.ok()) return Reply(*exchange, stream.status());
  OpenAiResponseBuilder response(*parsed, std::move(id), model, absl::ToUnixSeconds(absl::Now()),
                                 builder_.tokenizer(), builder_.tool_call_format());
  if (parsed->echo) {
    const auto* text = std::get_if<std::string>(&parsed->input.prompt);
    response.SetEcho(text != nullptr ? *text
                                     : builder_.tokenizer().Decode(std::get<std::vector<int32_t>>(parsed->input.prompt),
                                                                   /*skip_special_tokens=*/false));
  }
  std::make_shared<ResponsePump>(exchange, engine_, *std::move(stream), std::move(later), std::move(response),
                                 parsed->stream, std::move(tracker), *metrics_)
      ->Start();
}

}  // namespace tpserve

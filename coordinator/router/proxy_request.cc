// ProxyRequest: failover and pass-through. Tested by tests/router_test.sh.
#include "coordinator/router/proxy_request.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "boost/asio/post.hpp"
#include "coordinator/api/openai_json.h"
#include "coordinator/router/grpc_relay.h"
#include "coordinator/router/grpc_upstream_call.h"

namespace tpserve {
namespace {

constexpr char kBackendHeader[] = "x-tpserve-backend";

nlohmann::ordered_json RouterError(absl::string_view message, absl::string_view type) {
  return {{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}}}};
}

// A try that ended in `status` (not OK): before its connection was up (a connect timeout
// included), after it past a deadline, or broken.
BackendErrorKind FailureKind(bool connected, const absl::Status& status) {
  if (!connected) return BackendErrorKind::kConnect;
  if (status.code() == absl::StatusCode::kDeadlineExceeded) return BackendErrorKind::kTimeout;
  return BackendErrorKind::kStreamBroken;
}

}  // namespace

ProxyRequest::ProxyRequest(Strand strand, std::shared_ptr<HttpExchange> exchange, nlohmann::json body,
                           std::string model, std::string path_suffix, std::vector<ProxyCandidate> candidates,
                           ProxyTimeouts timeouts, RequestLog* log, RouterMetrics& metrics)
    : strand_(std::move(strand)),
      exchange_(std::move(exchange)),
      body_(std::move(body)),
      model_(std::move(model)),
      path_suffix_(std::move(path_suffix)),
      candidates_(std::move(candidates)),
      timeouts_(timeouts),
      log_(log),
      metrics_(metrics),
      stream_(body_.contains("stream") && body_["stream"].is_boolean() && body_["stream"].get<bool>()) {}

void ProxyRequest::Start() {
  boost::asio::post(strand_, [self = shared_from_this()] { self->Begin(); });
}

void ProxyRequest::Begin() {
  self_ = shared_from_this();
  std::weak_ptr<ProxyRequest> weak = self_;
  exchange_->OnClientGone([weak, strand = strand_] {
    boost::asio::post(strand, [weak] {
      if (auto self = weak.lock()) self->OnClientGone();
    });
  });
  TryNext();
}

void ProxyRequest::TryNext() {
  if (finished_) return;
  if (next_ >= candidates_.size() && errors_.empty() && !refusal_.ok()) {
    // No candidate could take the request (grpc:// backends, and it uses what their API cannot
    // carry): the client's error, 400 naming the field.
    HttpError e = ToHttpError(refusal_);
    exchange_->Respond(e.status, "application/json", std::move(e.body));
    return Finish(e.status, RequestOutcome::kError, std::string(refusal_.message()));
  }
  if (next_ >= candidates_.size()) {
    // Every one busy: 429, so that the client backs off and retries as it would against one
    // server; any other failure among them: 502.
    const bool all_busy = busy_ > 0 && busy_ == static_cast<int>(errors_.size());
    std::string message = absl::StrCat("every backend of model \"", model_, "\" (and its fallbacks) ",
                                       all_busy ? "is over its queue limit: " : "failed: ", absl::StrJoin(errors_, "; "));
    if (!refusal_.ok()) absl::StrAppend(&message, "; its grpc:// backends were not tried: ", refusal_.message());
    const int status = all_busy ? 429 : 502;
    exchange_->Respond(status, "application/json",
                       RouterError(message, all_busy ? "rate_limit_error" : "server_error").dump());
    return Finish(status, RequestOutcome::kError, message);
  }
  current_ = &candidates_[next_++];
  const RouterBackend& b = current_->pool->backend(current_->index);
  const std::string remote_model = b.remote_model.empty() ? current_->pool->model().name : b.remote_model;
  status_ = 0;
  whole_.clear();
  connected_ = false;
  try_start_ = absl::Now();
  std::shared_ptr<UpstreamCall> call =
      current_->grpc != nullptr ? StartGrpc(b, remote_model) : StartHttp(b, remote_model);
  if (call == nullptr) return TryNext();  // skipped: refusal_ says why
  call_ = std::move(call);
}

std::shared_ptr<UpstreamCall> ProxyRequest::StartHttp(const RouterBackend& b, const std::string& remote_model) {
  nlohmann::json body = body_;
  body["model"] = remote_model;
  UpstreamRequest request;
  request.endpoint = current_->endpoint;
  request.target = b.base_path + path_suffix_;
  request.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (!b.api_key.empty()) request.authorization = "Bearer " + b.api_key;
  request.connect_timeout = timeouts_.connect;
  request.response_timeout = timeouts_.response;
  current_->pool->Begin(current_->index);
  metrics_.BackendStarted(*current_->pool, current_->index);
  return UpstreamCall::Start(strand_, std::move(request), Callbacks());
}

std::shared_ptr<UpstreamCall> ProxyRequest::StartGrpc(const RouterBackend& b, const std::string& remote_model) {
  const OpenAiEndpoint endpoint =
      path_suffix_ == "/completions" ? OpenAiEndpoint::kCompletions : OpenAiEndpoint::kChatCompletions;
  absl::StatusOr<GrpcRelayRequest> relayed = BuildGrpcRelayRequest(endpoint, exchange_->request().body, remote_model);
  if (!relayed.ok()) {
    if (refusal_.ok()) refusal_ = relayed.status();
    return nullptr;
  }
  GrpcUpstreamRequest request;
  request.backend = current_->grpc;
  request.request = std::move(relayed->proto);
  request.relay = std::make_unique<GrpcRelay>(relayed->openai, remote_model, absl::ToUnixSeconds(absl::Now()));
  if (!b.api_key.empty()) request.authorization = "Bearer " + b.api_key;
  request.connect_timeout = timeouts_.connect;
  request.response_timeout = timeouts_.response;
  current_->pool->Begin(current_->index);
  metrics_.BackendStarted(*current_->pool, current_->index);
  return StartGrpcCall(strand_, std::move(request), Callbacks());
}

UpstreamCallbacks ProxyRequest::Callbacks() {
  // The callbacks hold the request alive while the call runs; Cancel() ends them.
  auto self = shared_from_this();
  return {[self](bool reused) {
            self->connected_ = true;
            self->metrics_.BackendConnection(*self->current_->pool, self->current_->index, reused);
          },
          [self] {
            // A pooled connection the backend had closed: not the backend's failure; a new one is
            // being opened (a failure to connect it is "connect").
            self->connected_ = false;
            self->metrics_.BackendStaleConnection(*self->current_->pool, self->current_->index);
          },
          [self](int status, std::string content_type) { self->OnHead(status, std::move(content_type)); },
          [self](std::string piece) { self->OnData(std::move(piece)); },
          [self](absl::Status status) { self->OnEnd(std::move(status)); }};
}

void ProxyRequest::OnHead(int status, std::string content_type) {
  status_ = status;
  content_type_ = std::move(content_type);
  metrics_.BackendFirstByte(*current_->pool, current_->index, absl::Now() - try_start_);
  if (status_ >= 500) {
    call_->Cancel();
    current_->pool->End(current_->index);
    FailOver(absl::StrCat("HTTP ", status_), BackendErrorKind::kHttp5xx);
  } else if (status_ == 429) {
    // Over its queue limit (tpserve's --max-queue, vLLM's): the next replica or the fallback
    // takes the request; the backend is healthy and stays in routing.
    call_->Cancel();
    current_->pool->End(current_->index);
    ++busy_;
    MoveOn("HTTP 429 (over its queue limit)", BackendErrorKind::kBusy, /*eject=*/false);
  }
}

void ProxyRequest::OnData(std::string piece) {
  const std::string& url = current_->pool->backend(current_->index).url;
  if (stream_ && status_ == 200) {
    if (!streaming_) {
      streaming_ = true;
      Answering();
      exchange_->StartStream(200, content_type_.empty() ? "text/event-stream" : content_type_,
                             {{"Cache-Control", "no-cache"}, {kBackendHeader, url}});
    }
    exchange_->Write(std::move(piece));
    return;
  }
  whole_ += piece;
}

void ProxyRequest::OnEnd(absl::Status status) {
  current_->pool->End(current_->index);
  call_.reset();
  const std::string& url = current_->pool->backend(current_->index).url;
  if (!status.ok()) {
    const BackendErrorKind kind = FailureKind(connected_, status);
    if (!streaming_) return FailOver(std::string(status.message()), kind);
    // Part of the stream reached the client: end it with an error event, never silently.
    current_->pool->Eject(current_->index, absl::Now());
    metrics_.BackendFailed(*current_->pool, current_->index, kind, /*moved_on=*/false);
    const std::string message =
        absl::StrCat("the backend ", url, " failed in the middle of the stream: ", status.message());
    exchange_->End(absl::StrCat(SseEvent(RouterError(message, "server_error").dump()), kSseDone));
    return Finish(200, RequestOutcome::kError, message);
  }
  if (streaming_) {
    exchange_->End();
    metrics_.BackendAnswered(*current_->pool, current_->index, absl::Now() - exchange_->request().arrival);
    return Finish(200, RequestOutcome::kSuccess, "");
  }
  std::vector<HttpHeader> headers = {{kBackendHeader, url}};
  const int status_code = status_;
  std::string body = std::move(whole_);
  RequestRecord partial;
  if (status_code < 400) {
    nlohmann::json parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_object() && parsed.contains("usage") && parsed["usage"].is_object()) {
      const nlohmann::json& usage = parsed["usage"];
      if (usage.contains("prompt_tokens") && usage["prompt_tokens"].is_number_integer()) {
        partial.prompt_tokens = usage["prompt_tokens"].get<int64_t>();
      }
      if (usage.contains("completion_tokens") && usage["completion_tokens"].is_number_integer()) {
        partial.completion_tokens = usage["completion_tokens"].get<int64_t>();
      }
    }
  }
  exchange_->Respond(status_code, content_type_.empty() ? "application/json" : content_type_, std::move(body),
                     std::move(headers));
  if (finished_) return;
  finished_ = true;
  Answering();
  metrics_.BackendAnswered(*current_->pool, current_->index, absl::Now() - exchange_->request().arrival);
  metrics_.RequestFinished(model_, status_code < 400 ? RequestOutcome::kSuccess : RequestOutcome::kError);
  if (log_ != nullptr) {
    partial.model = model_;
    partial.backend = url;
    partial.latency_ms = absl::ToDoubleMilliseconds(absl::Now() - exchange_->request().arrival);
    partial.status = status_code;
    partial.success = status_code < 400;
    if (!partial.success) partial.error = absl::StrCat("the backend answered HTTP ", status_code);
    log_->Append(partial, absl::Now());
  }
  self_.reset();
}

void ProxyRequest::FailOver(const std::string& error, BackendErrorKind kind) { MoveOn(error, kind, /*eject=*/true); }

void ProxyRequest::MoveOn(const std::string& error, BackendErrorKind kind, bool eject) {
  if (eject) current_->pool->Eject(current_->index, absl::Now());
  metrics_.BackendFailed(*current_->pool, current_->index, kind, /*moved_on=*/next_ < candidates_.size());
  errors_.push_back(absl::StrCat(current_->pool->backend(current_->index).url, ": ", error));
  TryNext();
}

void ProxyRequest::OnClientGone() {
  if (finished_) return;
  if (call_ != nullptr) {
    call_->Cancel();
    call_.reset();
    current_->pool->End(current_->index);
  }
  Finish(streaming_ ? 200 : 499, RequestOutcome::kClientGone,
         "the client disconnected; the backend request was cancelled");
}

void ProxyRequest::Answering() {
  const std::string& answering = current_->pool->model().name;
  if (answering != model_) metrics_.FallbackTaken(model_, answering);
}

void ProxyRequest::Finish(int status, RequestOutcome outcome, std::string error) {
  if (finished_) return;
  finished_ = true;
  metrics_.RequestFinished(model_, outcome);
  const bool success = outcome == RequestOutcome::kSuccess;
  if (log_ != nullptr) {
    RequestRecord r;
    r.model = model_;
    if (streaming_ || success) r.backend = current_->pool->backend(current_->index).url;
    r.latency_ms = absl::ToDoubleMilliseconds(absl::Now() - exchange_->request().arrival);
    r.status = status;
    r.success = success;
    r.error = std::move(error);
    log_->Append(r, absl::Now());
  }
  self_.reset();
}

}  // namespace tpserve

// ProxyRequest: the HTTP exchange's side of a routed request. Tested by tests/router_test.sh and
// tests/router_grpc_test.*.
#include "coordinator/router/proxy_request.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "boost/asio/post.hpp"
#include "coordinator/api/openai_json.h"
#include "coordinator/api/request_builder.h"
#include "coordinator/router/grpc_relay.h"
#include "coordinator/router/grpc_upstream_call.h"

namespace tpserve {
namespace {

constexpr char kBackendHeader[] = "x-tpserve-backend";
// Where a fallback model answered: its name (docs/router.md).
constexpr char kFallbackHeader[] = "x-tpserve-fallback";

nlohmann::ordered_json RouterError(absl::string_view message, absl::string_view type) {
  return {{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}}}};
}

// A try that ended in `status` (not OK): before its connection was up (a connect timeout
// included), after it past a deadline, or broken.
void SetUsage(const std::optional<UsageTokens>& usage, ProxyEnd& end) {
  if (!usage.has_value()) return;
  end.prompt_tokens = usage->prompt_tokens;
  end.completion_tokens = usage->completion_tokens;
}

// Whether the router may ask for a stream's usage on its client's behalf: "stream_options"
// absent (or null), or an object whose include_usage is absent or false. A client that asked
// already gets its usage chunk as the backend sends it; a malformed stream_options goes as sent,
// for the backend to refuse.
bool UsageToAsk(const nlohmann::json& body) {
  const auto options = body.find("stream_options");
  if (options == body.end() || options->is_null()) return true;
  if (!options->is_object()) return false;
  const auto include = options->find("include_usage");
  return include == options->end() || (include->is_boolean() && !include->get<bool>());
}

BackendErrorKind FailureKind(bool connected, const absl::Status& status) {
  if (!connected) return BackendErrorKind::kConnect;
  if (status.code() == absl::StatusCode::kDeadlineExceeded) return BackendErrorKind::kTimeout;
  return BackendErrorKind::kStreamBroken;
}

}  // namespace

ProxyRequest::ProxyRequest(Strand strand, std::shared_ptr<HttpExchange> exchange, nlohmann::json body,
                           std::string model, std::string path_suffix, std::vector<ProxyCandidate> candidates,
                           RequestLog* log, RouterMetrics& metrics)
    : strand_(std::move(strand)),
      exchange_(std::move(exchange)),
      body_(std::move(body)),
      path_suffix_(std::move(path_suffix)),
      stream_(body_.contains("stream") && body_["stream"].is_boolean() && body_["stream"].get<bool>()),
      core_(std::move(model), FrontDoor::kHttp, std::move(candidates), exchange_->request().arrival, log, metrics),
      request_timer_(strand_) {}

void ProxyRequest::Start() {
  // Begin is on the strand before OnClientGone can be: a client already gone finishes the
  // request after its first try started (and cancels it).
  boost::asio::post(strand_, [self = shared_from_this()] { self->Begin(); });
  std::weak_ptr<ProxyRequest> weak = shared_from_this();
  exchange_->OnClientGone([weak, strand = strand_] {
    boost::asio::post(strand, [weak] {
      if (auto self = weak.lock()) self->OnClientGone();
    });
  });
}

void ProxyRequest::Begin() {
  self_ = shared_from_this();
  TryNext();
}

void ProxyRequest::TryNext() {
  if (core_.finished()) return;
  while (const ProxyCandidate* c = core_.Next()) {
    status_ = 0;
    strip_usage_ = false;
    whole_.clear();
    ArmRequestTimeout();
    std::shared_ptr<UpstreamCall> call = c->grpc != nullptr ? StartGrpc(*c) : StartHttp(*c);
    if (call != nullptr) {
      call_ = std::move(call);
      return;
    }
  }
  const absl::Status why = core_.Exhausted();
  if (!core_.any_failed()) {
    // No candidate could take the request (grpc:// backends, and it uses what their API cannot
    // carry): the client's error, 400 naming the field.
    HttpError e = ToHttpError(why);
    exchange_->Respond(e.status, "application/json", std::move(e.body));
    return Finish({.outcome = RequestOutcome::kError, .status = e.status, .error = std::string(why.message())});
  }
  const bool busy = why.code() == absl::StatusCode::kResourceExhausted;
  const int status = busy ? 429 : 502;
  exchange_->Respond(status, "application/json",
                     RouterError(why.message(), busy ? "rate_limit_error" : "server_error").dump());
  Finish({.outcome = RequestOutcome::kError, .status = status, .error = std::string(why.message())});
}

std::shared_ptr<UpstreamCall> ProxyRequest::StartHttp(const ProxyCandidate& c) {
  const RouterBackend& b = core_.backend();
  const std::string remote_model = core_.RemoteModel();
  // A stream whose client did not ask for usage: asked of the backend (request_usage), so that
  // its tokens are counted, and taken out of the client's stream (OnData).
  strip_usage_ = stream_ && b.connection.request_usage && UsageToAsk(body_);
  std::string body;
  if (remote_model == core_.model() && !strip_usage_) {
    // The backend knows the model by the client's name: the client's bytes go as they came
    // (they parsed as this JSON object), without a copy of the parsed body and a new dump.
    body = exchange_->request().body;
  } else {
    nlohmann::json renamed = body_;
    renamed["model"] = remote_model;
    if (strip_usage_) renamed["stream_options"]["include_usage"] = true;
    body = renamed.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  core_.BeginTry();
  return UpstreamCall::Start(strand_, HttpBackendRequest(c, path_suffix_, std::move(body)), Callbacks());
}

std::shared_ptr<UpstreamCall> ProxyRequest::StartGrpc(const ProxyCandidate& c) {
  const OpenAiEndpoint endpoint =
      path_suffix_ == "/completions" ? OpenAiEndpoint::kCompletions : OpenAiEndpoint::kChatCompletions;
  const std::string remote_model = core_.RemoteModel();
  absl::StatusOr<GrpcRelayRequest> relayed = BuildGrpcRelayRequest(endpoint, exchange_->request().body, remote_model);
  if (!relayed.ok()) {
    core_.Skip(relayed.status());
    return nullptr;
  }
  const RouterBackend& b = core_.backend();
  GrpcUpstreamRequest request;
  request.backend = c.grpc;
  request.request = std::move(relayed->proto);
  request.relay = std::make_unique<GrpcRelay>(relayed->openai, remote_model, absl::ToUnixSeconds(absl::Now()));
  if (!b.api_key.empty()) request.authorization = "Bearer " + b.api_key;
  request.connect_timeout = b.connection.connect_timeout;
  request.response_timeout = b.connection.timeout;
  core_.BeginTry();
  return StartGrpcCall(strand_, std::move(request), Callbacks());
}

std::vector<HttpHeader> ProxyRequest::AnswerHeaders(std::vector<HttpHeader> headers) const {
  headers.push_back({kBackendHeader, core_.url()});
  if (std::string fallback = core_.fallback_model(); !fallback.empty()) {
    headers.push_back({kFallbackHeader, std::move(fallback)});
  }
  return headers;
}

UpstreamCallbacks ProxyRequest::Callbacks() {
  // The callbacks hold the request alive while the call runs; Cancel() ends them.
  auto self = shared_from_this();
  return {[self](bool reused) { self->core_.Connected(reused); },
          // A pooled connection the backend had closed: not the backend's failure; a new one is
          // being opened (a failure to connect it is "connect").
          [self] { self->core_.Stale(); },
          [self](int status, std::string content_type) { self->OnHead(status, std::move(content_type)); },
          [self](std::string piece) { self->OnData(std::move(piece)); },
          [self](absl::Status status) { self->OnEnd(std::move(status)); },
          [self](int64_t prompt_tokens, int64_t completion_tokens) {
            self->call_usage_ = UsageTokens{prompt_tokens, completion_tokens};
          }};
}

void ProxyRequest::OnHead(int status, std::string content_type) {
  status_ = status;
  content_type_ = std::move(content_type);
  if (core_.HttpHead(status_)) {
    call_->Cancel();
    TryNext();
  }
}

void ProxyRequest::OnData(std::string piece) {
  if (stream_ && status_ == 200) {
    if (!streaming_) {
      streaming_ = true;
      core_.Answering();
      exchange_->StartStream(200, content_type_.empty() ? "text/event-stream" : content_type_,
                             AnswerHeaders({{"Cache-Control", "no-cache"}}));
    }
    if (strip_usage_) {
      std::string out = usage_.Strip(piece);
      if (!out.empty()) exchange_->Write(std::move(out));
      return;
    }
    usage_.Feed(piece);
    exchange_->Write(std::move(piece));
    return;
  }
  whole_ += piece;
}

void ProxyRequest::OnEnd(absl::Status status) {
  call_.reset();
  core_.EndTry();
  if (!status.ok()) {
    const BackendErrorKind kind = FailureKind(core_.connected(), status);
    if (!streaming_) {
      core_.TryFailed(std::string(status.message()), kind);
      return TryNext();
    }
    // Part of the stream reached the client: end it with an error event, never silently.
    core_.BrokeWhileAnswering(kind);
    const std::string message =
        absl::StrCat("the backend ", core_.url(), " failed in the middle of the stream: ", status.message());
    EndStreamWithError(message);
    return Finish({.outcome = RequestOutcome::kError, .status = 200, .error = message});
  }
  if (streaming_) {
    exchange_->End(strip_usage_ ? usage_.Rest() : "");
    // The stream's usage chunk where the client asked for one, else the call's own count.
    ProxyEnd end{.outcome = RequestOutcome::kSuccess, .status = 200, .answered = true};
    SetUsage(usage_.usage() ? usage_.usage() : call_usage_, end);
    return Finish(std::move(end));
  }
  ProxyEnd end;
  end.status = status_;
  end.outcome = status_ < 400 ? RequestOutcome::kSuccess : RequestOutcome::kError;
  end.answered = true;
  if (status_ >= 400) end.error = absl::StrCat("the backend answered HTTP ", status_);
  if (status_ < 400) {
    // A grpc:// backend's call counted the tokens itself; an HTTP backend's body says them.
    SetUsage(call_usage_ ? call_usage_
                         : ReadUsage(nlohmann::json::parse(whole_, nullptr, /*allow_exceptions=*/false)),
             end);
  }
  core_.Answering();
  exchange_->Respond(status_, content_type_.empty() ? "application/json" : content_type_, std::move(whole_),
                     AnswerHeaders({}));
  Finish(std::move(end));
}

void ProxyRequest::EndStreamWithError(const std::string& message) {
  // The client's choices (OpenAI's n) that the stream has not finished end with finish_reason
  // "error", then the error event says why: never a silent cut.
  const auto n = body_.find("n");
  const int choices = n != body_.end() && n->is_number_integer() && n->get<int64_t>() > 0 && n->get<int64_t>() <= kMaxChoices
                          ? static_cast<int>(n->get<int64_t>())
                          : 1;
  exchange_->End(absl::StrCat(usage_.ErrorChunk(choices), SseEvent(RouterError(message, "server_error").dump()),
                              kSseDone));
}

void ProxyRequest::OnClientGone() {
  if (core_.finished()) return;
  if (call_ != nullptr) {
    call_->Cancel();
    call_.reset();
  }
  Finish({.outcome = RequestOutcome::kClientGone,
          .status = streaming_ ? 200 : 499,
          .error = "the client disconnected; the backend request was cancelled"});
}

void ProxyRequest::ArmRequestTimeout() {
  const absl::Time deadline = core_.request_deadline();
  if (deadline == request_deadline_) return;
  request_deadline_ = deadline;
  request_timer_.Set(deadline, [self = shared_from_this()] { self->OnRequestTimeout(); });
}

void ProxyRequest::OnRequestTimeout() {
  if (core_.finished()) return;
  if (call_ != nullptr) {
    call_->Cancel();
    call_.reset();
  }
  const std::string message = core_.RequestTimedOut(streaming_);
  if (streaming_) {
    EndStreamWithError(message);
    return Finish({.outcome = RequestOutcome::kError, .status = 200, .error = message});
  }
  exchange_->Respond(504, "application/json", RouterError(message, "server_error").dump());
  Finish({.outcome = RequestOutcome::kError, .status = 504, .error = message});
}

void ProxyRequest::Finish(ProxyEnd end) {
  request_timer_.Cancel();
  core_.Finish(std::move(end));
  self_.reset();
}

}  // namespace tpserve

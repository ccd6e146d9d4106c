// GrpcFrontGenerate: routing, forwarding and failover of a Generate call to the router's gRPC
// port. Tested by tests/router_grpc_front_test.cc and tests/router_grpc_front_test.sh.
#include "coordinator/router/grpc_front_generate.h"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "boost/asio/post.hpp"
#include "boost/asio/strand.hpp"
#include "coordinator/api/grpc_service.h"
#include "coordinator/api/grpc_status.h"
#include "coordinator/api/openai_json.h"
#include "coordinator/router/backend_pool.h"

namespace tpserve {
namespace {

constexpr char kBackendMetadata[] = "x-tpserve-backend";
// The most of an http(s):// backend's error body kept for the client's message.
constexpr size_t kMaxErrorBody = 64 << 10;

std::string CodeName(const absl::Status& status) { return absl::StatusCodeToString(status.code()); }

// The deadline the client set on its call; InfiniteFuture when it set none.
absl::Time ClientDeadline(const grpc::CallbackServerContext& server) {
  const std::chrono::system_clock::time_point deadline = server.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(deadline);
}

// The client's deadline has passed, as near as the router can tell: the client's clock ends its
// call (and cancels it here) a little before the deadline the router computed from the call's
// timeout header, and timers fire early by a little; 250 ms of slack.
bool DeadlineReached(absl::Time deadline) { return absl::Now() + absl::Milliseconds(250) >= deadline; }

}  // namespace

std::string PromptText(const v1::GenerateRequest& request) {
  nlohmann::json body = nlohmann::json::object();
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText:
      body["prompt"] = request.text();
      break;
    case v1::GenerateRequest::kTokenIds: {
      const auto& ids = request.token_ids().ids();
      body["prompt"] = nlohmann::json(std::vector<int32_t>(ids.begin(), ids.end()));
      break;
    }
    case v1::GenerateRequest::kChat:
      body["messages"] = nlohmann::json::array();
      for (const v1::ChatMessage& m : request.chat().messages()) {
        body["messages"].push_back({{"role", m.role()}, {"content", m.content()}});
      }
      break;
    default:
      break;
  }
  return PromptText(body);
}

GrpcFrontGenerate::GrpcFrontGenerate(const Context& context, grpc::CallbackServerContext* server, absl::Time arrival)
    : context_(context),
      server_(server),
      arrival_(arrival),
      deadline_(ClientDeadline(*server)),
      strand_(boost::asio::make_strand(context.proxy_io)),
      request_timer_(strand_) {}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GrpcFrontGenerate::Start(const Context& context,
                                                                     grpc::CallbackServerContext* server,
                                                                     std::string wire, absl::Time arrival) {
  std::shared_ptr<GrpcFrontGenerate> call(new GrpcFrontGenerate(context, server, arrival));
  call->self_ = call;
  // Parsed and routed off gRPC's thread (a long chat is hashed for cache_aware).
  boost::asio::post(call->strand_, [call, wire = std::move(wire)] { call->Begin(wire); });
  return call.get();
}

// gRPC's reactions: each only posts to the strand.
void GrpcFrontGenerate::OnWriteDone(bool ok) {
  boost::asio::post(strand_, [self = shared_from_this(), ok] { self->WriteDone(ok); });
}

void GrpcFrontGenerate::OnCancel() {
  boost::asio::post(strand_, [self = shared_from_this()] { self->ClientGone(); });
}

void GrpcFrontGenerate::OnDone() {
  // Posted handlers hold their own references: the last one frees this.
  std::shared_ptr<GrpcFrontGenerate> self = std::move(self_);
}

void GrpcFrontGenerate::Begin(const std::string& wire) {
  if (ending_.has_value()) return;  // the client went away first
  absl::StatusOr<v1::GenerateRequest> request = ParseGenerateRequest(wire);
  if (!request.ok()) return Refuse("", request.status());
  std::string model = request->model();
  const std::vector<std::string>& names = context_.routes.model_names();
  if (model.empty()) {
    // proto3's "empty = the default model": the router's only one; with several there is none.
    if (names.size() != 1) {
      return Refuse("", absl::InvalidArgumentError(absl::StrCat("'model' is required: the router serves ",
                                                                absl::StrJoin(names, ", "))));
    }
    model = names[0];
  }
  absl::StatusOr<std::vector<ProxyCandidate>> candidates =
      context_.routes.Candidates(model, PromptText(*request), FrontDoor::kGrpc);
  if (!candidates.ok()) return Refuse(model, candidates.status());
  request_ = *std::move(request);
  core_.emplace(model, FrontDoor::kGrpc, *std::move(candidates), arrival_, context_.log, context_.metrics);
  TryNext();
}

void GrpcFrontGenerate::Refuse(const std::string& model, const absl::Status& status) {
  LogRefusedRequest(context_.log, model, arrival_, status, /*grpc=*/true);
  Complete(status, std::nullopt);
}

void GrpcFrontGenerate::TryNext() {
  while (const ProxyCandidate* c = core_->Next()) {
    if (c->grpc == nullptr) {
      if (StartHttp(*c)) return;
      continue;
    }
    http_try_ = false;
    const RouterBackend& b = core_->backend();
    GrpcGenerateRequest generate;
    generate.backend = c->grpc;
    generate.request = request_;
    generate.request.set_model(core_->RemoteModel());
    if (!b.api_key.empty()) generate.authorization = "Bearer " + b.api_key;
    generate.connect_timeout = b.connection.connect_timeout;
    generate.response_timeout = b.connection.timeout;
    generate.read_ahead = false;  // one message at a time: WriteDone reads the next
    // The router's own bound on the request goes to the backend as its deadline where it comes
    // before the client's: the backend stops the request itself when it passes.
    request_deadline_ = core_->request_deadline();
    generate.deadline = std::min(deadline_, request_deadline_);
    ArmRequestTimer(/*http=*/false);
    core_->BeginTry();
    std::weak_ptr<GrpcFrontGenerate> weak = weak_from_this();
    call_ = GrpcGenerateCall::Start(strand_, std::move(generate),
                                    {[weak](bool reused) {
                                       if (auto self = weak.lock()) self->core_->Connected(reused);
                                     },
                                     [weak](v1::GenerateResponse message) {
                                       if (auto self = weak.lock()) self->OnMessage(std::move(message));
                                     },
                                     [weak](absl::Status status) {
                                       if (auto self = weak.lock()) self->OnBackendEnd(status);
                                     }});
    return;
  }
  const absl::Status why = core_->Exhausted();
  Complete(why, ProxyEnd{.outcome = RequestOutcome::kError,
                         .status = ToHttpError(why).status,
                         .grpc_status = CodeName(why),
                         .error = std::string(why.message())});
}

bool GrpcFrontGenerate::StartHttp(const ProxyCandidate& c) {
  absl::StatusOr<OpenAiHttpRequest> http =
      GenerateToOpenAi(request_, core_->RemoteModel(), core_->backend().connection.request_usage);
  if (!http.ok()) {
    core_->Skip(http.status());
    return false;
  }
  http_try_ = true;
  http_status_ = 0;
  http_error_body_.clear();
  http_stream_.emplace(http->endpoint, request_.n());
  core_->BeginTry();
  std::weak_ptr<GrpcFrontGenerate> weak = weak_from_this();
  UpstreamCallbacks callbacks;
  callbacks.connected = [weak](bool reused) {
    if (auto self = weak.lock()) self->core_->Connected(reused);
  };
  // A pooled connection the backend had closed: not its failure; a new one is being opened.
  callbacks.stale = [weak] {
    if (auto self = weak.lock()) self->core_->Stale();
  };
  callbacks.head = [weak](int status, std::string) {
    if (auto self = weak.lock()) self->OnHttpHead(status);
  };
  callbacks.data = [weak](std::string piece) {
    if (auto self = weak.lock()) self->OnHttpData(std::move(piece));
  };
  callbacks.end = [weak](absl::Status status) {
    if (auto self = weak.lock()) self->OnHttpEnd(status);
  };
  http_call_ = UpstreamCall::Start(strand_, HttpBackendRequest(c, http->path, std::move(http->body)),
                                   std::move(callbacks));
  request_deadline_ = core_->request_deadline();
  ArmRequestTimer(/*http=*/true);
  return true;
}

void GrpcFrontGenerate::ArmRequestTimer(bool http) {
  if (!http) return request_timer_.Cancel();
  std::weak_ptr<GrpcFrontGenerate> weak = weak_from_this();
  request_timer_.Set(request_deadline_, [weak] {
    std::shared_ptr<GrpcFrontGenerate> self = weak.lock();
    if (self == nullptr || self->ending_.has_value() || self->http_call_ == nullptr) return;
    self->CancelHttpCall();
    self->RequestTimedOut();
  });
}

void GrpcFrontGenerate::OnHttpHead(int status) {
  if (ending_.has_value()) return;
  http_status_ = status;
  if (!core_->HttpHead(status)) return;
  CancelHttpCall();
  TryNext();
}

void GrpcFrontGenerate::OnHttpData(std::string piece) {
  if (ending_.has_value()) return;
  if (http_status_ != 200) {
    // An error's body, for the client's message.
    if (http_error_body_.size() < kMaxErrorBody) http_error_body_ += piece;
    return;
  }
  std::vector<v1::GenerateResponse> messages;
  const absl::Status status = http_stream_->Feed(piece, &messages);
  for (v1::GenerateResponse& m : messages) Send(std::move(m));
  if (status.ok()) return;
  CancelHttpCall();
  HttpEnded(status);
}

void GrpcFrontGenerate::OnHttpEnd(const absl::Status& status) {
  http_call_.reset();
  if (ending_.has_value()) return;
  if (status.ok() && http_status_ != 200) {
    // The backend refused the request (a 4xx; 5xx and 429 failed over at the head): the
    // client's answer, with the gRPC code for the HTTP status.
    core_->EndTry();
    const absl::Status refusal = StatusFromHttpError(http_status_, http_error_body_, core_->url());
    Answering();
    return Complete(refusal, ProxyEnd{.outcome = RequestOutcome::kError,
                                      .status = http_status_,
                                      .grpc_status = CodeName(refusal),
                                      .error = std::string(refusal.message()),
                                      .answered = true});
  }
  absl::Status ended = status;
  if (ended.ok()) {
    std::vector<v1::GenerateResponse> messages;
    ended = http_stream_->End(&messages);
    for (v1::GenerateResponse& m : messages) Send(std::move(m));
  }
  HttpEnded(ended);
}

void GrpcFrontGenerate::HttpEnded(const absl::Status& status) {
  // The stream's usage chunk: the answer's tokens (all choices together).
  if (const std::optional<UsageTokens>& usage = http_stream_->usage(); usage.has_value()) {
    prompt_tokens_ = usage->prompt_tokens;
    completion_tokens_ = {{0, usage->completion_tokens}};
  }
  OnBackendEnd(status);
}

std::string GrpcFrontGenerate::DescribeFailure(const absl::Status& status) const {
  return http_try_ ? std::string(status.message()) : DescribeGrpcFailure(status);
}

void GrpcFrontGenerate::Answering() {
  if (core_->answering()) return;
  if (!http_try_) core_->FirstByte();  // an HTTP try's came with its response head
  core_->Answering();
  // Before the first write or the Finish, which send the initial metadata: as HTTP's header.
  server_->AddInitialMetadata(kBackendMetadata, core_->url());
  if (std::string fallback = core_->fallback_model(); !fallback.empty()) {
    server_->AddInitialMetadata("x-tpserve-fallback", fallback);
  }
}

void GrpcFrontGenerate::OnMessage(v1::GenerateResponse message) {
  if (ending_.has_value()) return;
  prompt_tokens_ = std::max<int64_t>(prompt_tokens_, message.usage().prompt_tokens());
  completion_tokens_[message.index()] = message.usage().completion_tokens();
  Send(std::move(message));
}

void GrpcFrontGenerate::Send(v1::GenerateResponse message) {
  Answering();
  if (!write_in_flight_) return Write(message);
  // Text of the same unfinished choice joins the last waiting message, as serve merges what its
  // client has not read yet.
  if (!pending_.empty()) {
    v1::GenerateResponse& last = pending_.back();
    const auto text_only = [](const v1::GenerateResponse& m) {
      return m.finish_reason() == v1::FINISH_REASON_UNSPECIFIED && m.token_ids_size() == 0 && m.logprobs_size() == 0 &&
             m.tool_calls_size() == 0;
    };
    if (last.index() == message.index() && text_only(last) && text_only(message)) {
      last.mutable_text()->append(message.text());
      return;
    }
  }
  pending_.push_back(std::move(message));
}

void GrpcFrontGenerate::Write(const v1::GenerateResponse& message) {
  const std::string bytes = message.SerializeAsString();
  grpc::Slice slice(bytes);
  wire_ = grpc::ByteBuffer(&slice, 1);
  write_in_flight_ = true;
  StartWrite(&wire_);
}

void GrpcFrontGenerate::WriteDone(bool ok) {
  write_in_flight_ = false;
  if (ok && !pending_.empty()) {
    // Waiting messages go before the call's end (which waits for them).
    v1::GenerateResponse next = std::move(pending_.front());
    pending_.pop_front();
    return Write(next);
  }
  if (ending_.has_value()) {
    if (!finished_) {
      finished_ = true;
      Finish(*ending_);
    }
    return;
  }
  if (!ok) return ClientGone();  // the stream broke under us
  if (call_ != nullptr) call_->ReadNext();
}

void GrpcFrontGenerate::OnBackendEnd(const absl::Status& status) {
  call_.reset();
  if (ending_.has_value()) return;
  const absl::StatusCode code = status.code();
  // The client's own deadline, passed on, ended the backend's call: the client's doing, not the
  // backend's failure (the client sees DEADLINE_EXCEEDED from its own side too).
  if (code == absl::StatusCode::kDeadlineExceeded && DeadlineReached(deadline_)) return DeadlinePassed();
  // The router's request_timeout_s, given to the call as its deadline, passed.
  if (code == absl::StatusCode::kDeadlineExceeded && request_deadline_ < deadline_ &&
      DeadlineReached(request_deadline_)) {
    return RequestTimedOut();
  }
  core_->EndTry();
  if (!core_->answering() && !status.ok()) {
    // Nothing reached the client: the HTTP side's failover, with gRPC's codes.
    if (GrpcBackendBroke(code)) {
      const BackendErrorKind kind = !core_->connected()                       ? BackendErrorKind::kConnect
                                    : code == absl::StatusCode::kDeadlineExceeded ? BackendErrorKind::kTimeout
                                                                              : BackendErrorKind::kStreamBroken;
      core_->TryFailed(DescribeFailure(status), kind);
      return TryNext();
    }
    if (code == absl::StatusCode::kResourceExhausted) {
      // Over its queue limit: the next replica or the fallback; the backend stays in routing.
      core_->TryFailed(absl::StrCat(DescribeFailure(status), " (over its queue limit)"), BackendErrorKind::kBusy,
                       /*eject=*/false);
      return TryNext();
    }
    if (ToHttpError(status).status >= 500) {  // INTERNAL and the like: as an HTTP backend's 5xx
      core_->TryFailed(DescribeFailure(status), BackendErrorKind::kHttp5xx);
      return TryNext();
    }
    // The backend answered about the request (INVALID_ARGUMENT, NOT_FOUND, UNAUTHENTICATED, ...):
    // the client's answer, passed through below.
  }
  Answering();
  absl::Status client_status = status;
  bool answered = true;
  if (!status.ok() && GrpcBackendBroke(code)) {
    // Broken after part of the answer reached the client: no failover; the backend is ejected
    // and the client's status names it.
    core_->BrokeWhileAnswering(code == absl::StatusCode::kDeadlineExceeded ? BackendErrorKind::kTimeout
                                                                           : BackendErrorKind::kStreamBroken);
    client_status = absl::Status(code, absl::StrCat("the backend ", core_->url(),
                                                    " failed in the middle of the stream: ", DescribeFailure(status)));
    answered = false;
  } else if (!status.ok() && ToHttpError(status).status >= 500) {
    answered = false;  // the engine failed the request: passed through, not a whole answer
  }
  ProxyEnd end{.outcome = status.ok() ? RequestOutcome::kSuccess : RequestOutcome::kError,
               .status = status.ok() ? 200 : ToHttpError(status).status,
               .grpc_status = CodeName(status),
               .error = status.ok() ? "" : std::string(client_status.message()),
               .answered = answered};
  if (prompt_tokens_ >= 0) {
    end.prompt_tokens = prompt_tokens_;
    int64_t completion = 0;
    for (const auto& [index, tokens] : completion_tokens_) completion += tokens;
    end.completion_tokens = completion;
  }
  Complete(client_status, std::move(end));
}

void GrpcFrontGenerate::ClientGone() {
  if (ending_.has_value()) return;
  // gRPC cancels a call whose deadline passed as one the client cancelled.
  if (DeadlineReached(deadline_)) return DeadlinePassed();
  CancelBackendCall();
  const absl::Status cancelled = absl::CancelledError("the client cancelled the call");
  std::optional<ProxyEnd> end;
  if (core_.has_value()) {
    end = ProxyEnd{.outcome = RequestOutcome::kClientGone,
                   .status = 499,
                   .grpc_status = CodeName(cancelled),
                   .error = "the client cancelled the call; the backend's call was cancelled"};
  }
  Complete(cancelled, std::move(end));
}

void GrpcFrontGenerate::DeadlinePassed() {
  if (ending_.has_value()) return;
  CancelBackendCall();
  const absl::Status passed = absl::DeadlineExceededError(
      absl::StrCat("the client's deadline (", absl::FormatDuration(deadline_ - arrival_), " after the call arrived) ",
                   "passed; the backend's call was cancelled"));
  std::optional<ProxyEnd> end;
  if (core_.has_value()) {
    core_->EndTry();
    end = ProxyEnd{.outcome = RequestOutcome::kClientGone,
                   .status = 499,
                   .grpc_status = CodeName(passed),
                   .error = std::string(passed.message())};
  }
  Complete(passed, std::move(end));
}

void GrpcFrontGenerate::CancelBackendCall() {
  if (call_ != nullptr) {
    call_->Cancel();
    call_.reset();
  }
  CancelHttpCall();
  pending_.clear();  // nobody to read them
}

void GrpcFrontGenerate::CancelHttpCall() {
  if (http_call_ == nullptr) return;
  http_call_->Cancel();
  http_call_.reset();
}

void GrpcFrontGenerate::RequestTimedOut() {
  const absl::Status passed = absl::DeadlineExceededError(core_->RequestTimedOut(core_->answering()));
  Complete(passed, ProxyEnd{.outcome = RequestOutcome::kError,
                            .status = ToHttpError(passed).status,
                            .grpc_status = CodeName(passed),
                            .error = std::string(passed.message())});
}

void GrpcFrontGenerate::Complete(const absl::Status& status, std::optional<ProxyEnd> end) {
  ending_ = ToGrpcStatus(status);
  request_timer_.Cancel();
  if (end.has_value()) core_->Finish(*std::move(end));
  if (write_in_flight_) return;  // WriteDone finishes
  finished_ = true;
  Finish(*ending_);
}

}  // namespace tpserve

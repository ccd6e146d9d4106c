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
      strand_(boost::asio::make_strand(context.proxy_io)) {}

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
      core_->Skip(absl::FailedPreconditionError(absl::StrCat(
          "the router's gRPC port forwards to grpc:// backends only, and model \"", c->pool->model().name,
          "\" lists ", core_->url(), " (a tpserve.v1 GenerateRequest and its responses have no faithful OpenAI "
          "HTTP form: token ids, logprobs, usage per message); send this request to the router's HTTP port, or "
          "list the backend's gRPC port (grpc://HOST:PORT) for the model")));
      continue;
    }
    const RouterBackend& b = core_->backend();
    GrpcGenerateRequest generate;
    generate.backend = c->grpc;
    generate.request = request_;
    generate.request.set_model(core_->RemoteModel());
    if (!b.api_key.empty()) generate.authorization = "Bearer " + b.api_key;
    generate.connect_timeout = b.connection.connect_timeout;
    generate.response_timeout = b.connection.timeout;
    generate.read_ahead = false;  // one message at a time: WriteDone reads the next
    generate.deadline = deadline_;
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

void GrpcFrontGenerate::Answering() {
  if (core_->answering()) return;
  core_->FirstByte();
  core_->Answering();
  // Before the first write or the Finish, which send the initial metadata: as HTTP's header.
  server_->AddInitialMetadata(kBackendMetadata, core_->url());
  if (std::string fallback = core_->fallback_model(); !fallback.empty()) {
    server_->AddInitialMetadata("x-tpserve-fallback", fallback);
  }
}

void GrpcFrontGenerate::OnMessage(v1::GenerateResponse message) {
  if (ending_.has_value()) return;
  Answering();
  prompt_tokens_ = std::max<int64_t>(prompt_tokens_, message.usage().prompt_tokens());
  completion_tokens_[message.index()] = message.usage().completion_tokens();
  const std::string bytes = message.SerializeAsString();
  grpc::Slice slice(bytes);
  wire_ = grpc::ByteBuffer(&slice, 1);
  write_in_flight_ = true;
  StartWrite(&wire_);
}

void GrpcFrontGenerate::WriteDone(bool ok) {
  write_in_flight_ = false;
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
  core_->EndTry();
  if (!core_->answering() && !status.ok()) {
    // Nothing reached the client: the HTTP side's failover, with gRPC's codes.
    if (GrpcBackendBroke(code)) {
      const BackendErrorKind kind = !core_->connected()                       ? BackendErrorKind::kConnect
                                    : code == absl::StatusCode::kDeadlineExceeded ? BackendErrorKind::kTimeout
                                                                              : BackendErrorKind::kStreamBroken;
      core_->TryFailed(DescribeGrpcFailure(status), kind);
      return TryNext();
    }
    if (code == absl::StatusCode::kResourceExhausted) {
      // Over its queue limit: the next replica or the fallback; the backend stays in routing.
      core_->TryFailed(absl::StrCat(DescribeGrpcFailure(status), " (over its queue limit)"), BackendErrorKind::kBusy,
                       /*eject=*/false);
      return TryNext();
    }
    if (ToHttpError(status).status >= 500) {  // INTERNAL and the like: as an HTTP backend's 5xx
      core_->TryFailed(DescribeGrpcFailure(status), BackendErrorKind::kHttp5xx);
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
                                                    " failed in the middle of the stream: ", DescribeGrpcFailure(status)));
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
  if (call_ != nullptr) {
    call_->Cancel();
    call_.reset();
  }
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
  if (call_ != nullptr) {
    call_->Cancel();
    call_.reset();
  }
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

void GrpcFrontGenerate::Complete(const absl::Status& status, std::optional<ProxyEnd> end) {
  ending_ = ToGrpcStatus(status);
  if (end.has_value()) core_->Finish(*std::move(end));
  if (write_in_flight_) return;  // WriteDone finishes
  finished_ = true;
  Finish(*ending_);
}

}  // namespace tpserve

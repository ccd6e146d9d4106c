// RouterGrpcServer: the service's three methods (ModelInfo forwarded here, Stats answered from the
// router's metrics); the server starts and stops as serve's (coordinator/api/grpc_server_start.h).
// Tested by tests/router_grpc_front_test.cc and tests/router_grpc_front_test.sh.
#include "coordinator/router/router_grpc_server.h"

#include <chrono>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/api/grpc_auth.h"
#include "coordinator/api/grpc_service.h"
#include "coordinator/api/grpc_status.h"
#include "coordinator/api/openai_json.h"
#include "coordinator/api/process_info.h"
#include "coordinator/router/grpc_generate_call.h"
#include "grpcpp/grpcpp.h"

namespace tpserve {
namespace {

// A ModelInfo call to one backend: connecting and the answer (serve answers at once).
constexpr absl::Duration kModelInfoTimeout = absl::Seconds(10);

// One ModelInfo call to a backend, tracked on its GrpcBackend (the router waits for it).
struct ModelInfoCall : GrpcBackend::Call {
  void TryCancel() override { context.TryCancel(); }
  grpc::ClientContext context;
  v1::ModelInfoRequest request;
  v1::ModelInfoResponse response;
};

// ModelInfo for `model`, asked of its routable grpc:// backends in turn until one answers: a
// backend that cannot be reached or fails (UNAVAILABLE, INTERNAL, ...) passes the question on;
// its answer, or its refusal of the request (NOT_FOUND, UNAUTHENTICATED, ...), is the client's,
// with served_model_names set to the router's name for the model. Counted as a ModelInfo call
// only: no request metrics, no log line, no ejection (a question about a model is not a
// request). Deletes itself in OnDone.
class ModelInfoForward final : public grpc::ServerUnaryReactor {
 public:
  ModelInfoForward(std::string model, std::vector<ProxyCandidate> candidates, v1::ModelInfoResponse* response,
                   RouterMetrics& metrics)
      : model_(std::move(model)), candidates_(std::move(candidates)), response_(response), metrics_(metrics) {}

  // The calls run one after another: Run starts the first, each one's callback the next.
  void Run() { TryNext(); }

  void OnCancel() override {
    std::shared_ptr<ModelInfoCall> call;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      call = current_;
    }
    if (call != nullptr) call->TryCancel();
  }

  void OnDone() override { delete this; }

 private:
  // Finish, counted.
  void End(const grpc::Status& status) {
    metrics_.ModelInfoFinished(status.ok());
    Finish(status);
  }

  // Starts the next candidate's call, or finishes. No lock is held across a call's start (its
  // callback may run at once) or Finish (after which OnDone may delete this).
  void TryNext() {
    for (; next_ < candidates_.size() && candidates_[next_].grpc == nullptr; ++next_) {
      const ProxyCandidate& c = candidates_[next_];
      errors_.push_back(absl::StrCat(c.pool->backend(c.index).url, ": not a grpc:// backend"));
    }
    if (next_ >= candidates_.size()) {
      return End(ToGrpcStatus(absl::UnavailableError(absl::StrCat("no backend of model \"", model_,
                                                                     "\" (and its fallbacks) answered ModelInfo: ",
                                                                     absl::StrJoin(errors_, "; ")))));
    }
    const ProxyCandidate& c = candidates_[next_++];
    const RouterBackend& b = c.pool->backend(c.index);
    auto call = std::make_shared<ModelInfoCall>();
    call->request.set_model(b.remote_model.empty() ? c.pool->model().name : b.remote_model);
    if (!b.api_key.empty()) call->context.AddMetadata("authorization", "Bearer " + b.api_key);
    call->context.set_deadline(absl::ToChronoTime(absl::Now() + kModelInfoTimeout));
    GrpcBackend* backend = c.grpc;
    if (!backend->Track(call)) return End(ToGrpcStatus(absl::UnavailableError("the router is stopping")));
    {
      absl::MutexLock lock(&mu_);
      if (cancelled_) {
        backend->Untrack(call.get());
        return End(ToGrpcStatus(absl::CancelledError("the client cancelled the call")));
      }
      current_ = call;
    }
    backend->stub().async()->ModelInfo(&call->context, &call->request, &call->response,
                                       [this, backend, call, url = b.url](grpc::Status status) {
                                         backend->Untrack(call.get());
                                         Answered(url, *call, status);
                                       });
  }

  void Answered(const std::string& url, ModelInfoCall& call, const grpc::Status& status) {
    bool cancelled;
    {
      absl::MutexLock lock(&mu_);
      current_.reset();
      cancelled = cancelled_;
    }
    const absl::Status s = FromGrpcStatus(status);
    if (!status.ok() && !cancelled &&
        (ToHttpError(s).status >= 500 || s.code() == absl::StatusCode::kResourceExhausted)) {
      errors_.push_back(absl::StrCat(url, ": ", DescribeGrpcFailure(s)));
      return TryNext();
    }
    if (status.ok()) {
      *response_ = std::move(call.response);
      response_->clear_served_model_names();
      response_->add_served_model_names(model_);
    }
    End(status);
  }

  const std::string model_;
  const std::vector<ProxyCandidate> candidates_;
  v1::ModelInfoResponse* const response_;
  RouterMetrics& metrics_;
  // The chain's own (one call at a time).
  size_t next_ = 0;
  std::vector<std::string> errors_;
  // Shared with OnCancel.
  absl::Mutex mu_;
  std::shared_ptr<ModelInfoCall> current_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

// running: the router's requests at a backend now (a request between tries, or refused, is
// in none); waiting 0: the router queues nothing (a request goes to a backend at once, or is
// refused); prompt_tokens and generation_tokens: its backends' answers' usage (streams without
// a usage chunk not counted); requests_finished: requests to configured models that ended,
// whatever their outcome; rss_bytes and peak_rss_bytes: the router process's.
v1::StatsResponse RouterStats(const RouterMetrics& metrics) {
  const RouterMetrics::Totals t = metrics.totals();
  v1::StatsResponse r;
  r.set_running(static_cast<int32_t>(t.in_flight));
  r.set_waiting(0);
  r.set_prompt_tokens(t.prompt_tokens);
  r.set_generation_tokens(t.completion_tokens);
  r.set_requests_finished(t.requests_finished);
  const ProcessMemory memory = ReadProcessMemory();
  r.set_rss_bytes(memory.rss_bytes);
  r.set_peak_rss_bytes(memory.peak_rss_bytes);
  return r;
}

grpc::ServerUnaryReactor* Refused(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

class RouterGrpcService final : public TpServeServiceBase {
 public:
  RouterGrpcService(GrpcFrontGenerate::Context context, ApiKeys api_keys)
      : context_(std::move(context)), api_keys_(std::move(api_keys)) {}

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override {
    const absl::Time arrival = absl::Now();
    std::string wire;
    if (auto* refused = AcceptGenerateCall(api_keys_, *context, *request, &wire)) return refused;
    return GrpcFrontGenerate::Start(context_, context, std::move(wire), arrival);
  }

  grpc::ServerUnaryReactor* ModelInfo(grpc::CallbackServerContext* context, const v1::ModelInfoRequest* request,
                                      v1::ModelInfoResponse* response) override {
    if (absl::Status key = AuthorizeGrpcCall(api_keys_, *context); !key.ok()) {
      context_.metrics.ModelInfoFinished(false);
      return Refused(context, key);
    }
    const std::vector<std::string>& names = context_.routes.model_names();
    std::string model = request->model();
    if (model.empty() && names.size() == 1) model = names[0];  // the default model, as Generate's
    if (model.empty()) {
      // No default among several: the names, as GET /v1/models lists them.
      for (const std::string& name : names) response->add_served_model_names(name);
      context_.metrics.ModelInfoFinished(true);
      grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
      reactor->Finish(grpc::Status::OK);
      return reactor;
    }
    absl::StatusOr<std::vector<ProxyCandidate>> backends = context_.routes.Backends(model);
    if (!backends.ok()) {
      context_.metrics.ModelInfoFinished(false);
      return Refused(context, backends.status());
    }
    auto* reactor = new ModelInfoForward(model, *std::move(backends), response, context_.metrics);
    reactor->Run();
    return reactor;
  }

  // The router's own numbers, as far as StatsResponse has room for them: the rest are an
  // engine's (KV cache, steps, preemptions, weights, speculative decoding), and stay zero. A
  // backend's engine statistics are on its own gRPC port: StatsRequest names no model, and a
  // router's backends are many, http(s):// ones with no Stats at all.
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* context, const v1::StatsRequest*,
                                  v1::StatsResponse* response) override {
    if (absl::Status key = AuthorizeGrpcCall(api_keys_, *context); !key.ok()) return Refused(context, key);
    *response = RouterStats(context_.metrics);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  const GrpcFrontGenerate::Context context_;
  const ApiKeys api_keys_;
};

RouterGrpcServer::RouterGrpcServer(GrpcFrontGenerate::Context context, RouterGrpcOptions options)
    : options_(std::move(options)),
      service_(std::make_unique<RouterGrpcService>(std::move(context), ApiKeys(options_.api_keys))) {}

RouterGrpcServer::~RouterGrpcServer() { Shutdown(); }

absl::Status RouterGrpcServer::Start() {
  absl::StatusOr<StartedGrpcServer> started = StartGrpcServer("router: --grpc-port", options_.listen, *service_);
  if (!started.ok()) return started.status();
  server_ = std::move(started->server);
  port_ = started->port;
  SetGrpcServing(*server_, true);
  return absl::OkStatus();
}

void RouterGrpcServer::Shutdown() {
  if (stopped_) return;
  stopped_ = true;
  // Calls in flight are cancelled at once: their OnCancel cancels their backend calls.
  if (server_ != nullptr) StopGrpcServer(*server_, absl::ZeroDuration());
}

}  // namespace tpserve

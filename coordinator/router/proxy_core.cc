// ProxyCore: tries, failover bookkeeping, metrics and the request log. Tested through the router
// by tests/router_grpc_test.cc, tests/router_grpc_front_test.cc and tests/router_test.sh.
#include "coordinator/router/proxy_core.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/api/openai_json.h"

namespace tpserve {

UpstreamRequest HttpBackendRequest(const ProxyCandidate& c, absl::string_view path, std::string body) {
  const RouterBackend& b = c.pool->backend(c.index);
  UpstreamRequest request;
  request.endpoint = c.endpoint;
  request.target = absl::StrCat(b.base_path, path);
  request.body = std::move(body);
  if (!b.api_key.empty()) request.authorization = "Bearer " + b.api_key;
  request.connect_timeout = b.connection.connect_timeout;
  request.response_timeout = b.connection.timeout;
  return request;
}

ProxyCore::ProxyCore(std::string model, FrontDoor door, std::vector<ProxyCandidate> candidates, absl::Time arrival,
                     RequestLog* log, RouterMetrics& metrics)
    : model_(std::move(model)),
      door_(door),
      candidates_(std::move(candidates)),
      arrival_(arrival),
      log_(log),
      metrics_(metrics) {}

const ProxyCandidate* ProxyCore::Next() {
  EndTry();
  while (next_ < candidates_.size()) {
    const ProxyCandidate& c = candidates_[next_++];
    const RouterBackend& b = c.pool->backend(c.index);
    // The candidate's place among its requests in flight is taken as it is chosen, so that
    // requests arriving together cannot pass its max_in_flight.
    if (b.connection.max_in_flight == 0) {
      c.pool->Begin(c.index);
    } else if (!c.pool->TryBegin(c.index, b.connection.max_in_flight)) {
      metrics_.BackendTurnedAway(*c.pool, c.index);
      Skip(absl::ResourceExhaustedError(absl::StrCat("backend ", b.url, " has its max_in_flight (",
                                                     b.connection.max_in_flight, ") requests in flight")));
      continue;
    }
    holds_place_ = true;
    current_ = &c;
    connected_ = false;
    try_start_ = absl::Now();
    return current_;
  }
  return nullptr;
}

std::string ProxyCore::RemoteModel() const {
  const RouterBackend& b = backend();
  return b.remote_model.empty() ? current_->pool->model().name : b.remote_model;
}

void ProxyCore::Skip(const absl::Status& why) {
  if (skipped_.ok()) skipped_ = why;
}

void ProxyCore::BeginTry() {
  try_start_ = absl::Now();
  metrics_.BackendStarted(*current_->pool, current_->index);
}

void ProxyCore::Connected(bool reused) {
  connected_ = true;
  metrics_.BackendConnection(*current_->pool, current_->index, reused);
}

void ProxyCore::Stale() {
  connected_ = false;
  metrics_.BackendStaleConnection(*current_->pool, current_->index);
}

void ProxyCore::FirstByte() { metrics_.BackendFirstByte(*current_->pool, current_->index, absl::Now() - try_start_); }

bool ProxyCore::HttpHead(int status) {
  FirstByte();
  if (status >= 500) {
    TryFailed(absl::StrCat("HTTP ", status), BackendErrorKind::kHttp5xx);
    return true;
  }
  if (status == 429) {
    // Over its queue limit (tpserve's --max-queue, vLLM's): the next replica or the fallback
    // takes the request; the backend is healthy and stays in routing.
    TryFailed("HTTP 429 (over its queue limit)", BackendErrorKind::kBusy, /*eject=*/false);
    return true;
  }
  return false;
}

void ProxyCore::TryFailed(const std::string& error, BackendErrorKind kind, bool eject) {
  EndTry();
  if (kind == BackendErrorKind::kBusy) ++busy_;
  if (eject) current_->pool->Eject(current_->index, absl::Now());
  errors_.push_back(absl::StrCat(url(), ": ", error));
  bool moved_on = next_ < candidates_.size();
  const std::optional<int64_t>& cap = backend().connection.max_retries;
  if (moved_on && cap.has_value() && retries_ >= *cap) {
    // The failed backend's max_retries is spent: the candidates left are not tried.
    retries_cap_ = *cap;
    for (; next_ < candidates_.size(); ++next_) {
      untried_.push_back(candidates_[next_].pool->backend(candidates_[next_].index).url);
    }
    moved_on = false;
  }
  if (moved_on) ++retries_;
  metrics_.BackendFailed(*current_->pool, current_->index, kind, moved_on);
}

void ProxyCore::EndTry() {
  if (!holds_place_) return;
  holds_place_ = false;
  current_->pool->End(current_->index);
}

void ProxyCore::Answering() {
  if (answering_) return;
  answering_ = true;
  const std::string& answering = current_->pool->model().name;
  if (answering != model_) metrics_.FallbackTaken(model_, answering);
}

std::string ProxyCore::fallback_model() const {
  if (!answering_) return "";
  const std::string& answering = current_->pool->model().name;
  return answering == model_ ? "" : answering;
}

void ProxyCore::BrokeWhileAnswering(BackendErrorKind kind) {
  current_->pool->Eject(current_->index, absl::Now());
  metrics_.BackendFailed(*current_->pool, current_->index, kind, /*moved_on=*/false);
}

std::string ProxyCore::RequestTimedOut(bool streaming) {
  EndTry();
  next_ = candidates_.size();
  metrics_.BackendFailed(*current_->pool, current_->index, BackendErrorKind::kTimeout, /*moved_on=*/false);
  return absl::StrCat("the request passed its request_timeout_s (", absl::FormatDuration(request_deadline() - arrival_),
                      " from its arrival at the router) ", streaming ? "while the backend " : "before the backend ", url(),
                      streaming ? " was streaming" : " answered", "; the backend's request was cancelled");
}

absl::Time ProxyCore::request_deadline() const {
  const std::optional<absl::Duration>& limit = backend().connection.request_timeout;
  return limit.has_value() ? arrival_ + *limit : absl::InfiniteFuture();
}

absl::Status ProxyCore::Exhausted() const {
  if (errors_.empty() && !skipped_.ok()) return skipped_;
  // Every one busy: RESOURCE_EXHAUSTED (HTTP 429), so that the client backs off and retries as
  // it would against one server; any other failure among them: UNAVAILABLE.
  const bool all_busy = busy_ > 0 && busy_ == static_cast<int>(errors_.size());
  std::string message =
      retries_cap_.has_value()
          ? absl::StrCat("model \"", model_, "\" (and its fallbacks): ", all_busy ? "busy" : "failed",
                         ", and its max_retries (", *retries_cap_, ") allows no further try (not tried: ",
                         absl::StrJoin(untried_, ", "), "): ", absl::StrJoin(errors_, "; "))
          : absl::StrCat("every backend of model \"", model_, "\" (and its fallbacks) ",
                         all_busy ? "is over its queue limit: " : "failed: ", absl::StrJoin(errors_, "; "));
  if (!skipped_.ok()) absl::StrAppend(&message, "; some backends were not tried: ", skipped_.message());
  return all_busy ? absl::ResourceExhaustedError(message) : absl::UnavailableError(message);
}

void ProxyCore::Finish(ProxyEnd end) {
  if (finished_) return;
  finished_ = true;
  EndTry();
  if (end.answered) metrics_.BackendAnswered(*current_->pool, current_->index, absl::Now() - arrival_);
  std::optional<double> cost;
  if (answering_ && end.prompt_tokens.has_value() && end.completion_tokens.has_value()) {
    cost = metrics_.BackendUsage(*current_->pool, current_->index, *end.prompt_tokens, *end.completion_tokens);
  } else if (answering_ && end.outcome == RequestOutcome::kSuccess) {
    metrics_.BackendUsageUnknown(*current_->pool, current_->index);
  }
  metrics_.RequestFinished(model_, door_, end.outcome);
  if (log_ == nullptr) return;
  RequestRecord r;
  r.model = model_;
  if (answering_) r.backend = url();
  r.latency_ms = absl::ToDoubleMilliseconds(absl::Now() - arrival_);
  r.status = end.status;
  r.grpc_status = std::move(end.grpc_status);
  r.success = end.outcome == RequestOutcome::kSuccess;
  r.error = std::move(end.error);
  r.prompt_tokens = end.prompt_tokens;
  r.completion_tokens = end.completion_tokens;
  r.priced = answering_ && CostUsd(backend(), 0, 0).has_value();
  r.cost_usd = cost;
  log_->Append(r, absl::Now());
}

void LogRefusedRequest(RequestLog* log, const std::string& model, absl::Time arrival, const absl::Status& error,
                       bool grpc) {
  if (log == nullptr) return;
  RequestRecord r;
  r.model = model;
  r.latency_ms = absl::ToDoubleMilliseconds(absl::Now() - arrival);
  r.status = ToHttpError(error).status;
  if (grpc) r.grpc_status = absl::StatusCodeToString(error.code());
  r.error = std::string(error.message());
  log->Append(r, absl::Now());
}

}  // namespace tpserve

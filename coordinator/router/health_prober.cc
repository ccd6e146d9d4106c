// HealthProber: one timer-driven probe loop per target, each on a strand of its own. Tested by
// tests/router_health_test.sh.
#include "coordinator/router/health_prober.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "coordinator/api/grpc_status.h"
#include "boost/asio/bind_executor.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/strand.hpp"
#include "coordinator/router/upstream_call.h"

namespace tpserve {

namespace {

// One Stats call of a grpc:// backend's probe.
struct StatsCall : GrpcBackend::Call {
  void TryCancel() override { context.TryCancel(); }
  grpc::ClientContext context;
  v1::StatsRequest request;
  v1::StatsResponse response;
};

}  // namespace

class HealthProber::Probe : public std::enable_shared_from_this<Probe> {
 public:
  Probe(boost::asio::io_context& io, HealthProbeTarget target, std::function<void(const std::string&)> log)
      : strand_(boost::asio::make_strand(io)),
        target_(std::move(target)),
        log_(std::move(log)),
        timer_(strand_),
        deadline_(strand_) {
    const RouterBackend& b = target_.pool->backend(target_.index);
    probe_url_ = target_.grpc != nullptr
                     ? absl::StrCat("Stats ", b.url)
                     : absl::StrCat("GET ", b.tls ? "https://" : "http://", b.host, ":", b.port, target_.options.path);
  }

  void Start() {
    boost::asio::post(strand_, [self = shared_from_this()] { self->Run(); });
  }

 private:
  void Run() {
    started_ = absl::Now();
    status_ = 0;
    if (target_.grpc != nullptr) return RunGrpc();
    const RouterBackend& b = target_.pool->backend(target_.index);
    UpstreamRequest request;
    request.endpoint = target_.endpoint;
    request.method = "GET";
    request.target = target_.options.path;
    if (!b.api_key.empty()) request.authorization = "Bearer " + b.api_key;  // for a path that needs it
    request.connect_timeout = target_.options.timeout;
    request.response_timeout = target_.options.timeout;
    auto self = shared_from_this();
    call_ = UpstreamCall::Start(strand_, std::move(request),
                                {nullptr, nullptr, [self](int status, std::string) { self->status_ = status; },
                                 [](std::string) {}, [self](absl::Status status) { self->Done(std::move(status)); },
                                 nullptr});
    // The whole probe, connecting to the last byte, within the timeout.
    deadline_.expires_after(absl::ToChronoMilliseconds(target_.options.timeout));
    deadline_.async_wait(boost::asio::bind_executor(strand_, [self](boost::system::error_code ec) {
      if (ec || self->call_ == nullptr) return;
      self->call_->Cancel();
      self->Done(absl::DeadlineExceededError(
          absl::StrCat("no whole answer within ", absl::FormatDuration(self->target_.options.timeout))));
    }));
  }

  // A grpc:// backend: the Stats RPC, within the timeout (its deadline). gRPC's callback posts
  // the outcome to the strand. It keeps no reference to the probe (nor to anything of the
  // proxy io_context, such as a strand) past its untracking: after that the router may
  // destroy the io_context, and gRPC destroys the callback later.
  void RunGrpc() {
    auto call = std::make_shared<StatsCall>();
    const RouterBackend& b = target_.pool->backend(target_.index);
    if (!b.api_key.empty()) call->context.AddMetadata("authorization", "Bearer " + b.api_key);
    call->context.set_deadline(absl::ToChronoTime(absl::Now() + target_.options.timeout));
    GrpcBackend* backend = target_.grpc;
    if (!backend->Track(call)) return;  // the router is stopping: no more probes
    backend->stub().async()->Stats(
        &call->context, &call->request, &call->response,
        [weak = weak_from_this(), backend, call](grpc::Status status) {
          if (std::shared_ptr<Probe> self = weak.lock()) {
            boost::asio::post(self->strand_, [self, status] { self->DoneGrpc(status); });
          }
          backend->Untrack(call.get());  // last: the router may stop once every call is untracked
        });
  }

  void DoneGrpc(const grpc::Status& status) {
    const bool passed = status.ok();
    std::string what = "answered OK";
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      what = absl::StrCat("no answer within ", absl::FormatDuration(target_.options.timeout));
    } else if (!passed) {
      const absl::Status described = target_.grpc->Described(FromGrpcStatus(status));
      what = absl::StrCat(absl::StatusCodeToString(described.code()), ": ", described.message());
    }
    Verdict(passed, what);
  }

  void Done(absl::Status status) {
    if (call_ == nullptr) return;
    call_.reset();
    deadline_.cancel();
    const bool passed = status.ok() && status_ >= 200 && status_ < 300;
    Verdict(passed, passed        ? absl::StrCat("answered HTTP ", status_)
                    : status.ok() ? absl::StrCat("HTTP ", status_)
                                  : std::string(status.message()));
  }

  // The probe passed or failed (`what`: how it ended, for the log); the next one is scheduled.
  void Verdict(bool passed, const std::string& what) {
    if (target_.pool->SetProbeFailing(target_.index, !passed)) {
      const std::string backend =
          absl::StrCat("backend ", target_.pool->backend(target_.index).url, " (model ", target_.pool->model().name, ")");
      log_(passed ? absl::StrCat(backend, " is healthy again: ", probe_url_, " ", what)
                  : absl::StrCat(backend, " is unhealthy, out of routing until a probe passes: ", probe_url_, ": ",
                                 what));
    }
    // The next probe an interval after this one started (at once when this one took longer).
    const absl::Duration wait = std::max(absl::ZeroDuration(), target_.options.interval - (absl::Now() - started_));
    timer_.expires_after(absl::ToChronoMilliseconds(wait));
    timer_.async_wait(boost::asio::bind_executor(strand_, [self = shared_from_this()](boost::system::error_code ec) {
      if (!ec) self->Run();
    }));
  }

  const Strand strand_;
  const HealthProbeTarget target_;
  const std::function<void(const std::string&)> log_;
  std::string probe_url_;  // for the log
  boost::asio::steady_timer timer_;     // until the next probe
  boost::asio::steady_timer deadline_;  // the running probe's timeout
  std::shared_ptr<UpstreamCall> call_;  // the running probe; null between probes
  absl::Time started_;
  int status_ = 0;  // the running probe's HTTP status; 0: no head yet
};

HealthProber::HealthProber(boost::asio::io_context& io, std::vector<HealthProbeTarget> targets,
                           std::function<void(const std::string&)> log) {
  for (HealthProbeTarget& t : targets) probes_.push_back(std::make_shared<Probe>(io, std::move(t), log));
}

void HealthProber::Start() {
  for (const std::shared_ptr<Probe>& p : probes_) p->Start();
}

}  // namespace tpserve

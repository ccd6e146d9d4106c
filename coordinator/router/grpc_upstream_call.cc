// GrpcGenerateCall: a ClientReadReactor whose reactions only post to the request's strand; the
// strand reads each message through the GrpcRelay and keeps the timeouts. Tested through the
// router by tests/router_grpc_test.cc and tests/router_grpc_test.sh.
#include "coordinator/router/grpc_upstream_call.h"

#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "boost/asio/bind_executor.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "grpcpp/grpcpp.h"

namespace tpserve {
namespace {

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

class GrpcGenerateCall final : public UpstreamCall,
                               public GrpcBackend::Call,
                               public grpc::ClientReadReactor<v1::GenerateResponse>,
                               public std::enable_shared_from_this<GrpcGenerateCall> {
 public:
  GrpcGenerateCall(Strand strand, GrpcUpstreamRequest request, UpstreamCallbacks callbacks)
      : strand_(std::move(strand)),
        backend_(*request.backend),
        request_(std::move(request.request)),
        relay_(std::move(request.relay)),
        authorization_(std::move(request.authorization)),
        connect_timeout_(request.connect_timeout),
        response_timeout_(request.response_timeout),
        callbacks_(std::move(callbacks)),
        timer_(strand_) {}

  // On the strand.
  void Run() {
    if (!backend_.Track(shared_from_this())) {
      // Posted: the proxy sees no callback before Start returns.
      boost::asio::post(strand_, [self = shared_from_this()] {
        self->Finish(absl::UnavailableError("the router is stopping"));
      });
      return;
    }
    self_ = shared_from_this();  // until OnDone: gRPC holds `this`
    if (!authorization_.empty()) context_.AddMetadata("authorization", authorization_);
    reused_ = backend_.connected();
    backend_.stub().async()->Generate(&context_, &request_, this);
    StartRead(&response_);
    StartCall();
    Arm(connect_timeout_, /*connecting=*/true);
    // On the channel's connection, already up: connected at once, as an HTTP call on a pooled
    // connection. Otherwise once the backend answers.
    if (reused_) boost::asio::post(strand_, [self = shared_from_this()] { self->Connected(); });
  }

  // On the strand.
  void Cancel() override {
    quiet_ = true;
    finished_ = true;
    timer_.cancel();
    context_.TryCancel();
  }

  // GrpcBackend::Call (any thread).
  void TryCancel() override { context_.TryCancel(); }

  // gRPC's reactions (its threads): each only posts to the strand, in order (a reaction runs
  // after the one before it posted).
  void OnReadInitialMetadataDone(bool ok) override {
    if (!ok) return;  // the call failed before the backend answered: OnDone says how
    boost::asio::post(strand_, [self = shared_from_this()] { self->Connected(); });
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // no more messages: OnDone follows
    auto message = std::make_shared<v1::GenerateResponse>();
    message->Swap(&response_);
    boost::asio::post(strand_, [self = shared_from_this(), message] { self->Message(*message); });
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    GrpcBackend& backend = backend_;
    // The posted handler may run, and free this, at once: nothing of `this` is read after it.
    // And no reference to it stays on this thread: once untracked, the router may destroy the
    // proxy io_context, which must outlive this object's strand and timer.
    boost::asio::post(strand_, [self = std::move(self_), s = FromGrpc(status)] { self->Finish(s); });
    backend.Untrack(this);
  }

 private:
  // Strand-only from here.
  void Connected() {
    if (quiet_ || connected_) return;
    connected_ = true;
    if (callbacks_.connected) callbacks_.connected(reused_);
    if (!finished_) Arm(response_timeout_, /*connecting=*/false);
  }

  void Message(const v1::GenerateResponse& message) {
    if (quiet_) return;
    Connected();  // the backend answered (its metadata's reaction may come later)
    if (quiet_) return;
    Arm(response_timeout_, /*connecting=*/false);
    std::string events = relay_->OnMessage(message);
    if (!relay_->stream()) return;  // the whole body at the end
    if (!head_sent_) {
      head_sent_ = true;
      callbacks_.head(200, "text/event-stream");
      if (quiet_) return;
    }
    if (!events.empty()) callbacks_.data(std::move(events));
  }

  // The call ended (gRPC's status), or the router ended it (a timeout, stopping).
  void Finish(const absl::Status& status) {
    if (finished_) return;
    finished_ = true;
    timer_.cancel();
    if (quiet_) return;
    GrpcRelayEnding ending = relay_->End(status);
    if (!ending.failure.ok()) return End(ending.failure);
    if (!head_sent_) {
      head_sent_ = true;
      callbacks_.head(ending.http_status, "application/json");
      if (quiet_) return;
    }
    if (!ending.body.empty()) {
      callbacks_.data(std::move(ending.body));
      if (quiet_) return;
    }
    End(absl::OkStatus());
  }

  // The proxy's last callback; a failure says what broke, naming gRPC's code.
  void End(const absl::Status& status) {
    quiet_ = true;
    if (status.ok()) return callbacks_.end(status);
    callbacks_.end(absl::Status(status.code(), absl::StrCat("gRPC ", absl::StatusCodeToString(status.code()), ": ",
                                                            status.message())));
  }

  // The timeout now running: connecting (no connection yet), or waiting for the backend's
  // next message.
  void Arm(absl::Duration timeout, bool connecting) {
    const uint64_t generation = ++timer_generation_;
    timer_.expires_after(absl::ToChronoMilliseconds(timeout));
    std::weak_ptr<GrpcGenerateCall> weak = weak_from_this();
    timer_.async_wait(boost::asio::bind_executor(strand_, [weak, generation, connecting, timeout](
                                                              boost::system::error_code ec) {
      std::shared_ptr<GrpcGenerateCall> self = weak.lock();
      if (ec || self == nullptr || generation != self->timer_generation_ || self->finished_) return;
      self->TimedOut(timeout, connecting);
    }));
  }

  void TimedOut(absl::Duration timeout, bool connecting) {
    if (connecting && backend_.connected()) {
      // Connected, waiting for the first token: from now on the response's timeout.
      return Arm(response_timeout_ - connect_timeout_, /*connecting=*/false);
    }
    context_.TryCancel();  // its OnDone finds the call finished
    const std::string what = connecting ? absl::StrCat("no connection to ", backend_.target(), " within ",
                                                       absl::FormatDuration(timeout))
                                        : absl::StrCat("no response from ", backend_.target(), " within ",
                                                       absl::FormatDuration(timeout));
    // Not connected: UNAVAILABLE, which the proxy counts as a failure to connect.
    Finish(connecting ? absl::UnavailableError(what) : absl::DeadlineExceededError(what));
  }

  const Strand strand_;
  GrpcBackend& backend_;
  const v1::GenerateRequest request_;  // gRPC reads it until the call ends
  const std::unique_ptr<GrpcRelay> relay_;
  const std::string authorization_;
  const absl::Duration connect_timeout_;
  const absl::Duration response_timeout_;
  const UpstreamCallbacks callbacks_;
  grpc::ClientContext context_;
  v1::GenerateResponse response_;  // the read in flight (gRPC's)
  std::shared_ptr<GrpcGenerateCall> self_;  // from Run until OnDone
  // Strand-only.
  boost::asio::steady_timer timer_;
  uint64_t timer_generation_ = 0;
  bool reused_ = false;     // the channel was connected when the call started
  bool connected_ = false;  // the backend answered
  bool head_sent_ = false;
  bool finished_ = false;   // the call ended, or the router ended it
  bool quiet_ = false;      // no callback any more (Cancel, or the end delivered)
};

}  // namespace

std::shared_ptr<UpstreamCall> StartGrpcCall(Strand strand, GrpcUpstreamRequest request, UpstreamCallbacks callbacks) {
  auto call = std::make_shared<GrpcGenerateCall>(std::move(strand), std::move(request), std::move(callbacks));
  call->Run();
  return call;
}

}  // namespace tpserve

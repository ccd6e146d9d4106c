// GrpcGenerateCall: a ClientReadReactor whose reactions only post to the request's strand; the
// strand hands each message on and keeps the timeouts. Tested through the router by
// tests/router_grpc_test.cc, tests/router_grpc_front_test.cc and the router's gRPC shell tests.
#include "coordinator/router/grpc_generate_call.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "boost/asio/post.hpp"
#include "coordinator/api/grpc_status.h"
#include "coordinator/router/deadline_timer.h"
#include "grpcpp/grpcpp.h"

namespace tpserve {
namespace {

class GenerateCall final : public GrpcGenerateCall,
                           public GrpcBackend::Call,
                           public grpc::ClientReadReactor<v1::GenerateResponse>,
                           public std::enable_shared_from_this<GenerateCall> {
 public:
  GenerateCall(Strand strand, GrpcGenerateRequest request, GrpcGenerateCallbacks callbacks)
      : strand_(std::move(strand)),
        backend_(*request.backend),
        request_(std::move(request.request)),
        authorization_(std::move(request.authorization)),
        connect_timeout_(request.connect_timeout),
        response_timeout_(request.response_timeout),
        read_ahead_(request.read_ahead),
        deadline_(request.deadline),
        callbacks_(std::move(callbacks)),
        timer_(strand_) {}

  // On the strand.
  void Run() {
    if (!backend_.Track(shared_from_this())) {
      // Posted: the caller sees no callback before Start returns.
      boost::asio::post(strand_, [self = shared_from_this()] {
        self->Finish(absl::UnavailableError("the router is stopping"));
      });
      return;
    }
    self_ = shared_from_this();  // until OnDone: gRPC holds `this`
    if (!authorization_.empty()) context_.AddMetadata("authorization", authorization_);
    if (deadline_ != absl::InfiniteFuture()) context_.set_deadline(absl::ToChronoTime(deadline_));
    reused_ = backend_.connected();
    backend_.stub().async()->Generate(&context_, &request_, this);
    // Without read-ahead the strand starts each read after the first (ReadNext), outside the
    // reactions: one hold, added before StartCall as gRPC requires, keeps the call from ending
    // (OnDone) until no read can start any more.
    if (!read_ahead_) {
      AddHold();
      holding_.store(true);
    }
    reading_ = true;
    StartRead(&response_);
    StartCall();
    Arm(connect_timeout_, /*connecting=*/true);
    // On the channel's connection, already up: connected at once, as an HTTP call on a pooled
    // connection. Otherwise once the backend answers.
    if (reused_) boost::asio::post(strand_, [self = shared_from_this()] { self->Connected(); });
  }

  // On the strand.
  void ReadNext() override {
    if (reading_ || finished_) return;
    reading_ = true;
    Arm(response_timeout_, /*connecting=*/false);
    StartRead(&response_);  // its reactions may run at once, on this thread: they only post
  }

  // On the strand.
  void Cancel() override {
    quiet_ = true;
    finished_ = true;
    timer_.Cancel();
    context_.TryCancel();
    Release();
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
    if (!ok) return Release();  // no more messages, and no more reads: OnDone follows
    auto message = std::make_shared<v1::GenerateResponse>();
    message->Swap(&response_);
    boost::asio::post(strand_, [self = shared_from_this(), message] { self->Message(std::move(*message)); });
    if (read_ahead_) StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    GrpcBackend& backend = backend_;
    // The posted handler may run, and free this, at once: nothing of `this` is read after it.
    // And no reference to it stays on this thread: once untracked, the router may destroy the
    // proxy io_context, which must outlive this object's strand and timer.
    boost::asio::post(strand_, [self = std::move(self_), s = backend.Described(FromGrpcStatus(status))] { self->Finish(s); });
    backend.Untrack(this);
  }

 private:
  // Strand-only from here.
  void Connected() {
    if (quiet_ || connected_) return;
    connected_ = true;
    if (callbacks_.connected) callbacks_.connected(reused_);
    if (!finished_ && reading_) Arm(response_timeout_, /*connecting=*/false);
  }

  void Message(v1::GenerateResponse message) {
    if (!read_ahead_) reading_ = false;
    if (quiet_) return;
    Connected();  // the backend answered (its metadata's reaction may come later)
    if (quiet_) return;
    if (read_ahead_) {
      Arm(response_timeout_, /*connecting=*/false);
    } else {
      timer_.Cancel();  // no timeout while the reader holds the message
    }
    callbacks_.message(std::move(message));
  }

  // The hold Run added, once no read can start any more: the last read came back empty (any
  // thread), or the call was ended here (the strand). Only the first call removes it.
  void Release() {
    if (holding_.exchange(false)) RemoveHold();
  }

  // The call ended (gRPC's status), or the router ended it (a timeout, stopping).
  void Finish(const absl::Status& status) {
    if (finished_) return;
    finished_ = true;
    timer_.Cancel();
    Release();
    if (quiet_) return;
    quiet_ = true;
    callbacks_.end(status);
  }

  // The timeout now running: connecting (no connection yet), or waiting for the backend's
  // next message. Replaces the one before.
  void Arm(absl::Duration timeout, bool connecting) {
    timer_.Set(absl::Now() + timeout, [weak = weak_from_this(), connecting] {
      std::shared_ptr<GenerateCall> self = weak.lock();
      if (self == nullptr || self->finished_) return;
      self->TimedOut(connecting);
    });
  }

  void TimedOut(bool connecting) {
    if (connecting && backend_.connected()) {
      // The channel is up and the backend silent: a connection (so that the proxy counts what
      // follows as a timeout, not a failure to connect), whose response timeout runs on from
      // the call's start (none is left where timeout_s is below connect_timeout_s).
      Connected();
      if (quiet_ || finished_) return;
      return Arm(std::max(response_timeout_ - connect_timeout_, absl::ZeroDuration()), /*connecting=*/false);
    }
    context_.TryCancel();  // its OnDone finds the call finished
    // The configured bounds (connect_timeout_s, timeout_s), not what was left of them.
    const std::string what = connecting ? absl::StrCat("no connection to ", backend_.target(), " within ",
                                                       absl::FormatDuration(connect_timeout_))
                                        : absl::StrCat("no response from ", backend_.target(), " within ",
                                                       absl::FormatDuration(response_timeout_));
    // Not connected: UNAVAILABLE, which the proxy counts as a failure to connect.
    Finish(connecting ? absl::UnavailableError(what) : absl::DeadlineExceededError(what));
  }

  const Strand strand_;
  GrpcBackend& backend_;
  const v1::GenerateRequest request_;  // gRPC reads it until the call ends
  const std::string authorization_;
  const absl::Duration connect_timeout_;
  const absl::Duration response_timeout_;
  const bool read_ahead_;
  const absl::Time deadline_;
  const GrpcGenerateCallbacks callbacks_;
  grpc::ClientContext context_;
  v1::GenerateResponse response_;           // the read in flight (gRPC's)
  std::shared_ptr<GenerateCall> self_;      // from Run until OnDone
  std::atomic<bool> holding_{false};        // Run's hold (no read-ahead), until Release
  // Strand-only.
  DeadlineTimer timer_;  // the connect or response timeout now running (Arm)
  bool reused_ = false;     // the channel was connected when the call started
  bool connected_ = false;  // the backend answered
  bool reading_ = false;    // a read is outstanding (without read-ahead: until its message arrived)
  bool finished_ = false;   // the call ended, or the router ended it
  bool quiet_ = false;      // no callback any more (Cancel, or the end delivered)
};

}  // namespace

std::shared_ptr<GrpcGenerateCall> GrpcGenerateCall::Start(Strand strand, GrpcGenerateRequest request,
                                                          GrpcGenerateCallbacks callbacks) {
  auto call = std::make_shared<GenerateCall>(std::move(strand), std::move(request), std::move(callbacks));
  call->Run();
  return call;
}

bool GrpcBackendBroke(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded ||
         code == absl::StatusCode::kCancelled || code == absl::StatusCode::kUnknown;
}

std::string DescribeGrpcFailure(const absl::Status& status) {
  return absl::StrCat("gRPC ", absl::StatusCodeToString(status.code()), ": ", status.message());
}

}  // namespace tpserve

// The relay of a grpc:// backend's Generate call (grpc_generate_call.h) to an OpenAI HTTP client:
// each message through the GrpcRelay as it arrives, reported as an HTTP backend's response.
// Tested through the router by tests/router_grpc_test.cc and tests/router_grpc_test.sh.
#include "coordinator/router/grpc_upstream_call.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "coordinator/router/grpc_generate_call.h"

namespace tpserve {
namespace {

class GrpcRelayCall final : public UpstreamCall, public std::enable_shared_from_this<GrpcRelayCall> {
 public:
  GrpcRelayCall(std::unique_ptr<GrpcRelay> relay, UpstreamCallbacks callbacks)
      : relay_(std::move(relay)), callbacks_(std::move(callbacks)) {}

  // On the strand.
  void Run(Strand strand, GrpcUpstreamRequest request) {
    GrpcGenerateRequest generate;
    generate.backend = request.backend;
    generate.request = std::move(request.request);
    generate.authorization = std::move(request.authorization);
    generate.connect_timeout = request.connect_timeout;
    generate.response_timeout = request.response_timeout;
    std::weak_ptr<GrpcRelayCall> weak = weak_from_this();
    call_ = GrpcGenerateCall::Start(
        std::move(strand), std::move(generate),
        {[weak](bool reused) {
           auto self = weak.lock();
           if (self != nullptr && self->callbacks_.connected) self->callbacks_.connected(reused);
         },
         [weak](v1::GenerateResponse message) {
           if (auto self = weak.lock()) self->Message(message);
         },
         [weak](absl::Status status) {
           if (auto self = weak.lock()) self->Finish(status);
         }});
  }

  // On the strand.
  void Cancel() override {
    quiet_ = true;
    if (call_ != nullptr) call_->Cancel();
  }

 private:
  void Message(const v1::GenerateResponse& message) {
    if (quiet_) return;
    std::string events = relay_->OnMessage(message);
    if (!relay_->stream()) return;  // the whole body at the end
    if (!head_sent_) {
      head_sent_ = true;
      callbacks_.head(200, "text/event-stream");
      if (quiet_) return;
    }
    if (!events.empty()) callbacks_.data(std::move(events));
  }

  void Finish(const absl::Status& status) {
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
    if (ending.prompt_tokens && ending.completion_tokens && callbacks_.usage) {
      callbacks_.usage(*ending.prompt_tokens, *ending.completion_tokens);
      if (quiet_) return;
    }
    End(absl::OkStatus());
  }

  // The proxy's last callback; a failure says what broke, naming gRPC's code.
  void End(const absl::Status& status) {
    quiet_ = true;
    if (status.ok()) return callbacks_.end(status);
    callbacks_.end(absl::Status(status.code(), DescribeGrpcFailure(status)));
  }

  const std::unique_ptr<GrpcRelay> relay_;
  const UpstreamCallbacks callbacks_;
  // Strand-only.
  std::shared_ptr<GrpcGenerateCall> call_;
  bool head_sent_ = false;
  bool quiet_ = false;  // no callback any more (Cancel, or the end delivered)
};

}  // namespace

std::shared_ptr<UpstreamCall> StartGrpcCall(Strand strand, GrpcUpstreamRequest request, UpstreamCallbacks callbacks) {
  auto call = std::make_shared<GrpcRelayCall>(std::move(request.relay), std::move(callbacks));
  call->Run(std::move(strand), std::move(request));
  return call;
}

}  // namespace tpserve

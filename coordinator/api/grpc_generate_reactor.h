// One streaming Generate call on gRPC's callback API: StartWrite -> OnWriteDone as engine
// events arrive; client cancel or deadline cancels the request. Messages go out serialized
// (the service's Generate is a raw method: grpc_service.h). Tested by tests/frontend_test.cc.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/engine/engine_api.h"
#include "coordinator/api/choice_streams.h"
#include "coordinator/api/frontend_metrics.h"
#include "coordinator/api/request_builder.h"
#include "coordinator/engine/request.h"
#include "coordinator/api/task_pool.h"
#include "coordinator/text/tokenizer.h"
#include "coordinator/api/choice_tool_calls.h"
#include "coordinator/text/tool_calls.h"
#include "grpcpp/grpcpp.h"
#include "proto/tpserve.grpc.pb.h"

namespace tpserve {

// Owns itself until gRPC's OnDone; a pump queued or running then holds it a little longer.
// The engine's notify hook holds only a weak reference, so a late event finds it gone.
class GenerateReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                        public std::enable_shared_from_this<GenerateReactor> {
 public:
  struct Context {
    EngineApi& engine;
    const Tokenizer& tokenizer;
    FrontendMetrics* metrics;  // may be null
    // Where the engine's notify hook sends the work of writing (never the engine thread).
    std::weak_ptr<TaskPool> pump_pool;
    // Where requests are built (parsed, rendered, tokenized) and submitted: bounded, shared
    // with the HTTP server; a full queue is RESOURCE_EXHAUSTED.
    std::weak_ptr<TaskPool> render_pool;
  };
  // What the render pool hands the reactor: choice 0's request, the other choices' (sent
  // once choice 0's first event shows its prompt computed, so that they find it in the
  // prefix cache), how to read tool calls back, and whether responses carry logprobs.
  struct Built {
    ServeRequest first;
    std::vector<ServeRequest> later;
    ToolUse tool_use;
    ToolCallFormat tool_format = ToolCallFormat::kNone;
    bool logprobs = false;
  };
  // Returns the reactor for gRPC to drive at once; `build` runs on the render pool, then the
  // request is submitted (or the call finishes with build's error, or Submit's).
  // `arrival`: when the call came in; `heavy`: post `build` as a heavy task (TaskPool::Post).
  // Each message carries one choice's events; the call ends once every choice finished, or
  // with the first choice's failure (the others are cancelled).
  static grpc::ServerWriteReactor<grpc::ByteBuffer>* Start(const Context& context,
                                                           std::function<absl::StatusOr<Built>()> build,
                                                           absl::Time arrival, bool heavy = false);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  GenerateReactor(const Tokenizer& tokenizer, FrontendMetrics* metrics, absl::Time arrival);
  // One choice's reading of its output (its stream and tracker are streams_').
  struct Choice {
    explicit Choice(ChoiceToolCalls tool_calls) : tools(std::move(tool_calls)) {}
    ChoiceToolCalls tools;  // the text through tool_choice, calls whole
    bool finished = false;
  };
  // On the render pool: submits the built request and starts streaming, or finishes.
  void Admit(const Context& context, absl::StatusOr<Built> built);
  // Watches a choice's stream: its events schedule a Pump on the pump pool.
  void Watch(RequestStream& stream);
  // Starts the next write, or the Finish, when there is something to do and no write is
  // in flight. Called from the reactions and the pump pool; never blocks.
  void Pump();
  // The engine's notify hook: posts one Pump to `pool` unless one is already pending.
  static void SchedulePump(const std::shared_ptr<GenerateReactor>& self, TaskPool& pool);
  void AppendEvent(const OutputEvent& e, Choice& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A choice's text through the tool-call reading its request asks for (final: its last event).
  void AppendText(const std::string& text, bool final, Choice& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Tokenizer& tokenizer_;
  std::shared_ptr<GenerateReactor> self_;  // released in OnDone
  std::atomic<bool> pump_scheduled_{false};

  absl::Mutex mu_;
  std::weak_ptr<TaskPool> pump_pool_;  // set by Admit
  // The choices' engine requests, once Admit submitted the first.
  std::optional<ChoiceStreams> streams_ ABSL_GUARDED_BY(mu_);
  std::vector<Choice> choices_ ABSL_GUARDED_BY(mu_);  // every choice, submitted or not
  int num_finished_ ABSL_GUARDED_BY(mu_) = 0;
  ToolUse tool_use_;
  ToolCallFormat tool_format_ = ToolCallFormat::kNone;
  bool logprobs_ = false;  // set by Admit, like tool_use_
  bool admitted_ ABSL_GUARDED_BY(mu_) = false;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;  // Finish or StartWriteAndFinish issued
  bool client_gone_ ABSL_GUARDED_BY(mu_) = false;
  RequestTracker tracker_ ABSL_GUARDED_BY(mu_);  // until Admit: the call's own
  // The message of the write in flight, built under mu_ while no write is in flight, and its
  // bytes, which gRPC reads until OnWriteDone.
  v1::GenerateResponse response_;
  grpc::ByteBuffer wire_;
};

}  // namespace tpserve

// GenerateReactor: one streaming Generate call. Tested by tests/frontend_test.cc.
#include "coordinator/api/grpc_generate_reactor.h"

#include <functional>
#include <string>
#include <utility>

#include "coordinator/api/grpc_status.h"

namespace tpserve {
namespace {

std::string TokenText(const Tokenizer& tokenizer, int32_t id) {
  const int32_t ids[1] = {id};
  return tokenizer.Decode(ids, /*skip_special_tokens=*/false);
}

v1::FinishReason ToProto(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    default:
      return v1::FINISH_REASON_UNSPECIFIED;
  }
}

}  // namespace

GenerateReactor::GenerateReactor(const Tokenizer& tokenizer, FrontendMetrics* metrics, absl::Time arrival)
    : tokenizer_(tokenizer), tracker_(metrics, arrival) {}

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerateReactor::Start(const Context& context,
                                                                   std::function<absl::StatusOr<Built>()> build,
                                                                   absl::Time arrival, bool heavy) {
  std::shared_ptr<GenerateReactor> reactor(new GenerateReactor(context.tokenizer, context.metrics, arrival));
  reactor->self_ = reactor;
  std::shared_ptr<TaskPool> render = context.render_pool.lock();
  const bool posted = render != nullptr && render->Post(
                                                [reactor, context, build = std::move(build)] {
                                                  reactor->Admit(context, build());
                                                },
                                                heavy);
  if (!posted) {
    {
      absl::MutexLock lock(&reactor->mu_);
      reactor->finishing_ = true;
    }
    reactor->Finish(ToGrpcStatus(absl::ResourceExhaustedError(
        "the server is busy: requests already wait to be rendered and tokenized (--max-pending-renders); "
        "retry later")));
  }
  return reactor.get();
}

void GenerateReactor::Admit(const Context& context, absl::StatusOr<Built> built) {
  // Reactions (OnCancel) may run meanwhile: streams_ and admitted_ change under mu_.
  auto finish = [this](const absl::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      finishing_ = true;
    }
    Finish(ToGrpcStatus(status));
  };
  if (!built.ok()) return finish(built.status());
  pump_pool_ = context.pump_pool;
  tool_use_ = built->tool_use;
  tool_format_ = built->tool_format;
  logprobs_ = built->logprobs;
  bool gone;
  {
    absl::MutexLock lock(&mu_);
    gone = client_gone_;
    if (!gone) tracker_.OnSubmitted();
  }
  if (gone) return finish(absl::CancelledError("the client cancelled the call"));
  const std::string first_id = built->first.request_id;
  absl::StatusOr<std::shared_ptr<RequestStream>> stream = context.engine.Submit(std::move(built->first));
  if (!stream.ok()) return finish(stream.status());
  bool cancelled;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i <= built->later.size(); ++i) {
      choices_.emplace_back(
          ChoiceToolCalls(tool_use_, tool_format_, first_id, static_cast<int>(i), ChoiceToolCalls::Delivery::kWhole));
    }
    streams_.emplace(context.engine, *stream, tracker_, std::move(built->later),
                     [this](RequestStream& later) { Watch(later); });
    admitted_ = true;
    cancelled = client_gone_;  // OnCancel ran while the request was being submitted
  }
  Watch(**stream);
  if (cancelled) (*stream)->Cancel();
  Pump();  // events pushed before SetNotify, or the cancel
}

void GenerateReactor::Watch(RequestStream& stream) {
  // Weak references: the hook lives in the engine's stream, which may outlive both.
  stream.SetNotify([weak_reactor = weak_from_this(), weak_pool = pump_pool_] {
    std::shared_ptr<TaskPool> pool = weak_pool.lock();
    std::shared_ptr<GenerateReactor> r = weak_reactor.lock();
    if (pool != nullptr && r != nullptr) SchedulePump(r, *pool);
  });
}

void GenerateReactor::SchedulePump(const std::shared_ptr<GenerateReactor>& self, TaskPool& pool) {
  if (self->pump_scheduled_.exchange(true)) return;  // the pending Pump will see this event too
  pool.Post([self] {
    self->pump_scheduled_.store(false);  // before Pump: later events schedule another
    self->Pump();
  });
}

void GenerateReactor::AppendText(const std::string& text, bool final, Choice& c) {
  const ToolStreamDelta d = c.tools.Feed(text, final);
  response_.mutable_text()->append(d.content);
  for (const ToolCallDelta& t : d.tool_calls) {  // whole: one delta a call
    v1::ToolCall* out = response_.add_tool_calls();
    out->set_id(t.id);
    out->set_name(t.name);
    out->set_arguments(t.arguments);
  }
}

void GenerateReactor::AppendEvent(const OutputEvent& e, Choice& c) {
  response_.mutable_token_ids()->Add(e.token_ids.begin(), e.token_ids.end());
  AppendText(e.text, e.finish != FinishReason::kNone, c);
  if (logprobs_) {
    for (const TokenLogprob& lp : e.logprobs) {
      v1::TokenLogprob* out = response_.add_logprobs();
      out->set_token_id(lp.token_id);
      out->set_token(TokenText(tokenizer_, lp.token_id));
      out->set_logprob(lp.logprob);
      for (const auto& [id, logprob] : lp.top) {
        v1::TopLogprob* top = out->add_top();
        top->set_token_id(id);
        top->set_token(TokenText(tokenizer_, id));
        top->set_logprob(logprob);
      }
    }
  }
  response_.mutable_usage()->set_prompt_tokens(e.prompt_tokens);
  response_.mutable_usage()->set_completion_tokens(e.completion_tokens);
  if (e.finish != FinishReason::kNone) {
    response_.set_finish_reason(e.finish == FinishReason::kStop && c.tools.calls() > 0 ? v1::FINISH_REASON_TOOL_CALLS
                                                                                     : ToProto(e.finish));
    response_.set_stop_string(e.stop_string);
    if (e.stop_token_id >= 0) response_.set_stop_token_id(e.stop_token_id);
    v1::Timings* t = response_.mutable_timings();
    t->set_queue_ms(e.timings.queue_ms);
    t->set_prefill_ms(e.timings.prefill_ms);
    t->set_first_token_ms(e.timings.first_token_ms);
    t->set_decode_ms(e.timings.decode_ms);
  }
}

void GenerateReactor::Pump() {
  enum class Action { kWrite, kWriteAndFinish, kFinish };
  Action action;
  grpc::Status status;
  std::vector<std::shared_ptr<RequestStream>> cancel;  // the other choices, when one failed
  {
    absl::MutexLock lock(&mu_);
    if (!admitted_ || finishing_ || write_in_flight_) return;  // Admit finishes an unadmitted call
    if (client_gone_) {
      finishing_ = true;
      action = Action::kFinish;
      status = grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the call");
    } else {
      // One message per choice: the first choice with events.
      OutputEvent e;
      bool any = false;
      size_t index = 0;
      FinishReason finish = FinishReason::kNone;
      std::string error;
      absl::StatusCode error_code = absl::StatusCode::kInternal;
      response_.Clear();
      for (; index < streams_->num_submitted() && !any; ++index) {
        Choice& c = choices_[index];
        while (!c.finished && finish == FinishReason::kNone && streams_->Next(index, &e)) {
          any = true;
          AppendEvent(e, c);
          finish = e.finish;
          error = std::move(e.error);
          error_code = e.error_code;
        }
      }
      if (!any) return;
      --index;
      response_.set_request_id(streams_->stream(index).request_id());
      response_.set_index(static_cast<int32_t>(index));
      // After choice 0's events: a later choice the engine refuses ends the call.
      absl::Status later = index == 0 ? streams_->SubmitLater() : absl::OkStatus();
      if (finish != FinishReason::kNone) {
        choices_[index].finished = true;
        ++num_finished_;
      }
      if (!later.ok()) {
        finish = FinishReason::kError;
        error = std::string(later.message());
        error_code = later.code();
      }
      if (finish == FinishReason::kError || finish == FinishReason::kCancelled) {
        finishing_ = true;
        action = Action::kWriteAndFinish;
        for (size_t i = 0; i < streams_->num_submitted(); ++i) {
          if (!choices_[i].finished) cancel.push_back(streams_->streams()[i]);
        }
        if (finish == FinishReason::kError) {
          // UNAVAILABLE: the server can serve nothing now (a rank died); RESOURCE_EXHAUSTED: a
          // later choice found the queue full. Retry later or elsewhere.
          status = grpc::Status(error_code == absl::StatusCode::kUnavailable ? grpc::StatusCode::UNAVAILABLE
                                : error_code == absl::StatusCode::kResourceExhausted
                                    ? grpc::StatusCode::RESOURCE_EXHAUSTED
                                    : grpc::StatusCode::INTERNAL,
                                error.empty() ? "the engine failed this request" : error);
        } else {
          // The client's own cancel ends the call before this (client_gone_): this one was the
          // server's, e.g. a drain past --shutdown-timeout. UNAVAILABLE: retry elsewhere.
          status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                error.empty() ? "the server cancelled the request" : error);
        }
      } else if (num_finished_ == static_cast<int>(choices_.size())) {
        finishing_ = true;
        action = Action::kWriteAndFinish;
      } else {
        write_in_flight_ = true;
        action = Action::kWrite;
      }
    }
  }
  for (const auto& stream : cancel) stream->Cancel();
  if (action != Action::kFinish) {
    // No write in flight, and none starts before the one below: wire_ is free.
    const std::string bytes = response_.SerializeAsString();
    grpc::Slice slice(bytes);
    wire_ = grpc::ByteBuffer(&slice, 1);
  }
  // Outside the lock: reactions may run on other threads as soon as these are called.
  // wire_ stays untouched until OnWriteDone (or, after the last write, forever).
  switch (action) {
    case Action::kWrite:
      StartWrite(&wire_);
      break;
    case Action::kWriteAndFinish:
      StartWriteAndFinish(&wire_, grpc::WriteOptions(), status);
      break;
    case Action::kFinish:
      Finish(status);
      break;
  }
}

void GenerateReactor::OnWriteDone(bool ok) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!ok && !client_gone_) {  // the stream broke under us
      client_gone_ = true;
      if (streams_) {
        streams_->OnClientGone();
        streams = streams_->streams();
      }
    }
  }
  for (const auto& stream : streams) stream->Cancel();
  Pump();
}

void GenerateReactor::OnCancel() {
  std::vector<std::shared_ptr<RequestStream>> streams;
  {
    absl::MutexLock lock(&mu_);
    if (finishing_ || client_gone_) return;
    client_gone_ = true;
    if (!streams_) {
      tracker_.OnClientGone();  // before Admit: Admit sees client_gone_ instead
    } else {
      streams_->OnClientGone();
      streams = streams_->streams();
    }
  }
  for (const auto& stream : streams) stream->Cancel();
  Pump();
}

void GenerateReactor::OnDone() {
  // The last reference may be the engine's notify call in flight; it then deletes us.
  std::shared_ptr<GenerateReactor> self = std::move(self_);
}

}  // namespace tpserve

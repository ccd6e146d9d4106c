// GenerateReactor: one streaming Generate call. Tested by tests/frontend_test.cc.
#include "coordinator/api/grpc_generate_reactor.h"

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

GenerateReactor::GenerateReactor(const Tokenizer& tokenizer, FrontendMetrics* metrics, bool logprobs,
                                 absl::Time arrival)
    : tokenizer_(tokenizer), logprobs_(logprobs), tracker_(metrics, arrival) {}

grpc::ServerWriteReactor<v1::GenerateResponse>* GenerateReactor::Start(
    const Context& context, std::function<absl::StatusOr<ServeRequest>()> build, bool logprobs, absl::Time arrival) {
  std::shared_ptr<GenerateReactor> reactor(new GenerateReactor(context.tokenizer, context.metrics, logprobs, arrival));
  reactor->self_ = reactor;
  std::shared_ptr<TaskPool> render = context.render_pool.lock();
  const bool posted = render != nullptr && render->Post([reactor, context, build = std::move(build)] {
    reactor->Admit(context, build());
  });
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

void GenerateReactor::Admit(const Context& context, absl::StatusOr<ServeRequest> request) {
  // Reactions (OnCancel) may run meanwhile: stream_ and admitted_ change under mu_.
  auto finish = [this](const absl::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      finishing_ = true;
    }
    Finish(ToGrpcStatus(status));
  };
  if (!request.ok()) return finish(request.status());
  bool gone;
  {
    absl::MutexLock lock(&mu_);
    gone = client_gone_;
    if (!gone) tracker_.OnSubmitted();
  }
  if (gone) return finish(absl::CancelledError("the client cancelled the call"));
  absl::StatusOr<std::shared_ptr<RequestStream>> stream = context.engine.Submit(*std::move(request));
  if (!stream.ok()) return finish(stream.status());
  bool cancelled;
  {
    absl::MutexLock lock(&mu_);
    stream_ = *stream;
    admitted_ = true;
    cancelled = client_gone_;  // OnCancel ran while the request was being submitted
  }
  // Weak references: the hook lives in the engine's stream, which may outlive both.
  (*stream)->SetNotify([weak_reactor = weak_from_this(), weak_pool = context.pump_pool] {
    std::shared_ptr<TaskPool> pool = weak_pool.lock();
    std::shared_ptr<GenerateReactor> r = weak_reactor.lock();
    if (pool != nullptr && r != nullptr) SchedulePump(r, *pool);
  });
  if (cancelled) (*stream)->Cancel();
  Pump();  // events pushed before SetNotify, or the cancel
}

void GenerateReactor::SchedulePump(const std::shared_ptr<GenerateReactor>& self, TaskPool& pool) {
  if (self->pump_scheduled_.exchange(true)) return;  // the pending Pump will see this event too
  pool.Post([self] {
    self->pump_scheduled_.store(false);  // before Pump: later events schedule another
    self->Pump();
  });
}

void GenerateReactor::AppendEvent(const OutputEvent& e) {
  response_.mutable_token_ids()->Add(e.token_ids.begin(), e.token_ids.end());
  response_.mutable_text()->append(e.text);
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
    response_.set_finish_reason(ToProto(e.finish));
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
  {
    absl::MutexLock lock(&mu_);
    if (!admitted_ || finishing_ || write_in_flight_) return;  // Admit finishes an unadmitted call
    if (client_gone_) {
      finishing_ = true;
      action = Action::kFinish;
      status = grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the call");
    } else {
      OutputEvent e;
      bool any = false;
      FinishReason finish = FinishReason::kNone;
      std::string error;
      absl::StatusCode error_code = absl::StatusCode::kInternal;
      response_.Clear();
      while (finish == FinishReason::kNone && stream_->TryNext(&e)) {
        any = true;
        tracker_.OnEvent(e);
        AppendEvent(e);
        finish = e.finish;
        error = std::move(e.error);
        error_code = e.error_code;
      }
      if (!any) return;
      response_.set_request_id(stream_->request_id());
      if (finish == FinishReason::kNone) {
        write_in_flight_ = true;
        action = Action::kWrite;
      } else {
        finishing_ = true;
        action = Action::kWriteAndFinish;
        if (finish == FinishReason::kError) {
          // UNAVAILABLE: the server can serve nothing now (a rank died); retry elsewhere.
          status = grpc::Status(error_code == absl::StatusCode::kUnavailable ? grpc::StatusCode::UNAVAILABLE
                                                                             : grpc::StatusCode::INTERNAL,
                                error.empty() ? "the engine failed this request" : error);
        } else if (finish == FinishReason::kCancelled) {
          // The client's own cancel ends the call before this (client_gone_): this one was the
          // server's, e.g. a drain past --shutdown-timeout. UNAVAILABLE: retry elsewhere.
          status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                error.empty() ? "the server cancelled the request" : error);
        }
      }
    }
  }
  // Outside the lock: reactions may run on other threads as soon as these are called.
  // response_ stays untouched until OnWriteDone (or, after the last write, forever).
  switch (action) {
    case Action::kWrite:
      StartWrite(&response_);
      break;
    case Action::kWriteAndFinish:
      StartWriteAndFinish(&response_, grpc::WriteOptions(), status);
      break;
    case Action::kFinish:
      Finish(status);
      break;
  }
}

void GenerateReactor::OnWriteDone(bool ok) {
  {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!ok && !client_gone_ && stream_ != nullptr) {  // the stream broke under us
      client_gone_ = true;
      tracker_.OnClientGone();
      stream_->Cancel();
    }
  }
  Pump();
}

void GenerateReactor::OnCancel() {
  std::shared_ptr<RequestStream> stream;
  {
    absl::MutexLock lock(&mu_);
    if (finishing_ || client_gone_) return;
    client_gone_ = true;
    tracker_.OnClientGone();
    stream = stream_;  // null before Admit: Admit sees client_gone_ instead
  }
  if (stream != nullptr) stream->Cancel();
  Pump();
}

void GenerateReactor::OnDone() {
  // The last reference may be the engine's notify call in flight; it then deletes us.
  std::shared_ptr<GenerateReactor> self = std::move(self_);
}

}  // namespace tpserve

// RequestStream: the per-request event queue between the engine thread and a front end.
// Tested by tests/request_stream_test.cc and, through the servers, tests/frontend_test.cc.
#include "coordinator/engine/request.h"

#include <utility>

namespace tpserve {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

void RequestStream::Push(OutputEvent e) {
  std::function<void()> notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;  // nothing follows the final event (e.g. a late second finish)
    if (e.finish != FinishReason::kNone) finished_ = true;
    events_.push_back(std::move(e));
    notify = notify_;
  }
  cv_.notify_all();
  // Outside the lock: the hook may read the stream (TryNext) or start a write.
  if (notify) notify();
}

bool RequestStream::Next(OutputEvent* e, absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [this] { return !events_.empty(); };
  if (timeout == absl::InfiniteDuration()) {
    cv_.wait(lock, ready);  // now + infinity would overflow wait_for's deadline
  } else if (!cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), ready)) {
    return false;
  }
  *e = std::move(events_.front());
  events_.pop_front();
  return true;
}

bool RequestStream::TryNext(OutputEvent* e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.empty()) return false;
  *e = std::move(events_.front());
  events_.pop_front();
  return true;
}

void RequestStream::SetNotify(std::function<void()> notify) {
  std::lock_guard<std::mutex> lock(mu_);
  notify_ = std::move(notify);
}

void RequestStream::SetCancelHook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  cancel_hook_ = std::move(hook);
}

void RequestStream::Cancel() {
  std::function<void()> hook;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return;
    cancelled_ = true;
    if (!finished_) hook = std::move(cancel_hook_);
  }
  if (hook) hook();
}

bool RequestStream::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

bool RequestStream::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

}  // namespace tpserve

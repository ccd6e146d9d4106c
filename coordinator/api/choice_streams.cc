// ChoiceStreams: the n engine requests of one API request. Tested by
// tests/choice_streams_test.cc.
#include "coordinator/api/choice_streams.h"

#include <string>
#include <utility>

namespace tpserve {

ChoiceStreams::ChoiceStreams(EngineApi& engine, std::shared_ptr<RequestStream> first, RequestTracker first_tracker,
                             std::vector<ServeRequest> later, std::function<void(RequestStream&)> watch)
    : engine_(engine), watch_(std::move(watch)), later_(std::move(later)) {
  streams_.push_back(std::move(first));
  trackers_.push_back(std::move(first_tracker));
}

bool ChoiceStreams::Next(size_t i, OutputEvent* e) {
  if (!streams_[i]->TryNext(e)) return false;
  trackers_[i].OnEvent(*e);
  return true;
}

absl::Status ChoiceStreams::SubmitLater() {
  std::vector<ServeRequest> later = std::move(later_);
  later_.clear();
  for (ServeRequest& request : later) {
    RequestTracker tracker = trackers_[0].ForAnotherChoice();
    tracker.OnSubmitted();
    absl::StatusOr<std::shared_ptr<RequestStream>> stream = engine_.Submit(std::move(request));
    if (!stream.ok()) return stream.status();
    streams_.push_back(*std::move(stream));
    trackers_.push_back(std::move(tracker));
    watch_(*streams_.back());
  }
  return absl::OkStatus();
}

void ChoiceStreams::CancelUnfinished() {
  for (const auto& stream : streams_) {
    stream->SetNotify(nullptr);
    if (!stream->finished()) stream->Cancel();
  }
}

void ChoiceStreams::OnClientGone() {
  for (RequestTracker& tracker : trackers_) tracker.OnClientGone();
}

OutputEvent RefusedChoiceEvent(const absl::Status& status) {
  OutputEvent e;
  e.finish = FinishReason::kError;
  e.error = std::string(status.message());
  e.error_code = status.code();
  return e;
}

}  // namespace tpserve

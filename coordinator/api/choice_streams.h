// The engine requests behind one API request with n choices: choice 0's, submitted by the
// caller, and choices 1..n-1's, submitted once choice 0's first event shows its prompt
// computed (so that they find it in the prefix cache instead of computing it again), each
// with its own RequestTracker. Shared by the HTTP ResponsePump and the gRPC GenerateReactor.
// Tested by tests/choice_streams_test.cc.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/api/frontend_metrics.h"
#include "coordinator/engine/engine_api.h"
#include "coordinator/engine/request.h"

namespace tpserve {

// Not thread-safe: used on its owner's strand or under its lock.
class ChoiceStreams {
 public:
  // `first`: choice 0's stream, already submitted (the caller watches it), tracked by
  // `first_tracker`; `later`: the other choices' requests (MoreChoices). `watch` is called
  // with each later choice's stream as it is submitted, before its events can be missed.
  ChoiceStreams(EngineApi& engine, std::shared_ptr<RequestStream> first, RequestTracker first_tracker,
                std::vector<ServeRequest> later, std::function<void(RequestStream&)> watch);

  // Choices submitted so far (choice i's stream is the i-th).
  size_t num_submitted() const { return streams_.size(); }
  RequestStream& stream(size_t i) const { return *streams_[i]; }
  // Choice i's next event, if one is there; its tracker records it.
  bool Next(size_t i, OutputEvent* e);
  // Submits the later choices, once: call after each of choice 0's events. OK, or the
  // status of the first one the engine refused, which is choice num_submitted() (it and
  // the ones after it are not submitted; the response is to fail).
  absl::Status SubmitLater();
  // The streams, for the caller to cancel those that have not finished (outside its lock).
  const std::vector<std::shared_ptr<RequestStream>>& streams() const { return streams_; }
  // Stops notifications and cancels every submitted choice that has not finished.
  void CancelUnfinished();
  // The client went away: every submitted choice counts as aborted (unless it finished).
  void OnClientGone();

 private:
  EngineApi& engine_;
  const std::function<void(RequestStream&)> watch_;
  std::vector<std::shared_ptr<RequestStream>> streams_;  // choice i's
  std::vector<RequestTracker> trackers_;                  // choice i's
  std::vector<ServeRequest> later_;                       // choices not yet submitted
};

// The event that fails a choice the engine refused with `status` (a response builder reads
// it as the engine's own failure).
OutputEvent RefusedChoiceEvent(const absl::Status& status);

}  // namespace tpserve

// What the API front ends (gRPC, HTTP) hand the serving engine and get back: a request
// with its sampling parameters, and a thread-safe stream of output events. Tested by
// tests/serving_engine_test.cc.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/engine/sampling_params.h"

namespace tpserve {

struct ServeRequest {
  std::string request_id;
  std::vector<int32_t> prompt_ids;
  SamplingParams params;  // validated by the engine
};

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };
const char* FinishReasonName(FinishReason r);  // "stop", "length", "cancelled", "error"

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // top-N alternatives
};

// The engine's timings of one request, in milliseconds since it arrived at the engine
// (EngineApi::Submit). The front ends add their own time before that (RequestTracker).
struct RequestTimings {
  double queue_ms = 0;        // arrival -> first scheduled
  double prefill_ms = 0;      // first scheduled -> prefill done
  double first_token_ms = 0;  // arrival -> first token
  double decode_ms = 0;       // first token -> finish
};

// One increment of a request's output. The last event has finish != kNone.
struct OutputEvent {
  std::vector<int32_t> token_ids;  // new tokens
  std::string text;                // new text (stop strings held back / removed)
  std::vector<TokenLogprob> logprobs;
  FinishReason finish = FinishReason::kNone;
  std::string error;  // with kError
  // With kError, what kind of failure: INTERNAL (the engine failed this request) or
  // UNAVAILABLE (the server can serve nothing now, e.g. a rank died: retry elsewhere).
  absl::StatusCode error_code = absl::StatusCode::kInternal;
  // With kStop, what matched (vLLM's stop_reason): a stop string, or a stop_token_id (-1:
  // neither, e.g. EOS or the end of a structured output).
  std::string stop_string;
  int32_t stop_token_id = -1;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;  // so far
  RequestTimings timings;         // final on the last event
};

// The per-request queue between the engine thread (producer) and a front end (consumer).
class RequestStream {
 public:
  explicit RequestStream(std::string request_id) : request_id_(std::move(request_id)) {}
  const std::string& request_id() const { return request_id_; }

  // Producer side (engine thread).
  void Push(OutputEvent e);
  // Consumer side: waits up to `timeout` for the next event; false on timeout.
  bool Next(OutputEvent* e, absl::Duration timeout);
  // Non-blocking variant for reactor-style front ends.
  bool TryNext(OutputEvent* e);
  // Called (from the engine thread, without the lock held) whenever an event is pushed;
  // set it before submitting. Must not block.
  void SetNotify(std::function<void()> notify);
  // The client went away or asked to stop: the engine finishes the request with
  // kCancelled and frees its KV blocks at its next step.
  void Cancel();
  // Called once, on the cancelling thread without the lock held, by the first Cancel()
  // before the final event (the engine hears of it at once; no polling). Must not block.
  void SetCancelHook(std::function<void()> hook);
  bool cancelled() const;
  bool finished() const;  // the final event was pushed

 private:
  const std::string request_id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<OutputEvent> events_;
  std::function<void()> notify_;
  std::function<void()> cancel_hook_;
  bool cancelled_ = false;
  bool finished_ = false;
};

}  // namespace tpserve

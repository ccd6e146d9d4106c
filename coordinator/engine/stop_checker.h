// Stop strings over a request's streamed text: matched across text deltas and never
// emitted. Text work, done on the output processor's thread; the token-level stops (stop
// token ids, EOS, min_tokens, max_tokens) are the engine's (Scheduler::Update). Tested by
// tests/stop_checker_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "coordinator/engine/request.h"  // FinishReason
#include "coordinator/engine/sampling_params.h"

namespace tpserve {

struct StopUpdate {
  std::string text;  // to send to the client now (may be empty)
  // kStop when a stop string ended the output with this token, else kNone.
  FinishReason finish_reason = FinishReason::kNone;
  std::string stop_string;  // the one that matched (vLLM's stop_reason)
};

// Fed the text each generated token made final (IncrementalDecoder::Push), in order.
// Text that could still become a stop string is held back; a matched stop string and
// everything after it is dropped. As vLLM: stop strings are looked for in the text of the
// min_tokens-th token onwards (text before that is emitted as it comes); the earliest match
// ends the output, the first listed on equal starts.
class StopChecker {
 public:
  explicit StopChecker(const SamplingParams& params);

  // One token's text. Must not be called after an update that finished the output.
  StopUpdate Push(absl::string_view text_delta);
  // The held-back text, for an output that ended otherwise (the engine's stop token or
  // max_tokens, a cancel). Empty after a stop string.
  std::string Flush();

  bool finished() const { return finished_; }
  int32_t num_tokens() const { return num_tokens_; }

 private:
  // Length of the longest suffix of pending_ that is a proper prefix of a stop string.
  size_t HeldBackLength() const;

  std::vector<std::string> stop_strings_;
  int32_t min_tokens_;
  size_t max_stop_length_ = 0;
  std::string pending_;  // text received but not yet emitted
  int32_t num_tokens_ = 0;
  bool finished_ = false;
};

}  // namespace tpserve

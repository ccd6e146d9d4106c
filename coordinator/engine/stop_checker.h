// When one request's output ends and which of its streamed text may be sent: stop
// strings matched across text deltas (never emitted), stop token ids, EOS, max_tokens
// and min_tokens. Tested by tests/stop_checker_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "coordinator/engine/request.h"  // FinishReason
#include "coordinator/engine/sampling_params.h"

namespace tpserve {

struct StopUpdate {
  std::string text;  // to send to the client now (may be empty)
  // kStop or kLength when this token ended the request, else kNone.
  FinishReason finish_reason = FinishReason::kNone;
  // What stopped it (vLLM's stop_reason): the matched stop string, or the stop token
  // id; both unset for EOS and for kLength.
  std::string stop_string;
  int32_t stop_token_id = -1;
};

// Fed each generated token with the text it made final (IncrementalDecoder::Push).
// Text that could still become a stop string is held back; a matched stop string and
// everything after it is dropped. Rules, as vLLM has them:
//  - A stop token id, or an EOS id unless ignore_eos, ends the request with "stop" from
//    the (min_tokens + 1)-th token on; its own text is not emitted (the Sampler masks
//    these ids before that, so they cannot come earlier).
//  - Stop strings are looked for in the text of the min_tokens-th token onwards (text
//    before that is emitted as it comes); the earliest match ends the request, the first
//    listed on equal starts.
//  - The max_tokens-th token ends it with "length", unless it also stopped it.
// On any finish the held-back text is released with the update.
class StopChecker {
 public:
  // `eos_token_ids`: the model's EOS ids.
  StopChecker(const SamplingParams& params, absl::Span<const int32_t> eos_token_ids);

  // Must not be called after an update that finished the request.
  StopUpdate Push(int32_t token_id, absl::string_view text_delta);
  // The held-back text, for a request that ends for another reason (cancelled, error,
  // context full). Empty after a finish.
  std::string Flush();

  bool finished() const { return finished_; }
  int32_t num_tokens() const { return num_tokens_; }

 private:
  bool IsStopToken(int32_t token_id, int32_t* stop_token_id) const;
  // Length of the longest suffix of pending_ that is a proper prefix of a stop string.
  size_t HeldBackLength() const;

  std::vector<std::string> stop_strings_;
  std::vector<int32_t> stop_token_ids_;
  std::vector<int32_t> eos_token_ids_;  // empty when ignore_eos
  int32_t max_tokens_;
  int32_t min_tokens_;
  size_t max_stop_length_ = 0;
  std::string pending_;  // text received but not yet emitted
  int32_t num_tokens_ = 0;
  bool finished_ = false;
};

}  // namespace tpserve

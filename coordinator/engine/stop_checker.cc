// Incremental stop-string matching and finish reasons. Tested by
// tests/stop_checker_test.cc.
#include "coordinator/engine/stop_checker.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "kernels/base.h"

namespace tpserve {

StopChecker::StopChecker(const SamplingParams& params, absl::Span<const int32_t> eos_token_ids)
    : stop_strings_(params.stop),
      stop_token_ids_(params.stop_token_ids),
      max_tokens_(params.max_tokens),
      min_tokens_(params.min_tokens) {
  if (!params.ignore_eos) eos_token_ids_.assign(eos_token_ids.begin(), eos_token_ids.end());
  for (const std::string& s : stop_strings_) {
    TP_CHECK(!s.empty());  // SamplingParams::Validate rejects empty stop strings
    max_stop_length_ = std::max(max_stop_length_, s.size());
  }
}

bool StopChecker::IsStopToken(int32_t token_id, int32_t* stop_token_id) const {
  if (std::find(stop_token_ids_.begin(), stop_token_ids_.end(), token_id) != stop_token_ids_.end()) {
    *stop_token_id = token_id;
    return true;
  }
  return std::find(eos_token_ids_.begin(), eos_token_ids_.end(), token_id) != eos_token_ids_.end();
}

size_t StopChecker::HeldBackLength() const {
  const absl::string_view text = pending_;
  for (size_t n = std::min(text.size(), max_stop_length_ - 1); n > 0; --n) {
    const absl::string_view suffix = text.substr(text.size() - n);
    for (const std::string& s : stop_strings_) {
      if (s.size() > n && absl::StartsWith(s, suffix)) return n;
    }
  }
  return 0;
}

StopUpdate StopChecker::Push(int32_t token_id, absl::string_view text_delta) {
  TP_CHECK(!finished_);
  ++num_tokens_;
  StopUpdate update;
  auto finish = [&](FinishReason reason) {
    finished_ = true;
    update.finish_reason = reason;
    update.text += pending_;
    pending_.clear();
  };

  if (num_tokens_ > min_tokens_ && IsStopToken(token_id, &update.stop_token_id)) {
    finish(FinishReason::kStop);
    return update;
  }

  pending_.append(text_delta.data(), text_delta.size());
  if (!stop_strings_.empty() && num_tokens_ >= min_tokens_) {
    size_t match = std::string::npos;
    for (const std::string& s : stop_strings_) {
      const size_t pos = pending_.find(s);
      if (pos < match) {
        match = pos;
        update.stop_string = s;
      }
    }
    if (match != std::string::npos) {
      pending_.resize(match);
      finish(FinishReason::kStop);
      return update;
    }
    const size_t emit = pending_.size() - HeldBackLength();
    update.text = pending_.substr(0, emit);
    pending_.erase(0, emit);
  } else {
    update.text = std::move(pending_);
    pending_.clear();
  }

  if (num_tokens_ >= max_tokens_) finish(FinishReason::kLength);
  return update;
}

std::string StopChecker::Flush() {
  std::string text = std::move(pending_);
  pending_.clear();
  return text;
}

}  // namespace tpserve

// Incremental stop-string matching. Tested by tests/stop_checker_test.cc.
#include "coordinator/engine/stop_checker.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "kernels/base.h"

namespace tpserve {

StopChecker::StopChecker(const SamplingParams& params) : stop_strings_(params.stop), min_tokens_(params.min_tokens) {
  for (const std::string& s : stop_strings_) {
    TP_CHECK(!s.empty());  // SamplingParams::Validate rejects empty stop strings
    max_stop_length_ = std::max(max_stop_length_, s.size());
  }
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

StopUpdate StopChecker::Push(absl::string_view text_delta) {
  TP_CHECK(!finished_);
  ++num_tokens_;
  StopUpdate update;
  pending_.append(text_delta.data(), text_delta.size());
  if (stop_strings_.empty() || num_tokens_ < min_tokens_) {
    update.text = std::move(pending_);
    pending_.clear();
    return update;
  }
  size_t match = std::string::npos;
  for (const std::string& s : stop_strings_) {
    const size_t pos = pending_.find(s);
    if (pos < match) {
      match = pos;
      update.stop_string = s;
    }
  }
  if (match != std::string::npos) {
    finished_ = true;
    update.finish_reason = FinishReason::kStop;
    update.text = pending_.substr(0, match);
    pending_.clear();
    return update;
  }
  const size_t emit = pending_.size() - HeldBackLength();
  update.text = pending_.substr(0, emit);
  pending_.erase(0, emit);
  return update;
}

std::string StopChecker::Flush() {
  std::string text = std::move(pending_);
  pending_.clear();
  return text;
}

}  // namespace tpserve

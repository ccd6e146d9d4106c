// The token usage an OpenAI server-sent-event stream reports: the `usage` object of its chunks
// (the last chunk's, with `stream_options.include_usage`; vLLM's continuous usage, each chunk's
// running total), read as the stream passes through the router so that streamed requests are
// counted and priced as whole responses are. Only lines that hold "usage" followed by an object
// are parsed. Not thread-safe (a request's strand owns it). Tested by tests/stream_usage_test.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace tpserve {

class StreamUsage {
 public:
  // The next bytes of the stream (any split: a line may span pieces).
  void Feed(absl::string_view piece);
  // The latest usage seen with both counts; none before one.
  std::optional<int64_t> prompt_tokens() const { return prompt_tokens_; }
  std::optional<int64_t> completion_tokens() const { return completion_tokens_; }

 private:
  void Line(absl::string_view line);

  std::string partial_;        // the current line's start, until its newline
  bool skipping_ = false;      // the current line outgrew 1 MiB (no usage chunk): ignored up to its newline
  std::optional<int64_t> prompt_tokens_;
  std::optional<int64_t> completion_tokens_;
};

}  // namespace tpserve

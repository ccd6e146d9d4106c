// The token usage an OpenAI server-sent-event stream reports: the `usage` object of its chunks
// (the last chunk's, with `stream_options.include_usage`; vLLM's continuous usage, each chunk's
// running total), read as the stream passes through the router so that streamed requests are
// counted and priced as whole responses are. Each line is scanned once for the keys that matter
// and parsed at most once: only the first chunk, chunks that finish a choice and lines that hold
// "usage" followed by an object (Strip: any "usage" key). Where the router itself asked the
// backend for usage (the client did not), Strip also takes that usage out of what the client
// gets. It also notes which choices the stream finished, so that a stream the router must end
// early ends each of the others with finish_reason "error" (ErrorChunk). Not thread-safe (a
// request's strand owns it). Tested by tests/stream_usage_test.cc.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace tpserve {

struct UsageTokens {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};
// An OpenAI response's or chunk's `usage` (`response` is the whole object): its token counts
// where it has both as integers; none otherwise.
std::optional<UsageTokens> ReadUsage(const nlohmann::json& response);

class StreamUsage {
 public:
  // The next bytes of the stream (any split: a line may span pieces).
  void Feed(absl::string_view piece);
  // For a stream whose usage the router asked for (stream_options.include_usage added to the
  // client's request): reads `piece` as Feed does and returns what the client gets, the stream
  // as it would be without include_usage: each data chunk without its "usage" key (OpenAI's
  // null in every chunk, vLLM's continuous usage), and the usage chunk (no choices) dropped
  // whole with the blank line that ends its event. Other lines pass byte for byte; a chunk that
  // loses its key is written back as compact JSON, its key order kept. A line is returned once
  // its newline came (a line past 1 MiB, no usage chunk, as it comes); Rest() returns an
  // unterminated last line at the stream's end.
  std::string Strip(absl::string_view piece);
  std::string Rest();
  // For a stream the router ends before the backend did (the backend broke, or the request's
  // request_timeout_s passed): one `data:` event, as the backend's own chunks are written (its
  // id, object, created and model), that ends every choice of [0, n) the stream has not finished
  // with finish_reason "error" (chat: an empty delta; completions: empty text). Empty when every
  // choice finished or no chunk of the stream has been read yet.
  std::string ErrorChunk(int n) const;
  // The latest usage seen with both counts; none before one.
  const std::optional<UsageTokens>& usage() const { return usage_; }
  std::optional<int64_t> prompt_tokens() const {
    return usage_ ? std::optional<int64_t>(usage_->prompt_tokens) : std::nullopt;
  }
  std::optional<int64_t> completion_tokens() const {
    return usage_ ? std::optional<int64_t>(usage_->completion_tokens) : std::nullopt;
  }

 private:
  // Splits the stream into lines for Feed and Strip: `on_line` gets each whole line with its
  // newline (a line over 1 MiB is no usage chunk: `pass` gets its bytes as they come instead).
  template <class OnLine, class OnPass>
  void Split(absl::string_view piece, OnLine on_line, OnPass pass);
  // Feed's line, without its newline.
  void Line(absl::string_view line);
  // Whether a data line's chunk is one Note reads: the first chunk (until one gave the stream's
  // id and kind), or one with a finish_reason string (`finishes`).
  bool ToNote(bool finishes) const;
  // A data line's parsed JSON (after "data:"): the stream's id and kind from its first chunk, and
  // the choices it finishes.
  void Note(const nlohmann::ordered_json& chunk);
  // Strip's line, `line` with its newline: appended to `out` as the client gets it.
  void StripLine(absl::string_view line, std::string& out);

  std::string partial_;        // the current line's start, until its newline
  bool skipping_ = false;      // the current line outgrew 1 MiB (no usage chunk): ignored up to its newline
                               // (Strip: passed on as it comes)
  bool drop_blank_ = false;    // Strip dropped a usage chunk: the blank line ending its event goes too
  std::optional<UsageTokens> usage_;
  std::optional<nlohmann::ordered_json> head_;  // the first chunk's id, object, created, model
  std::set<int64_t> finished_;                  // choice indexes with a finish_reason
};

}  // namespace tpserve

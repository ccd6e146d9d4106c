// Builds an OpenAI (chat) completions response from OutputEvents: one JSON body or a stream
// of SSE chunks. Pure, tested by tests/openai_json_test.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"

#include "coordinator/api/openai_json.h"
#include "coordinator/engine/request.h"
#include "coordinator/text/tokenizer.h"
#include "coordinator/text/tool_calls.h"
#include "nlohmann/json.hpp"

namespace tpserve {

// Builds one request's response from its OutputEvents, as one JSON body (Accumulate, then
// Body) or as a stream of SSE chunks (Chunks per event). `tokenizer` names logprob tokens.
class OpenAiResponseBuilder {
 public:
  // `tool_format`: how the model writes tool calls, for a chat request whose tool_choice is
  // "auto" (its output is parsed for calls; docs/tool_calls.md).
  OpenAiResponseBuilder(const OpenAiRequest& request, std::string id, std::string model, int64_t created,
                        const Tokenizer& tokenizer, ToolCallFormat tool_format = ToolCallFormat::kNone);

  // Streaming: the SSE events that `e` adds (possibly none); after the final event, also
  // the usage chunk (when asked) and [DONE]. An error or cancel ends the stream with an
  // {"error": ...} event and [DONE].
  std::string Chunks(const OutputEvent& e);

  // Non-streaming.
  void Accumulate(const OutputEvent& e);
  bool finished() const { return finish_ != FinishReason::kNone; }
  // The response body; call after the final event. An error or cancel is an error JSON.
  std::string Body() const;
  // After the final event: OK, or what failed the request (UNAVAILABLE: the server cut it,
  // e.g. a drain, or could serve nothing, e.g. a rank died; INTERNAL: the engine failed
  // it), for the response's HTTP status.
  absl::Status status() const;

 private:
  void Record(const OutputEvent& e);
  bool failed() const { return finish_ == FinishReason::kError || finish_ == FinishReason::kCancelled; }
  absl::Status FailureStatus() const;
  nlohmann::ordered_json Envelope(bool chunk) const;
  nlohmann::ordered_json ChoiceChunk(const OutputEvent& e);
  // A chat chunk's delta for new text `text` (final: the request's last event); counts the
  // tool calls it starts.
  nlohmann::ordered_json ChatDelta(const std::string& text, bool final);
  // The finish_reason: "tool_calls" when a finished ("stop") answer called tools.
  nlohmann::ordered_json FinishJson(FinishReason finish) const;
  // Non-streaming chat: the message, with tool calls where the request offered tools.
  nlohmann::ordered_json Message() const;
  nlohmann::ordered_json ToolCallJson(const ToolCall& call, int index, bool with_type) const;
  nlohmann::ordered_json UsageJson() const;
  // Completions' {"tokens", "token_logprobs", "top_logprobs", "text_offset"} or chat's
  // {"content": [...]}; `text_offset` advances over the tokens' text.
  nlohmann::ordered_json LogprobsJson(const std::vector<TokenLogprob>& logprobs, size_t* text_offset) const;
  std::string TokenText(int32_t id) const;

  const OpenAiEndpoint endpoint_;
  const bool logprobs_;
  const bool include_usage_;
  const std::string id_;
  const std::string model_;
  const int64_t created_;
  const Tokenizer& tokenizer_;

  bool sent_first_chunk_ = false;
  std::string text_;
  std::vector<TokenLogprob> logprobs_seen_;  // non-streaming
  size_t text_offset_ = 0;                   // streaming completions' logprobs text_offset
  FinishReason finish_ = FinishReason::kNone;
  std::string error_;
  absl::StatusCode error_code_ = absl::StatusCode::kInternal;  // with kError
  int32_t prompt_tokens_ = 0;
  int32_t completion_tokens_ = 0;
  // Tools (chat).
  const ToolUse::Choice tool_choice_;
  const std::string tool_function_;
  const ToolCallFormat tool_format_;
  const ToolCallContext tool_context_;
  std::unique_ptr<StreamingToolCallParser> tool_parser_;  // streaming, tool_choice "auto"
  std::string constrained_;  // streaming, tool_choice "required": the output, parsed at the end
  mutable int tool_calls_ = 0;  // calls sent (streaming) or found (Body)
};

}  // namespace tpserve

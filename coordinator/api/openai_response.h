// Builds an OpenAI (chat) completions response from OutputEvents: one JSON body or a stream
// of SSE chunks; the HTTP front end's, and the router's for a grpc:// backend's responses.
// Pure, tested by tests/openai_json_test.cc and tests/grpc_relay_test.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

#include "coordinator/api/openai_json.h"
#include "coordinator/engine/request.h"
#include "coordinator/text/tokenizer.h"
#include "coordinator/api/choice_tool_calls.h"
#include "coordinator/text/tool_calls.h"
#include "nlohmann/json.hpp"

namespace tpserve {

// Builds one request's response from its OutputEvents, as one JSON body (Accumulate, then
// Body) or as a stream of SSE chunks (Chunks per event). `tokenizer` names logprob tokens.
// With n > 1 each choice's events come from its own stream and carry its index; the
// response is complete once every choice finished, or at the first that failed.
class OpenAiResponseBuilder {
 public:
  // A token's text, as logprobs name it (the tokenizer's decoding of that one id).
  using TokenTextFn = std::function<std::string(int32_t id)>;

  // `tool_format`: how the model writes tool calls, for a chat request whose tool_choice is
  // "auto" (its output is parsed for calls; docs/tool_calls.md).
  OpenAiResponseBuilder(const OpenAiRequest& request, std::string id, std::string model, int64_t created,
                        const Tokenizer& tokenizer, ToolCallFormat tool_format = ToolCallFormat::kNone);
  // For a response relayed from a tpserve gRPC backend (the router): the events' text is
  // content only, the tool calls the backend read back come whole beside it (the `calls` of
  // Chunks and Accumulate), and logprob tokens are named by `token_text`.
  static OpenAiResponseBuilder ForRelay(const OpenAiRequest& request, std::string id, std::string model,
                                        int64_t created, TokenTextFn token_text);

  // Streaming: the SSE events that choice `index`'s event `e` adds (possibly none); after
  // the response's last event, also the usage chunk (when asked) and [DONE]. An error or
  // cancel ends the stream with an {"error": ...} event and [DONE]. `calls`: ForRelay's.
  std::string Chunks(const OutputEvent& e, int index = 0, const std::vector<ToolCall>& calls = {});
  // Non-streaming.
  void Accumulate(const OutputEvent& e, int index = 0, const std::vector<ToolCall>& calls = {});
  // Every choice finished, or one failed: nothing more to add.
  bool finished() const;
  // The response body; call once finished. An error or cancel is an error JSON.
  std::string Body() const;
  // Once finished: OK, or what failed the request (UNAVAILABLE: the server cut it, e.g. a
  // drain, or could serve nothing, e.g. a rank died; INTERNAL: the engine failed it), for
  // the response's HTTP status.
  absl::Status status() const;
  int num_choices() const { return static_cast<int>(choices_.size()); }
  // The usage the response reports (whether or not it is sent): the prompt's tokens and the
  // choices' completion tokens summed, as UsageJson.
  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t completion_tokens() const;
  // Completions' echo: every choice's text starts with `prompt` (the first chunk when streamed).
  void SetEcho(std::string prompt) { echo_ = std::move(prompt); }

 private:
  // One choice's state.
  struct Choice {
    bool sent_first_chunk = false;
    std::string text;
    std::vector<TokenLogprob> logprobs;  // non-streaming
    size_t text_offset = 0;              // streaming completions' logprobs text_offset
    FinishReason finish = FinishReason::kNone;
    nlohmann::ordered_json stop_reason;  // the stop string or stop token id that ended it, else null
    int32_t completion_tokens = 0;
    std::optional<ChoiceToolCalls> tools;  // streaming chat: the text through tool_choice (calls sent: calls())
    std::vector<ToolCall> relayed_calls;   // ForRelay: the calls so far
  };

  OpenAiResponseBuilder(const OpenAiRequest& request, std::string id, std::string model, int64_t created,
                        TokenTextFn token_text, ToolCallFormat tool_format, bool relay);
  // The calls the choice made so far (ForRelay: relayed; else as its text was read).
  int CallCount(const Choice& c) const;

  void Record(const OutputEvent& e, Choice& c);
  bool failed() const { return !failure_.ok(); }
  nlohmann::ordered_json Envelope(bool chunk) const;
  // Choice `index`'s entry in the chunk for `e`; null when `e` makes no chunk.
  nlohmann::ordered_json ChoiceChunk(const OutputEvent& e, int index, const std::vector<ToolCall>& calls);
  // The SSE event of a chunk holding `choice`: chunk_prefix_ and the choice.
  std::string ChunkEvent(const nlohmann::ordered_json& choice) const;
  // A chat chunk's delta for new text `text` (final: the choice's last event); counts the
  // tool calls it starts.
  nlohmann::ordered_json ChatDelta(Choice& c, const std::string& text, bool final,
                                   const std::vector<ToolCall>& calls) const;
  static nlohmann::ordered_json ToolCallJson(const ToolCall& call, int index, bool with_type);
  // The finish_reason: "tool_calls" when a finished ("stop") answer called tools.
  static nlohmann::ordered_json FinishJson(FinishReason finish, int tool_calls);
  // Non-streaming: choice `index` of the body, with tool calls where the request offered tools.
  nlohmann::ordered_json BodyChoice(int index) const;
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
  const TokenTextFn token_text_;
  // Tools (chat).
  const ToolUse tool_use_;
  const ToolCallFormat tool_format_;
  const bool relay_;  // ForRelay
  std::string chunk_prefix_;  // "data: " and a chunk's JSON up to its choices' first
  std::vector<Choice> choices_;
  int num_finished_ = 0;
  absl::Status failure_;  // the first choice that failed
  bool sent_done_ = false;
  int32_t prompt_tokens_ = 0;
  std::string echo_;
};

}  // namespace tpserve

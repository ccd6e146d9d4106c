// A tpserve.v1 Generate call to the router's gRPC port sent on to an http(s):// backend: the
// GenerateRequest written as the OpenAI-compatible request that serve's (and vLLM's) HTTP API
// reads the same way (/v1/completions for a text or token-id prompt, /v1/chat/completions for
// chat messages, always streamed with its usage), and the backend's server-sent events read
// back as GenerateResponse messages. Pure (no I/O): tests/router_grpc_to_openai_test.cc;
// through the router, tests/router_grpc_front_test.cc and tests/router_grpc_front_test.sh.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/api/openai_json.h"
#include "coordinator/api/sse_parser.h"
#include "coordinator/router/stream_usage.h"
#include "proto/tpserve.pb.h"

namespace tpserve {

// One request to an OpenAI-compatible backend.
struct OpenAiHttpRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  std::string path;  // "/completions" or "/chat/completions": after the backend's base path (".../v1")
  std::string body;  // JSON, "stream": true (with stream_options.include_usage: request_usage)
};

// `request` for the backend's model `model`. Every field set is sent, never dropped: the
// sampling fields OpenAI's API has under its names (max_tokens, temperature, top_p, seed,
// presence_penalty, frequency_penalty, stop, logit_bias, n, response_format, tools,
// tool_choice), the rest under vLLM's names for its extra sampling parameters, which serve's
// HTTP API reads too (top_k, min_p, repetition_penalty, stop_token_ids, ignore_eos,
// min_tokens); ParseOpenAiRequest of the body gives back what GenerateInputFromProto reads from
// `request`. INVALID_ARGUMENT naming the field for a request serve's gRPC port would refuse
// (no prompt, a chat message without a role, tools_json that is not JSON, ...) and for what an
// OpenAI answer cannot carry back: sampling.logprobs (its logprobs name tokens by text, where a
// GenerateResponse names them by id), and tools with a prompt that is not chat (OpenAI's
// completions take no tools).
// `request_usage` false (the backend's `request_usage: false`, for an API that refuses
// stream_options): no include_usage is asked, and the messages carry no usage.
absl::StatusOr<OpenAiHttpRequest> GenerateToOpenAi(const v1::GenerateRequest& request, const std::string& model,
                                                   bool request_usage = true);

// What one event of an OpenAI stream says for one choice.
struct OpenAiChoicePiece {
  int index = 0;
  std::string text;  // completions' "text", chat's "delta.content"
  // A chat delta's tool calls, piece by piece as OpenAI streams them: "index" says which call
  // of the choice a piece continues (id, name and arguments are appended).
  struct ToolCallPiece {
    int index = 0;
    std::string id, name, arguments;
  };
  std::vector<ToolCallPiece> tool_calls;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  // vLLM's and serve's "stop_reason" with finish_reason "stop": the stop string, or the
  // stop_token_ids entry, that matched.
  std::string stop_string;
  std::optional<int32_t> stop_token_id;
};

struct OpenAiStreamEvent {
  std::string id;  // the response's id
  std::vector<OpenAiChoicePiece> choices;
  std::optional<UsageTokens> usage;  // the include_usage chunk's (or any chunk's) usage
  // An error event ({"error": {...}}, as serve writes a request its engine failed after the
  // stream started): its message with the code serve's ToHttpError maps back to it
  // (service_unavailable UNAVAILABLE, rate_limit_error RESOURCE_EXHAUSTED,
  // invalid_request_error INVALID_ARGUMENT, NOT_FOUND or UNAUTHENTICATED by its code, else
  // INTERNAL). OK: not an error event.
  absl::Status error;
};

// One event's data (the JSON after "data:", not "[DONE]"). UNAVAILABLE saying what is wrong
// when it is not an OpenAI chunk of `endpoint` (a backend that breaks the protocol is treated
// as one that broke); INTERNAL for a finish_reason tpserve.v1 has no value for (e.g.
// "content_filter": the answer was cut for a reason the client could not be told).
absl::StatusOr<OpenAiStreamEvent> ReadOpenAiEvent(OpenAiEndpoint endpoint, absl::string_view data);

// A non-streamed error answer (HTTP `http_status`, not 5xx or 429: the router fails those
// over) as the gRPC client's status: 400 INVALID_ARGUMENT (tagged with its "param" field where
// the body names one), 401 UNAUTHENTICATED, 403 PERMISSION_DENIED, 404 NOT_FOUND, 408
// DEADLINE_EXCEEDED, 409 ABORTED, 413 and 422 INVALID_ARGUMENT, any other 4xx
// FAILED_PRECONDITION, anything else (a 2xx or 3xx to a streamed request) INTERNAL. The message
// names `url` and quotes the body's error.message (else the start of the body).
absl::Status StatusFromHttpError(int http_status, absl::string_view body, absl::string_view url);

// The backend's stream, fed as it arrives, as the messages the gRPC client gets: each event's
// text as a message (choice index, request id); a choice's last message (finish_reason, its
// stop string or token, its tool calls whole) held until the stream's usage chunk or its end,
// so that it carries the usage: prompt_tokens, and completion_tokens where there is one choice
// (OpenAI reports the choices' completion tokens together). Earlier messages carry no usage
// and no token ids (an OpenAI stream has neither per token). Not thread-safe.
class GenerateFromOpenAiStream {
 public:
  // `n`: the choices asked for (GenerateRequest.n, 0 read as 1).
  GenerateFromOpenAiStream(OpenAiEndpoint endpoint, int n);
  GenerateFromOpenAiStream(const GenerateFromOpenAiStream&) = delete;  // sse_ calls back into it
  GenerateFromOpenAiStream& operator=(const GenerateFromOpenAiStream&) = delete;

  // The next bytes of the body (any split). Appends the messages now ready to `out`. Not OK
  // ends the stream: an error event's status, ReadOpenAiEvent's refusal of an event, or
  // UNAVAILABLE for a choice index outside [0, n). Events after "[DONE]" are ignored.
  absl::Status Feed(absl::string_view piece, std::vector<v1::GenerateResponse>* out);
  // The body ended: the held messages. UNAVAILABLE when it ended before "[DONE]" or before
  // every choice finished (cut short).
  absl::Status End(std::vector<v1::GenerateResponse>* out);
  // The stream's usage, once its usage chunk came.
  const std::optional<UsageTokens>& usage() const { return usage_; }

 private:
  absl::Status Event(absl::string_view data, std::vector<v1::GenerateResponse>* out);
  void Release(std::vector<v1::GenerateResponse>* out);

  struct Choice {
    bool finished = false;
    std::map<int, v1::ToolCall> tool_calls;  // by the call's index
  };
  const OpenAiEndpoint endpoint_;
  std::vector<Choice> choices_;
  SseParser sse_;                                // calls Event with out_
  std::vector<v1::GenerateResponse>* out_ = nullptr;  // Feed's, while it runs
  absl::Status status_;                            // the first event that ended the stream
  bool done_ = false;  // "[DONE]" came
  std::string request_id_;
  std::vector<v1::GenerateResponse> held_;  // finished choices' last messages
  std::optional<UsageTokens> usage_;
};

}  // namespace tpserve

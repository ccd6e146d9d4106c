// OpenAI HTTP API JSON: request parsing, error bodies, the model list, SSE framing (responses
// are openai_response.h). Pure functions, tested by tests/openai_json_test.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/engine/request.h"
#include "coordinator/api/request_builder.h"
#include "nlohmann/json.hpp"

namespace tpserve {

enum class OpenAiEndpoint { kCompletions, kChatCompletions };

struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  GenerateInput input;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a final usage chunk
  bool logprobs = false;       // return per-token logprobs (input.params.logprobs alternatives)
  bool echo = false;           // completions: each choice's text starts with the prompt
};

// Parse and type errors are INVALID_ARGUMENT tagged with the field (api_error.h), e.g.
// "'temperature' must be a number, got \"hot\"". Range checks of sampling values are the
// engine's. A top-level field outside OpenAiRequestFields is refused (INVALID_ARGUMENT naming
// it), except the few accepted at a fixed value (docs/serving.md).
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, absl::string_view body);
// The same, also listing in `fields_read` every top-level field the parser looked up
// (present or not), for the test that keeps OpenAiRequestFields and the parser in step.
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, absl::string_view body,
                                                 std::vector<std::string>* fields_read);

// The top-level fields a request to `endpoint` may carry (beside the fixed-value ones): the
// one list both the parser and the refusal of unknown fields go by. Each is read by the
// parser, except those in kIgnoredRequestFields.
const std::vector<std::string>& OpenAiRequestFields(OpenAiEndpoint endpoint);
// Accepted and not read: "user", OpenAI's end-user id (for the provider's abuse monitoring).
inline constexpr const char* kIgnoredRequestFields[] = {"user"};

// An error response: HTTP status and {"error": {"message", "type", "param", "code"}}.
struct HttpError {
  int status = 500;
  std::string body;
};
// INVALID_ARGUMENT -> 400, UNAUTHENTICATED -> 401 (code "invalid_api_key"), NOT_FOUND -> 404
// (code "model_not_found"), RESOURCE_EXHAUSTED -> 429, UNAVAILABLE -> 503, anything else
// -> 500. "param" is the FieldError's field.
HttpError ToHttpError(const absl::Status& status);
nlohmann::ordered_json ErrorJson(const absl::Status& status);

// One "data: ...\n\n" server-sent event.
std::string SseEvent(absl::string_view data);
inline constexpr char kSseDone[] = "data: [DONE]\n\n";

// GET /v1/models.
std::string ModelListJson(const std::vector<std::string>& served_model_names, int64_t created,
                          int64_t max_model_len);
// GET /v1/models/{id}: one model object.
std::string ModelJson(const std::string& name, int64_t created, int64_t max_model_len);

// "stop" / "length"; null while unfinished.
nlohmann::ordered_json FinishReasonJson(FinishReason r);

}  // namespace tpserve

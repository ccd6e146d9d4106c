// GenerateRequest -> OpenAI JSON, and OpenAI SSE -> GenerateResponse messages. Tested by
// tests/router_grpc_to_openai_test.cc.
#include "coordinator/router/grpc_to_openai.h"

#include <charconv>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "coordinator/api/generate_proto.h"
#include "coordinator/api/request_builder.h"
#include "coordinator/engine/field_error.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using Json = nlohmann::ordered_json;

// The most of a non-streamed error body kept for the client's message.
constexpr size_t kMaxQuotedBody = 512;

// A float field as the decimal a client would have written (0.7, not 0.699999988079071):
// the shortest that reads back as the same float, as a double. The backend reads the value
// the gRPC client meant; serve's HTTP API reads it back as the same float.
double FloatJson(float value) {
  char buf[32];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value);
  *result.ptr = '\0';
  return std::strtod(buf, nullptr);
}

absl::Status Unavailable(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat("the backend's stream is not an OpenAI stream: ", what));
}

std::string Describe(const Json& v) { return v.dump(-1, ' ', false, Json::error_handler_t::replace); }

// An error event's or body's {"error": {...}} as the status serve's ToHttpError made it from.
absl::Status StatusFromErrorJson(const Json& error, absl::StatusCode fallback) {
  std::string message = "the backend failed the request";
  std::string type, code, param;
  if (error.is_object()) {
    if (auto m = error.find("message"); m != error.end() && m->is_string()) message = m->get<std::string>();
    if (auto t = error.find("type"); t != error.end() && t->is_string()) type = t->get<std::string>();
    if (auto c = error.find("code"); c != error.end() && c->is_string()) code = c->get<std::string>();
    if (auto p = error.find("param"); p != error.end() && p->is_string()) param = p->get<std::string>();
  } else if (error.is_string()) {
    message = error.get<std::string>();
  }
  absl::StatusCode status = fallback;
  if (code == "service_unavailable") {
    status = absl::StatusCode::kUnavailable;
  } else if (type == "rate_limit_error") {
    status = absl::StatusCode::kResourceExhausted;
  } else if (code == "model_not_found") {
    status = absl::StatusCode::kNotFound;
  } else if (code == "invalid_api_key") {
    status = absl::StatusCode::kUnauthenticated;
  } else if (type == "invalid_request_error") {
    status = absl::StatusCode::kInvalidArgument;
  }
  if (status == absl::StatusCode::kInvalidArgument && !param.empty()) return FieldError(param, message);
  return absl::Status(status, message);
}

absl::Status AddSampling(const v1::SamplingParams& s, Json& body) {
  if (s.has_logprobs()) {
    return FieldError("sampling.logprobs",
                      "sampling.logprobs cannot be sent to an http(s):// backend: its OpenAI answer names each "
                      "token by its text, where a GenerateResponse's logprobs name tokens by id; send the "
                      "request to the router's HTTP port (OpenAI logprobs), or list a grpc:// backend for the model");
  }
  if (s.has_max_tokens()) body["max_tokens"] = s.max_tokens();
  if (s.has_temperature()) body["temperature"] = FloatJson(s.temperature());
  if (s.has_top_p()) body["top_p"] = FloatJson(s.top_p());
  if (s.has_seed()) body["seed"] = static_cast<int64_t>(s.seed());  // serve reads an int64, as its bits
  if (s.has_presence_penalty()) body["presence_penalty"] = FloatJson(s.presence_penalty());
  if (s.has_frequency_penalty()) body["frequency_penalty"] = FloatJson(s.frequency_penalty());
  if (s.stop_size() > 0) body["stop"] = Json(std::vector<std::string>(s.stop().begin(), s.stop().end()));
  if (!s.logit_bias().empty()) {
    Json bias = Json::object();
    std::map<int32_t, float> sorted(s.logit_bias().begin(), s.logit_bias().end());  // a stable body
    for (const auto& [id, value] : sorted) bias[std::to_string(id)] = FloatJson(value);
    body["logit_bias"] = std::move(bias);
  }
  // vLLM's extra sampling parameters (serve's HTTP API reads them too).
  if (s.has_top_k()) body["top_k"] = s.top_k();
  if (s.has_min_p()) body["min_p"] = FloatJson(s.min_p());
  if (s.has_repetition_penalty()) body["repetition_penalty"] = FloatJson(s.repetition_penalty());
  if (s.stop_token_ids_size() > 0) {
    body["stop_token_ids"] = Json(std::vector<int32_t>(s.stop_token_ids().begin(), s.stop_token_ids().end()));
  }
  if (s.ignore_eos()) body["ignore_eos"] = true;
  if (s.min_tokens() != 0) body["min_tokens"] = s.min_tokens();
  return absl::OkStatus();
}

absl::Status AddResponseFormat(const v1::ResponseFormat& f, Json& body) {
  switch (f.type()) {
    case v1::ResponseFormat::TYPE_TEXT:
      return absl::OkStatus();
    case v1::ResponseFormat::TYPE_JSON_OBJECT:
      body["response_format"] = Json{{"type", "json_object"}};
      return absl::OkStatus();
    case v1::ResponseFormat::TYPE_JSON_SCHEMA: {
      Json schema = Json::parse(f.json_schema(), nullptr, /*allow_exceptions=*/false);
      if (schema.is_discarded() || !(schema.is_object() || schema.is_boolean())) {
        return FieldError("response_format.json_schema",
                          "response_format.json_schema must be a JSON schema (an object, as JSON text)");
      }
      body["response_format"] =
          Json{{"type", "json_schema"}, {"json_schema", {{"name", "response"}, {"schema", std::move(schema)}}}};
      return absl::OkStatus();
    }
    default:
      return FieldError("response_format.type",
                        absl::StrCat("response_format.type ", f.type(), " is not a known type"));
  }
}

absl::Status AddTools(const v1::GenerateRequest& request, Json& body) {
  if (request.tools_json().empty() && request.tool_choice().empty()) return absl::OkStatus();
  if (request.prompt_case() != v1::GenerateRequest::kChat) {
    return FieldError(request.tools_json().empty() ? "tool_choice" : "tools_json",
                      "tools go with a chat prompt only (an OpenAI backend's /v1/completions takes none); send the "
                      "prompt as chat messages");
  }
  if (!request.tools_json().empty()) {
    Json tools = Json::parse(request.tools_json(), nullptr, /*allow_exceptions=*/false);
    if (tools.is_discarded()) return FieldError("tools_json", "tools_json is not valid JSON");
    body["tools"] = std::move(tools);
  }
  const std::string& c = request.tool_choice();
  if (c == "auto" || c == "none" || c == "required") {
    body["tool_choice"] = c;
  } else if (!c.empty()) {
    body["tool_choice"] = Json{{"type", "function"}, {"function", {{"name", c}}}};
  }
  return absl::OkStatus();
}

v1::FinishReason ReadFinish(const std::string& reason, int index, absl::Status* error) {
  if (reason == "stop") return v1::FINISH_REASON_STOP;
  if (reason == "length") return v1::FINISH_REASON_LENGTH;
  if (reason == "tool_calls" || reason == "function_call") return v1::FINISH_REASON_TOOL_CALLS;
  *error = absl::InternalError(absl::StrCat("the backend finished choice ", index, " with finish_reason \"", reason,
                                            "\", which tpserve.v1 has no value for"));
  return v1::FINISH_REASON_UNSPECIFIED;
}

// A string member, or "" where it is absent or null; false when it is another type.
bool ReadString(const Json& object, const char* key, std::string* out) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return true;
  if (!it->is_string()) return false;
  *out = it->get<std::string>();
  return true;
}

absl::StatusOr<OpenAiChoicePiece> ReadChoice(OpenAiEndpoint endpoint, const Json& c) {
  OpenAiChoicePiece piece;
  if (!c.is_object()) return Unavailable(absl::StrCat("a choice is not an object: ", Describe(c)));
  if (auto index = c.find("index"); index != c.end()) {
    if (!index->is_number_integer()) return Unavailable(absl::StrCat("a choice's index is ", Describe(*index)));
    piece.index = index->get<int>();
  }
  if (endpoint == OpenAiEndpoint::kCompletions) {
    if (!ReadString(c, "text", &piece.text)) return Unavailable("a choice's \"text\" is not a string");
  } else if (auto delta = c.find("delta"); delta != c.end() && !delta->is_null()) {
    if (!delta->is_object()) return Unavailable("a choice's \"delta\" is not an object");
    if (!ReadString(*delta, "content", &piece.text)) return Unavailable("a delta's \"content\" is not a string");
    if (auto calls = delta->find("tool_calls"); calls != delta->end() && !calls->is_null()) {
      if (!calls->is_array()) return Unavailable("a delta's \"tool_calls\" is not a list");
      for (const Json& call : *calls) {
        OpenAiChoicePiece::ToolCallPiece t;
        if (!call.is_object()) return Unavailable("a delta's tool call is not an object");
        if (auto i = call.find("index"); i != call.end()) {
          if (!i->is_number_integer()) return Unavailable("a tool call's \"index\" is not an integer");
          t.index = i->get<int>();
        }
        bool ok = ReadString(call, "id", &t.id);
        if (auto f = call.find("function"); ok && f != call.end() && !f->is_null()) {
          ok = f->is_object() && ReadString(*f, "name", &t.name) && ReadString(*f, "arguments", &t.arguments);
        }
        if (!ok) {
          return Unavailable(absl::StrCat("a tool call is not {id, function: {name, arguments}}: ", Describe(call)));
        }
        piece.tool_calls.push_back(std::move(t));
      }
    }
  }
  if (auto finish = c.find("finish_reason"); finish != c.end() && !finish->is_null()) {
    if (!finish->is_string()) return Unavailable(absl::StrCat("a finish_reason is ", Describe(*finish)));
    absl::Status error;
    piece.finish = ReadFinish(finish->get<std::string>(), piece.index, &error);
    if (!error.ok()) return error;
  }
  if (auto stop = c.find("stop_reason"); stop != c.end() && piece.finish == v1::FINISH_REASON_STOP) {
    if (stop->is_string()) piece.stop_string = stop->get<std::string>();
    if (stop->is_number_integer()) piece.stop_token_id = stop->get<int32_t>();
  }
  return piece;
}

}  // namespace

absl::StatusOr<OpenAiHttpRequest> GenerateToOpenAi(const v1::GenerateRequest& request, const std::string& model,
                                                   bool request_usage) {
  // What serve's gRPC port refuses first (no prompt, an empty role, ...), in its words.
  if (absl::StatusOr<GenerateInput> input = GenerateInputFromProto(request); !input.ok()) return input.status();
  if (request.n() < 0 || request.n() > kMaxChoices) {
    return FieldError("n", absl::StrCat("'n' must be between 1 and ", kMaxChoices, ", got ", request.n()));
  }
  OpenAiHttpRequest out;
  Json body = Json::object();
  body["model"] = model;
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText:
      body["prompt"] = request.text();
      break;
    case v1::GenerateRequest::kTokenIds:
      body["prompt"] = Json(std::vector<int32_t>(request.token_ids().ids().begin(), request.token_ids().ids().end()));
      break;
    case v1::GenerateRequest::kChat:
      out.endpoint = OpenAiEndpoint::kChatCompletions;
      body["messages"] = Json::array();
      for (const v1::ChatMessage& m : request.chat().messages()) {
        body["messages"].push_back(Json{{"role", m.role()}, {"content", m.content()}});
      }
      break;
    case v1::GenerateRequest::PROMPT_NOT_SET:  // refused above
      return FieldError("prompt", "prompt is required: set text, token_ids or chat");
  }
  if (absl::Status s = AddSampling(request.sampling(), body); !s.ok()) return s;
  if (absl::Status s = AddResponseFormat(request.response_format(), body); !s.ok()) return s;
  if (absl::Status s = AddTools(request, body); !s.ok()) return s;
  if (request.n() > 1) body["n"] = request.n();
  body["stream"] = true;
  if (request_usage) body["stream_options"] = Json{{"include_usage", true}};
  out.path = out.endpoint == OpenAiEndpoint::kCompletions ? "/completions" : "/chat/completions";
  out.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return out;
}

absl::StatusOr<OpenAiStreamEvent> ReadOpenAiEvent(OpenAiEndpoint endpoint, absl::string_view data) {
  const Json j = Json::parse(data.begin(), data.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Unavailable(absl::StrCat("an event is not a JSON object: ", data.substr(0, 200)));
  }
  OpenAiStreamEvent event;
  if (auto error = j.find("error"); error != j.end() && !error->is_null()) {
    event.error = StatusFromErrorJson(*error, absl::StatusCode::kInternal);
    if (event.error.ok()) event.error = absl::InternalError("the backend failed the request");
    return event;
  }
  if (!ReadString(j, "id", &event.id)) return Unavailable("an event's \"id\" is not a string");
  if (auto choices = j.find("choices"); choices != j.end() && !choices->is_null()) {
    if (!choices->is_array()) return Unavailable("an event's \"choices\" is not a list");
    for (const Json& c : *choices) {
      absl::StatusOr<OpenAiChoicePiece> piece = ReadChoice(endpoint, c);
      if (!piece.ok()) return piece.status();
      event.choices.push_back(*std::move(piece));
    }
  }
  event.usage = ReadUsage(j);
  return event;
}

absl::Status StatusFromHttpError(int http_status, absl::string_view body, absl::string_view url) {
  absl::StatusCode code;
  switch (http_status) {
    case 400:
    case 413:
    case 422:
      code = absl::StatusCode::kInvalidArgument;
      break;
    case 401:
      code = absl::StatusCode::kUnauthenticated;
      break;
    case 403:
      code = absl::StatusCode::kPermissionDenied;
      break;
    case 404:
      code = absl::StatusCode::kNotFound;
      break;
    case 408:
      code = absl::StatusCode::kDeadlineExceeded;
      break;
    case 409:
      code = absl::StatusCode::kAborted;
      break;
    default:
      code = http_status >= 400 && http_status < 500 ? absl::StatusCode::kFailedPrecondition
                                                     : absl::StatusCode::kInternal;
      break;
  }
  const std::string prefix = absl::StrCat("the backend ", url, " answered HTTP ", http_status, ": ");
  const Json j = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded() && j.is_object() && j.contains("error")) {
    const absl::Status s = StatusFromErrorJson(j["error"], code);
    // The HTTP status decides the code; the body's "param" tags a 400 with its field.
    if (code == absl::StatusCode::kInvalidArgument) {
      if (std::optional<std::string> field = ErrorField(s)) {
        return FieldError(*field, absl::StrCat(prefix, s.message()));
      }
    }
    return absl::Status(code, absl::StrCat(prefix, s.message()));
  }
  absl::string_view quoted = absl::StripAsciiWhitespace(body);
  const bool cut = quoted.size() > kMaxQuotedBody;
  return absl::Status(code, absl::StrCat(prefix, quoted.empty() ? "(an empty body)" : quoted.substr(0, kMaxQuotedBody),
                                         cut ? "..." : ""));
}

GenerateFromOpenAiStream::GenerateFromOpenAiStream(OpenAiEndpoint endpoint, int n)
    : endpoint_(endpoint),
      choices_(static_cast<size_t>(n < 1 ? 1 : n)),
      sse_([this](const std::string& data) {
        status_ = Event(data, out_);
        return status_.ok();
      }) {}

absl::Status GenerateFromOpenAiStream::Feed(absl::string_view piece, std::vector<v1::GenerateResponse>* out) {
  if (!status_.ok()) return status_;
  out_ = out;
  sse_.Feed(piece);
  out_ = nullptr;
  return status_;
}

absl::Status GenerateFromOpenAiStream::Event(absl::string_view data, std::vector<v1::GenerateResponse>* out) {
  if (done_) return absl::OkStatus();  // nothing is sent after [DONE]
  if (data == "[DONE]") {
    done_ = true;
    Release(out);
    return absl::OkStatus();
  }
  absl::StatusOr<OpenAiStreamEvent> event = ReadOpenAiEvent(endpoint_, data);
  if (!event.ok()) return event.status();
  if (!event->error.ok()) return event->error;
  if (request_id_.empty()) request_id_ = event->id;
  for (OpenAiChoicePiece& piece : event->choices) {
    if (piece.index < 0 || piece.index >= static_cast<int>(choices_.size())) {
      return Unavailable(absl::StrCat("choice ", piece.index, " of ", choices_.size()));
    }
    Choice& choice = choices_[piece.index];
    if (choice.finished) continue;
    for (OpenAiChoicePiece::ToolCallPiece& t : piece.tool_calls) {
      v1::ToolCall& call = choice.tool_calls[t.index];
      call.mutable_id()->append(t.id);
      call.mutable_name()->append(t.name);
      call.mutable_arguments()->append(t.arguments);
    }
    v1::GenerateResponse message;
    message.set_request_id(request_id_);
    message.set_index(piece.index);
    message.set_text(std::move(piece.text));
    if (piece.finish == v1::FINISH_REASON_UNSPECIFIED) {
      if (!message.text().empty()) out->push_back(std::move(message));
      continue;
    }
    choice.finished = true;
    message.set_finish_reason(piece.finish);
    message.set_stop_string(std::move(piece.stop_string));
    if (piece.stop_token_id.has_value()) message.set_stop_token_id(*piece.stop_token_id);
    for (auto& [index, call] : choice.tool_calls) *message.add_tool_calls() = std::move(call);
    held_.push_back(std::move(message));
  }
  if (event->usage.has_value()) usage_ = event->usage;
  bool all_finished = true;
  for (const Choice& c : choices_) all_finished = all_finished && c.finished;
  if (all_finished && usage_.has_value()) Release(out);
  return absl::OkStatus();
}

void GenerateFromOpenAiStream::Release(std::vector<v1::GenerateResponse>* out) {
  for (v1::GenerateResponse& message : held_) {
    if (usage_.has_value()) {
      message.mutable_usage()->set_prompt_tokens(static_cast<int32_t>(usage_->prompt_tokens));
      if (choices_.size() == 1) {
        message.mutable_usage()->set_completion_tokens(static_cast<int32_t>(usage_->completion_tokens));
      }
    }
    out->push_back(std::move(message));
  }
  held_.clear();
}

absl::Status GenerateFromOpenAiStream::End(std::vector<v1::GenerateResponse>* out) {
  // A last line without its newline, and an event whose blank line never came (the body ended
  // right after it), are read too.
  if (absl::Status s = Feed("\n", out); !s.ok()) return s;
  out_ = out;
  sse_.Finish();
  out_ = nullptr;
  if (!status_.ok()) return status_;
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (!choices_[i].finished) {
      return absl::UnavailableError(absl::StrCat("the backend's stream ended before choice ", i, " finished",
                                                 done_ ? "" : " (no [DONE]: cut short)"));
    }
  }
  Release(out);
  return absl::OkStatus();
}

}  // namespace tpserve

// GenerateInput <-> v1::GenerateRequest. Tested by tests/generate_proto_test.cc and
// tests/frontend_test.cc.
#include "coordinator/api/generate_proto.h"

#include <algorithm>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/engine/field_error.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

void CopySampling(const v1::SamplingParams& s, GenerateInput* input) {
  SamplingParams& p = input->params;
  if (s.has_max_tokens()) {
    p.max_tokens = s.max_tokens();
    input->max_tokens_set = true;
  }
  // Unset fields stay unset, so that RequestBuilder gives them the model's defaults.
  input->explicit_sampling = {.temperature = s.has_temperature(),
                              .top_k = s.has_top_k(),
                              .top_p = s.has_top_p(),
                              .min_p = s.has_min_p(),
                              .repetition_penalty = s.has_repetition_penalty()};
  if (s.has_temperature()) p.temperature = s.temperature();
  if (s.has_top_p()) p.top_p = s.top_p();
  if (s.has_top_k()) p.top_k = s.top_k();
  if (s.has_min_p()) p.min_p = s.min_p();
  if (s.has_seed()) p.seed = s.seed();
  if (s.has_repetition_penalty()) p.repetition_penalty = s.repetition_penalty();
  if (s.has_presence_penalty()) p.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) p.frequency_penalty = s.frequency_penalty();
  p.stop.assign(s.stop().begin(), s.stop().end());
  p.stop_token_ids.assign(s.stop_token_ids().begin(), s.stop_token_ids().end());
  p.ignore_eos = s.ignore_eos();
  p.min_tokens = s.min_tokens();
  if (s.has_logprobs()) p.logprobs = s.logprobs();
  for (const auto& [id, bias] : s.logit_bias()) p.logit_bias.emplace_back(id, bias);
  std::sort(p.logit_bias.begin(), p.logit_bias.end());  // a map's order is unspecified
}

absl::Status CopyResponseFormat(const v1::ResponseFormat& f, GenerateInput* input) {
  switch (f.type()) {
    case v1::ResponseFormat::TYPE_TEXT:
      return absl::OkStatus();
    case v1::ResponseFormat::TYPE_JSON_OBJECT:
      input->response_format = ResponseFormat{ResponseFormat::Type::kJsonObject, ""};
      return absl::OkStatus();
    case v1::ResponseFormat::TYPE_JSON_SCHEMA:
      if (f.json_schema().empty()) {
        return FieldError("response_format.json_schema", "response_format.json_schema: the schema is required with TYPE_JSON_SCHEMA");
      }
      input->response_format = ResponseFormat{ResponseFormat::Type::kJsonSchema, f.json_schema()};
      return absl::OkStatus();
    default:
      return FieldError("response_format.type", absl::StrCat("response_format.type ", f.type(), " is not a known type"));
  }
}

// tools_json and tool_choice -> the same ToolUse as the OpenAI API's.
absl::Status CopyTools(const v1::GenerateRequest& request, GenerateInput* input) {
  using Json = nlohmann::ordered_json;
  Json tools;
  if (!request.tools_json().empty()) {
    tools = Json::parse(request.tools_json(), nullptr, /*allow_exceptions=*/false);
    if (tools.is_discarded()) return FieldError("tools_json", "tools_json is not valid JSON");
  }
  Json choice;
  const std::string& c = request.tool_choice();
  if (c == "auto" || c == "none" || c == "required") {
    choice = c;
  } else if (!c.empty()) {
    choice = Json{{"type", "function"}, {"function", {{"name", c}}}};
  }
  absl::StatusOr<ToolUse> use = ParseToolUse(tools, choice);
  if (!use.ok()) return use.status();
  input->tool_use = *std::move(use);
  return absl::OkStatus();
}

// The proto's chat messages: role and content strings only.
absl::Status CopyMessages(const ChatPrompt& chat, v1::ChatMessages* out) {
  if (!chat.add_generation_prompt) {
    return FieldError("add_generation_prompt",
                      "'add_generation_prompt' false cannot be sent to a gRPC backend (its chat prompts always end "
                      "with the generation prompt); leave it out, or route the model to an http:// backend");
  }
  if (!chat.template_kwargs.is_null() && !chat.template_kwargs.empty()) {
    return FieldError("chat_template_kwargs",
                      "'chat_template_kwargs' cannot be sent to a gRPC backend (tpserve.v1.GenerateRequest has no "
                      "template variables); leave it out, or route the model to an http:// backend");
  }
  for (size_t i = 0; i < chat.messages.size(); ++i) {
    const nlohmann::ordered_json& m = chat.messages[i];
    const std::string at = absl::StrCat("messages[", i, "]");
    for (const auto& [key, value] : m.items()) {
      if (key == "role" || key == "content" || value.is_null()) continue;
      return FieldError(absl::StrCat(at, ".", key),
                        absl::StrCat("'", at, ".", key, "' cannot be sent to a gRPC backend (its chat messages carry ",
                                     "\"role\" and \"content\" only); route the model to an http:// backend for ",
                                     "messages with \"", key, "\""));
    }
    auto role = m.find("role");
    auto content = m.find("content");
    if (role == m.end() || !role->is_string() || content == m.end() || !content->is_string()) {
      return FieldError(at, absl::StrCat("'", at, "' cannot be sent to a gRPC backend: it needs a string \"role\" ",
                                         "and a string \"content\""));
    }
    v1::ChatMessage* message = out->add_messages();
    message->set_role(role->get<std::string>());
    message->set_content(content->get<std::string>());
  }
  return absl::OkStatus();
}

absl::Status CopySamplingTo(const GenerateInput& input, v1::SamplingParams* s) {
  const SamplingParams& p = input.params;
  const SamplingParams neutral;
  if (input.max_tokens_set) s->set_max_tokens(p.max_tokens);
  // Unset fields stay unset: the backend gives them its model's defaults, as it would to
  // the same request sent to its HTTP port.
  const ExplicitSamplingFields& set = input.explicit_sampling;
  if (set.temperature || p.temperature != neutral.temperature) s->set_temperature(p.temperature);
  if (set.top_p || p.top_p != neutral.top_p) s->set_top_p(p.top_p);
  if (set.top_k || p.top_k != neutral.top_k) s->set_top_k(p.top_k);
  if (set.min_p || p.min_p != neutral.min_p) s->set_min_p(p.min_p);
  if (set.repetition_penalty || p.repetition_penalty != neutral.repetition_penalty) {
    s->set_repetition_penalty(p.repetition_penalty);
  }
  if (p.presence_penalty != neutral.presence_penalty) s->set_presence_penalty(p.presence_penalty);
  if (p.frequency_penalty != neutral.frequency_penalty) s->set_frequency_penalty(p.frequency_penalty);
  if (p.seed.has_value()) s->set_seed(*p.seed);
  for (const std::string& stop : p.stop) s->add_stop(stop);
  for (int32_t id : p.stop_token_ids) s->add_stop_token_ids(id);
  s->set_ignore_eos(p.ignore_eos);
  s->set_min_tokens(p.min_tokens);
  if (p.logprobs.has_value()) s->set_logprobs(*p.logprobs);
  for (const auto& [id, bias] : p.logit_bias) {
    if (!s->mutable_logit_bias()->insert({id, bias}).second) {
      return FieldError("logit_bias", absl::StrCat("'logit_bias' gives token id ", id, " twice; give it once"));
    }
  }
  if (p.skip_special_tokens != neutral.skip_special_tokens) {
    return FieldError("skip_special_tokens",
                      "'skip_special_tokens' false cannot be sent to a gRPC backend (tpserve.v1.SamplingParams has "
                      "no such field); leave it out, or route the model to an http:// backend");
  }
  return absl::OkStatus();
}

absl::Status CopyToolsTo(const ToolUse& use, v1::GenerateRequest* request) {
  if (!use.tools.empty()) request->set_tools_json(use.tools.dump());
  switch (use.choice) {
    case ToolUse::Choice::kNone:
      if (!use.tools.empty()) request->set_tool_choice("none");
      break;
    case ToolUse::Choice::kAuto:
      request->set_tool_choice("auto");
      break;
    case ToolUse::Choice::kRequired:
      request->set_tool_choice("required");
      break;
    case ToolUse::Choice::kNamed:
      if (use.function.empty() || use.function == "auto" || use.function == "none" || use.function == "required") {
        return FieldError("tool_choice", absl::StrCat("'tool_choice' names the function \"", use.function,
                                                      "\", which a gRPC backend reads as that keyword; rename ",
                                                      "the function"));
      }
      request->set_tool_choice(use.function);
      break;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GenerateInput> GenerateInputFromProto(const v1::GenerateRequest& request) {
  GenerateInput input;
  input.model = request.model();
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText:
      input.prompt = request.text();
      break;
    case v1::GenerateRequest::kTokenIds:
      input.prompt = std::vector<int32_t>(request.token_ids().ids().begin(), request.token_ids().ids().end());
      break;
    case v1::GenerateRequest::kChat: {
      ChatPrompt chat;
      for (int i = 0; i < request.chat().messages_size(); ++i) {
        const v1::ChatMessage& m = request.chat().messages(i);
        if (m.role().empty()) {
          const std::string field = "chat.messages[" + std::to_string(i) + "].role";
          return FieldError(field, field + " must not be empty");
        }
        chat.messages.push_back({{"role", m.role()}, {"content", m.content()}});
      }
      input.prompt = std::move(chat);
      break;
    }
    case v1::GenerateRequest::PROMPT_NOT_SET:
      return FieldError("prompt", "prompt is required: set text, token_ids or chat");
  }
  CopySampling(request.sampling(), &input);
  if (absl::Status s = CopyResponseFormat(request.response_format(), &input); !s.ok()) return s;
  if (absl::Status s = CopyTools(request, &input); !s.ok()) return s;
  input.n = request.n() == 0 ? 1 : request.n();
  return input;
}

absl::StatusOr<v1::GenerateRequest> GenerateRequestFromInput(const GenerateInput& input) {
  v1::GenerateRequest request;
  request.set_model(input.model);
  if (const auto* text = std::get_if<std::string>(&input.prompt)) {
    request.set_text(*text);
  } else if (const auto* ids = std::get_if<std::vector<int32_t>>(&input.prompt)) {
    request.mutable_token_ids()->mutable_ids()->Add(ids->begin(), ids->end());
  } else {
    const ChatPrompt& chat = std::get<ChatPrompt>(input.prompt);
    if (!chat.tools.is_null()) {
      // Set by RequestBuilder::Build from tool_use, never by a parser: tool_use is what is sent.
      return absl::InternalError("GenerateRequestFromInput: a built chat prompt (with tools) is not an input");
    }
    if (absl::Status s = CopyMessages(chat, request.mutable_chat()); !s.ok()) return s;
  }
  if (absl::Status s = CopySamplingTo(input, request.mutable_sampling()); !s.ok()) return s;
  if (input.response_format.has_value()) {
    v1::ResponseFormat* f = request.mutable_response_format();
    if (input.response_format->type == ResponseFormat::Type::kJsonObject) {
      f->set_type(v1::ResponseFormat::TYPE_JSON_OBJECT);
    } else {
      f->set_type(v1::ResponseFormat::TYPE_JSON_SCHEMA);
      f->set_json_schema(input.response_format->schema);
    }
  }
  if (absl::Status s = CopyToolsTo(input.tool_use, &request); !s.ok()) return s;
  if (input.n != 1) request.set_n(input.n);
  return request;
}

}  // namespace tpserve

// OpenAI request parsing and response building. Tested by tests/openai_json_test.cc.
#include "coordinator/api/openai_json.h"

#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "coordinator/engine/field_error.h"

namespace tpserve {
namespace {

using Json = nlohmann::ordered_json;

constexpr int64_t kMaxChoices = 64;  // n: choices per request

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// A bad value as a message shows it: short, JSON-quoted.
std::string Describe(const Json& v) {
  std::string s = Dump(v);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

absl::Status TypeError(absl::string_view field, absl::string_view expected, const Json& got) {
  return FieldError(field, absl::StrCat("'", field, "' must be ", expected, ", got ", Describe(got)));
}

// Absent or null: false. Present: true; `v` is the value.
bool Present(const Json& body, const char* field, const Json** v) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return false;
  *v = &*it;
  return true;
}

// A request's top level, as the parser reads it: every field looked up through it is listed
// in `read` when given (tests compare that with OpenAiRequestFields). Nested objects are
// read as plain Json.
struct Body {
  const Json& json;
  std::vector<std::string>* read;
};

bool Present(const Body& body, const char* field, const Json** v) {
  if (body.read != nullptr) body.read->push_back(field);
  return Present(body.json, field, v);
}

// response_format: "text" (nothing), "json_object", or "json_schema" with its schema.
absl::Status ParseResponseFormat(const Body& body, std::optional<ResponseFormat>* out) {
  const Json* v;
  if (!Present(body, "response_format", &v)) return absl::OkStatus();
  const Json* type = v->is_object() && v->contains("type") ? &(*v)["type"] : nullptr;
  if (type == nullptr || !type->is_string()) return TypeError("response_format", "an object with a \"type\"", *v);
  if (*type == "text") return absl::OkStatus();
  if (*type == "json_object") {
    *out = ResponseFormat{ResponseFormat::Type::kJsonObject, ""};
    return absl::OkStatus();
  }
  if (*type != "json_schema") {
    return FieldError("response_format", absl::StrCat("response_format type ", Describe(*type),
                                                      " is not supported; use \"text\", \"json_object\" or \"json_schema\""));
  }
  const Json* spec = nullptr;
  if (!Present(*v, "json_schema", &spec) || !spec->is_object()) {
    return FieldError("response_format.json_schema",
                      "response_format.json_schema must be an object with the \"schema\" (and a \"name\")");
  }
  const Json* schema = nullptr;
  if (!Present(*spec, "schema", &schema) || !(schema->is_object() || schema->is_boolean())) {
    return FieldError("response_format.json_schema.schema",
                      "response_format.json_schema.schema must be a JSON schema (an object)");
  }
  *out = ResponseFormat{ResponseFormat::Type::kJsonSchema, Dump(*schema)};
  return absl::OkStatus();
}

// logit_bias: {"token id": bias}, as OpenAI spells it (ids as strings).
absl::Status ParseLogitBias(const Body& body, std::vector<std::pair<int32_t, float>>* out) {
  const Json* v;
  if (!Present(body, "logit_bias", &v)) return absl::OkStatus();
  if (!v->is_object()) return TypeError("logit_bias", "an object of token id -> bias", *v);
  for (const auto& [key, bias] : v->items()) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(key, &id)) {
      return FieldError("logit_bias", absl::StrCat("logit_bias: key ", Describe(Json(key)), " is not a token id"));
    }
    if (!bias.is_number()) return TypeError(absl::StrCat("logit_bias[", key, "]"), "a number", bias);
    out->emplace_back(id, static_cast<float>(bias.get<double>()));
  }
  return absl::OkStatus();
}

// OpenAI features tpserve does not implement yet (issue 20) are refused by name rather than
// accepted and ignored. Their neutral values (one candidate, no suffix) pass.
absl::Status RefuseUnimplemented(OpenAiEndpoint endpoint, const Body& body) {
  const Json* v;
  if (Present(body, "best_of", &v) && !(v->is_number_integer() && v->get<int64_t>() == 1)) {
    return FieldError("best_of", absl::StrCat("'best_of' must be 1 (one candidate per request), got ", Describe(*v)));
  }
  if (endpoint == OpenAiEndpoint::kCompletions && Present(body, "suffix", &v) &&
      !(v->is_string() && v->get<std::string>().empty())) {
    return FieldError("suffix", "'suffix' (fill-in-the-middle) is not supported");
  }
  return absl::OkStatus();
}

// Every top-level field is one tpserve reads (OpenAiRequestFields), or is refused: a field
// accepted and ignored would leave the client believing it took effect (vLLM's guided_json,
// say, giving unconstrained output). The OpenAI API itself refuses unknown fields the same way.
absl::Status RefuseUnknownFields(OpenAiEndpoint endpoint, const Json& body) {
  auto set_of = [](OpenAiEndpoint e) {
    return new absl::flat_hash_set<std::string>(OpenAiRequestFields(e).begin(), OpenAiRequestFields(e).end());
  };
  static const auto* completions = set_of(OpenAiEndpoint::kCompletions);
  static const auto* chat = set_of(OpenAiEndpoint::kChatCompletions);
  // Fields whose value here is fixed: that value (or null) passes, any other is refused.
  static const auto* fixed = new absl::flat_hash_map<std::string, Json>{
      {"include_stop_str_in_output", false}, {"spaces_between_special_tokens", true},
      {"continue_final_message", false},     {"use_beam_search", false},
      {"parallel_tool_calls", true},         {"store", false}};
  static const auto* guided = new absl::flat_hash_set<std::string>{
      "guided_json",  "guided_regex",  "guided_choice", "guided_grammar", "guided_decoding_backend",
      "guided_whitespace_pattern", "structured_outputs"};
  const auto& own = endpoint == OpenAiEndpoint::kCompletions ? *completions : *chat;
  for (const auto& [key, value] : body.items()) {
    if (own.contains(key) || value.is_null()) continue;
    if (auto it = fixed->find(key); it != fixed->end()) {
      if (value == it->second) continue;
      return FieldError(key, absl::StrCat("'", key, "' ", Describe(value), " is not supported (tpserve runs as ", key,
                                          " = ", it->second.dump(), ")"));
    }
    if (guided->contains(key)) {
      return FieldError(key, absl::StrCat("'", key, "' (vLLM's guided decoding) is not supported; ask for ",
                                          "\"response_format\": {\"type\": \"json_schema\", ...} or "
                                          "{\"type\": \"json_object\"}"));
    }
    return FieldError(key, absl::StrCat("unrecognized request argument '", key, "' (",
                                        endpoint == OpenAiEndpoint::kCompletions ? "/v1/completions"
                                                                                 : "/v1/chat/completions",
                                        " does not take it; fields tpserve does not implement are refused, not "
                                        "ignored)"));
  }
  return absl::OkStatus();
}

template <typename BodyOrJson>
absl::Status ReadBool(const BodyOrJson& body, const char* field, bool* out) {
  const Json* v;
  if (!Present(body, field, &v)) return absl::OkStatus();
  if (!v->is_boolean()) return TypeError(field, "true or false", *v);
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status ReadFloat(const Body& body, const char* field, float* out, bool* present = nullptr) {
  const Json* v;
  if (!Present(body, field, &v)) return absl::OkStatus();
  if (!v->is_number()) return TypeError(field, "a number", *v);
  *out = static_cast<float>(v->get<double>());
  if (present != nullptr) *present = true;
  return absl::OkStatus();
}

// Integers; a float with an integral value (2.0) is accepted as pydantic does.
absl::StatusOr<int64_t> AsInt(const Json& v, absl::string_view field, int64_t lo, int64_t hi) {
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return TypeError(field, "an integer", v);
    x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
             std::fabs(v.get<double>()) < 9e18) {
    x = static_cast<int64_t>(v.get<double>());
  } else {
    return TypeError(field, "an integer", v);
  }
  if (x < lo || x > hi) {
    return FieldError(field, absl::StrCat("'", field, "' must be between ", lo, " and ", hi, ", got ", x));
  }
  return x;
}

absl::Status ReadInt32(const Body& body, const char* field, int32_t* out, bool* present = nullptr) {
  const Json* v;
  if (!Present(body, field, &v)) return absl::OkStatus();
  absl::StatusOr<int64_t> x =
      AsInt(*v, field, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
  if (!x.ok()) return x.status();
  *out = static_cast<int32_t>(*x);
  if (present != nullptr) *present = true;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> AsTokenIds(const Json& v, absl::string_view field) {
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    absl::StatusOr<int64_t> id = AsInt(v[i], absl::StrCat(field, "[", i, "]"), 0, std::numeric_limits<int32_t>::max());
    if (!id.ok()) return id.status();
    ids.push_back(static_cast<int32_t>(*id));
  }
  return ids;
}

bool AllIntegers(const Json& v) {
  for (const Json& x : v) {
    if (!x.is_number()) return false;
  }
  return true;
}

// A string, a list of token ids, or a batch of one of those.
absl::StatusOr<Prompt> ParsePrompt(const Body& body) {
  const Json* v;
  if (!Present(body, "prompt", &v)) return FieldError("prompt", "'prompt' is required");
  if (v->is_string()) return Prompt(v->get<std::string>());
  if (!v->is_array()) return TypeError("prompt", "a string or a list of token ids", *v);
  if (v->empty()) return FieldError("prompt", "prompt must not be empty");
  if (AllIntegers(*v)) {
    absl::StatusOr<std::vector<int32_t>> ids = AsTokenIds(*v, "prompt");
    if (!ids.ok()) return ids.status();
    return Prompt(*std::move(ids));
  }
  if (v->size() > 1) {
    return FieldError("prompt", absl::StrCat("'prompt' is a batch of ", v->size(),
                                             " prompts; tpserve takes one prompt per request"));
  }
  const Json& only = (*v)[0];
  if (only.is_string()) return Prompt(only.get<std::string>());
  if (only.is_array() && AllIntegers(only)) {
    absl::StatusOr<std::vector<int32_t>> ids = AsTokenIds(only, "prompt[0]");
    if (!ids.ok()) return ids.status();
    return Prompt(*std::move(ids));
  }
  return TypeError("prompt", "a string or a list of token ids", *v);
}

// Messages go to the chat template as the client sent them, except that a content list
// of text parts becomes one string (joined with newlines, as vLLM does for templates that
// expect string content).
absl::StatusOr<Json> ParseMessages(const Body& body) {
  const Json* v;
  if (!Present(body, "messages", &v)) return FieldError("messages", "'messages' is required");
  if (!v->is_array()) return TypeError("messages", "a list of messages", *v);
  if (v->empty()) return FieldError("messages", "messages must be a non-empty list of messages");
  Json messages = *v;
  for (size_t i = 0; i < messages.size(); ++i) {
    Json& m = messages[i];
    const std::string at = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return TypeError(at, "an object with \"role\" and \"content\"", m);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return FieldError(absl::StrCat(at, ".role"), absl::StrCat("'", at, ".role' must be a string"));
    }
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      // As OpenAI's API: only an assistant message that calls tools may leave out content.
      const std::string& role_name = role->get_ref<const std::string&>();
      const auto present = [&m](const char* key) {
        auto it = m.find(key);
        return it != m.end() && !it->is_null();
      };
      if (role_name == "assistant" && (present("tool_calls") || present("function_call"))) continue;
      return FieldError(absl::StrCat(at, ".content"),
                        role_name == "assistant"
                            ? absl::StrCat(at, ".content is required for an \"assistant\" message without \"tool_calls\"")
                            : absl::StrCat(at, ".content is required for a \"", role_name, "\" message"));
    }
    if (content->is_string()) continue;
    if (!content->is_array()) return TypeError(absl::StrCat(at, ".content"), "a string or a list of parts", *content);
    std::string text;
    for (size_t k = 0; k < content->size(); ++k) {
      const Json& part = (*content)[k];
      const std::string part_at = absl::StrCat(at, ".content[", k, "]");
      auto type = part.is_object() ? part.find("type") : part.end();
      if (!part.is_object() || type == part.end() || *type != "text") {
        return FieldError(part_at, absl::StrCat("'", part_at, "': only {\"type\": \"text\"} parts are supported, got ",
                                                Describe(part)));
      }
      auto part_text = part.find("text");
      if (part_text == part.end() || !part_text->is_string()) {
        return FieldError(part_at, absl::StrCat("'", part_at, ".text' must be a string"));
      }
      if (k > 0) text += "\n";
      text += part_text->get<std::string>();
    }
    *content = text;
  }
  return messages;
}

absl::Status ParseStop(const Body& body, std::vector<std::string>* stop) {
  const Json* v;
  if (!Present(body, "stop", &v)) return absl::OkStatus();
  if (v->is_string()) {
    stop->push_back(v->get<std::string>());
    return absl::OkStatus();
  }
  if (!v->is_array()) return TypeError("stop", "a string or a list of strings", *v);
  for (const Json& s : *v) {
    if (!s.is_string()) return TypeError("stop", "a string or a list of strings", *v);
    stop->push_back(s.get<std::string>());
  }
  return absl::OkStatus();
}

absl::Status ParseSampling(const Body& body, OpenAiEndpoint endpoint, OpenAiRequest* r) {
  SamplingParams& p = r->input.params;
  if (absl::Status s = ReadInt32(body, "max_tokens", &p.max_tokens, &r->input.max_tokens_set); !s.ok()) return s;
  if (endpoint == OpenAiEndpoint::kChatCompletions) {  // the newer name wins
    if (absl::Status s = ReadInt32(body, "max_completion_tokens", &p.max_tokens, &r->input.max_tokens_set); !s.ok()) {
      return s;
    }
  }
  // Absent or null fields stay unset, so that RequestBuilder gives them the model's defaults
  // (--generation-config).
  ExplicitSamplingFields& set = r->input.explicit_sampling;
  struct FloatField {
    const char* name;
    float* out;
    bool* present;
  };
  for (const FloatField& f : {FloatField{"temperature", &p.temperature, &set.temperature},
                              FloatField{"top_p", &p.top_p, &set.top_p}, FloatField{"min_p", &p.min_p, &set.min_p},
                              FloatField{"presence_penalty", &p.presence_penalty, nullptr},
                              FloatField{"frequency_penalty", &p.frequency_penalty, nullptr},
                              FloatField{"repetition_penalty", &p.repetition_penalty, &set.repetition_penalty}}) {
    if (absl::Status s = ReadFloat(body, f.name, f.out, f.present); !s.ok()) return s;
  }
  if (absl::Status s = ReadInt32(body, "top_k", &p.top_k, &set.top_k); !s.ok()) return s;
  if (p.top_k == -1) p.top_k = 0;  // vLLM spells "off" as -1
  if (absl::Status s = ReadInt32(body, "min_tokens", &p.min_tokens); !s.ok()) return s;
  if (absl::Status s = ReadBool(body, "ignore_eos", &p.ignore_eos); !s.ok()) return s;
  if (absl::Status s = ReadBool(body, "skip_special_tokens", &p.skip_special_tokens); !s.ok()) return s;
  if (absl::Status s = ParseStop(body, &p.stop); !s.ok()) return s;
  const Json* v;
  if (Present(body, "stop_token_ids", &v)) {
    if (!v->is_array()) return TypeError("stop_token_ids", "a list of token ids", *v);
    absl::StatusOr<std::vector<int32_t>> ids = AsTokenIds(*v, "stop_token_ids");
    if (!ids.ok()) return ids.status();
    p.stop_token_ids = *std::move(ids);
  }
  if (Present(body, "seed", &v)) {
    absl::StatusOr<int64_t> seed =
        AsInt(*v, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
    if (!seed.ok()) return seed.status();
    p.seed = static_cast<uint64_t>(*seed);
  }
  if (absl::Status s = RefuseUnimplemented(endpoint, body); !s.ok()) return s;
  if (absl::Status s = ParseResponseFormat(body, &r->input.response_format); !s.ok()) return s;
  if (absl::Status s = ParseLogitBias(body, &p.logit_bias); !s.ok()) return s;
  if (Present(body, "n", &v)) {
    absl::StatusOr<int64_t> n = AsInt(*v, "n", 1, kMaxChoices);
    if (!n.ok()) return n.status();
    r->input.n = static_cast<int32_t>(*n);
  }
  if (endpoint == OpenAiEndpoint::kCompletions) {
    if (absl::Status s = ReadBool(body, "echo", &r->echo); !s.ok()) return s;
  }

  // Logprobs: completions take an integer (alternatives per token); chat takes a boolean
  // plus top_logprobs.
  if (endpoint == OpenAiEndpoint::kCompletions) {
    if (Present(body, "logprobs", &v)) {
      absl::StatusOr<int64_t> k = AsInt(*v, "logprobs", 0, 20);
      if (!k.ok()) return k.status();
      r->logprobs = true;
      p.logprobs = static_cast<int32_t>(*k);
      if (r->echo) {
        return FieldError("echo", "'echo' together with 'logprobs' (the prompt's logprobs) is not supported");
      }
    }
  } else {
    if (absl::Status s = ReadBool(body, "logprobs", &r->logprobs); !s.ok()) return s;
    if (Present(body, "top_logprobs", &v)) {
      absl::StatusOr<int64_t> k = AsInt(*v, "top_logprobs", 0, 20);
      if (!k.ok()) return k.status();
      if (*k > 0 && !r->logprobs) {
        return FieldError("top_logprobs", "'top_logprobs' needs \"logprobs\": true");
      }
      if (r->logprobs) p.logprobs = static_cast<int32_t>(*k);
    }
    if (r->logprobs && !p.logprobs.has_value()) p.logprobs = 0;  // the chosen tokens' logprobs only
  }
  return absl::OkStatus();
}

}  // namespace

const std::vector<std::string>& OpenAiRequestFields(OpenAiEndpoint endpoint) {
  // [0]: completions, [1]: chat. The parser reads each of these (openai_json_test checks that
  // it reads these and no others), except kIgnoredRequestFields.
  static const std::vector<std::string>* const fields = [] {
    const std::vector<std::string> both = {
        "model", "stream", "stream_options", "max_tokens", "temperature", "top_p", "min_p", "top_k",
        "presence_penalty", "frequency_penalty", "repetition_penalty", "min_tokens", "ignore_eos", "stop",
        "stop_token_ids", "seed", "best_of", "response_format", "logit_bias", "n", "logprobs", "skip_special_tokens",
        kIgnoredRequestFields[0]};
    auto* f = new std::vector<std::string>[2]{both, both};
    f[0].insert(f[0].end(), {"prompt", "echo", "suffix"});
    f[1].insert(f[1].end(), {"messages", "add_generation_prompt", "chat_template_kwargs", "max_completion_tokens",
                             "top_logprobs", "tools", "tool_choice"});
    return f;
  }();
  return fields[endpoint == OpenAiEndpoint::kCompletions ? 0 : 1];
}

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, absl::string_view body_text) {
  return ParseOpenAiRequest(endpoint, body_text, nullptr);
}

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, absl::string_view body_text,
                                                 std::vector<std::string>* fields_read) {
  // Values nested deeper than this are discarded while parsing and the body refused:
  // copying the body, the chat template's values and tojson all recurse once per level,
  // so a 4 MB body of brackets would overflow the stack. Real requests (tool schemas
  // included) nest about ten levels.
  constexpr int kMaxJsonDepth = 64;
  bool too_deep = false;
  auto limit_depth = [&too_deep](int depth, Json::parse_event_t event, Json&) {
    if (depth < kMaxJsonDepth ||
        (event != Json::parse_event_t::object_start && event != Json::parse_event_t::array_start)) {
      return true;
    }
    too_deep = true;
    return false;
  };
  Json body_json;
  try {
    body_json = Json::parse(body_text.begin(), body_text.end(), limit_depth);
  } catch (const Json::exception& e) {
    // Not only parse_error: a number out of double's range (1e400) throws out_of_range.
    return absl::InvalidArgumentError(absl::StrCat("request body is not valid JSON: ", e.what()));
  }
  if (too_deep) {
    return absl::InvalidArgumentError(
        absl::StrCat("request body nests arrays and objects more than ", kMaxJsonDepth, " levels deep"));
  }
  if (!body_json.is_object()) return absl::InvalidArgumentError("request body must be a JSON object");
  const Body body{body_json, fields_read};

  OpenAiRequest r;
  r.endpoint = endpoint;
  const Json* v;
  if (Present(body, "model", &v)) {
    if (!v->is_string()) return TypeError("model", "a string", *v);
    r.input.model = v->get<std::string>();
  }
  if (endpoint == OpenAiEndpoint::kCompletions) {
    absl::StatusOr<Prompt> prompt = ParsePrompt(body);
    if (!prompt.ok()) return prompt.status();
    r.input.prompt = *std::move(prompt);
  } else {
    ChatPrompt chat;
    absl::StatusOr<Json> messages = ParseMessages(body);
    if (!messages.ok()) return messages.status();
    chat.messages = *std::move(messages);
    if (absl::Status s = ReadBool(body, "add_generation_prompt", &chat.add_generation_prompt); !s.ok()) return s;
    if (Present(body, "chat_template_kwargs", &v)) {
      if (!v->is_object()) return TypeError("chat_template_kwargs", "an object", *v);
      chat.template_kwargs = *v;
    }
    r.input.prompt = std::move(chat);
  }
  if (absl::Status s = ParseSampling(body, endpoint, &r); !s.ok()) return s;
  if (endpoint == OpenAiEndpoint::kChatCompletions) {
    const Json* tools = nullptr;
    const Json* choice = nullptr;
    const Json none;
    Present(body, "tools", &tools);
    Present(body, "tool_choice", &choice);
    absl::StatusOr<ToolUse> use = ParseToolUse(tools ? *tools : none, choice ? *choice : none);
    if (!use.ok()) return use.status();
    r.input.tool_use = *std::move(use);
  }
  if (absl::Status s = ReadBool(body, "stream", &r.stream); !s.ok()) return s;
  if (Present(body, "stream_options", &v)) {
    if (!v->is_object()) return TypeError("stream_options", "an object", *v);
    if (!r.stream) return FieldError("stream_options", "'stream_options' is only allowed with \"stream\": true");
    if (absl::Status s = ReadBool(*v, "include_usage", &r.include_usage); !s.ok()) {
      return FieldError("stream_options.include_usage", "'stream_options.include_usage' must be true or false");
    }
  }
  // Last, so that a missing or mistyped field the request needs is what the error names.
  if (absl::Status s = RefuseUnknownFields(endpoint, body_json); !s.ok()) return s;
  return r;
}

Json ErrorJson(const absl::Status& status) {
  const char* type = "server_error";
  Json code = nullptr;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      type = "invalid_request_error";
      break;
    case absl::StatusCode::kNotFound:
      type = "invalid_request_error";
      code = "model_not_found";
      break;
    case absl::StatusCode::kUnauthenticated:  // as OpenAI's API answers a missing or wrong key
      type = "invalid_request_error";
      code = "invalid_api_key";
      break;
    case absl::StatusCode::kResourceExhausted:
      type = "rate_limit_error";
      code = "rate_limit_exceeded";
      break;
    case absl::StatusCode::kUnavailable:
      code = "service_unavailable";
      break;
    default:
      break;
  }
  std::optional<std::string> field = ErrorField(status);
  Json error = Json::object();
  error["message"] = std::string(status.message());
  error["type"] = type;
  error["param"] = field.has_value() ? Json(*field) : Json(nullptr);
  error["code"] = code;
  return Json{{"error", error}};
}

HttpError ToHttpError(const absl::Status& status) {
  HttpError e;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      e.status = 400;
      break;
    case absl::StatusCode::kNotFound:
      e.status = 404;
      break;
    case absl::StatusCode::kUnauthenticated:
      e.status = 401;
      break;
    case absl::StatusCode::kResourceExhausted:
      e.status = 429;
      break;
    case absl::StatusCode::kUnavailable:
      e.status = 503;
      break;
    default:
      e.status = 500;
      break;
  }
  e.body = Dump(ErrorJson(status));
  return e;
}

std::string SseEvent(absl::string_view data) { return absl::StrCat("data: ", data, "\n\n"); }

namespace {
Json ModelObject(const std::string& name, int64_t created, int64_t max_model_len) {
  return Json{{"id", name}, {"object", "model"}, {"created", created}, {"owned_by", "tpserve"},
              {"max_model_len", max_model_len}};
}
}  // namespace

std::string ModelListJson(const std::vector<std::string>& served_model_names, int64_t created,
                          int64_t max_model_len) {
  Json data = Json::array();
  for (const std::string& name : served_model_names) data.push_back(ModelObject(name, created, max_model_len));
  return Dump(Json{{"object", "list"}, {"data", data}});
}

std::string ModelJson(const std::string& name, int64_t created, int64_t max_model_len) {
  return Dump(ModelObject(name, created, max_model_len));
}

Json FinishReasonJson(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    default:
      return nullptr;
  }
}

}  // namespace tpserve

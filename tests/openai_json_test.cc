// The OpenAI JSON layer without sockets: request parsing and the errors that name fields,
// error bodies and HTTP codes, response bodies, SSE chunk sequences and logprobs shapes.
#include <algorithm>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/api/openai_json.h"
#include "coordinator/api/openai_response.h"
#include "coordinator/engine/field_error.h"
#include "coordinator/text/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

absl::StatusOr<OpenAiRequest> ParseCompletion(const std::string& body) {
  return ParseOpenAiRequest(OpenAiEndpoint::kCompletions, body);
}
absl::StatusOr<OpenAiRequest> ParseChat(const std::string& body) {
  return ParseOpenAiRequest(OpenAiEndpoint::kChatCompletions, body);
}

// The status is INVALID_ARGUMENT, tagged with `field`, and its message names the field.
void ExpectFieldError(const absl::StatusOr<OpenAiRequest>& r, const std::string& field,
                      const std::string& message_part) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_EQ(ErrorField(r.status()).value_or("<none>"), field) << r.status();
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(message_part));
}

TEST(OpenAiParseTest, CompletionFieldsMapToSamplingParams) {
  auto r = ParseCompletion(R"({
    "model": "m", "prompt": "Hello", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
    "top_k": -1, "min_p": 0.05, "seed": 42, "stop": "\n", "stop_token_ids": [5, 6],
    "presence_penalty": 0.1, "frequency_penalty": 0.2, "repetition_penalty": 1.1,
    "ignore_eos": true, "min_tokens": 2, "stream": true, "stream_options": {"include_usage": true},
    "logprobs": 3, "n": 1, "user": "ignored"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->input.model, "m");
  EXPECT_EQ(std::get<std::string>(r->input.prompt), "Hello");
  const SamplingParams& p = r->input.params;
  EXPECT_TRUE(r->input.max_tokens_set);
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_FLOAT_EQ(p.temperature, 0.5f);
  EXPECT_FLOAT_EQ(p.top_p, 0.9f);
  EXPECT_EQ(p.top_k, 0);
  EXPECT_FLOAT_EQ(p.min_p, 0.05f);
  EXPECT_EQ(p.seed, 42u);
  EXPECT_THAT(p.stop, ElementsAre("\n"));
  EXPECT_THAT(p.stop_token_ids, ElementsAre(5, 6));
  EXPECT_FLOAT_EQ(p.presence_penalty, 0.1f);
  EXPECT_FLOAT_EQ(p.frequency_penalty, 0.2f);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.1f);
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.min_tokens, 2);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(p.logprobs, 3);
  const ExplicitSamplingFields& set = r->input.explicit_sampling;
  EXPECT_TRUE(set.temperature && set.top_k && set.top_p && set.min_p && set.repetition_penalty);
}

TEST(OpenAiParseTest, DefaultsWhenFieldsAreAbsentOrNull) {
  auto r = ParseCompletion(R"({"prompt": "x", "temperature": null, "stop": null, "seed": null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->input.max_tokens_set);
  // Unset, so that the model's generation config may fill them (RequestBuilder).
  const ExplicitSamplingFields& set = r->input.explicit_sampling;
  EXPECT_FALSE(set.temperature || set.top_k || set.top_p || set.min_p || set.repetition_penalty);
  EXPECT_FLOAT_EQ(r->input.params.temperature, 1.0f);
  EXPECT_FALSE(r->input.params.seed.has_value());
  EXPECT_TRUE(r->input.params.stop.empty());
  EXPECT_FALSE(r->stream);
  EXPECT_FALSE(r->logprobs);
  EXPECT_EQ(r->input.model, "");
}

TEST(OpenAiParseTest, ExplicitZeroIsSet) {
  auto r = ParseCompletion(R"({"prompt": "x", "temperature": 0, "top_k": 0})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->input.explicit_sampling.temperature);
  EXPECT_TRUE(r->input.explicit_sampling.top_k);
  EXPECT_FALSE(r->input.explicit_sampling.top_p);
  EXPECT_EQ(r->input.params.temperature, 0);
}

TEST(OpenAiParseTest, PromptForms) {
  auto ids = ParseCompletion(R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(std::get<std::vector<int32_t>>(ids->input.prompt), ElementsAre(1, 2, 3));
  auto one_text = ParseCompletion(R"({"prompt": ["only"]})");
  ASSERT_TRUE(one_text.ok());
  EXPECT_EQ(std::get<std::string>(one_text->input.prompt), "only");
  auto one_ids = ParseCompletion(R"({"prompt": [[4, 5]]})");
  ASSERT_TRUE(one_ids.ok());
  EXPECT_THAT(std::get<std::vector<int32_t>>(one_ids->input.prompt), ElementsAre(4, 5));
  auto stops = ParseCompletion(R"({"prompt": "x", "stop": ["a", "b"]})");
  ASSERT_TRUE(stops.ok());
  EXPECT_THAT(stops->input.params.stop, ElementsAre("a", "b"));
}

TEST(OpenAiParseTest, ErrorsNameTheField) {
  ExpectFieldError(ParseCompletion(R"({"max_tokens": 5})"), "prompt", "'prompt' is required");
  ExpectFieldError(ParseCompletion(R"({"prompt": []})"), "prompt", "must not be empty");
  ExpectFieldError(ParseCompletion(R"({"prompt": ["a", "b"]})"), "prompt", "batch of 2 prompts");
  ExpectFieldError(ParseCompletion(R"({"prompt": {"text": "a"}})"), "prompt", "a string or a list of token ids");
  ExpectFieldError(ParseCompletion(R"({"prompt": [1, -2]})"), "prompt[1]", "between 0 and");
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "temperature": "hot"})"), "temperature",
                   "'temperature' must be a number, got \"hot\"");
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "max_tokens": 1.5})"), "max_tokens",
                   "'max_tokens' must be an integer");
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "max_tokens": 1e12})"), "max_tokens", "between");
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "n": 0})"), "n", "'n' must be between 1 and 64");
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "n": 65})"), "n", "'n' must be between 1 and 64");
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "stop": [1]})"), "stop", "a string or a list of strings");
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "stream": "yes"})"), "stream", "true or false");
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "logprobs": 50})"), "logprobs", "between 0 and 20");
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "model": 3})"), "model", "'model' must be a string");
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "echo": true, "logprobs": 1})"), "echo", "not supported");
  EXPECT_TRUE(ParseCompletion(R"({"prompt": "x", "echo": true})")->echo);
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "stop_token_ids": "1"})"), "stop_token_ids",
                   "a list of token ids");
}

// response_format and logit_bias as OpenAI spells them; their errors name the field.
TEST(OpenAiParseTest, ResponseFormatAndLogitBias) {
  auto object = ParseChat(R"({"messages": [{"role": "user", "content": "x"}],
                              "response_format": {"type": "json_object"}})");
  ASSERT_TRUE(object.ok()) << object.status();
  ASSERT_TRUE(object->input.response_format.has_value());
  EXPECT_EQ(object->input.response_format->type, ResponseFormat::Type::kJsonObject);
  auto schema = ParseCompletion(R"({"prompt": "x", "response_format": {"type": "json_schema",
      "json_schema": {"name": "p", "strict": true, "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}})");
  ASSERT_TRUE(schema.ok()) << schema.status();
  ASSERT_TRUE(schema->input.response_format.has_value());
  EXPECT_EQ(schema->input.response_format->type, ResponseFormat::Type::kJsonSchema);
  EXPECT_EQ(schema->input.response_format->schema, R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  auto text = ParseCompletion(R"({"prompt": "x", "response_format": {"type": "text"}})");
  ASSERT_TRUE(text.ok());
  EXPECT_FALSE(text->input.response_format.has_value());
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "response_format": {"type": "json_schema"}})"),
                   "response_format.json_schema", "must be an object");
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "a"}}})"),
                   "response_format.json_schema.schema", "must be a JSON schema");
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "response_format": {"type": "structural_tag"}})"),
                   "response_format", "\"structural_tag\" is not supported");
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "response_format": "json"})"), "response_format",
                   "an object");

  auto bias = ParseCompletion(R"({"prompt": "x", "logit_bias": {"50": -100, "7": 2.5}})");
  ASSERT_TRUE(bias.ok()) << bias.status();
  EXPECT_EQ(bias->input.params.logit_bias, (std::vector<std::pair<int32_t, float>>{{50, -100.0f}, {7, 2.5f}}));
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "logit_bias": {"abc": 1}})"), "logit_bias", "not a token id");
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "logit_bias": {"3": "high"}})"), "logit_bias[3]", "a number");
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "logit_bias": [1]})"), "logit_bias", "an object");
}

// tools and tool_choice parse into the input's ToolUse (RequestBuilder applies it:
// frontend_test's BuilderAppliesToolUse); errors name the field.
TEST(OpenAiParseTest, ToolsAndToolChoice) {
  const std::string chat = R"({"messages": [{"role": "user", "content": "x"}], )";
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "get", "parameters":
      {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";
  auto automatic = ParseChat(chat + tools + "}");
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ(automatic->input.tool_use.choice, ToolUse::Choice::kAuto);
  EXPECT_EQ(automatic->input.tool_use.tools[0]["function"]["name"], "get");
  EXPECT_EQ(ParseChat(chat + tools + R"(, "tool_choice": "none"})")->input.tool_use.choice, ToolUse::Choice::kNone);
  EXPECT_EQ(ParseChat(chat + tools + R"(, "tool_choice": "required"})")->input.tool_use.choice,
            ToolUse::Choice::kRequired);
  auto named = ParseChat(chat + tools + R"(, "tool_choice": {"type": "function", "function": {"name": "get"}}})");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->input.tool_use.choice, ToolUse::Choice::kNamed);
  EXPECT_EQ(named->input.tool_use.function, "get");
  EXPECT_EQ(ParseChat(chat + R"("tool_choice": "none"})")->input.tool_use.choice, ToolUse::Choice::kNone);

  ExpectFieldError(ParseChat(chat + R"("tool_choice": "auto"})"), "tool_choice", "needs a non-empty");
  ExpectFieldError(ParseChat(chat + tools + R"(, "tool_choice": "sometimes"})"), "tool_choice", "\"required\"");
  ExpectFieldError(ParseChat(chat + R"("tools": [{"type": "function", "function": {}}]})"), "tools", "tools[0]");
  // A tool's answer and an assistant's call are accepted in the conversation.
  auto turns = ParseChat(R"({"messages": [{"role": "user", "content": "x"},
      {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}], )" + tools + "}");
  EXPECT_TRUE(turns.ok()) << turns.status();
}

// Features not implemented yet are refused by name, never accepted and ignored; their
// neutral values pass.
TEST(OpenAiParseTest, UnimplementedFeaturesAreRefusedNotIgnored) {
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "best_of": 3})"), "best_of", "must be 1");
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "suffix": "end"})"), "suffix", "fill-in-the-middle");
  for (const std::string& neutral : std::vector<std::string>{R"("logit_bias": {})", R"("best_of": 1)",
                                                              R"("logit_bias": null)"}) {
    auto r = ParseChat(R"({"messages": [{"role": "user", "content": "x"}], )" + neutral + "}");
    EXPECT_TRUE(r.ok()) << neutral << ": " << r.status();
  }
  EXPECT_TRUE(ParseCompletion(R"({"prompt": "x", "suffix": ""})").ok());
}

TEST(OpenAiParseTest, UnknownFieldsAreRefusedNotIgnored) {
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "foo_bar": 1})"), "foo_bar", "unrecognized request argument");
  ExpectFieldError(ParseChat(R"({"messages": [{"role": "user", "content": "x"}], "echo": true})"), "echo",
                   "unrecognized");  // completions only
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "tools": []})"), "tools", "unrecognized");
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "guided_json": {"type": "object"}})"), "guided_json",
                   "response_format");
  ExpectFieldError(ParseChat(R"({"messages": [{"role": "user", "content": "x"}], "guided_choice": ["a"]})"),
                   "guided_choice", "guided decoding");
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "include_stop_str_in_output": true})"),
                   "include_stop_str_in_output", "include_stop_str_in_output = false");
  ExpectFieldError(ParseChat(R"({"messages": [{"role": "user", "content": "x"}], "parallel_tool_calls": false})"),
                   "parallel_tool_calls", "not supported");
  ExpectFieldError(ParseCompletion(R"({"prompt": "x", "stream_options": {"include_usage": true}})"),
                   "stream_options", "\"stream\": true");
  // Fixed values that are tpserve's own, nulls, and the end-user id pass.
  for (const std::string& fine :
       std::vector<std::string>{R"("include_stop_str_in_output": false)", R"("parallel_tool_calls": true)",
                                R"("store": false)", R"("guided_json": null)", R"("user": "u-1")",
                                R"("foo_bar": null)", R"("stream": true, "stream_options": {"include_usage": true})"}) {
    auto r = ParseChat(R"({"messages": [{"role": "user", "content": "x"}], )" + fine + "}");
    EXPECT_TRUE(r.ok()) << fine << ": " << r.status();
  }
  // skip_special_tokens is read.
  auto kept = ParseCompletion(R"({"prompt": "x", "skip_special_tokens": false})");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_FALSE(kept->input.params.skip_special_tokens);
  EXPECT_TRUE(ParseCompletion(R"({"prompt": "x"})")->input.params.skip_special_tokens);
}

// The accepted fields and the parser cannot drift: parsing a request looks up exactly the
// fields OpenAiRequestFields lists (less the ones accepted and ignored), each endpoint its own.
// A field the parser starts reading without being listed would be refused as unknown when a
// client sends it; a listed field nobody reads would be accepted and ignored.
TEST(OpenAiParseTest, TheParserReadsExactlyTheAcceptedFields) {
  const std::vector<std::string> ignored(std::begin(kIgnoredRequestFields), std::end(kIgnoredRequestFields));
  for (const auto& [endpoint, body] : std::vector<std::pair<OpenAiEndpoint, std::string>>{
           {OpenAiEndpoint::kCompletions, R"({"prompt": "x"})"},
           {OpenAiEndpoint::kChatCompletions, R"({"messages": [{"role": "user", "content": "x"}]})"},
           // Every field at once (a stream, with tools): the same lookups.
           {OpenAiEndpoint::kCompletions,
            R"({"prompt": "x", "model": "m", "stream": true, "stream_options": {"include_usage": true},
                "max_tokens": 3, "temperature": 0.5, "top_p": 0.9, "min_p": 0.1, "top_k": 5, "presence_penalty": 0.1,
                "frequency_penalty": 0.1, "repetition_penalty": 1.1, "min_tokens": 1, "ignore_eos": true,
                "stop": "s", "stop_token_ids": [1], "seed": 7, "best_of": 1, "response_format": {"type": "text"},
                "logit_bias": {"3": 1}, "n": 2, "logprobs": 2, "skip_special_tokens": false, "user": "u",
                "echo": false, "suffix": ""})"},
           {OpenAiEndpoint::kChatCompletions,
            R"({"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": true,
                "chat_template_kwargs": {}, "max_completion_tokens": 3, "logprobs": true, "top_logprobs": 2,
                "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto"})"}}) {
    std::vector<std::string> read;
    absl::StatusOr<OpenAiRequest> r = ParseOpenAiRequest(endpoint, body, &read);
    ASSERT_TRUE(r.ok()) << r.status();
    std::set<std::string> looked_up(read.begin(), read.end());
    std::set<std::string> accepted;
    for (const std::string& f : OpenAiRequestFields(endpoint)) {
      if (std::find(ignored.begin(), ignored.end(), f) == ignored.end()) accepted.insert(f);
    }
    EXPECT_EQ(looked_up, accepted) << body;
  }
}

TEST(OpenAiParseTest, MalformedBodies) {
  auto bad = ParseCompletion(R"({"prompt": "x",)");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("not valid JSON"));
  auto array = ParseCompletion(R"([1, 2])");
  ASSERT_FALSE(array.ok());
  EXPECT_THAT(std::string(array.status().message()), HasSubstr("must be a JSON object"));
}

// Found by tests/fuzz/openai_request_fuzzer.cc: a number past double's range makes
// nlohmann::json throw out_of_range, not parse_error; it escaped the parser (the HTTP
// server's exception handler made it a 500 "internal error"; the fuzzer aborted).
TEST(OpenAiParseTest, NumbersOutOfRangeAreInvalidJson) {
  for (const char* body : {R"({"prompt": "x", "temperature": 1e400})", R"({"prompt": [-1e999]})"}) {
    auto r = ParseCompletion(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("not valid JSON"));
  }
  auto chat = ParseChat(R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"n": 1e400}})");
  ASSERT_FALSE(chat.ok());
  EXPECT_THAT(std::string(chat.status().message()), HasSubstr("number overflow"));
}

// Found by probing the openai_request fuzz target with long inputs: a body of nested
// brackets (well within the 4 MB body limit) overflowed the stack when copied.
TEST(OpenAiParseTest, DeeplyNestedBodiesAreRefused) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const std::string& body :
       {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"x": )" + deep + "}}",
        R"({"messages": [{"role": "user", "content": "x", "extra": )" + deep + "}]}", deep}) {
    auto r = ParseChat(body);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("more than 64 levels deep"));
  }
  // 64 levels, counting the body object, are fine.
  const std::string ok_body = R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"x": )" +
                              std::string(62, '[') + std::string(62, ']') + "}}";
  EXPECT_TRUE(ParseChat(ok_body).ok()) << ParseChat(ok_body).status();
  const std::string too_deep = R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"x": )" +
                               std::string(63, '[') + std::string(63, ']') + "}}";
  EXPECT_FALSE(ParseChat(too_deep).ok());
}

TEST(OpenAiParseTest, ChatMessagesAndOptions) {
  auto r = ParseChat(R"({
    "messages": [{"role": "system", "content": "Be brief."},
                 {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]},
                 {"role": "assistant", "content": null, "tool_calls": []}],
    "max_tokens": 3, "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 2,
    "chat_template_kwargs": {"enable_thinking": false}, "add_generation_prompt": false})");
  ASSERT_TRUE(r.ok()) << r.status();
  const auto& chat = std::get<ChatPrompt>(r->input.prompt);
  ASSERT_EQ(chat.messages.size(), 3u);
  EXPECT_EQ(chat.messages[1]["content"], "Hi\nthere");
  EXPECT_TRUE(chat.messages[2]["content"].is_null());
  EXPECT_TRUE(chat.messages[2].contains("tool_calls"));
  EXPECT_FALSE(chat.add_generation_prompt);
  EXPECT_EQ(chat.template_kwargs["enable_thinking"], false);
  EXPECT_EQ(r->input.params.max_tokens, 9);  // max_completion_tokens wins
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->input.params.logprobs, 2);
}

TEST(OpenAiParseTest, ChatErrorsNameTheField) {
  ExpectFieldError(ParseChat(R"({"prompt": "x"})"), "messages", "'messages' is required");
  ExpectFieldError(ParseChat(R"({"messages": []})"), "messages", "non-empty");
  ExpectFieldError(ParseChat(R"({"messages": "hi"})"), "messages", "a list of messages");
  ExpectFieldError(ParseChat(R"({"messages": [{"content": "hi"}]})"), "messages[0].role", "must be a string");
  // Content is required, except for an assistant message that calls tools (as OpenAI).
  ExpectFieldError(ParseChat(R"({"messages": [{"role": "system", "content": "x"}, {"role": "user"}]})"),
                   "messages[1].content", "messages[1].content is required for a \"user\" message");
  for (const char* role : {"system", "developer", "tool", "user"}) {
    ExpectFieldError(ParseChat(absl::StrCat(R"({"messages": [{"role": ")", role, R"(", "content": null}]})")),
                     "messages[0].content", absl::StrCat("required for a \"", role, "\" message"));
  }
  ExpectFieldError(ParseChat(R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant"}]})"),
                   "messages[1].content", "required for an \"assistant\" message without \"tool_calls\"");
  ExpectFieldError(
      ParseChat(R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": null}]})"),
      "messages[1].content", "without \"tool_calls\"");
  for (const char* call : {R"("tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}])",
                           R"("function_call": {"name": "f", "arguments": "{}"})"}) {
    auto chat = ParseChat(absl::StrCat(R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", )", call,
                                       "}]}"));
    EXPECT_TRUE(chat.ok()) << call << ": " << chat.status();
  }
  ExpectFieldError(ParseChat(R"({"messages": [{"role": "user", "content":
      [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}]}]})"),
                   "messages[0].content[1]", "only {\"type\": \"text\"} parts");
  ExpectFieldError(ParseChat(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})"),
                   "top_logprobs", "needs \"logprobs\": true");
  ExpectFieldError(ParseChat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 2})"), "logprobs",
                   "true or false");
}

TEST(OpenAiErrorTest, StatusesMapToHttpCodesAndOpenAiShape) {
  HttpError bad = ToHttpError(FieldError("temperature", "'temperature' must be a number"));
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(Json::parse(bad.body),
            Json::parse(R"({"error": {"message": "'temperature' must be a number",
                                      "type": "invalid_request_error", "param": "temperature", "code": null}})"));
  HttpError missing = ToHttpError(absl::NotFoundError("model \"x\" is not served here"));
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(Json::parse(missing.body)["error"]["code"], "model_not_found");
  EXPECT_TRUE(Json::parse(missing.body)["error"]["param"].is_null());
  HttpError busy = ToHttpError(absl::ResourceExhaustedError("queue full"));
  EXPECT_EQ(busy.status, 429);
  EXPECT_EQ(Json::parse(busy.body)["error"]["type"], "rate_limit_error");
  EXPECT_EQ(ToHttpError(absl::UnavailableError("loading")).status, 503);
  EXPECT_EQ(ToHttpError(absl::InternalError("boom")).status, 500);
}

TEST(OpenAiJsonTest, SseFramingAndModelList) {
  EXPECT_EQ(SseEvent("{\"a\":1}"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(std::string(kSseDone), "data: [DONE]\n\n");
  Json models = Json::parse(ModelListJson({"a", "b"}, 100, 4096));
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 2u);
  EXPECT_EQ(models["data"][1]["id"], "b");
  EXPECT_EQ(models["data"][1]["object"], "model");
  EXPECT_EQ(models["data"][1]["max_model_len"], 4096);
}

class OpenAiResponseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = Tokenizer::FromFile(std::string(TPSERVE_FIXTURES) + "/tokenizers/gpt2/tokenizer.json");
    ASSERT_TRUE(t.ok()) << t.status();
    tokenizer_ = *std::move(t);
  }

  OutputEvent Event(const std::string& text, std::vector<int32_t> ids, int32_t completion_tokens,
                    FinishReason finish = FinishReason::kNone) {
    OutputEvent e;
    e.text = text;
    e.token_ids = ids;
    for (int32_t id : ids) e.logprobs.push_back(TokenLogprob{id, -0.25f, {{id, -0.25f}}});
    e.prompt_tokens = 4;
    e.completion_tokens = completion_tokens;
    e.finish = finish;
    return e;
  }

  // Splits an SSE stream into its data payloads.
  static std::vector<std::string> Payloads(const std::string& sse) {
    std::vector<std::string> out;
    size_t pos = 0;
    while (pos < sse.size()) {
      EXPECT_EQ(sse.compare(pos, 6, "data: "), 0) << sse.substr(pos);
      const size_t end = sse.find("\n\n", pos);
      EXPECT_NE(end, std::string::npos);
      out.push_back(sse.substr(pos + 6, end - pos - 6));
      pos = end + 2;
    }
    return out;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(OpenAiResponseTest, CompletionBody) {
  OpenAiRequest req;
  req.endpoint = OpenAiEndpoint::kCompletions;
  OpenAiResponseBuilder b(req, "cmpl-1", "m", 123, *tokenizer_);
  b.Accumulate(Event("Hello", {576}, 1));
  EXPECT_FALSE(b.finished());
  b.Accumulate(Event(" world", {379}, 2, FinishReason::kLength));
  ASSERT_TRUE(b.finished());
  EXPECT_EQ(Json::parse(b.Body()), Json::parse(R"({
    "id": "cmpl-1", "object": "text_completion", "created": 123, "model": "m", "system_fingerprint": null,
    "choices": [{"index": 0, "text": "Hello world", "logprobs": null, "finish_reason": "length", "stop_reason": null}],
    "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}})"));
}

TEST_F(OpenAiResponseTest, ChatBodyWithLogprobs) {
  OpenAiRequest req;
  req.endpoint = OpenAiEndpoint::kChatCompletions;
  req.logprobs = true;
  OpenAiResponseBuilder b(req, "chatcmpl-1", "m", 5, *tokenizer_);
  b.Accumulate(Event("Hello", {576}, 1, FinishReason::kStop));
  Json body = Json::parse(b.Body());
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"], Json::parse(R"({"role": "assistant", "content": "Hello"})"));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  const Json& lp = body["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(lp["token"], "Hello");
  EXPECT_EQ(lp["logprob"], -0.25);
  EXPECT_EQ(lp["bytes"], Json::parse("[72, 101, 108, 108, 111]"));
  EXPECT_EQ(lp["top_logprobs"][0]["token"], "Hello");
}

TEST_F(OpenAiResponseTest, CompletionLogprobsShape) {
  OpenAiRequest req;
  req.endpoint = OpenAiEndpoint::kCompletions;
  req.logprobs = true;
  OpenAiResponseBuilder b(req, "c", "m", 0, *tokenizer_);
  b.Accumulate(Event("Hello world", {576, 379}, 2, FinishReason::kLength));
  Json lp = Json::parse(b.Body())["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], Json::parse(R"(["Hello", " world"])"));
  EXPECT_EQ(lp["token_logprobs"], Json::parse("[-0.25, -0.25]"));
  EXPECT_EQ(lp["top_logprobs"][1], Json::parse(R"({" world": -0.25})"));
  EXPECT_EQ(lp["text_offset"], Json::parse("[0, 5]"));
  // A sampled token outside the top N is added to them (up to logprobs + 1 entries).
  OpenAiResponseBuilder outside(req, "c", "m", 0, *tokenizer_);
  OutputEvent e = Event("Hello", {576}, 1, FinishReason::kLength);
  e.logprobs[0] = TokenLogprob{576, -3.0f, {{379, -0.5f}}};
  outside.Accumulate(e);
  lp = Json::parse(outside.Body())["choices"][0]["logprobs"];
  EXPECT_EQ(lp["top_logprobs"][0], Json::parse(R"({" world": -0.5, "Hello": -3.0})"));
}

TEST_F(OpenAiResponseTest, StreamChunksAreCompactJsonInOpenAiKeyOrder) {
  // Byte for byte: the envelope (id to system_fingerprint), then the choices; names that
  // need escaping are escaped.
  OpenAiRequest req;
  req.endpoint = OpenAiEndpoint::kCompletions;
  req.stream = true;
  OpenAiResponseBuilder b(req, "cmpl-1", "org/m \"q\"", 123, *tokenizer_);
  const std::string envelope =
      R"({"id":"cmpl-1","object":"text_completion","created":123,"model":"org/m \"q\"","system_fingerprint":null,)";
  EXPECT_EQ(b.Chunks(Event("Hel\nlo", {1}, 1)),
            absl::StrCat("data: ", envelope,
                         R"("choices":[{"index":0,"text":"Hel\nlo","logprobs":null,"finish_reason":null}]})", "\n\n"));
  EXPECT_EQ(b.Chunks(Event("!", {2}, 2, FinishReason::kLength)),
            absl::StrCat("data: ", envelope,
                         R"("choices":[{"index":0,"text":"!","logprobs":null,"finish_reason":"length","stop_reason":null}]})",
                         "\n\ndata: [DONE]\n\n"));
  OpenAiRequest chat;
  chat.endpoint = OpenAiEndpoint::kChatCompletions;
  chat.stream = true;
  OpenAiResponseBuilder c(chat, "chatcmpl-1", "m", 5, *tokenizer_);
  const std::string chat_envelope =
      R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":5,"model":"m","system_fingerprint":null,)";
  EXPECT_EQ(c.Chunks(Event("Hi", {1}, 1)),
            absl::StrCat("data: ", chat_envelope,
                         R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]})",
                         "\n\ndata: ", chat_envelope,
                         R"("choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}]})", "\n\n"));
}

TEST_F(OpenAiResponseTest, ChatStreamChunkSequence) {
  OpenAiRequest req;
  req.endpoint = OpenAiEndpoint::kChatCompletions;
  req.stream = true;
  req.include_usage = true;
  OpenAiResponseBuilder b(req, "chatcmpl-2", "m", 7, *tokenizer_);
  std::string sse = b.Chunks(Event("Hel", {1}, 1));
  sse += b.Chunks(Event("", {2}, 2));  // text held back: no chunk
  sse += b.Chunks(Event("lo", {3}, 3, FinishReason::kStop));
  std::vector<std::string> p = Payloads(sse);
  ASSERT_EQ(p.size(), 5u) << sse;
  Json role = Json::parse(p[0]);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"], Json::parse(R"({"role": "assistant", "content": ""})"));
  EXPECT_EQ(Json::parse(p[1])["choices"][0]["delta"]["content"], "Hel");
  EXPECT_TRUE(Json::parse(p[1])["choices"][0]["finish_reason"].is_null());
  Json last = Json::parse(p[2]);
  EXPECT_EQ(last["choices"][0]["delta"]["content"], "lo");
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  Json usage = Json::parse(p[3]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"], Json::parse(R"({"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7})"));
  EXPECT_EQ(p[4], "[DONE]");
}

// tool_choice "auto": calls in the model's syntax become message.tool_calls (content the
// rest, null when empty) and finish_reason "tool_calls"; streamed, the call arrives as one
// delta.tool_calls entry and the held-back marker text never appears as content.
TEST_F(OpenAiResponseTest, ToolCallsFromTheModelsSyntax) {
  OpenAiRequest req;
  req.endpoint = OpenAiEndpoint::kChatCompletions;
  req.input.tool_use.choice = ToolUse::Choice::kAuto;
  req.input.tool_use.tools = Json::parse(R"([{"type": "function", "function": {"name": "get"}}])");
  const std::string call = "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  OpenAiResponseBuilder whole(req, "chatcmpl-t", "m", 1, *tokenizer_, ToolCallFormat::kHermes);
  whole.Accumulate(Event(call, {1, 2}, 2, FinishReason::kStop));
  Json body = Json::parse(whole.Body());
  const Json& message = body["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null()) << message;
  ASSERT_EQ(message["tool_calls"].size(), 1u) << message;
  EXPECT_EQ(message["tool_calls"][0]["type"], "function");
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get");
  EXPECT_EQ(Json::parse(message["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            Json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(message["tool_calls"][0]["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");

  req.stream = true;
  OpenAiResponseBuilder streamed(req, "chatcmpl-t", "m", 1, *tokenizer_, ToolCallFormat::kHermes);
  std::string sse = streamed.Chunks(Event("Let me look. ", {1}, 1));
  for (size_t i = 0; i < call.size(); i += 7) sse += streamed.Chunks(Event(call.substr(i, 7), {2}, 2));
  sse += streamed.Chunks(Event("", {3}, 3, FinishReason::kStop));
  std::string content;
  Json calls = Json::array();
  Json finish;
  for (const std::string& p : Payloads(sse)) {
    if (p == "[DONE]") continue;
    const Json chunk = Json::parse(p);
    const Json& choice = chunk["choices"][0];
    if (choice["delta"].contains("content")) content += choice["delta"]["content"].get<std::string>();
    if (choice["delta"].contains("tool_calls")) {
      for (const Json& c : choice["delta"]["tool_calls"]) calls.push_back(c);
    }
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
  }
  EXPECT_EQ(content, "Let me look.");
  ASSERT_EQ(calls.size(), 1u) << sse;
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["function"]["name"], "get");
  EXPECT_EQ(finish, "tool_calls");
}

// A response relayed from a tpserve gRPC backend (the router): the backend read the calls
// back and sends them whole beside the text, which is content only. The body and the stream
// say what the builder writes reading the model's syntax itself; logprob tokens are named by
// the relay's function.
TEST_F(OpenAiResponseTest, RelayedResponsesMatchTheOnesBuiltFromTheText) {
  OpenAiRequest req;
  req.endpoint = OpenAiEndpoint::kChatCompletions;
  req.logprobs = true;
  req.input.tool_use.choice = ToolUse::Choice::kAuto;
  req.input.tool_use.tools = Json::parse(R"([{"type": "function", "function": {"name": "get"}}])");
  const std::string call = "<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  OpenAiResponseBuilder parsed(req, "chatcmpl-t", "m", 1, *tokenizer_, ToolCallFormat::kHermes);
  parsed.Accumulate(Event("Let me look. ", {1}, 1));
  parsed.Accumulate(Event(call, {2}, 2, FinishReason::kStop));
  const Json want = Json::parse(parsed.Body());
  const Json& want_call = want["choices"][0]["message"]["tool_calls"][0];
  const ToolCall relayed_call{want_call["id"], "get", want_call["function"]["arguments"]};
  auto token_text = [this](int32_t id) {
    const int32_t ids[1] = {id};
    return tokenizer_->Decode(ids, /*skip_special_tokens=*/false);
  };
  OpenAiResponseBuilder relayed = OpenAiResponseBuilder::ForRelay(req, "chatcmpl-t", "m", 1, token_text);
  relayed.Accumulate(Event("Let me look.", {1}, 1));
  relayed.Accumulate(Event("", {2}, 2, FinishReason::kStop), 0, {relayed_call});
  EXPECT_EQ(Json::parse(relayed.Body()), want);

  // Streamed: the same content, the call as one delta with its index, id and type, and
  // finish_reason "tool_calls".
  req.stream = true;
  req.logprobs = false;
  auto read = [](const std::string& sse, std::string* content, Json* calls, Json* finish) {
    for (const std::string& p : Payloads(sse)) {
      if (p == "[DONE]") continue;
      const Json chunk = Json::parse(p);
      const Json& choice = chunk["choices"][0];
      if (choice["delta"].contains("content")) *content += choice["delta"]["content"].get<std::string>();
      if (choice["delta"].contains("tool_calls")) {
        for (const Json& c : choice["delta"]["tool_calls"]) calls->push_back(c);
      }
      if (!choice["finish_reason"].is_null()) *finish = choice["finish_reason"];
    }
  };
  OpenAiResponseBuilder streamed(req, "chatcmpl-t", "m", 1, *tokenizer_, ToolCallFormat::kHermes);
  std::string want_content, content;
  Json want_calls = Json::array(), calls = Json::array(), want_finish, finish;
  std::string sse = streamed.Chunks(Event("Let me look. ", {1}, 1));
  sse += streamed.Chunks(Event(call, {2}, 2));
  sse += streamed.Chunks(Event("", {3}, 3, FinishReason::kStop));
  read(sse, &want_content, &want_calls, &want_finish);
  OpenAiResponseBuilder relayed_stream = OpenAiResponseBuilder::ForRelay(req, "chatcmpl-t", "m", 1, token_text);
  std::string relayed_sse = relayed_stream.Chunks(Event("Let me look.", {1}, 1));
  relayed_sse += relayed_stream.Chunks(Event("", {2, 3}, 3, FinishReason::kStop), 0, {relayed_call});
  read(relayed_sse, &content, &calls, &finish);
  EXPECT_EQ(content, want_content);
  EXPECT_EQ(calls, want_calls);
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(finish, want_finish);
}

// tool_choice "required": the constrained JSON list becomes the calls; cut short by
// max_tokens it stays text with finish "length". A named function streams its arguments.
TEST_F(OpenAiResponseTest, ForcedToolCalls) {
  OpenAiRequest req;
  req.endpoint = OpenAiEndpoint::kChatCompletions;
  req.input.tool_use.choice = ToolUse::Choice::kRequired;
  req.input.tool_use.tools = Json::parse(R"([{"type": "function", "function": {"name": "get"}}])");
  OpenAiResponseBuilder b(req, "chatcmpl-r", "m", 1, *tokenizer_);
  b.Accumulate(Event(R"([{"name": "get", "parameters": {"a": 1}}])", {1}, 1, FinishReason::kStop));
  Json message = Json::parse(b.Body())["choices"][0]["message"];
  ASSERT_EQ(message["tool_calls"].size(), 1u) << message;
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], R"({"a":1})");
  EXPECT_TRUE(message["content"].is_null()) << message;  // the text was the calls: not repeated
  // A named function, whitespace around its arguments: content null too.
  OpenAiRequest named_req = req;
  named_req.input.tool_use.choice = ToolUse::Choice::kNamed;
  named_req.input.tool_use.function = "get";
  OpenAiResponseBuilder whole(named_req, "chatcmpl-w", "m", 1, *tokenizer_);
  whole.Accumulate(Event("  \n{\"a\": 1}\n ", {1}, 1, FinishReason::kStop));
  message = Json::parse(whole.Body())["choices"][0]["message"];
  ASSERT_EQ(message["tool_calls"].size(), 1u) << message;
  EXPECT_TRUE(message["content"].is_null()) << message;
  OpenAiResponseBuilder cut(req, "chatcmpl-r", "m", 1, *tokenizer_);
  cut.Accumulate(Event(R"([{"name": "ge)", {1}, 1, FinishReason::kLength));
  Json body = Json::parse(cut.Body());
  EXPECT_EQ(body["choices"][0]["message"]["content"], R"([{"name": "ge)");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");

  req.input.tool_use.choice = ToolUse::Choice::kNamed;
  req.input.tool_use.function = "get";
  req.stream = true;
  OpenAiResponseBuilder named(req, "chatcmpl-n", "m", 1, *tokenizer_);
  std::string sse = named.Chunks(Event(R"({"a")", {1}, 1));
  sse += named.Chunks(Event(": 1}", {2}, 2, FinishReason::kStop));
  std::vector<std::string> p = Payloads(sse);
  ASSERT_EQ(p.size(), 4u) << sse;
  const Json first = Json::parse(p[1])["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(first["function"]["name"], "get");
  EXPECT_EQ(first["function"]["arguments"], R"({"a")");
  const Json second = Json::parse(p[2])["choices"][0];
  EXPECT_EQ(second["delta"]["tool_calls"][0]["function"]["arguments"], ": 1}");
  EXPECT_FALSE(second["delta"]["tool_calls"][0].contains("id"));
  EXPECT_EQ(second["finish_reason"], "tool_calls");
}

// n = 2: one choice per index, usage sums the completions, the stream ends (usage, then
// [DONE]) once both finished; a choice that fails ends the whole response.
TEST_F(OpenAiResponseTest, SeveralChoices) {
  OpenAiRequest req;
  req.endpoint = OpenAiEndpoint::kChatCompletions;
  req.input.n = 2;
  OpenAiResponseBuilder b(req, "chatcmpl-n", "m", 1, *tokenizer_);
  OutputEvent by_string = Event("A", {1}, 1, FinishReason::kStop);
  by_string.stop_string = "###";
  b.Accumulate(by_string, 1);
  EXPECT_FALSE(b.finished());
  OutputEvent stopped = Event("Bb", {1, 2}, 2, FinishReason::kLength);
  b.Accumulate(stopped, 0);
  ASSERT_TRUE(b.finished());
  Json body = Json::parse(b.Body());
  ASSERT_EQ(body["choices"].size(), 2u);
  EXPECT_EQ(body["choices"][0]["index"], 0);
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Bb");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["choices"][1]["message"]["content"], "A");
  EXPECT_EQ(body["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(body["choices"][1]["stop_reason"], "###");
  EXPECT_TRUE(body["choices"][0]["stop_reason"].is_null());
  EXPECT_EQ(body["usage"], Json::parse(R"({"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7})"));

  req.stream = true;
  req.include_usage = true;
  OpenAiResponseBuilder s(req, "chatcmpl-n", "m", 1, *tokenizer_);
  std::string sse = s.Chunks(Event("x", {1}, 1), 0);
  sse += s.Chunks(Event("y", {1}, 1, FinishReason::kStop), 1);
  EXPECT_EQ(sse.find("[DONE]"), std::string::npos) << "choice 0 is still running";
  sse += s.Chunks(Event("z", {2}, 2, FinishReason::kStop), 0);
  std::vector<std::string> p = Payloads(sse);
  ASSERT_EQ(p.size(), 7u) << sse;  // role 0, x, role 1, y, z, usage, [DONE]
  EXPECT_EQ(Json::parse(p[2])["choices"][0]["index"], 1);
  EXPECT_EQ(Json::parse(p[2])["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(Json::parse(p[4])["choices"][0]["index"], 0);
  EXPECT_EQ(Json::parse(p[4])["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(Json::parse(p[5])["usage"]["completion_tokens"], 3);
  EXPECT_EQ(p[6], "[DONE]");

  OpenAiResponseBuilder failing(req, "chatcmpl-f", "m", 1, *tokenizer_);
  OutputEvent full = Event("", {}, 0, FinishReason::kError);
  full.error = "the waiting queue is full";
  full.error_code = absl::StatusCode::kResourceExhausted;
  (void)failing.Chunks(Event("x", {1}, 1), 0);
  const std::string end = failing.Chunks(full, 1);
  EXPECT_TRUE(failing.finished());
  EXPECT_EQ(failing.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(end.find("the waiting queue is full"), std::string::npos) << end;
  EXPECT_NE(end.find("[DONE]"), std::string::npos) << end;
  EXPECT_EQ(failing.Chunks(Event("late", {2}, 2, FinishReason::kStop), 0), "");
}

// echo: the prompt starts the text, in the body and in each choice's first chunk.
TEST_F(OpenAiResponseTest, CompletionEcho) {
  OpenAiRequest req;
  req.endpoint = OpenAiEndpoint::kCompletions;
  req.echo = true;
  OpenAiResponseBuilder b(req, "c", "m", 0, *tokenizer_);
  b.SetEcho("Say:");
  b.Accumulate(Event(" hi", {1}, 1, FinishReason::kStop));
  EXPECT_EQ(Json::parse(b.Body())["choices"][0]["text"], "Say: hi");
  req.stream = true;
  OpenAiResponseBuilder s(req, "c", "m", 0, *tokenizer_);
  s.SetEcho("Say:");
  std::string sse = s.Chunks(Event("", {1}, 1));
  sse += s.Chunks(Event(" hi", {2}, 2, FinishReason::kStop));
  std::vector<std::string> p = Payloads(sse);
  ASSERT_EQ(p.size(), 3u) << sse;
  EXPECT_EQ(Json::parse(p[0])["choices"][0]["text"], "Say:");
  EXPECT_EQ(Json::parse(p[1])["choices"][0]["text"], " hi");
}

TEST_F(OpenAiResponseTest, CompletionStreamWithoutUsageEndsWithFinishThenDone) {
  OpenAiRequest req;
  req.endpoint = OpenAiEndpoint::kCompletions;
  req.stream = true;
  OpenAiResponseBuilder b(req, "cmpl-3", "m", 7, *tokenizer_);
  std::string sse = b.Chunks(Event("a", {64}, 1));
  sse += b.Chunks(Event("", {}, 1, FinishReason::kLength));
  std::vector<std::string> p = Payloads(sse);
  ASSERT_EQ(p.size(), 3u) << sse;
  EXPECT_EQ(Json::parse(p[0])["choices"][0]["text"], "a");
  EXPECT_EQ(Json::parse(p[1])["choices"][0]["text"], "");
  EXPECT_EQ(Json::parse(p[1])["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(p[2], "[DONE]");
}

TEST_F(OpenAiResponseTest, EngineErrorEndsTheStreamWithAnErrorEvent) {
  OpenAiRequest req;
  req.endpoint = OpenAiEndpoint::kCompletions;
  req.stream = true;
  OpenAiResponseBuilder b(req, "cmpl-4", "m", 7, *tokenizer_);
  OutputEvent e = Event("", {}, 0, FinishReason::kError);
  e.error = "worker 1 died";
  std::vector<std::string> p = Payloads(b.Chunks(e));
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(Json::parse(p[0])["error"]["message"], "worker 1 died");
  EXPECT_EQ(p[1], "[DONE]");
  OpenAiRequest plain;
  OpenAiResponseBuilder nb(plain, "cmpl-5", "m", 7, *tokenizer_);
  nb.Accumulate(e);
  EXPECT_EQ(Json::parse(nb.Body())["error"]["type"], "server_error");
}

}  // namespace
}  // namespace tpserve

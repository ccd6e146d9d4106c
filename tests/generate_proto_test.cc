// GenerateRequestFromInput against GenerateInputFromProto: OpenAI requests parsed as `serve`
// parses them come back from the proto as they went in (every field the proto carries), and
// what it cannot carry is refused naming the field. No sockets.
#include <algorithm>
#include <string>
#include <variant>
#include <vector>

#include "coordinator/api/generate_proto.h"
#include "coordinator/api/openai_json.h"
#include "coordinator/engine/field_error.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

GenerateInput Parse(OpenAiEndpoint endpoint, const std::string& body) {
  absl::StatusOr<OpenAiRequest> r = ParseOpenAiRequest(endpoint, body);
  EXPECT_TRUE(r.ok()) << r.status() << " " << body;
  return r.ok() ? r->input : GenerateInput();
}

// Every field of `a` that a GenerateRequest carries equals `b`'s.
void ExpectSameInput(const GenerateInput& a, const GenerateInput& b, const std::string& body) {
  SCOPED_TRACE(body);
  EXPECT_EQ(a.model, b.model);
  ASSERT_EQ(a.prompt.index(), b.prompt.index());
  if (const auto* chat = std::get_if<ChatPrompt>(&a.prompt)) {
    EXPECT_EQ(chat->messages, std::get<ChatPrompt>(b.prompt).messages);
    EXPECT_EQ(chat->add_generation_prompt, std::get<ChatPrompt>(b.prompt).add_generation_prompt);
  } else if (const auto* text = std::get_if<std::string>(&a.prompt)) {
    EXPECT_EQ(*text, std::get<std::string>(b.prompt));
  } else {
    EXPECT_EQ(std::get<std::vector<int32_t>>(a.prompt), std::get<std::vector<int32_t>>(b.prompt));
  }
  const SamplingParams& p = a.params;
  const SamplingParams& q = b.params;
  EXPECT_EQ(a.max_tokens_set, b.max_tokens_set);
  if (a.max_tokens_set) { EXPECT_EQ(p.max_tokens, q.max_tokens); }
  EXPECT_EQ(p.temperature, q.temperature);
  EXPECT_EQ(p.top_k, q.top_k);
  EXPECT_EQ(p.top_p, q.top_p);
  EXPECT_EQ(p.min_p, q.min_p);
  EXPECT_EQ(p.seed, q.seed);
  EXPECT_EQ(p.repetition_penalty, q.repetition_penalty);
  EXPECT_EQ(p.presence_penalty, q.presence_penalty);
  EXPECT_EQ(p.frequency_penalty, q.frequency_penalty);
  EXPECT_EQ(p.min_tokens, q.min_tokens);
  EXPECT_EQ(p.stop, q.stop);
  EXPECT_EQ(p.stop_token_ids, q.stop_token_ids);
  EXPECT_EQ(p.ignore_eos, q.ignore_eos);
  EXPECT_EQ(p.logprobs, q.logprobs);
  std::vector<std::pair<int32_t, float>> bias = p.logit_bias;  // the proto's map has no order: by id
  std::sort(bias.begin(), bias.end());
  EXPECT_EQ(bias, q.logit_bias);
  EXPECT_EQ(p.skip_special_tokens, q.skip_special_tokens);
  EXPECT_EQ(a.explicit_sampling.temperature, b.explicit_sampling.temperature);
  EXPECT_EQ(a.explicit_sampling.top_k, b.explicit_sampling.top_k);
  EXPECT_EQ(a.explicit_sampling.top_p, b.explicit_sampling.top_p);
  EXPECT_EQ(a.explicit_sampling.min_p, b.explicit_sampling.min_p);
  EXPECT_EQ(a.explicit_sampling.repetition_penalty, b.explicit_sampling.repetition_penalty);
  ASSERT_EQ(a.response_format.has_value(), b.response_format.has_value());
  if (a.response_format) {
    EXPECT_EQ(a.response_format->type, b.response_format->type);
    EXPECT_EQ(a.response_format->schema, b.response_format->schema);
  }
  EXPECT_EQ(a.tool_use.choice, b.tool_use.choice);
  EXPECT_EQ(a.tool_use.function, b.tool_use.function);
  EXPECT_EQ(a.tool_use.tools, b.tool_use.tools);
  EXPECT_EQ(a.n, b.n);
}

TEST(GenerateProtoTest, OpenAiRequestsComeBackFromTheProtoAsTheyWent) {
  const std::vector<std::pair<OpenAiEndpoint, std::string>> cases = {
      {OpenAiEndpoint::kCompletions, R"({"model": "m", "prompt": "Hello"})"},
      {OpenAiEndpoint::kCompletions, R"({"model": "m", "prompt": [1, 2, 3], "max_tokens": 7, "temperature": 0})"},
      {OpenAiEndpoint::kCompletions,
       R"({"model": "m", "prompt": ["Hi"], "top_p": 0.5, "top_k": -1, "min_p": 0.1, "seed": -3,
           "repetition_penalty": 1.2, "presence_penalty": 0.5, "frequency_penalty": -0.5, "min_tokens": 2,
           "stop": ["x", "yz"], "stop_token_ids": [5, 6], "ignore_eos": true, "logprobs": 3,
           "logit_bias": {"9": -100, "4": 2.5}, "n": 3, "skip_special_tokens": true})"},
      {OpenAiEndpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."},
           {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
           "max_completion_tokens": 9, "temperature": 0.7, "logprobs": true, "top_logprobs": 2,
           "add_generation_prompt": true, "chat_template_kwargs": {}, "stop": "!"})"},
      {OpenAiEndpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": true,
           "response_format": {"type": "json_object"}})"},
      {OpenAiEndpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
           "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "integer"}}}})"},
      {OpenAiEndpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
           "tools": [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}]})"},
      {OpenAiEndpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "tool_choice": "required",
           "tools": [{"type": "function", "function": {"name": "get"}}]})"},
      {OpenAiEndpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "tool_choice": "none",
           "tools": [{"type": "function", "function": {"name": "get"}}]})"},
      {OpenAiEndpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
           "tool_choice": {"type": "function", "function": {"name": "get"}},
           "tools": [{"type": "function", "function": {"name": "get"}}]})"},
  };
  for (const auto& [endpoint, body] : cases) {
    const GenerateInput input = Parse(endpoint, body);
    absl::StatusOr<v1::GenerateRequest> proto = GenerateRequestFromInput(input);
    ASSERT_TRUE(proto.ok()) << proto.status() << " " << body;
    absl::StatusOr<GenerateInput> back = GenerateInputFromProto(*proto);
    ASSERT_TRUE(back.ok()) << back.status() << " " << body;
    ExpectSameInput(input, *back, body);
  }
}

TEST(GenerateProtoTest, UnsetSamplingFieldsStayUnsetForTheBackendsDefaults) {
  absl::StatusOr<v1::GenerateRequest> proto =
      GenerateRequestFromInput(Parse(OpenAiEndpoint::kCompletions, R"({"model": "m", "prompt": "Hi"})"));
  ASSERT_TRUE(proto.ok()) << proto.status();
  EXPECT_EQ(proto->model(), "m");
  EXPECT_FALSE(proto->sampling().has_max_tokens());
  EXPECT_FALSE(proto->sampling().has_temperature());
  EXPECT_FALSE(proto->sampling().has_top_p());
  EXPECT_FALSE(proto->sampling().has_top_k());
  EXPECT_FALSE(proto->sampling().has_seed());
  EXPECT_FALSE(proto->sampling().has_logprobs());
  EXPECT_EQ(proto->n(), 0);
  EXPECT_EQ(proto->tool_choice(), "");
}

TEST(GenerateProtoTest, WhatTheProtoCannotCarryIsRefusedNamingTheField) {
  struct Case {
    OpenAiEndpoint endpoint;
    std::string body;
    std::string field;
    std::string message;
  };
  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  const std::vector<Case> cases = {
      {OpenAiEndpoint::kChatCompletions, R"({"model": "m", )" + user + R"(, "add_generation_prompt": false})",
       "add_generation_prompt", "'add_generation_prompt' false cannot be sent to a gRPC backend"},
      {OpenAiEndpoint::kChatCompletions,
       R"({"model": "m", )" + user + R"(, "chat_template_kwargs": {"enable_thinking": false}})",
       "chat_template_kwargs", "'chat_template_kwargs' cannot be sent to a gRPC backend"},
      {OpenAiEndpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x", "name": "bob"}]})", "messages[0].name",
       "'messages[0].name' cannot be sent to a gRPC backend (its chat messages carry \"role\" and \"content\" only)"},
      {OpenAiEndpoint::kChatCompletions,
       R"({"model": "m", "messages": [{"role": "user", "content": "x"},
           {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
            "function": {"name": "get", "arguments": "{}"}}]},
           {"role": "tool", "tool_call_id": "c", "content": "1"}]})",
       "messages[1].tool_calls", "'messages[1].tool_calls' cannot be sent to a gRPC backend"},
      {OpenAiEndpoint::kCompletions, R"({"model": "m", "prompt": "x", "skip_special_tokens": false})",
       "skip_special_tokens", "'skip_special_tokens' false cannot be sent to a gRPC backend"},
      {OpenAiEndpoint::kCompletions, R"({"model": "m", "prompt": "x", "logit_bias": {"7": 1, "07": 2}})",
       "logit_bias", "gives token id 7 twice"},
      {OpenAiEndpoint::kChatCompletions,
       R"({"model": "m", )" + user + R"(, "tool_choice": {"type": "function", "function": {"name": "auto"}},
           "tools": [{"type": "function", "function": {"name": "auto"}}]})",
       "tool_choice", "names the function \"auto\""},
  };
  for (const Case& c : cases) {
    absl::StatusOr<v1::GenerateRequest> proto = GenerateRequestFromInput(Parse(c.endpoint, c.body));
    ASSERT_FALSE(proto.ok()) << c.body;
    EXPECT_EQ(proto.status().code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_THAT(proto.status().message(), HasSubstr(c.message)) << c.body;
    EXPECT_EQ(ErrorField(proto.status()), c.field) << c.body;
  }
}

}  // namespace
}  // namespace tpserve

// grpc_to_openai.h without sockets: a GenerateRequest becomes the OpenAI body that serve's HTTP
// API parses back into the same request (or INVALID_ARGUMENT naming a field it cannot carry);
// OpenAI server-sent events, split anywhere, become GenerateResponse messages (text, finish,
// stop reason, tool calls, usage), and each way a stream can go wrong becomes a status; an HTTP
// error answer becomes the gRPC client's status. A round trip through serve's own SSE writer
// (the router's GrpcRelay, OpenAiResponseBuilder) checks the reading against what tpserve writes.
#include "coordinator/router/grpc_to_openai.h"

#include <map>
#include <string>
#include <vector>

#include "coordinator/api/generate_proto.h"
#include "coordinator/engine/field_error.h"
#include "coordinator/router/grpc_relay.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

v1::GenerateRequest TextRequest(const std::string& text) {
  v1::GenerateRequest r;
  r.set_model("routed");
  r.set_text(text);
  return r;
}

v1::GenerateRequest ChatRequest(std::vector<std::pair<std::string, std::string>> messages) {
  v1::GenerateRequest r;
  r.set_model("routed");
  for (const auto& [role, content] : messages) {
    v1::ChatMessage* m = r.mutable_chat()->add_messages();
    m->set_role(role);
    m->set_content(content);
  }
  return r;
}

// The request as serve's gRPC port reads it, written back as a GenerateRequest: the form two
// requests that mean the same are compared in.
std::string Meaning(const GenerateInput& input) {
  absl::StatusOr<v1::GenerateRequest> proto = GenerateRequestFromInput(input);
  EXPECT_TRUE(proto.ok()) << proto.status();
  return proto.ok() ? proto->ShortDebugString() : "";
}

// A text request with every sampling field tpserve.v1 has but logprobs.
v1::GenerateRequest EverySamplingField() {
  v1::GenerateRequest r = TextRequest("Once upon a time");
  v1::SamplingParams* s = r.mutable_sampling();
  s->set_max_tokens(12);
  s->set_temperature(0.7f);
  s->set_top_p(0.9f);
  s->set_top_k(40);
  s->set_min_p(0.05f);
  s->set_seed(18446744073709551615ull);  // beyond int64: sent as its bits
  s->set_repetition_penalty(1.1f);
  s->set_presence_penalty(0.5f);
  s->set_frequency_penalty(-0.25f);
  s->add_stop("\n\n");
  s->add_stop("END");
  s->add_stop_token_ids(7);
  s->set_ignore_eos(true);
  s->set_min_tokens(3);
  (*s->mutable_logit_bias())[42] = -100;
  (*s->mutable_logit_bias())[5] = 2.5f;
  r.set_n(3);
  return r;
}

TEST(GrpcToOpenAiTest, TheBodyMeansWhatTheRequestMeantToServesHttpApi) {
  std::vector<v1::GenerateRequest> requests;
  requests.push_back(TextRequest("Hello"));
  requests.push_back(EverySamplingField());
  v1::GenerateRequest ids;
  ids.set_model("routed");
  for (int id : {11, 12, 13}) ids.mutable_token_ids()->add_ids(id);
  ids.mutable_sampling()->set_temperature(0);  // explicit: not the model's default
  requests.push_back(ids);
  v1::GenerateRequest chat = ChatRequest({{"system", "Be brief."}, {"user", "Weather in Paris?"}});
  chat.set_tools_json(R"([{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}])");
  chat.set_tool_choice("weather");
  chat.mutable_response_format()->set_type(v1::ResponseFormat::TYPE_TEXT);
  chat.mutable_sampling()->set_max_tokens(20);
  requests.push_back(chat);
  v1::GenerateRequest json_schema = ChatRequest({{"user", "A name?"}});
  json_schema.mutable_response_format()->set_type(v1::ResponseFormat::TYPE_JSON_SCHEMA);
  json_schema.mutable_response_format()->set_json_schema(R"({"required":["name"],"type":"object"})");
  json_schema.set_tool_choice("none");
  requests.push_back(json_schema);
  v1::GenerateRequest json_object = TextRequest("{");
  json_object.mutable_response_format()->set_type(v1::ResponseFormat::TYPE_JSON_OBJECT);
  requests.push_back(json_object);

  for (const v1::GenerateRequest& request : requests) {
    SCOPED_TRACE(request.ShortDebugString());
    absl::StatusOr<OpenAiHttpRequest> http = GenerateToOpenAi(request, "backend-model");
    ASSERT_TRUE(http.ok()) << http.status();
    const bool is_chat = request.prompt_case() == v1::GenerateRequest::kChat;
    EXPECT_EQ(http->endpoint, is_chat ? OpenAiEndpoint::kChatCompletions : OpenAiEndpoint::kCompletions);
    EXPECT_EQ(http->path, is_chat ? "/chat/completions" : "/completions");
    absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(http->endpoint, http->body);
    ASSERT_TRUE(parsed.ok()) << parsed.status() << " in " << http->body;
    EXPECT_TRUE(parsed->stream);
    EXPECT_TRUE(parsed->include_usage);
    EXPECT_EQ(parsed->input.model, "backend-model");
    v1::GenerateRequest expected = request;
    expected.set_model("backend-model");
    absl::StatusOr<GenerateInput> input = GenerateInputFromProto(expected);
    ASSERT_TRUE(input.ok()) << input.status();
    EXPECT_EQ(Meaning(parsed->input), Meaning(*input)) << http->body;
  }
}

TEST(GrpcToOpenAiTest, TheBodyUsesOpenAisAndVllmsNames) {
  absl::StatusOr<OpenAiHttpRequest> http = GenerateToOpenAi(EverySamplingField(), "m");
  ASSERT_TRUE(http.ok()) << http.status();
  const Json body = Json::parse(http->body);
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["prompt"], "Once upon a time");
  EXPECT_EQ(body["max_tokens"], 12);
  // Floats as a client writes them, not as their float's double.
  EXPECT_THAT(http->body, HasSubstr(R"("temperature":0.7,)"));
  EXPECT_THAT(http->body, HasSubstr(R"("min_p":0.05,)"));
  EXPECT_EQ(body["seed"], -1);
  EXPECT_EQ(body["stop"], Json({"\n\n", "END"}));
  EXPECT_EQ(body["logit_bias"], Json({{"5", 2.5}, {"42", -100}}));
  EXPECT_EQ(body["top_k"], 40);
  EXPECT_EQ(body["stop_token_ids"], Json({7}));
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["min_tokens"], 3);
  EXPECT_EQ(body["n"], 3);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"], Json({{"include_usage", true}}));
  // Unset fields are left out: the backend's defaults (its model's generation config) apply,
  // as they would through serve's gRPC port.
  const Json plain = Json::parse(GenerateToOpenAi(TextRequest("Hi"), "m")->body);
  EXPECT_EQ(plain, Json::parse(R"({"model": "m", "prompt": "Hi", "stream": true,
                                   "stream_options": {"include_usage": true}})"));
  const Json chat = Json::parse(GenerateToOpenAi(ChatRequest({{"user", "Hi"}}), "m")->body);
  EXPECT_EQ(chat["messages"], Json::parse(R"([{"role": "user", "content": "Hi"}])"));
  EXPECT_FALSE(chat.contains("prompt"));
  // A backend with request_usage: false is not asked for usage.
  EXPECT_EQ(Json::parse(GenerateToOpenAi(TextRequest("Hi"), "m", /*request_usage=*/false)->body),
            Json::parse(R"({"model": "m", "prompt": "Hi", "stream": true})"));
}

TEST(GrpcToOpenAiTest, WhatTheAnswerCannotCarryOrServeWouldRefuseIsRefusedNamingTheField) {
  auto refused = [](const v1::GenerateRequest& request) {
    absl::StatusOr<OpenAiHttpRequest> http = GenerateToOpenAi(request, "m");
    EXPECT_FALSE(http.ok());
    return http.ok() ? absl::OkStatus() : http.status();
  };
  v1::GenerateRequest logprobs = TextRequest("Hi");
  logprobs.mutable_sampling()->set_logprobs(0);  // set, even to 0: the chosen tokens' logprobs
  absl::Status s = refused(logprobs);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorField(s), "sampling.logprobs");
  EXPECT_THAT(s.message(), HasSubstr("names each token by its text"));

  v1::GenerateRequest tools = TextRequest("Hi");
  tools.set_tools_json("[]");
  s = refused(tools);
  EXPECT_EQ(ErrorField(s), "tools_json");
  EXPECT_THAT(s.message(), HasSubstr("chat prompt only"));
  v1::GenerateRequest choice = TextRequest("Hi");
  choice.set_tool_choice("auto");
  EXPECT_EQ(ErrorField(refused(choice)), "tool_choice");

  v1::GenerateRequest bad_tools = ChatRequest({{"user", "Hi"}});
  bad_tools.set_tools_json("[{");
  EXPECT_EQ(ErrorField(refused(bad_tools)), "tools_json");
  v1::GenerateRequest bad_schema = ChatRequest({{"user", "Hi"}});
  bad_schema.mutable_response_format()->set_type(v1::ResponseFormat::TYPE_JSON_SCHEMA);
  EXPECT_EQ(ErrorField(refused(bad_schema)), "response_format.json_schema");  // empty
  bad_schema.mutable_response_format()->set_json_schema("{\"type\":");
  EXPECT_EQ(ErrorField(refused(bad_schema)), "response_format.json_schema");  // not JSON

  v1::GenerateRequest no_prompt;
  no_prompt.set_model("m");
  EXPECT_EQ(ErrorField(refused(no_prompt)), "prompt");
  v1::GenerateRequest no_role = ChatRequest({{"", "Hi"}});
  EXPECT_EQ(ErrorField(refused(no_role)), "chat.messages[0].role");
  v1::GenerateRequest many = TextRequest("Hi");
  many.set_n(65);
  s = refused(many);
  EXPECT_EQ(ErrorField(s), "n");
  EXPECT_THAT(s.message(), HasSubstr("between 1 and 64, got 65"));
}

// Feeds `sse` to a stream in pieces of `step` bytes, then ends it; returns the messages, and the
// first failure in `status`.
std::vector<v1::GenerateResponse> Read(OpenAiEndpoint endpoint, int n, const std::string& sse, size_t step,
                                       absl::Status* status, GenerateFromOpenAiStream* keep = nullptr) {
  GenerateFromOpenAiStream local(endpoint, n);
  GenerateFromOpenAiStream& stream = keep != nullptr ? *keep : local;
  std::vector<v1::GenerateResponse> out;
  *status = absl::OkStatus();
  for (size_t at = 0; at < sse.size(); at += step) {
    *status = stream.Feed(absl::string_view(sse).substr(at, step), &out);
    if (!status->ok()) return out;
  }
  *status = stream.End(&out);
  return out;
}

// The messages of each choice folded into one (text joined; the last message's finish, stop and
// usage; tool calls), as the client would put them together.
std::map<int, v1::GenerateResponse> Fold(const std::vector<v1::GenerateResponse>& messages) {
  std::map<int, v1::GenerateResponse> by_choice;
  for (const v1::GenerateResponse& m : messages) {
    v1::GenerateResponse& f = by_choice[m.index()];
    f.set_index(m.index());
    f.mutable_text()->append(m.text());
    f.mutable_tool_calls()->MergeFrom(m.tool_calls());
    if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      f.set_finish_reason(m.finish_reason());
      f.set_stop_string(m.stop_string());
      if (m.has_stop_token_id()) f.set_stop_token_id(m.stop_token_id());
      *f.mutable_usage() = m.usage();
    }
  }
  return by_choice;
}

constexpr char kCompletionStream[] =
    "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" there\","
    "\"logprobs\":null,\"finish_reason\":null}]}\n\n"
    ": a comment\n"
    "data: {\"id\":\"cmpl-1\",\"choices\":[{\"index\":0,\"text\":\" was\",\"finish_reason\":null}]}\r\n\r\n"
    "data: {\"id\":\"cmpl-1\",\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"stop\","
    "\"stop_reason\":\"\\n\"}]}\n\n"
    "data: {\"id\":\"cmpl-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2,"
    "\"total_tokens\":6}}\n\n"
    "data: [DONE]\n\n";

TEST(GrpcToOpenAiTest, ACompletionStreamSplitAnywhereGivesTheSameMessages) {
  absl::Status status;
  const std::vector<v1::GenerateResponse> whole =
      Read(OpenAiEndpoint::kCompletions, 1, kCompletionStream, sizeof(kCompletionStream), &status);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(whole.size(), 3u);
  EXPECT_EQ(whole[0].text(), " there");
  EXPECT_EQ(whole[0].request_id(), "cmpl-1");
  EXPECT_EQ(whole[0].finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
  EXPECT_FALSE(whole[0].has_usage());  // known at the end only
  EXPECT_EQ(whole[1].text(), " was");
  EXPECT_EQ(whole[2].finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(whole[2].stop_string(), "\n");
  EXPECT_EQ(whole[2].usage().prompt_tokens(), 4);
  EXPECT_EQ(whole[2].usage().completion_tokens(), 2);
  for (size_t step : {1, 2, 7, 64}) {
    SCOPED_TRACE(step);
    std::vector<v1::GenerateResponse> split = Read(OpenAiEndpoint::kCompletions, 1, kCompletionStream, step, &status);
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_EQ(split.size(), whole.size());
    for (size_t i = 0; i < split.size(); ++i) EXPECT_EQ(split[i].ShortDebugString(), whole[i].ShortDebugString());
  }
}

TEST(GrpcToOpenAiTest, ChatChoicesToolCallsAndStopTokens) {
  // Two choices, interleaved; choice 1 calls a tool in pieces; choice 0 stops on a token id.
  const std::string sse =
      "data: {\"id\":\"chatcmpl-9\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
      "\"finish_reason\":null}]}\n\n"
      "data: {\"id\":\"chatcmpl-9\",\"choices\":[{\"index\":1,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
      "\"finish_reason\":null}]}\n\n"
      "data: {\"id\":\"chatcmpl-9\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Sunny\"},"
      "\"finish_reason\":null}]}\n\n"
      "data: {\"id\":\"chatcmpl-9\",\"choices\":[{\"index\":1,\"delta\":{\"tool_calls\":[{\"index\":0,"
      "\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"weather\",\"arguments\":\"{\\\"ci\"}}]},"
      "\"finish_reason\":null}]}\n\n"
      "data: {\"id\":\"chatcmpl-9\",\"choices\":[{\"index\":1,\"delta\":{\"tool_calls\":[{\"index\":0,"
      "\"function\":{\"arguments\":\"ty\\\": \\\"Paris\\\"}\"}}]},\"finish_reason\":null}]}\n\n"
      "data: {\"id\":\"chatcmpl-9\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\","
      "\"stop_reason\":13}]}\n\n"
      "data: {\"id\":\"chatcmpl-9\",\"choices\":[{\"index\":1,\"delta\":{},\"finish_reason\":\"tool_calls\","
      "\"stop_reason\":null}]}\n\n"
      "data: {\"id\":\"chatcmpl-9\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":14}}\n\n"
      "data: [DONE]\n\n";
  absl::Status status;
  GenerateFromOpenAiStream stream(OpenAiEndpoint::kChatCompletions, 2);
  const std::vector<v1::GenerateResponse> messages =
      Read(OpenAiEndpoint::kChatCompletions, 2, sse, 5, &status, &stream);
  ASSERT_TRUE(status.ok()) << status;
  std::map<int, v1::GenerateResponse> folded = Fold(messages);
  ASSERT_EQ(folded.size(), 2u);
  EXPECT_EQ(folded[0].text(), "Sunny");
  EXPECT_EQ(folded[0].finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(folded[0].stop_token_id(), 13);
  EXPECT_EQ(folded[1].text(), "");
  EXPECT_EQ(folded[1].finish_reason(), v1::FINISH_REASON_TOOL_CALLS);
  ASSERT_EQ(folded[1].tool_calls_size(), 1);
  EXPECT_EQ(folded[1].tool_calls(0).id(), "call_1");
  EXPECT_EQ(folded[1].tool_calls(0).name(), "weather");
  EXPECT_EQ(folded[1].tool_calls(0).arguments(), R"({"city": "Paris"})");
  // With two choices the backend's completion tokens are not split per choice; the stream's
  // usage has them all.
  EXPECT_EQ(folded[0].usage().prompt_tokens(), 9);
  EXPECT_EQ(folded[0].usage().completion_tokens(), 0);
  ASSERT_TRUE(stream.usage().has_value());
  EXPECT_EQ(stream.usage()->completion_tokens, 14);
  // The role-only first chunks make no message.
  for (const v1::GenerateResponse& m : messages) {
    EXPECT_TRUE(!m.text().empty() || m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) << m.ShortDebugString();
  }
}

TEST(GrpcToOpenAiTest, AStreamThatGoesWrongEndsWithAStatus) {
  absl::Status status;
  const std::string chunk =
      "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n";
  // Serve's error event after the stream started (the engine failed the request).
  std::vector<v1::GenerateResponse> out =
      Read(OpenAiEndpoint::kCompletions, 1,
           chunk + "data: {\"error\":{\"message\":\"rank 1 is gone\",\"type\":\"server_error\",\"param\":null,"
                   "\"code\":\"service_unavailable\"}}\n\ndata: [DONE]\n\n",
           1000, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(), "rank 1 is gone");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text(), "a");
  Read(OpenAiEndpoint::kCompletions, 1,
       chunk + "data: {\"error\":{\"message\":\"the engine failed this request\",\"type\":\"server_error\"}}\n\n", 1000,
       &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  Read(OpenAiEndpoint::kCompletions, 1,
       "data: {\"error\":{\"message\":\"the queue is full\",\"type\":\"rate_limit_error\"}}\n\n", 1000, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  Read(OpenAiEndpoint::kCompletions, 1,
       "data: {\"error\":{\"message\":\"'temperature' must be at least 0\",\"type\":\"invalid_request_error\","
       "\"param\":\"temperature\"}}\n\n",
       1000, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorField(status), "temperature");
  // Cut short: no finish, no [DONE].
  out = Read(OpenAiEndpoint::kCompletions, 1, chunk, 1000, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("ended before choice 0 finished (no [DONE]: cut short)"));
  // Not an OpenAI stream.
  Read(OpenAiEndpoint::kCompletions, 1, "data: {\"choices\": 3}\n\n", 1000, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  Read(OpenAiEndpoint::kCompletions, 1, "data: <html>\n\n", 1000, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("not a JSON object: <html>"));
  Read(OpenAiEndpoint::kCompletions, 1, "{\"id\": \"not SSE\"}", 1000, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  Read(OpenAiEndpoint::kCompletions, 1,
       "data: {\"choices\":[{\"index\":1,\"text\":\"x\",\"finish_reason\":null}]}\n\n", 1000, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("choice 1 of 1"));
  // A finish tpserve.v1 cannot say.
  Read(OpenAiEndpoint::kChatCompletions, 1,
       "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"content_filter\"}]}\n\n", 1000, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("finish_reason \"content_filter\""));
  // Without a usage chunk the last message goes at [DONE], without usage; what follows [DONE]
  // is ignored.
  out = Read(OpenAiEndpoint::kCompletions, 1,
             chunk + "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}]}\n\n"
                     "data: [DONE]\n\ndata: {\"choices\":[{\"index\":0,\"text\":\"late\"}]}\n\n",
             3, &status);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_FALSE(out[1].has_usage());
}

TEST(GrpcToOpenAiTest, HttpErrorsBecomeTheClientsStatus) {
  const std::string url = "http://127.0.0.1:9/v1";
  absl::Status s = StatusFromHttpError(
      400, R"({"error": {"message": "'top_k' must be an integer", "type": "invalid_request_error", "param": "top_k"}})",
      url);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorField(s), "top_k");
  EXPECT_EQ(s.message(), "the backend http://127.0.0.1:9/v1 answered HTTP 400: 'top_k' must be an integer");
  s = StatusFromHttpError(404, R"({"error": {"message": "The model `x` does not exist.", "code": "model_not_found"}})",
                          url);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("The model `x` does not exist."));
  EXPECT_EQ(StatusFromHttpError(401, "{}", url).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(StatusFromHttpError(403, "", url).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(StatusFromHttpError(422, "", url).code(), absl::StatusCode::kInvalidArgument);
  s = StatusFromHttpError(418, "  I'm a teapot\n", url);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "the backend http://127.0.0.1:9/v1 answered HTTP 418: I'm a teapot");
  s = StatusFromHttpError(404, "", url);
  EXPECT_THAT(s.message(), HasSubstr("(an empty body)"));
  s = StatusFromHttpError(400, std::string(2000, 'x'), url);
  EXPECT_THAT(s.message(), HasSubstr(std::string(512, 'x') + "..."));
  EXPECT_EQ(StatusFromHttpError(204, "", url).code(), absl::StatusCode::kInternal);
}

// serve's own SSE for a request (the router's GrpcRelay writes it with serve's
// OpenAiResponseBuilder from GenerateResponse messages) read back: the same text, finish, stop
// reason, tool calls and usage per choice.
TEST(GrpcToOpenAiTest, ServesOwnStreamReadsBackAsTheMessagesItWasWrittenFrom) {
  auto message = [](int index, const std::string& text, int completion, v1::FinishReason finish = {}) {
    v1::GenerateResponse m;
    m.set_request_id("gen-7");
    m.set_index(index);
    m.set_text(text);
    m.mutable_usage()->set_prompt_tokens(6);
    m.mutable_usage()->set_completion_tokens(completion);
    m.set_finish_reason(finish);
    return m;
  };
  struct Case {
    v1::GenerateRequest request;
    std::vector<v1::GenerateResponse> messages;
  };
  std::vector<Case> cases;
  {
    Case c{TextRequest("Once"), {}};
    c.request.mutable_sampling()->add_stop("\n");
    c.messages = {message(0, " upon", 1), message(0, " a time", 3)};
    v1::GenerateResponse last = message(0, "", 4, v1::FINISH_REASON_STOP);
    last.set_stop_string("\n");
    c.messages.push_back(last);
    cases.push_back(c);
  }
  {
    Case c{ChatRequest({{"user", "Hi"}}), {}};
    c.request.set_n(2);
    c.messages = {message(0, "Hello", 1), message(1, "Hey", 1), message(1, " you", 2, v1::FINISH_REASON_LENGTH)};
    v1::GenerateResponse call = message(0, "", 5, v1::FINISH_REASON_TOOL_CALLS);
    v1::ToolCall* t = call.add_tool_calls();
    t->set_id("call_7");
    t->set_name("weather");
    t->set_arguments(R"({"city":"Paris"})");
    c.messages.push_back(call);
    c.request.set_tools_json(R"([{"type": "function", "function": {"name": "weather"}}])");
    cases.push_back(c);
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.request.ShortDebugString());
    absl::StatusOr<OpenAiHttpRequest> http = GenerateToOpenAi(c.request, "backend-model");
    ASSERT_TRUE(http.ok()) << http.status();
    absl::StatusOr<GrpcRelayRequest> relayed = BuildGrpcRelayRequest(http->endpoint, http->body, "backend-model");
    ASSERT_TRUE(relayed.ok()) << relayed.status();
    GrpcRelay relay(relayed->openai, "backend-model", 1700000000);
    std::string sse;
    for (const v1::GenerateResponse& m : c.messages) sse += relay.OnMessage(m);
    ASSERT_TRUE(relay.End(absl::OkStatus()).failure.ok());
    absl::Status status;
    GenerateFromOpenAiStream stream(http->endpoint, c.request.n());
    const std::vector<v1::GenerateResponse> read = Read(http->endpoint, c.request.n(), sse, 9, &status, &stream);
    ASSERT_TRUE(status.ok()) << status << "\n" << sse;
    std::map<int, v1::GenerateResponse> got = Fold(read);
    std::map<int, v1::GenerateResponse> want = Fold(c.messages);
    ASSERT_EQ(got.size(), want.size()) << sse;
    int64_t completion = 0;
    for (auto& [index, w] : want) {
      completion += w.usage().completion_tokens();
      if (want.size() > 1) w.mutable_usage()->clear_completion_tokens();  // not split per choice
      EXPECT_EQ(got[index].ShortDebugString(), w.ShortDebugString()) << sse;
    }
    ASSERT_TRUE(stream.usage().has_value());
    EXPECT_EQ(stream.usage()->prompt_tokens, 6);
    EXPECT_EQ(stream.usage()->completion_tokens, completion);
  }
}

}  // namespace
}  // namespace tpserve

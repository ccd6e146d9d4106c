// GrpcRelay (coordinator/router/grpc_relay.h) without sockets: an OpenAI body becomes the
// GenerateRequest for the backend's model (or a 400 naming the field); scripted
// GenerateResponse streams become OpenAI bodies and SSE chunks; each way a call can end
// becomes what the client gets (an HTTP error, an error event, or the router's failover).
#include "coordinator/router/grpc_relay.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "coordinator/engine/field_error.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

OpenAiRequest Request(OpenAiEndpoint endpoint, const std::string& body) {
  absl::StatusOr<GrpcRelayRequest> r = BuildGrpcRelayRequest(endpoint, body, "backend-model");
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->openai : OpenAiRequest();
}

v1::GenerateResponse Message(const std::string& text, std::vector<int32_t> ids, int completion_tokens,
                             v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED, int index = 0) {
  v1::GenerateResponse m;
  m.set_request_id(index == 0 ? "gen-abc" : "gen-abc-" + std::to_string(index));
  m.set_index(index);
  m.set_text(text);
  for (int32_t id : ids) m.add_token_ids(id);
  m.mutable_usage()->set_prompt_tokens(5);
  m.mutable_usage()->set_completion_tokens(completion_tokens);
  m.set_finish_reason(finish);
  return m;
}

// The JSON payloads of an SSE text ("[DONE]" as a string).
std::vector<Json> Events(const std::string& sse) {
  std::vector<Json> out;
  for (absl::string_view event : absl::StrSplit(sse, "\n\n", absl::SkipEmpty())) {
    EXPECT_TRUE(absl::ConsumePrefix(&event, "data: ")) << event;
    out.push_back(event == "[DONE]" ? Json("[DONE]") : Json::parse(event));
  }
  return out;
}

TEST(GrpcRelayTest, BuildsTheRequestForTheBackendsModelOrRefusesIt) {
  absl::StatusOr<GrpcRelayRequest> r = BuildGrpcRelayRequest(
      OpenAiEndpoint::kChatCompletions,
      R"({"model": "routed", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "stream": true})",
      "backend-model");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->proto.model(), "backend-model");
  EXPECT_EQ(r->proto.chat().messages(0).content(), "Hi");
  EXPECT_EQ(r->proto.sampling().max_tokens(), 3);
  EXPECT_TRUE(r->openai.stream);

  // What serve itself refuses, with serve's message and field.
  r = BuildGrpcRelayRequest(OpenAiEndpoint::kCompletions, R"({"model": "m", "prompt": "x", "guided_json": {}})", "m");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorField(r.status()), "guided_json");
  // What the proto cannot carry (generate_proto_test has the list), and an echo the router
  // cannot write without a tokenizer.
  r = BuildGrpcRelayRequest(OpenAiEndpoint::kCompletions, R"({"model": "m", "prompt": [1, 2], "echo": true})", "m");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorField(r.status()), "echo");
  EXPECT_THAT(r.status().message(), HasSubstr("cannot be relayed to a gRPC backend"));
}

TEST(GrpcRelayTest, WholeCompletionWithStopReasonAndLogprobs) {
  GrpcRelay relay(Request(OpenAiEndpoint::kCompletions, R"({"model": "m", "prompt": "Say", "logprobs": 1, "stop": ["!"]})"),
                  "backend-model", 42);
  v1::GenerateResponse first = Message("Hel", {7}, 1);
  v1::TokenLogprob* lp = first.add_logprobs();
  lp->set_token_id(7);
  lp->set_token("Hel");
  lp->set_logprob(-0.5f);
  v1::TopLogprob* top = lp->add_top();
  top->set_token_id(8);
  top->set_token("He");
  top->set_logprob(-1.5f);
  EXPECT_EQ(relay.OnMessage(first), "");
  v1::GenerateResponse last = Message("lo", {9}, 2, v1::FINISH_REASON_STOP);
  last.set_stop_string("!");
  v1::TokenLogprob* lp2 = last.add_logprobs();
  lp2->set_token_id(9);
  lp2->set_token("lo");
  lp2->set_logprob(-0.25f);
  EXPECT_EQ(relay.OnMessage(last), "");
  GrpcRelayEnding end = relay.End(absl::OkStatus());
  ASSERT_TRUE(end.failure.ok());
  EXPECT_EQ(end.http_status, 200);
  EXPECT_EQ(Json::parse(end.body), Json::parse(R"({
    "id": "cmpl-abc", "object": "text_completion", "created": 42, "model": "backend-model", "system_fingerprint": null,
    "choices": [{"index": 0, "text": "Hello", "finish_reason": "stop", "stop_reason": "!",
                 "logprobs": {"tokens": ["Hel", "lo"], "token_logprobs": [-0.5, -0.25],
                              "top_logprobs": [{"He": -1.5, "Hel": -0.5}, {"lo": -0.25}], "text_offset": [0, 3]}}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}})"));

  // echo: the router writes the prompt's text, as serve does.
  GrpcRelay echo(Request(OpenAiEndpoint::kCompletions, R"({"model": "m", "prompt": "Say", "echo": true})"), "m", 1);
  echo.OnMessage(Message("lo", {9}, 1, v1::FINISH_REASON_LENGTH));
  EXPECT_EQ(Json::parse(echo.End(absl::OkStatus()).body)["choices"][0]["text"], "Saylo");
}

TEST(GrpcRelayTest, StreamedChatChunksAsMessagesArrive) {
  GrpcRelay relay(Request(OpenAiEndpoint::kChatCompletions,
                          R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": true,
                              "stream_options": {"include_usage": true}})"),
                  "backend-model", 7);
  std::vector<Json> first = Events(relay.OnMessage(Message("Hel", {1}, 1)));
  ASSERT_EQ(first.size(), 2u);  // the role chunk, then the text
  EXPECT_EQ(first[0]["choices"][0]["delta"], Json::parse(R"({"role": "assistant", "content": ""})"));
  EXPECT_EQ(first[1]["id"], "chatcmpl-abc");
  EXPECT_EQ(first[1]["object"], "chat.completion.chunk");
  EXPECT_EQ(first[1]["choices"][0]["delta"]["content"], "Hel");
  std::vector<Json> last = Events(relay.OnMessage(Message("lo", {2}, 2, v1::FINISH_REASON_LENGTH)));
  ASSERT_EQ(last.size(), 3u);
  EXPECT_EQ(last[0]["choices"][0]["delta"]["content"], "lo");
  EXPECT_EQ(last[0]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(last[1]["usage"]["total_tokens"], 7);
  EXPECT_EQ(last[2], "[DONE]");
  GrpcRelayEnding end = relay.End(absl::OkStatus());
  EXPECT_TRUE(end.failure.ok());
  EXPECT_EQ(end.body, "");
}

TEST(GrpcRelayTest, ChoicesAndRelayedToolCalls) {
  GrpcRelay relay(Request(OpenAiEndpoint::kChatCompletions,
                          R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "n": 2,
                              "tools": [{"type": "function", "function": {"name": "get"}}]})"),
                  "m", 1);
  relay.OnMessage(Message("a", {1}, 1));
  relay.OnMessage(Message("b", {1}, 1, v1::FINISH_REASON_LENGTH, 1));
  EXPECT_EQ(relay.End(absl::OkStatus()).failure.code(), absl::StatusCode::kUnavailable)
      << "choice 0 never finished: the backend broke off";
  v1::GenerateResponse call = Message("", {2}, 2, v1::FINISH_REASON_TOOL_CALLS);
  v1::ToolCall* c = call.add_tool_calls();
  c->set_id("call_1");
  c->set_name("get");
  c->set_arguments(R"({"city":"Paris"})");
  relay.OnMessage(call);
  GrpcRelayEnding end = relay.End(absl::OkStatus());
  ASSERT_TRUE(end.failure.ok());
  const Json body = Json::parse(end.body);
  EXPECT_EQ(body["choices"][0]["message"], Json::parse(R"({"role": "assistant", "content": "a",
      "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get", "arguments": "{\"city\":\"Paris\"}"}}]})"));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(body["choices"][1]["message"]["content"], "b");
  EXPECT_EQ(body["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 3);
}

// A call refused before any message: the HTTP error serve answers (429: the router's "busy";
// 500: its failover); a server that broke or cannot be reached: the router's failover.
TEST(GrpcRelayTest, EndingsBeforeAnyMessage) {
  const OpenAiRequest request = Request(OpenAiEndpoint::kCompletions, R"({"model": "m", "prompt": "x"})");
  struct Case {
    absl::Status status;
    int http_status;  // 0: a failure
  };
  for (const Case& c : {Case{absl::InvalidArgumentError("temperature must be >= 0"), 400},
                        Case{absl::NotFoundError("model x is not served"), 404},
                        Case{absl::UnauthenticatedError("no key"), 401},
                        Case{absl::ResourceExhaustedError("the queue is full"), 429},
                        Case{absl::InternalError("boom"), 500}, Case{absl::UnimplementedError("no such method"), 500},
                        Case{absl::UnavailableError("failed to connect to all addresses"), 0},
                        Case{absl::DeadlineExceededError("late"), 0}, Case{absl::CancelledError("gone"), 0}}) {
    GrpcRelay relay(request, "m", 1);
    GrpcRelayEnding end = relay.End(c.status);
    if (c.http_status == 0) {
      EXPECT_EQ(end.failure, c.status);
      continue;
    }
    EXPECT_TRUE(end.failure.ok()) << c.status;
    EXPECT_EQ(end.http_status, c.http_status) << c.status;
    EXPECT_EQ(Json::parse(end.body)["error"]["message"], std::string(c.status.message()));
  }
  GrpcRelay relay(request, "m", 1);
  EXPECT_EQ(relay.End(absl::OkStatus()).failure.code(), absl::StatusCode::kUnavailable);
}

// After the first message: the engine's failure is written as serve writes it (an error
// event and [DONE]; a whole response's 500); a broken server is the router's to report.
TEST(GrpcRelayTest, EndingsAfterTheFirstMessage) {
  const std::string body = R"({"model": "m", "prompt": "x", "stream": true})";
  GrpcRelay streamed(Request(OpenAiEndpoint::kCompletions, body), "m", 1);
  streamed.OnMessage(Message("a", {1}, 1));
  GrpcRelayEnding end = streamed.End(absl::InternalError("the engine failed this request"));
  ASSERT_TRUE(end.failure.ok());
  std::vector<Json> events = Events(end.body);
  ASSERT_EQ(events.size(), 2u) << end.body;
  EXPECT_EQ(events[0]["error"]["message"], "the engine failed this request");
  EXPECT_EQ(events[1], "[DONE]");

  GrpcRelay broken(Request(OpenAiEndpoint::kCompletions, body), "m", 1);
  broken.OnMessage(Message("a", {1}, 1));
  EXPECT_EQ(broken.End(absl::UnavailableError("Socket closed")).failure.code(), absl::StatusCode::kUnavailable);

  GrpcRelay whole(Request(OpenAiEndpoint::kCompletions, R"({"model": "m", "prompt": "x"})"), "m", 1);
  whole.OnMessage(Message("a", {1}, 1));
  end = whole.End(absl::InternalError("the engine failed this request"));
  ASSERT_TRUE(end.failure.ok());
  EXPECT_EQ(end.http_status, 500);
  EXPECT_EQ(Json::parse(end.body)["error"]["message"], "the engine failed this request");
}

}  // namespace
}  // namespace tpserve

// The HTTP server end to end (tests/frontend_fixture.h): completions and chat, JSON and SSE,
// concurrency, disconnects, 400/404/429/503, /health, /v1/models, /metrics as Prometheus text
// under vLLM's names, latencies from the front end's arrival, HTTP responses by route.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/frontend_fixture.h"
#include "tests/raw_http_client.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

TEST_F(FrontendTest, HttpCompletion) {
  StartServers();
  HttpResult r = Post("/v1/completions", R"({"model": "fake-model", "prompt": "Hello world", "max_tokens": 4})");
  ASSERT_EQ(r.status, 200) << r.body;
  Json body = Json::parse(r.body);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["model"], "fake-model");
  EXPECT_THAT(body["id"].get<std::string>(), ::testing::StartsWith("cmpl-"));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  std::vector<int32_t> prompt = tokenizer_->Encode("Hello world", true);
  std::vector<int32_t> echoed;
  for (int i = 0; i < 4; ++i) echoed.push_back(prompt[i % prompt.size()]);
  EXPECT_EQ(body["choices"][0]["text"], tokenizer_->Decode(echoed, true));
  EXPECT_EQ(body["usage"]["completion_tokens"], 4);
  EXPECT_EQ(body["usage"]["prompt_tokens"], prompt.size());
}

TEST_F(FrontendTest, HttpCompletionStreamsServerSentEvents) {
  StartServers();
  HttpResult r = Post("/v1/completions", R"({"prompt": [5, 6, 7], "max_tokens": 6, "stream": true,
                                             "stream_options": {"include_usage": true}, "logprobs": 1})");
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<std::string> payloads = SsePayloads(r.body);
  ASSERT_GE(payloads.size(), 3u);
  EXPECT_EQ(payloads.back(), "[DONE]");
  Json usage = Json::parse(payloads[payloads.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 6);
  EXPECT_EQ(usage["usage"]["total_tokens"], 9);
  int tokens = 0;
  std::string finish;
  for (size_t i = 0; i + 2 < payloads.size(); ++i) {
    Json chunk = Json::parse(payloads[i]);
    EXPECT_EQ(chunk["object"], "text_completion");
    tokens += chunk["choices"][0]["logprobs"]["tokens"].size();
    if (!chunk["choices"][0]["finish_reason"].is_null()) finish = chunk["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(tokens, 6);
  EXPECT_EQ(finish, "length");
}

TEST_F(FrontendTest, HttpChatCompletionStreamingAndNot) {
  StartServers();
  HttpResult r = Post("/v1/chat/completions",
                      R"({"messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": 3})");
  ASSERT_EQ(r.status, 200) << r.body;
  Json body = Json::parse(r.body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["usage"]["completion_tokens"], 3);

  r = Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"}], "stream": true})");
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<std::string> payloads = SsePayloads(r.body);
  ASSERT_GE(payloads.size(), 3u);
  EXPECT_EQ(Json::parse(payloads[0])["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(payloads.back(), "[DONE]");
  EXPECT_EQ(Json::parse(payloads[payloads.size() - 2])["choices"][0]["finish_reason"], "length");
  // Without max_tokens a chat request may use the rest of the context.
  EXPECT_EQ(engine_->last_request().params.max_tokens,
            256 - static_cast<int>(engine_->last_request().prompt_ids.size()));
}

TEST_F(FrontendTest, HttpManyConcurrentStreams) {
  StartServers();
  constexpr int kClients = 24;
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      HttpResult r = Post("/v1/completions", absl::StrCat(R"({"prompt": "client )", i,
                                                          R"(", "max_tokens": 20, "stream": true})"));
      if (r.status == 200 && absl::EndsWith(r.body, "data: [DONE]\n\n") &&
          r.body.find("\"finish_reason\":\"length\"") != std::string::npos) {
        ++ok;
      } else {
        ADD_FAILURE() << "client " << i << ": HTTP " << r.status << ": " << r.body;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), kClients);
  EXPECT_EQ(engine_->cancelled(), 0);
  EXPECT_EQ(engine_->submitted(), kClients);
}

TEST_F(FrontendTest, HttpStreamingClientDisconnectCancels) {
  StartServers(Slow());
  httplib::Client client("127.0.0.1", http_->port());
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}};
  req.body = R"({"prompt": "Hello", "max_tokens": 200, "stream": true})";
  int chunks = 0;
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 2; };
  httplib::Response res;
  httplib::Error error;
  client.send(req, res, error);  // returns once the receiver says stop and the socket closes
  EXPECT_EQ(chunks, 2);
  EXPECT_TRUE(engine_->WaitForCancelled(1, absl::Seconds(10)));
}

TEST_F(FrontendTest, HttpNonStreamingClientDisconnectCancels) {
  StartServers(Slow());
  const std::string body = R"({"prompt": "Hello", "max_tokens": 200})";
  const std::string request = absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                                           "Content-Type: application/json\r\nContent-Length: ", body.size(),
                                           "\r\n\r\n", body);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(http_->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  ASSERT_TRUE(Eventually([&] { return engine_->submitted() == 1; }));
  close(fd);
  EXPECT_TRUE(engine_->WaitForCancelled(1, absl::Seconds(10)));
}

TEST_F(FrontendTest, HttpErrors) {
  StartServers();
  auto error_of = [](const HttpResult& r) { return Json::parse(r.body)["error"]; };

  HttpResult r = Post("/v1/completions", R"({"prompt": "x",)");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(error_of(r)["message"].get<std::string>(), HasSubstr("not valid JSON"));

  r = Post("/v1/completions", R"({"prompt": "x", "temperature": "hot"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_of(r)["param"], "temperature");
  EXPECT_EQ(error_of(r)["type"], "invalid_request_error");

  r = Post("/v1/completions", R"({"prompt": "x", "top_p": 2})");  // the engine's check
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(error_of(r)["message"].get<std::string>(), HasSubstr("top_p"));

  r = Post("/v1/completions", R"({"prompt": "x", "max_tokens": 0})");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(error_of(r)["message"].get<std::string>(), HasSubstr("max_tokens"));

  r = Post("/v1/completions", R"({"prompt": "", "max_tokens": 2})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_of(r)["param"], "prompt");

  r = Post("/v1/completions", R"({"prompt": "x", "max_tokens": 300})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_of(r)["param"], "max_tokens");
  EXPECT_THAT(error_of(r)["message"].get<std::string>(), HasSubstr("max_model_len (256)"));

  r = Post("/v1/completions", R"({"prompt": "x", "n": 65})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(error_of(r)["param"], "n");

  r = Post("/v1/completions", R"({"prompt": "x", "model": "gpt-4"})");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(error_of(r)["code"], "model_not_found");
  EXPECT_THAT(error_of(r)["message"].get<std::string>(), HasSubstr("served models: fake-model"));

  r = Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "model": "gpt-4"})");
  EXPECT_EQ(r.status, 404);

  r = Post("/v1/completions", absl::StrCat(R"({"prompt": ")", std::string(100 << 10, 'a'), R"("})"));
  EXPECT_EQ(r.status, 413);
  EXPECT_THAT(error_of(r)["message"].get<std::string>(), HasSubstr("exceeds the limit of 65536 bytes"));

  r = Get("/v1/nothing");
  EXPECT_EQ(r.status, 404);
  EXPECT_THAT(error_of(r)["message"].get<std::string>(), HasSubstr("no route for GET /v1/nothing"));

  engine_->SetSubmitError(absl::ResourceExhaustedError("waiting queue is full"));
  r = Post("/v1/completions", R"({"prompt": "x"})");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(error_of(r)["message"], "waiting queue is full");
  r = Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "stream": true})");
  EXPECT_EQ(r.status, 429);
}

// A body that stops short of its Content-Length is answered 408, in the API's error shape,
// when --http-body-timeout passes; then the connection closes.
TEST_F(FrontendTest, HttpStalledBodyGets408) {
  http_options_.transport.body_timeout = absl::Milliseconds(300);
  StartServers();
  RawHttpClient c(http_->port());
  ASSERT_TRUE(c.Send("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     "Content-Length: 100\r\n\r\n{\"prompt\": \"x\""));
  absl::StatusOr<RawHttpResponse> r = c.ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 408);
  EXPECT_EQ(r->Header("connection"), "close");
  const Json error = Json::parse(r->body)["error"];
  EXPECT_EQ(error["type"], "invalid_request_error");
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("--http-body-timeout"));
  EXPECT_TRUE(error.contains("param") && error.contains("code"));
  EXPECT_TRUE(c.WaitClosed());
}

// A request that fails after admission: a non-streaming one gets the 5xx an SDK raises
// (503 when the server cut it or lost a rank, 500 when the engine failed it), never 200; a stream, whose 200
// went out with its first event, ends with an error event and [DONE].
TEST_F(FrontendTest, HttpFailureAfterAdmission) {
  StartServers(Slow());
  struct Case {
    FinishReason reason;
    const char* error;
    int status;
    absl::StatusCode error_code = absl::StatusCode::kInternal;
  };
  for (const Case& c : {Case{FinishReason::kCancelled, "the server shut down before the request finished", 503},
                        Case{FinishReason::kError, "the model step failed: rank 1 is gone", 500},
                        Case{FinishReason::kError, "rank 1 of 2 (host h) is gone: the job is stopping", 503,
                             absl::StatusCode::kUnavailable}}) {
    const int before = engine_->submitted();
    HttpResult r;
    std::thread client([&] { r = Post("/v1/completions", R"({"prompt": "Hello", "max_tokens": 200})"); });
    ASSERT_TRUE(Eventually([&] { return engine_->submitted() == before + 1; }));
    engine_->EndAll(c.reason, c.error, c.error_code);
    client.join();
    EXPECT_EQ(r.status, c.status) << r.body;
    EXPECT_EQ(Json::parse(r.body)["error"]["message"], c.error);

    r = {};
    std::thread streamer(
        [&] { r = Post("/v1/completions", R"({"prompt": "Hello", "max_tokens": 200, "stream": true})"); });
    ASSERT_TRUE(Eventually([&] { return engine_->submitted() == before + 2; }));
    engine_->EndAll(c.reason, c.error, c.error_code);
    streamer.join();
    ASSERT_EQ(r.status, 200) << r.body;
    std::vector<std::string> payloads = SsePayloads(r.body);
    ASSERT_GE(payloads.size(), 2u);
    EXPECT_EQ(payloads.back(), "[DONE]");
    EXPECT_EQ(Json::parse(payloads[payloads.size() - 2])["error"]["message"], c.error);
  }
}

// Rendering and tokenizing run on a bounded pool: one request more than it holds is a 429,
// and the I/O thread keeps answering meanwhile.
TEST_F(FrontendTest, HttpRenderQueueLimit) {
  http_options_.frontend.render_threads = 1;
  http_options_.frontend.max_pending_renders = 1;
  StartServers();
  absl::Notification gate;
  engine_->SetSubmitGate(&gate);
  HttpResult first;
  std::thread a([&] { first = Post("/v1/completions", R"({"prompt": "a", "max_tokens": 2})"); });
  ASSERT_TRUE(Eventually([&] { return engine_->submits_waiting() == 1; }));  // a holds the render thread
  // b and c: one waits in the queue, the other finds it full.
  HttpResult rest[2];
  std::atomic<int> answered{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 2; ++i) {
    clients.emplace_back([&, i] {
      rest[i] = Post("/v1/completions", R"({"prompt": "b", "max_tokens": 2, "stream": true})");
      ++answered;
    });
  }
  ASSERT_TRUE(Eventually([&] { return answered.load() == 1; }));
  const HttpResult& refused = rest[0].status == 429 ? rest[0] : rest[1];
  ASSERT_EQ(refused.status, 429) << rest[0].body << rest[1].body;
  EXPECT_THAT(Json::parse(refused.body)["error"]["message"].get<std::string>(), HasSubstr("--max-pending-renders"));
  EXPECT_EQ(Get("/health").status, 200);  // the I/O thread answers while the pool is full
  engine_->SetSubmitGate(nullptr);
  gate.Notify();
  a.join();
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(rest[0].status + rest[1].status, 200 + 429);
}

TEST_F(FrontendTest, HttpModelByIdVersionAndMethods) {
  StartServers({}, {"alias-a", "alias-b"});
  HttpResult r = Get("/v1/models/alias-b");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body)["id"], "alias-b");
  EXPECT_EQ(Json::parse(r.body)["object"], "model");
  r = Get("/v1/models/gpt-4");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(Json::parse(r.body)["error"]["code"], "model_not_found");
  r = Get("/version");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(Json::parse(r.body)["version"], "test");
  r = Get("/v1/completions");
  EXPECT_EQ(r.status, 405);
  EXPECT_THAT(Json::parse(r.body)["error"]["message"].get<std::string>(), HasSubstr("use POST"));
  // A GET route asked with another method names GET, whatever the method was.
  httplib::Client client("127.0.0.1", http_->port());
  for (const char* path : {"/v1/models", "/version", "/metrics", "/v1/models/alias-a"}) {
    auto deleted = client.Delete(path);
    ASSERT_TRUE(deleted) << path;
    EXPECT_EQ(deleted->status, 405) << path;
    EXPECT_EQ(deleted->get_header_value("Allow"), "GET") << path;
    EXPECT_THAT(deleted->body, HasSubstr("use GET")) << path;
  }
  EXPECT_EQ(Post("/v1/models/alias-a", "{}").status, 405);
}

TEST_F(FrontendTest, HttpModelIdIsPercentDecoded) {
  // A path-like model name, as a checkpoint directory makes it: clients encode the "/".
  StartServers({}, {"/models/org/m-1"});
  HttpResult r = Get("/v1/models/%2Fmodels%2Forg%2Fm%2D1");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body)["id"], "/models/org/m-1");
  EXPECT_EQ(Get("/v1/models//models/org/m-1").status, 200);  // unencoded too
  EXPECT_EQ(Get("/v1/models/%2Fmodels%2Forg%2Fm-2").status, 404);
  EXPECT_EQ(Get("/v1/models/%zz").status, 404);  // a malformed escape is the text itself
}

// --api-key: every route but /health needs "Authorization: Bearer KEY" with one of the keys; a
// missing or wrong key is a 401 in OpenAI's error shape (code "invalid_api_key") with
// WWW-Authenticate, and no request reaches the engine.
TEST_F(FrontendTest, HttpApiKeys) {
  http_options_.frontend.api_keys = {"key-one", "key-two"};
  StartServers();
  struct Reply {
    int status = -1;
    std::string body;
    std::string www_authenticate;
  };
  auto send = [&](const std::string& method, const std::string& path, const std::string& authorization,
                  const std::string& body = "") {
    httplib::Client client("127.0.0.1", http_->port());
    client.set_read_timeout(60, 0);
    httplib::Headers headers;
    if (!authorization.empty()) headers.emplace("Authorization", authorization);
    httplib::Result res = method == "GET" ? client.Get(path.c_str(), headers)
                                          : client.Post(path.c_str(), headers, body, "application/json");
    if (!res) return Reply{-1, httplib::to_string(res.error()), ""};
    return Reply{res->status, res->body, res->get_header_value("WWW-Authenticate")};
  };
  const std::string completion = R"({"prompt": "Hello", "max_tokens": 2})";
  const std::string chat = R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})";

  for (const std::string& authorization :
       {std::string(), std::string("Bearer key-three"), std::string("Bearer key-on"), std::string("Bearer key-one2"),
        std::string("Basic a2V5LW9uZQ=="), std::string("key-one")}) {
    Reply r = send("POST", "/v1/completions", authorization, completion);
    EXPECT_EQ(r.status, 401) << "Authorization: " << authorization;
    EXPECT_EQ(r.www_authenticate, "Bearer");
    Json error = Json::parse(r.body)["error"];
    EXPECT_EQ(error["type"], "invalid_request_error");
    EXPECT_EQ(error["code"], "invalid_api_key");
    EXPECT_THAT(error["message"].get<std::string>(), ::testing::Not(HasSubstr("key-one")));
  }
  EXPECT_THAT(Json::parse(send("POST", "/v1/completions", "", completion).body)["error"]["message"].get<std::string>(),
              HasSubstr("Authorization: Bearer <key>"));
  EXPECT_EQ(send("POST", "/v1/chat/completions", "", chat).status, 401);
  EXPECT_EQ(engine_->submitted(), 0);

  EXPECT_EQ(send("POST", "/v1/completions", "Bearer key-one", completion).status, 200);
  EXPECT_EQ(send("POST", "/v1/chat/completions", "bearer key-two", chat).status, 200);
  EXPECT_EQ(engine_->submitted(), 2);

  // /health is open; every other route, unknown ones included, needs the key.
  EXPECT_EQ(send("GET", "/health", "").status, 200);
  EXPECT_EQ(send("GET", "/health", "Bearer wrong").status, 200);
  for (const char* path : {"/metrics", "/v1/models", "/v1/models/fake-model", "/version", "/v1/nothing"}) {
    EXPECT_EQ(send("GET", path, "").status, 401) << path;
    EXPECT_EQ(send("GET", path, "Bearer nope").status, 401) << path;
    EXPECT_EQ(send("GET", path, "Bearer key-two").status, std::string(path) == "/v1/nothing" ? 404 : 200) << path;
  }
}

// A chat message's role must be one the chat templates are written for: an unknown one is a
// 400 naming the message and the roles allowed, before the template runs.
TEST_F(FrontendTest, HttpChatRefusesUnknownRoles) {
  StartServers();
  HttpResult r = Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"},
      {"role": "wizard", "content": "abracadabra"}], "max_tokens": 2})");
  ASSERT_EQ(r.status, 400) << r.body;
  Json error = Json::parse(r.body)["error"];
  EXPECT_EQ(error["param"], "messages[1].role");
  EXPECT_EQ(error["type"], "invalid_request_error");
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("\"wizard\""));
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("system, user, assistant, tool"));
  r = Post("/v1/chat/completions", R"({"messages": [{"role": "developer", "content": "Be brief"}], "max_tokens": 2})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(Json::parse(r.body)["error"]["message"].get<std::string>(), HasSubstr("as \"system\""));
  r = Post("/v1/chat/completions", R"({"messages": [{"role": "", "content": "x"}], "max_tokens": 2})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(engine_->submitted(), 0);

  // Every allowed role, in one conversation.
  r = Post("/v1/chat/completions", R"({"messages": [{"role": "system", "content": "Be brief"},
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                            "function": {"name": "get", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
      {"role": "user", "content": "Thanks"}], "max_tokens": 2})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(engine_->submitted(), 1);
}

TEST_F(FrontendTest, HttpHealthAndModels) {
  StartServers({}, {"alias-a", "alias-b"});
  EXPECT_EQ(Get("/health").status, 200);
  engine_->SetReady(false);
  HttpResult r = Get("/health");
  EXPECT_EQ(r.status, 503);
  EXPECT_THAT(r.body, HasSubstr("not ready"));
  EXPECT_EQ(Post("/v1/completions", R"({"prompt": "x"})").status, 503);
  engine_->SetReady(true);
  EXPECT_EQ(Get("/health").status, 200);

  r = Get("/v1/models");
  ASSERT_EQ(r.status, 200);
  Json models = Json::parse(r.body);
  ASSERT_EQ(models["data"].size(), 2u);
  EXPECT_EQ(models["data"][0]["id"], "alias-a");
  EXPECT_EQ(models["data"][1]["max_model_len"], 256);

  r = Post("/v1/completions", R"({"prompt": "x", "model": "alias-b", "max_tokens": 1})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body)["model"], "alias-b");
  r = Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})");
  EXPECT_EQ(Json::parse(r.body)["model"], "alias-a");  // the default
}

// Checks the text exposition format line by line; returns each sample's value by its
// name and labels, e.g. "vllm:num_requests_running{model_name=\"fake-model\",engine=\"0\"}".
std::map<std::string, double> ParsePrometheus(const std::string& text) {
  static const std::regex kHelp(R"(# HELP [a-zA-Z_:][a-zA-Z0-9_:]* .*)");
  static const std::regex kType(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped))");
  static const std::regex kSample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="(?:\\.|[^"\\])*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:\\.|[^"\\])*")*\})? ([^ ]+))");
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
  EXPECT_TRUE(absl::EndsWith(text, "\n"));
  for (absl::string_view line_view : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const std::string line(line_view);
    std::smatch m;
    if (std::regex_match(line, kHelp)) continue;
    if (std::regex_match(line, m, kType)) {
      types[m[1]] = m[2];
      continue;
    }
    if (!std::regex_match(line, m, kSample)) {
      ADD_FAILURE() << "not Prometheus text: " << line;
      continue;
    }
    std::string family = m[1];
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      if (types.count(family) == 0 && absl::EndsWith(family, suffix)) {
        family = family.substr(0, family.size() - strlen(suffix));
      }
    }
    EXPECT_EQ(types.count(family), 1u) << "sample before its # TYPE: " << line;
    const std::string value = m[3];
    double v = 0;
    if (value == "+Inf") {
      v = INFINITY;
    } else {
      char* end = nullptr;
      v = std::strtod(value.c_str(), &end);
      EXPECT_EQ(*end, '\0') << "bad value: " << line;
    }
    samples[absl::StrCat(std::string(m[1]), std::string(m[2]))] = v;
  }
  return samples;
}

// The value of each sample in `text` by its name and labels as rendered.
class Samples {
 public:
  explicit Samples(std::string text) : text_(std::move(text)), samples_(ParsePrometheus(text_)) {}
  double operator()(const std::string& key) const {
    auto it = samples_.find(key);
    EXPECT_TRUE(it != samples_.end()) << key << " missing from\n" << text_;
    return it == samples_.end() ? NAN : it->second;
  }
  // A series with vLLM's labels (model_name, engine) and then `labels`.
  double Model(const std::string& name, const std::string& labels = "") const {
    return (*this)(absl::StrCat(name, "{model_name=\"fake-model\",engine=\"0\"", labels.empty() ? "" : ",", labels,
                                "}"));
  }
  bool Has(const std::string& key) const { return samples_.count(key) > 0; }

 private:
  const std::string text_;
  const std::map<std::string, double> samples_;
};

TEST_F(FrontendTest, MetricsAreValidPrometheusText) {
  StartServers();
  // Traffic from both front ends lands in the shared metrics.
  ASSERT_EQ(Post("/v1/completions", R"({"prompt": "Hello", "max_tokens": 5})").status, 200);
  std::vector<v1::GenerateResponse> responses;
  ASSERT_TRUE(Generate(TextRequest("Hello", 5), &responses).ok());

  HttpResult r = Get("/metrics");
  ASSERT_EQ(r.status, 200);
  const Samples s(r.body);
  EXPECT_EQ(s.Model("vllm:num_requests_running"), 0);
  EXPECT_EQ(s.Model("vllm:num_requests_waiting"), 0);
  EXPECT_EQ(s.Model("vllm:kv_cache_usage_perc"), 0.25);
  EXPECT_EQ(s.Model("vllm:gpu_cache_usage_perc"), 0.25);
  EXPECT_EQ(s.Model("vllm:prefix_cache_queries_total"), 40);
  EXPECT_EQ(s.Model("vllm:prefix_cache_hits_total"), 20);
  EXPECT_EQ(s.Model("vllm:num_preemptions_total"), 3);
  EXPECT_EQ(s.Model("vllm:spec_decode_num_drafts_total"), 6);
  EXPECT_EQ(s.Model("vllm:spec_decode_num_draft_tokens_total"), 12);
  EXPECT_EQ(s.Model("vllm:spec_decode_num_accepted_tokens_total"), 7);
  EXPECT_EQ(s.Model("vllm:spec_decode_num_accepted_tokens_per_pos_total", "position=\"0\""), 5);
  EXPECT_EQ(s.Model("vllm:spec_decode_num_accepted_tokens_per_pos_total", "position=\"1\""), 2);
  EXPECT_GT(s.Model("vllm:prompt_tokens_total"), 0);
  EXPECT_EQ(s.Model("vllm:generation_tokens_total"), 10);
  EXPECT_EQ(s.Model("vllm:request_success_total", "finished_reason=\"length\""), 2);
  EXPECT_EQ(s.Model("vllm:request_success_total", "finished_reason=\"abort\""), 0);
  EXPECT_EQ(s.Model("tpserve_step_time_seconds_total", "phase=\"allreduce\""), 0.002);
  EXPECT_EQ(s.Model("tpserve_step_time_seconds_total", "phase=\"draft\""), 0.003);
  EXPECT_GT(s("process_resident_memory_bytes"), 1 << 20);
  EXPECT_GE(s("tpserve_process_peak_resident_memory_bytes"), s("process_resident_memory_bytes"));
  for (const char* h : {"vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds",
                        "vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds",
                        "vllm:request_decode_time_seconds", "vllm:request_inference_time_seconds",
                        "vllm:request_prompt_tokens", "vllm:request_generation_tokens"}) {
    EXPECT_EQ(s.Model(absl::StrCat(h, "_count")), 2) << h;
    EXPECT_EQ(s.Model(absl::StrCat(h, "_bucket"), "le=\"+Inf\""), 2) << h;
  }
  // vLLM's bucket bounds; token counts in 1-2-5 steps.
  EXPECT_EQ(s.Model("vllm:time_to_first_token_seconds_bucket", "le=\"2560\""), 2);
  EXPECT_TRUE(s.Has("vllm:inter_token_latency_seconds_bucket{model_name=\"fake-model\",engine=\"0\",le=\"0.01\"}"));
  EXPECT_FALSE(s.Has("vllm:inter_token_latency_seconds_bucket{model_name=\"fake-model\",engine=\"0\",le=\"0.001\"}"));
  EXPECT_EQ(s.Model("vllm:request_generation_tokens_bucket", "le=\"5\""), 2);
  EXPECT_EQ(s.Model("vllm:request_generation_tokens_sum"), 10);
  EXPECT_TRUE(s.Has("vllm:request_prompt_tokens_bucket{model_name=\"fake-model\",engine=\"0\",le=\"200\"}"));
  EXPECT_FALSE(s.Has("vllm:request_prompt_tokens_bucket{model_name=\"fake-model\",engine=\"0\",le=\"300\"}"));
  // 4 gaps per request, under both of vLLM's names.
  EXPECT_EQ(s.Model("vllm:inter_token_latency_seconds_count"), 8);
  EXPECT_EQ(s.Model("vllm:time_per_output_token_seconds_count"), 8);
  // The names vLLM has replaced tpserve's; none is exported twice.
  EXPECT_THAT(r.body, ::testing::Not(HasSubstr("tpserve_num_requests")));
  EXPECT_THAT(r.body, ::testing::Not(HasSubstr("tpserve_time_to_first_token")));
}

// TTFT, e2e and queue time start at the request's first byte: a client that takes 200 ms
// to send its request shows in them, though the engine's own timings never see it.
TEST_F(FrontendTest, MetricsMeasureFromTheFrontEndsArrival) {
  FakeEngineOptions options;
  options.first_token_delay = absl::Milliseconds(20);
  StartServers(options);
  const std::string body = R"({"prompt": "Hello", "max_tokens": 3})";
  const std::string request = absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                                           "Connection: close\r\nContent-Type: application/json\r\n",
                                           "Content-Length: ", body.size(), "\r\n\r\n", body);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(http_->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const size_t half = request.size() / 2;
  ASSERT_EQ(write(fd, request.data(), half), static_cast<ssize_t>(half));
  // 300 ms: the server's clock starts at accept, which may follow connect() by a little.
  absl::SleepFor(absl::Milliseconds(300));
  ASSERT_EQ(write(fd, request.data() + half, request.size() - half), static_cast<ssize_t>(request.size() - half));
  std::string response;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) response.append(buf, static_cast<size_t>(n));
  close(fd);
  ASSERT_THAT(response, ::testing::StartsWith("HTTP/1.1 200"));

  const Samples s(Get("/metrics").body);
  ASSERT_EQ(s.Model("vllm:time_to_first_token_seconds_count"), 1);
  const double ttft_s = s.Model("vllm:time_to_first_token_seconds_sum");
  EXPECT_GE(ttft_s, 0.25);
  EXPECT_GE(s.Model("vllm:e2e_request_latency_seconds_sum"), ttft_s);
  // Waiting for the rest of the request is time before the engine saw it: queue time, too.
  const double queue_s = s.Model("vllm:request_queue_time_seconds_sum");
  EXPECT_GE(queue_s, 0.25);
  EXPECT_LT(queue_s, ttft_s);
  // ... and all of it the front end's own: arrival to submission.
  ASSERT_EQ(s.Model("tpserve_request_frontend_seconds_count"), 1);
  const double frontend_s = s.Model("tpserve_request_frontend_seconds_sum");
  EXPECT_GE(frontend_s, 0.25);
  EXPECT_LE(frontend_s, queue_s);
  // The engine's phases stay the engine's: the fake's prefill is its first_token_delay.
  EXPECT_LT(s.Model("vllm:request_prefill_time_seconds_sum"), 0.2);
}

// tpserve_model_info carries the storage the engine reports once it is ready (serve builds
// the metrics while the weights load, before the engine can say), and only then.
TEST_F(FrontendTest, ModelInfoGaugeAppearsOnceTheEngineIsReady) {
  StartServers({}, {}, /*ready=*/false);
  EXPECT_FALSE(absl::StrContains(metrics_->RenderPrometheus(), "tpserve_model_info{"));
  engine_->SetReady(true);
  const Samples s(metrics_->RenderPrometheus());
  EXPECT_EQ(s.Model("tpserve_model_info", "quantization=\"\",dtype=\"bfloat16\",kv_cache_dtype=\"\""), 1);
  // Once: a later scrape has the same one series.
  const std::string again = metrics_->RenderPrometheus();
  EXPECT_EQ(again.find("tpserve_model_info{"), again.rfind("tpserve_model_info{"));
}

TEST_F(FrontendTest, MetricsCountHttpRequestsByRouteAndStatus) {
  StartServers();
  ASSERT_EQ(Post("/v1/completions", R"({"prompt": "Hello", "max_tokens": 2})").status, 200);
  ASSERT_EQ(Post("/v1/completions", R"({"prompt": "Hello", "max_tokens": 2, "stream": true})").status, 200);
  ASSERT_EQ(Post("/v1/completions", "not json").status, 400);
  ASSERT_EQ(Get("/nowhere").status, 404);
  ASSERT_EQ(Get("/v1/models/unknown").status, 404);
  ASSERT_EQ(Get("/v1/models").status, 200);
  ASSERT_EQ(Post("/health", "{}").status, 405);

  const Samples s(Get("/metrics").body);
  auto count = [&](const std::string& handler, const std::string& method, const std::string& status) {
    return s(absl::StrCat("http_requests_total{handler=\"", handler, "\",method=\"", method, "\",status=\"", status,
                          "\"}"));
  };
  EXPECT_EQ(count("/v1/completions", "POST", "2xx"), 2);  // JSON and SSE
  EXPECT_EQ(count("/v1/completions", "POST", "4xx"), 1);
  EXPECT_EQ(count("none", "GET", "4xx"), 1);  // unknown paths share one handler
  EXPECT_EQ(count("/v1/models/{model}", "GET", "4xx"), 1);
  EXPECT_EQ(count("/v1/models", "GET", "2xx"), 1);
  EXPECT_EQ(count("/health", "POST", "4xx"), 1);
  EXPECT_FALSE(s.Has("http_requests_total{handler=\"/nowhere\",method=\"GET\",status=\"4xx\"}"));
}

}  // namespace
}  // namespace tpserve

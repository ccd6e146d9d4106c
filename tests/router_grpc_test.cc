// The router in front of a grpc:// backend, in one process (tests/frontend_fixture.h: a fake
// engine behind serve's gRPC and HTTP servers): the same OpenAI requests answered through the
// router's relay and straight by serve's HTTP front end give the same responses, streamed and
// not (ids and timestamps aside); what the gRPC API cannot carry is a 400; the backend's API key
// goes as metadata; a busy backend is "busy"; a failure after the first token is the router's
// error event; a client gone cancels the backend's request; the Stats probe marks a backend
// that refuses it unhealthy. Real processes: tests/router_grpc_test.sh.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/router/router_server.h"
#include "gmock/gmock.h"
#include "tests/frontend_fixture.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

class RouterGrpcTest : public FrontendTest {
 protected:
  void TearDown() override {
    router_.reset();
    FrontendTest::TearDown();
  }

  // A router serving "relayed" from the gRPC server (as its model "fake-model"), with `extra`
  // spliced into that backend's object; after StartServers().
  void StartRouter(const std::string& extra = "", const std::string& model_extra = "",
                   const std::string& api_key = "") {
    absl::StatusOr<RouterConfig> config = ParseRouterConfig(absl::StrCat(
        R"({"models": {"relayed": {)", model_extra, R"("backends": [{"url": "grpc://127.0.0.1:)", grpc_->port(),
        R"(", "model": "fake-model")", extra, "}]}}}"));
    ASSERT_TRUE(config.ok()) << config.status();
    for (RouterBackend& b : config->models.at("relayed").backends) b.api_key = api_key;
    RouterOptions options;
    options.transport.host = "127.0.0.1";
    options.transport.port = 0;
    options.log = [this](const std::string& line) {
      absl::MutexLock lock(&log_mu_);
      log_.push_back(line);
    };
    router_ = std::make_unique<RouterServer>(*std::move(config), options);
    ASSERT_TRUE(router_->Start().ok());
  }

  HttpResult RouterPost(const std::string& path, const std::string& body) {
    httplib::Client client("127.0.0.1", router_->port());
    client.set_read_timeout(60, 0);
    auto res = client.Post(path.c_str(), body, "application/json");
    if (!res) return {-1, httplib::to_string(res.error())};
    return {res->status, res->body};
  }

  // A streamed request to the router, read to its end; `first_chunk` runs once the first
  // piece of the stream has reached the client.
  std::string StreamFromRouter(const std::string& body, const std::function<void()>& first_chunk) {
    httplib::Client client("127.0.0.1", router_->port());
    client.set_read_timeout(60, 0);
    std::string sse;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body;
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
      if (sse.empty()) first_chunk();
      sse.append(data, size);
      return true;
    };
    client.send(req);
    return sse;
  }

  std::string Metrics() {
    httplib::Client client("127.0.0.1", router_->port());
    auto res = client.Get("/metrics");
    return res ? res->body : "";
  }

  absl::Mutex log_mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(log_mu_);
  std::unique_ptr<RouterServer> router_;
};

// A response with what differs between two answers of the same request left out: ids, the
// creation time, tool call ids.
Json Comparable(Json body) {
  body.erase("id");
  body.erase("created");
  for (Json& choice : body["choices"]) {
    if (choice.contains("message") && choice["message"].contains("tool_calls")) {
      for (Json& call : choice["message"]["tool_calls"]) call["id"] = "call_X";
    }
  }
  return body;
}

// A stream's chunks folded into what a client reads off it, per choice: text, tool calls,
// logprobs, finish and stop reasons; the usage; errors; whether it ended with [DONE].
Json Fold(const std::vector<std::string>& payloads) {
  Json out = {{"choices", Json::object()}, {"usage", nullptr}, {"errors", Json::array()}, {"done", false}};
  for (const std::string& p : payloads) {
    if (p == "[DONE]") {
      out["done"] = true;
      continue;
    }
    Json chunk = Json::parse(p);
    if (chunk.contains("error")) {
      out["errors"].push_back(chunk["error"]);
      continue;
    }
    if (chunk.contains("usage")) out["usage"] = chunk["usage"];
    for (const Json& choice : chunk["choices"]) {
      Json& c = out["choices"][std::to_string(choice["index"].get<int>())];
      if (c.is_null()) c = {{"text", ""}, {"calls", Json::array()}, {"logprobs", Json::object()}};
      if (choice.contains("text")) c["text"] = c["text"].get<std::string>() + choice["text"].get<std::string>();
      if (choice.contains("delta")) {
        const Json& d = choice["delta"];
        if (d.contains("content") && d["content"].is_string()) {
          c["text"] = c["text"].get<std::string>() + d["content"].get<std::string>();
        }
        if (d.contains("role")) c["role"] = d["role"];
        if (d.contains("tool_calls")) {
          for (Json call : d["tool_calls"]) {
            call["id"] = "call_X";
            c["calls"].push_back(call);
          }
        }
      }
      // (choice is const: operator[] on a key it lacks is undefined, and the router's own error
      // chunk has neither logprobs nor stop_reason.)
      const Json none;
      // Logprobs token by token (each array of the object joined): how many tokens one chunk
      // carries depends on timing (a server sends what is ready).
      if (!choice.value("logprobs", none).is_null()) {
        for (const auto& [key, values] : choice["logprobs"].items()) {
          for (const Json& v : values) c["logprobs"][key].push_back(v);
        }
      }
      if (!choice.value("finish_reason", none).is_null()) {
        c["finish_reason"] = choice["finish_reason"];
        c["stop_reason"] = choice.value("stop_reason", none);
      }
    }
  }
  return out;
}

TEST_F(RouterGrpcTest, RelayedResponsesEqualServesOwn) {
  FakeEngineOptions o;
  o.max_model_len = 2048;  // the tools' system block makes a long prompt
  o.token_delay = absl::ZeroDuration();
  StartServers(o);
  StartRouter();
  const std::string tool_call = R"(<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>)";
  const std::vector<std::pair<std::string, std::string>> requests = {
      {"/v1/completions", R"({"prompt": "Hello world", "max_tokens": 5})"},
      {"/v1/completions", R"({"prompt": [11, 12, 13, 14], "max_tokens": 8, "stop_token_ids": [13], "logprobs": 2})"},
      {"/v1/completions", R"({"prompt": "Hello there", "max_tokens": 3, "echo": true, "n": 2, "seed": 5})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6,
                                  "logprobs": true, "top_logprobs": 1})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "system", "content": "Be brief."},
                                               {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
                                  "max_completion_tokens": 4, "temperature": 0, "n": 3})"},
      {"/v1/chat/completions", absl::StrCat(R"({"messages": [{"role": "user", "content": ")", tool_call,
                                            R"("}], "max_tokens": 400,
                                  "tools": [{"type": "function", "function": {"name": "get"}}]})")},
  };
  for (const auto& [path, request] : requests) {
    for (bool stream : {false, true}) {
      Json body = Json::parse(request);
      body["model"] = "relayed";
      if (stream) {
        body["stream"] = true;
        body["stream_options"] = {{"include_usage", true}};
      }
      const HttpResult relayed = RouterPost(path, body.dump());
      body["model"] = "fake-model";
      const HttpResult direct = Post(path, body.dump());
      SCOPED_TRACE(absl::StrCat(path, " ", body.dump()));
      ASSERT_EQ(direct.status, 200) << direct.body;
      ASSERT_EQ(relayed.status, 200) << relayed.body;
      if (!stream) {
        EXPECT_EQ(Comparable(Json::parse(relayed.body)), Comparable(Json::parse(direct.body)));
        EXPECT_THAT(Json::parse(relayed.body)["id"].get<std::string>(),
                    ::testing::StartsWith(path == "/v1/completions" ? "cmpl-" : "chatcmpl-"));
        continue;
      }
      const Json folded = Fold(SsePayloads(relayed.body));
      EXPECT_EQ(folded, Fold(SsePayloads(direct.body)));
      EXPECT_TRUE(folded["done"]);
      EXPECT_FALSE(folded["usage"].is_null());
    }
  }
  // The tool call came through (the echo reaches the user's message).
  Json body = Json::parse(requests.back().second);
  body["model"] = "relayed";
  const Json message = Json::parse(RouterPost("/v1/chat/completions", body.dump()).body)["choices"][0]["message"];
  ASSERT_EQ(message["tool_calls"].size(), 1u) << message;
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris"})");
}

// A stream whose client asked for no usage chunk is still counted: the backend's messages
// carry the tokens, and the relay hands them to the router's counts (the same as the whole
// response's usage, twice over for the two requests).
TEST_F(RouterGrpcTest, AStreamWithoutAUsageChunkIsCountedFromTheMessages) {
  StartServers();
  StartRouter();
  const std::string request = R"({"model": "relayed", "prompt": "Hello world", "max_tokens": 5})";
  const HttpResult whole = RouterPost("/v1/completions", request);
  ASSERT_EQ(whole.status, 200) << whole.body;
  const Json usage = Json::parse(whole.body)["usage"];
  Json streamed = Json::parse(request);
  streamed["stream"] = true;  // no stream_options: the client gets no usage chunk
  const std::string sse = StreamFromRouter(streamed.dump(), [] {});
  EXPECT_THAT(sse, HasSubstr("[DONE]"));
  EXPECT_THAT(sse, ::testing::Not(HasSubstr("\"usage\"")));
  const std::string metrics = Metrics();
  const std::string labels = absl::StrCat("{model=\"relayed\",backend=\"grpc://127.0.0.1:", grpc_->port(), "\"}");
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("tpserve_router_backend_prompt_tokens_total", labels, " ",
                                              2 * usage["prompt_tokens"].get<int64_t>())));
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("tpserve_router_backend_completion_tokens_total", labels, " ",
                                              2 * usage["completion_tokens"].get<int64_t>())));
  EXPECT_THAT(metrics, ::testing::Not(HasSubstr(absl::StrCat("tpserve_router_backend_requests_without_usage_total",
                                                             labels, " 1"))));
}

// max_in_flight: with the backend's one place taken by a stream, the next request finds no
// backend with room (busy: 429 naming the cap) and the count goes back when the stream ends.
TEST_F(RouterGrpcTest, MaxInFlightTurnsAwayWhatPassesTheCap) {
  FakeEngineOptions o;
  o.token_delay = absl::Milliseconds(40);
  StartServers(o);
  StartRouter(R"(, "max_in_flight": 1)");
  HttpResult second;
  const std::string sse = StreamFromRouter(
      R"({"model": "relayed", "prompt": "Hello", "max_tokens": 12, "stream": true})",
      [&] { second = RouterPost("/v1/completions", R"({"model": "relayed", "prompt": "Hi", "max_tokens": 2})"); });
  EXPECT_THAT(sse, HasSubstr("[DONE]"));
  EXPECT_EQ(second.status, 429) << second.body;
  EXPECT_THAT(second.body, HasSubstr("max_in_flight (1)"));
  const HttpResult third = RouterPost("/v1/completions", R"({"model": "relayed", "prompt": "Hi", "max_tokens": 2})");
  EXPECT_EQ(third.status, 200) << third.body;
}

TEST_F(RouterGrpcTest, WhatTheGrpcApiCannotCarryIsA400NamingTheField) {
  StartServers();
  StartRouter();
  const HttpResult r = RouterPost(
      "/v1/chat/completions",
      R"({"model": "relayed", "messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": false})");
  EXPECT_EQ(r.status, 400);
  const Json error = Json::parse(r.body)["error"];
  EXPECT_EQ(error["param"], "add_generation_prompt");
  EXPECT_EQ(error["type"], "invalid_request_error");
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("cannot be sent to a gRPC backend"));
  EXPECT_EQ(engine_->submitted(), 0);
  // The backend's own refusals pass through with its message.
  const HttpResult bad = RouterPost("/v1/completions", R"({"model": "relayed", "prompt": "x", "temperature": -1})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.body, HasSubstr("temperature"));
}

TEST_F(RouterGrpcTest, TheBackendsKeyGoesAsMetadata) {
  grpc_options_.frontend.api_keys = {"backend-secret"};
  StartServers();
  StartRouter("", "", "backend-secret");
  EXPECT_EQ(RouterPost("/v1/completions", R"({"model": "relayed", "prompt": "Hi", "max_tokens": 2})").status, 200);
  router_.reset();
  StartRouter("", "", "wrong");
  const HttpResult r = RouterPost("/v1/completions", R"({"model": "relayed", "prompt": "Hi", "max_tokens": 2})");
  EXPECT_EQ(r.status, 401) << r.body;
}

TEST_F(RouterGrpcTest, ABusyBackendIsBusyNotEjected) {
  StartServers();
  StartRouter();
  engine_->SetSubmitError(absl::ResourceExhaustedError("the queue is full"));
  const HttpResult r = RouterPost("/v1/completions", R"({"model": "relayed", "prompt": "Hi", "max_tokens": 2})");
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_THAT(r.body, HasSubstr("over its queue limit"));
  const std::string metrics = Metrics();
  const std::string labels = absl::StrCat("model=\"relayed\",backend=\"grpc://127.0.0.1:", grpc_->port(), "\"");
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("tpserve_router_backend_errors_total{", labels, ",kind=\"busy\"} 1")));
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("tpserve_router_backend_healthy{", labels, "} 1")));
}

TEST_F(RouterGrpcTest, FailuresAfterTheFirstToken) {
  StartServers(Slow());
  StartRouter();
  const std::string body =
      R"({"model": "relayed", "prompt": "Hi", "max_tokens": 200, "ignore_eos": true, "stream": true})";
  // The engine failed the request once part of the stream reached the client: the error event
  // serve's own HTTP front end writes.
  std::string sse = StreamFromRouter(body, [this] { engine_->EndAll(FinishReason::kError, "the engine failed this request"); });
  Json folded = Fold(SsePayloads(sse));
  ASSERT_EQ(folded["errors"].size(), 1u) << sse;
  EXPECT_EQ(folded["errors"][0]["message"], "the engine failed this request");
  EXPECT_TRUE(folded["done"]);
  // The server can serve nothing now (a rank died): the backend is ejected, and the router's
  // error event names it.
  sse = StreamFromRouter(
      body, [this] { engine_->EndAll(FinishReason::kError, "rank 1 is gone", absl::StatusCode::kUnavailable); });
  folded = Fold(SsePayloads(sse));
  ASSERT_EQ(folded["errors"].size(), 1u) << sse;
  EXPECT_THAT(folded["errors"][0]["message"].get<std::string>(),
              HasSubstr(absl::StrCat("the backend grpc://127.0.0.1:", grpc_->port(),
                                     " failed in the middle of the stream: gRPC UNAVAILABLE: rank 1 is gone")));
  EXPECT_TRUE(folded["done"]);
  EXPECT_THAT(Metrics(), HasSubstr("kind=\"stream_broken\"} 1"));
}

TEST_F(RouterGrpcTest, AClientGoneCancelsTheBackendsRequest) {
  StartServers(Slow());
  StartRouter();
  {
    httplib::Client client("127.0.0.1", router_->port());
    int chunks = 0;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = R"({"model": "relayed", "prompt": "Hi", "max_tokens": 200, "ignore_eos": true, "stream": true})";
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&chunks](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 3; };
    client.send(req);  // the receiver stops after a few chunks: the client closes
    EXPECT_GE(chunks, 3);
  }
  EXPECT_TRUE(engine_->WaitForCancelled(1, absl::Seconds(10)));
  EXPECT_TRUE(Eventually([this] { return engine_->running() == 0; }));
}

TEST_F(RouterGrpcTest, TheStatsProbeTakesARefusingBackendOutOfRouting) {
  grpc_options_.frontend.api_keys = {"backend-secret"};
  StartServers();
  StartRouter("", R"("health_check": {"interval_s": 0.2, "timeout_s": 5}, )", "wrong");
  const std::string healthy =
      absl::StrCat("tpserve_router_backend_healthy{model=\"relayed\",backend=\"grpc://127.0.0.1:", grpc_->port(), "\"}");
  EXPECT_TRUE(Eventually([&] { return Metrics().find(healthy + " 0") != std::string::npos; }));
  absl::MutexLock lock(&log_mu_);
  ASSERT_FALSE(log_.empty());
  EXPECT_THAT(log_[0], HasSubstr(absl::StrCat("is unhealthy, out of routing until a probe passes: Stats grpc://127.0.0.1:",
                                              grpc_->port(), ": UNAUTHENTICATED")));
}

}  // namespace
}  // namespace tpserve

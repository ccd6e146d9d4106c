// tpbench's OpenAI HTTP target (bench/tpbench/openai_target.h) against scripted SSE
// responses from an in-process cpp-httplib server on 127.0.0.1: timing, usage, the stream
// forms of tpserve/vLLM/Groq, and every way a request can fail.
#include "bench/tpbench/openai_target.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace tpserve::bench {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using Json = nlohmann::json;

std::string Event(const Json& j) { return "data: " + j.dump() + "\n\n"; }
const std::string kDone = "data: [DONE]\n\n";

Json TextChunk(const std::string& text, const char* finish = nullptr) {
  return {{"id", "cmpl-1"},
          {"object", "text_completion"},
          {"choices", Json::array({{{"index", 0}, {"text", text}, {"finish_reason", finish ? Json(finish) : Json()}}})}};
}

Json ChatChunk(Json delta, const char* finish = nullptr) {
  return {{"id", "chatcmpl-1"},
          {"object", "chat.completion.chunk"},
          {"choices", Json::array({{{"index", 0}, {"delta", std::move(delta)}, {"finish_reason", finish ? Json(finish) : Json()}}})}};
}

Json Usage(int prompt, int completion) {
  return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
}

Json UsageChunk(int prompt, int completion) {
  return {{"id", "cmpl-1"}, {"choices", Json::array()}, {"usage", Usage(prompt, completion)}};
}

// How a scripted response ends once its pieces are written.
enum class End {
  kClose,  // the final (empty) chunk: a clean end of the HTTP response
  kDrop,   // the connection is closed mid-response
  kStall,  // nothing more for 2 s (or until the test ends), then a clean end
};

// A loopback port where connections are refused: a socket bound to a free port (port 0)
// that never listens. No other process can take the port while it is held, so this is no
// guess that some fixed port is unused.
class RefusingPort {
 public:
  RefusingPort() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~RefusingPort() {
    if (fd_ >= 0) ::close(fd_);
  }
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;
  int port() const { return port_; }  // 0 if the socket could not be bound

 private:
  int fd_;
  int port_ = 0;
};

struct Script {
  int status = 200;
  std::string error_body{};           // the body when status != 200
  std::vector<std::string> pieces{};  // written one by one; an SSE event may span several
  absl::Duration gap{};               // before every piece but the first
  End end = End::kClose;
  std::string backend_header{};       // sent as X-Tpserve-Backend (mixed case on purpose) when set
  std::string metrics_page{};         // served at GET /metrics when set (else 404)
};

// What the fake server received.
struct Received {
  std::string path;
  Json body;
  std::optional<std::string> authorization;
  int remote_port = 0;  // the client's end of the connection
};

class OpenAiTargetTest : public ::testing::Test {
 protected:
  ~OpenAiTargetTest() override {
    stopping_.Notify();
    if (thread_.joinable()) {
      server_.stop();
      thread_.join();
    }
  }

  // Answers both endpoints with `script` and starts listening.
  void Serve(Script script) {
    if (!script.metrics_page.empty()) {
      server_.Get("/metrics", [page = script.metrics_page](const httplib::Request&, httplib::Response& res) {
        res.set_content(page, "text/plain; version=0.0.4");
      });
    }
    auto shared = std::make_shared<const Script>(std::move(script));
    auto handler = [this, shared](const httplib::Request& req, httplib::Response& res) {
      {
        absl::MutexLock lock(&mu_);
        received_.push_back({req.path, Json::parse(req.body, nullptr, false),
                             req.has_header("Authorization") ? std::optional(req.get_header_value("Authorization"))
                                                             : std::nullopt, req.remote_port});
      }
      const Script& s = *shared;
      if (!s.backend_header.empty()) res.set_header("X-Tpserve-Backend", s.backend_header);
      if (s.status != 200) {
        res.status = s.status;
        res.set_content(s.error_body, "application/json");
        return;
      }
      auto next = std::make_shared<size_t>(0);
      res.set_chunked_content_provider("text/event-stream", [this, shared, next](size_t, httplib::DataSink& sink) {
        const Script& s = *shared;
        if (*next < s.pieces.size()) {
          if (*next > 0) absl::SleepFor(s.gap);
          const std::string& piece = s.pieces[(*next)++];
          return sink.write(piece.data(), piece.size());
        }
        switch (s.end) {
          case End::kDrop:
            return false;
          case End::kStall:
            stopping_.WaitForNotificationWithTimeout(absl::Seconds(2));
            break;
          case End::kClose:
            break;
        }
        sink.done();
        return true;
      });
    };
    server_.Post("/v1/completions", handler);
    server_.Post("/v1/chat/completions", handler);
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object": "list", "data": [{"id": "other", "object": "model"},
                          {"id": "fake-model", "object": "model", "max_model_len": 4096}]})",
                      "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) absl::SleepFor(absl::Milliseconds(1));
  }

  OpenAiTargetOptions Options() const {
    OpenAiTargetOptions o;
    o.base_url = "http://127.0.0.1:" + std::to_string(port_) + "/v1/";  // trailing '/' on purpose
    o.model = "fake-model";
    return o;
  }

  RequestOutcome Send(OpenAiTargetOptions options, const BenchRequest& request,
                      absl::Duration timeout = absl::Seconds(30)) {
    absl::StatusOr<std::unique_ptr<Target>> target = MakeOpenAiTarget(std::move(options));
    EXPECT_TRUE(target.ok()) << target.status();
    if (!target.ok()) return RequestOutcome();
    return (*target)->Send(request, timeout);
  }

  static BenchRequest Request(int max_tokens = 5) {
    BenchRequest r;
    r.text = "Hello world";
    r.max_tokens = max_tokens;
    return r;
  }

  std::vector<Received> received() {
    absl::MutexLock lock(&mu_);
    return received_;
  }

  Received last_received() {
    std::vector<Received> all = received();
    EXPECT_FALSE(all.empty());
    return all.empty() ? Received() : all.back();
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  absl::Notification stopping_;
  absl::Mutex mu_;
  std::vector<Received> received_ ABSL_GUARDED_BY(mu_);
};

TEST_F(OpenAiTargetTest, CompletionsStreamTimesEveryChunk) {
  constexpr int kTokens = 5;
  const absl::Duration kGap = absl::Milliseconds(100);
  Script script{.gap = kGap};
  for (int i = 0; i < kTokens; ++i) script.pieces.push_back(Event(TextChunk(" t", i + 1 == kTokens ? "length" : nullptr)));
  script.pieces.push_back(Event(UsageChunk(7, kTokens)));
  script.pieces.push_back(kDone);
  Serve(script);

  RequestOutcome out = Send(Options(), Request(kTokens));
  EXPECT_TRUE(out.success) << out.error;
  EXPECT_EQ(out.error, "");
  EXPECT_FALSE(out.timeout);
  EXPECT_EQ(out.completion_tokens, kTokens);
  EXPECT_EQ(out.prompt_tokens, 7);
  EXPECT_EQ(out.finish_reason, "length");
  EXPECT_GT(out.ttft_ms, 0);
  EXPECT_GE(out.latency_ms, out.ttft_ms);
  ASSERT_EQ(out.itl_ms.size(), kTokens - 1u);
  // No speed assumed: single gaps may shrink on the way (a late chunk, then one on time),
  // but the server waits kGap before each chunk after the first, so the last token comes
  // at least (kTokens - 1) * kGap after the request was sent, and TTFT plus the ITLs is
  // that time exactly (1 us allowed for summing doubles).
  double last_token_ms = out.ttft_ms;
  for (double itl : out.itl_ms) {
    EXPECT_GE(itl, 0);
    last_token_ms += itl;
  }
  EXPECT_GE(last_token_ms, (kTokens - 1) * absl::ToDoubleMilliseconds(kGap) - 1e-3);
  EXPECT_LE(last_token_ms, out.latency_ms + 1e-3);

  Received r = last_received();
  EXPECT_EQ(r.path, "/v1/completions");
  EXPECT_EQ(r.body["model"], "fake-model");
  EXPECT_EQ(r.body["prompt"], "Hello world");
  EXPECT_EQ(r.body["max_tokens"], kTokens);
  EXPECT_EQ(r.body["stream"], true);
  EXPECT_EQ(r.body["stream_options"]["include_usage"], true);
  EXPECT_FALSE(r.body.contains("ignore_eos"));
  EXPECT_FALSE(r.body.contains("temperature"));
  EXPECT_FALSE(r.body.contains("messages"));
  EXPECT_FALSE(r.authorization.has_value());
}

TEST_F(OpenAiTargetTest, InfoReadsTheModelList) {
  Serve(Script{});
  absl::StatusOr<std::unique_ptr<Target>> target = MakeOpenAiTarget(Options());
  ASSERT_TRUE(target.ok());
  absl::StatusOr<ServerInfo> info = (*target)->Info();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->model, "fake-model") << "the requested model, not the first listed";
  EXPECT_EQ(info->max_model_len, 4096);
  RefusingPort refusing;
  ASSERT_GT(refusing.port(), 0);
  OpenAiTargetOptions dead = Options();
  dead.base_url = "http://127.0.0.1:" + std::to_string(refusing.port()) + "/v1";
  absl::StatusOr<ServerInfo> none = (*MakeOpenAiTarget(dead))->Info();
  EXPECT_FALSE(none.ok());
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("/v1/models"));
}

// Without a /metrics page (404 here) the storage is unknown, not an error.
TEST_F(OpenAiTargetTest, InfoWithoutAMetricsPageLeavesTheStorageUnknown) {
  Serve(Script{});
  absl::StatusOr<ServerInfo> info = (*MakeOpenAiTarget(Options()))->Info();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->model, "fake-model");
  EXPECT_EQ(info->quantization, "");
  EXPECT_EQ(info->kv_cache_dtype, "");
  EXPECT_EQ(info->dtype, "");
}

// tpserve's tpserve_model_info gauge names the weights' and the KV cache's storage (the run
// record's quantization and kv_cache_dtype); vLLM's cache_config_info names its cache_dtype.
TEST_F(OpenAiTargetTest, InfoReadsTheStorageFromTheMetricsPage) {
  Serve(Script{.metrics_page = "# HELP tpserve_model_info The served model's weight and KV cache storage.\n"
                               "# TYPE tpserve_model_info gauge\n"
                               "tpserve_model_info{model_name=\"fake \\\"m\\\"\",quantization=\"q4_k+q6_k\","
                               "dtype=\"bfloat16\",kv_cache_dtype=\"fp8_e4m3\"} 1\n"
                               "vllm:cache_config_info{cache_dtype=\"fp8\",block_size=\"16\"} 1\n"});
  absl::StatusOr<ServerInfo> info = (*MakeOpenAiTarget(Options()))->Info();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->quantization, "q4_k+q6_k");
  EXPECT_EQ(info->kv_cache_dtype, "fp8_e4m3") << "tpserve's own label, not vLLM's";
  EXPECT_EQ(info->dtype, "bfloat16");
}

TEST_F(OpenAiTargetTest, InfoReadsVllmsCacheDtype) {
  Serve(Script{.metrics_page = "vllm:cache_config_info{block_size=\"16\",cache_dtype=\"fp8_e5m2\","
                               "enable_prefix_caching=\"True\"} 1.0\n"
                               "vllm:num_requests_running{model_name=\"fake-model\"} 0.0\n"});
  absl::StatusOr<ServerInfo> info = (*MakeOpenAiTarget(Options()))->Info();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->kv_cache_dtype, "fp8_e5m2");
  EXPECT_EQ(info->quantization, "");
}

TEST_F(OpenAiTargetTest, ConnectionsAreReusedUnlessTurnedOff) {
  Serve(Script{.pieces = {Event(TextChunk("a", "length")), "data: [DONE]\n\n"}});
  for (bool reuse : {true, false}) {
    OpenAiTargetOptions o = Options();
    o.reuse_connections = reuse;
    absl::StatusOr<std::unique_ptr<Target>> target = MakeOpenAiTarget(o);
    ASSERT_TRUE(target.ok());
    for (int i = 0; i < 3; ++i) EXPECT_TRUE((*target)->Send(Request(1), absl::Seconds(30)).success);
  }
  std::vector<Received> got = received();
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(got[0].remote_port, got[1].remote_port) << "one connection for sequential requests";
  EXPECT_EQ(got[1].remote_port, got[2].remote_port);
  EXPECT_NE(got[3].remote_port, got[4].remote_port) << "reuse_connections = false: a new connection each";
  EXPECT_NE(got[4].remote_port, got[5].remote_port);
}

TEST_F(OpenAiTargetTest, ChatRoleOnlyDeltaIsNotAToken) {
  const absl::Duration kGap = absl::Milliseconds(100);
  Serve({.pieces = {Event(ChatChunk({{"role", "assistant"}, {"content", ""}})),
                    Event(ChatChunk({{"content", "Hi"}})), Event(ChatChunk({{"content", " there"}})),
                    Event(ChatChunk({{"content", "!"}})), Event(ChatChunk(Json::object(), "stop")),
                    Event(UsageChunk(12, 3)), kDone},
         .gap = kGap});
  OpenAiTargetOptions options = Options();
  options.chat = true;
  RequestOutcome out = Send(options, Request());
  EXPECT_TRUE(out.success) << out.error;
  EXPECT_EQ(out.completion_tokens, 3);
  EXPECT_EQ(out.prompt_tokens, 12);
  EXPECT_EQ(out.finish_reason, "stop");
  // The first token came one gap after the role-only chunk (a bound no delay can break).
  EXPECT_GE(out.ttft_ms, absl::ToDoubleMilliseconds(kGap) - 1e-3);
  EXPECT_EQ(out.itl_ms.size(), 2u);

  Received r = last_received();
  EXPECT_EQ(r.path, "/v1/chat/completions");
  EXPECT_EQ(r.body["messages"], Json::parse(R"([{"role": "user", "content": "Hello world"}])"));
  EXPECT_FALSE(r.body.contains("prompt"));
}

// Behind `tpserve router`: the backend that answered, from its response header; the output
// text only when asked for (tpbench compare), a chat's reasoning before its content.
TEST_F(OpenAiTargetTest, RecordsTheRoutersBackendAndTheOutputWhenAsked) {
  Json reasoning = ChatChunk({{"reasoning_content", "hmm, "}});
  Serve({.pieces = {Event(ChatChunk({{"role", "assistant"}, {"content", ""}})), Event(reasoning),
                    Event(ChatChunk({{"content", "caf\xc3\xa9"}})), Event(ChatChunk({{"content", " ok"}}, "stop")),
                    kDone},
         .backend_header = "http://10.0.0.2:8000/v1"});
  OpenAiTargetOptions options = Options();
  options.chat = true;
  RequestOutcome out = Send(options, Request());
  EXPECT_TRUE(out.success) << out.error;
  EXPECT_EQ(out.backend, "http://10.0.0.2:8000/v1");
  EXPECT_FALSE(out.output_text.has_value()) << "kept without capture_output";

  options.capture_output = true;
  out = Send(options, Request());
  EXPECT_TRUE(out.success) << out.error;
  EXPECT_EQ(out.backend, "http://10.0.0.2:8000/v1");
  EXPECT_EQ(out.output_text, "hmm, caf\xc3\xa9 ok");
  EXPECT_FALSE(out.output_token_ids.has_value());  // the OpenAI API gives no token ids
}

TEST_F(OpenAiTargetTest, NoBackendHeaderNoBackendAndCompletionTextKept) {
  Serve({.pieces = {Event(TextChunk("a")), Event(TextChunk("")), Event(TextChunk(" b", "length")), kDone}});
  OpenAiTargetOptions options = Options();
  options.capture_output = true;
  RequestOutcome out = Send(options, Request());
  EXPECT_TRUE(out.success) << out.error;
  EXPECT_EQ(out.backend, "");
  EXPECT_EQ(out.output_text, "a b");
}

TEST_F(OpenAiTargetTest, GroqUsageUnderXGroqCorrectsTheChunkCount) {
  // Groq: chat chunks, no stream_options usage chunk, usage in the last chunk's x_groq.
  Json last = ChatChunk(Json::object(), "stop");
  last["x_groq"] = {{"id", "req_1"}, {"usage", Usage(9, 4)}};
  Serve({.pieces = {Event(ChatChunk({{"role", "assistant"}, {"content", ""}})), Event(ChatChunk({{"content", "a"}})),
                    Event(ChatChunk({{"content", "bc"}})), Event(ChatChunk({{"content", "d"}})), Event(last), kDone}});
  OpenAiTargetOptions options = Options();
  options.chat = true;
  options.api_key = "gsk_test";
  RequestOutcome out = Send(options, Request());
  EXPECT_TRUE(out.success) << out.error;
  EXPECT_EQ(out.prompt_tokens, 9);
  EXPECT_EQ(out.completion_tokens, 4);  // three chunks, four tokens by the server's count
  EXPECT_EQ(out.itl_ms.size(), 2u);
}

TEST_F(OpenAiTargetTest, ParsesEventsSplitAcrossWritesWithCrLfAndCommentLines) {
  const std::string first = "data: " + TextChunk("a").dump() + "\r\n\r\n";
  Serve({.pieces = {": keep-alive comment\r\n\r\n", first.substr(0, 10), first.substr(10, first.size() - 11),
                    first.substr(first.size() - 1),
                    // "data:" without a space, an event: field, and one JSON object over two data lines.
                    "event: completion\r\ndata:" + TextChunk("b").dump() + "\r\n\r\n",
                    "data: {\"choices\": [{\"index\": 0, \"text\": \"c\",\r\ndata: \"finish_reason\": \"stop\"}]}\r\n",
                    "\r\n", "data: [DO", "NE]\r\n\r\n"},
         .gap = absl::Milliseconds(30)});
  RequestOutcome out = Send(Options(), Request());
  EXPECT_TRUE(out.success) << out.error;
  EXPECT_EQ(out.completion_tokens, 3);
  EXPECT_EQ(out.finish_reason, "stop");
  EXPECT_EQ(out.prompt_tokens, -1);  // no usage sent
}

TEST_F(OpenAiTargetTest, TokenIdsAreSentAsAnArrayWhenAccepted) {
  Serve({.pieces = {Event(TextChunk("x", "stop")), kDone}});
  BenchRequest request = Request();
  request.token_ids = {101, 7, 42};

  absl::StatusOr<std::unique_ptr<Target>> target = MakeOpenAiTarget(Options());
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_TRUE((*target)->AcceptsTokenIds());
  RequestOutcome out = (*target)->Send(request, absl::Seconds(30));
  EXPECT_TRUE(out.success) << out.error;
  EXPECT_EQ(last_received().body["prompt"], Json::array({101, 7, 42}));

  OpenAiTargetOptions text_only = Options();
  text_only.send_token_ids = false;
  target = MakeOpenAiTarget(text_only);
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_FALSE((*target)->AcceptsTokenIds());
  out = (*target)->Send(request, absl::Seconds(30));
  EXPECT_TRUE(out.success) << out.error;
  EXPECT_EQ(last_received().body["prompt"], "Hello world");

  OpenAiTargetOptions chat = Options();
  chat.chat = true;
  target = MakeOpenAiTarget(chat);
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_FALSE((*target)->AcceptsTokenIds());
}

TEST_F(OpenAiTargetTest, OptionalFieldsOnlyWhenAsked) {
  Serve({.pieces = {Event(TextChunk("x", "stop")), kDone}});
  OpenAiTargetOptions options = Options();
  options.model = "";
  options.include_usage = false;
  BenchRequest request = Request();
  request.ignore_eos = true;
  request.temperature = 0.7f;
  RequestOutcome out = Send(options, request);
  EXPECT_TRUE(out.success) << out.error;
  Received r = last_received();
  EXPECT_EQ(r.body["ignore_eos"], true);
  EXPECT_EQ(r.body["temperature"], 0.7);
  EXPECT_FALSE(r.body.contains("model"));
  EXPECT_FALSE(r.body.contains("stream_options"));
  EXPECT_EQ(r.body["stream"], true);
}

TEST_F(OpenAiTargetTest, AuthorizationHeaderOnlyWithAKey) {
  Serve({.pieces = {Event(TextChunk("x", "stop")), kDone}});
  OpenAiTargetOptions options = Options();
  EXPECT_TRUE(Send(options, Request()).success);
  EXPECT_FALSE(last_received().authorization.has_value());
  options.api_key = "sk-secret";
  EXPECT_TRUE(Send(options, Request()).success);
  EXPECT_EQ(last_received().authorization, "Bearer sk-secret");
}

TEST_F(OpenAiTargetTest, HttpErrorCarriesTheServersMessage) {
  Serve({.status = 400,
         .error_body = R"({"error": {"message": "max_tokens is too large", "type": "invalid_request_error"}})"});
  RequestOutcome out = Send(Options(), Request());
  EXPECT_FALSE(out.success);
  EXPECT_FALSE(out.timeout);
  EXPECT_EQ(out.error, "HTTP 400: max_tokens is too large");
  EXPECT_EQ(out.ttft_ms, -1);
  EXPECT_GT(out.latency_ms, 0);
}

TEST_F(OpenAiTargetTest, HttpErrorWithoutJsonQuotesTheBodyTruncated) {
  Serve({.status = 503, .error_body = std::string(500, 'z')});
  RequestOutcome out = Send(Options(), Request());
  EXPECT_FALSE(out.success);
  EXPECT_THAT(out.error, StartsWith("HTTP 503: zzzz"));
  EXPECT_LE(out.error.size(), std::string("HTTP 503: ").size() + 200 + 3);
}

TEST_F(OpenAiTargetTest, ErrorEventMidStreamFailsTheRequest) {
  Serve({.pieces = {Event(TextChunk("a")), Event({{"error", {{"message", "engine died"}, {"code", 500}}}}),
                    Event(TextChunk("b", "stop")), kDone}});
  RequestOutcome out = Send(Options(), Request());
  EXPECT_FALSE(out.success);
  EXPECT_THAT(out.error, HasSubstr("engine died"));
  EXPECT_EQ(out.completion_tokens, 1);
  EXPECT_GT(out.ttft_ms, 0);
}

TEST_F(OpenAiTargetTest, MalformedEventAbortsTheStream) {
  Serve({.pieces = {Event(TextChunk("a")), "data: this is\ndata: not json\n\n", Event(TextChunk("b", "stop")), kDone}});
  RequestOutcome out = Send(Options(), Request());
  EXPECT_FALSE(out.success);
  EXPECT_EQ(out.error, "malformed SSE event: this is\nnot json");  // data lines joined by '\n'
  EXPECT_EQ(out.completion_tokens, 1);  // nothing after the bad event counted
  EXPECT_EQ(out.finish_reason, "");
}

TEST_F(OpenAiTargetTest, StreamEndingBeforeFinishIsAnError) {
  Serve({.pieces = {Event(TextChunk("a")), Event(TextChunk("b"))}, .end = End::kClose});
  RequestOutcome out = Send(Options(), Request());
  EXPECT_FALSE(out.success);
  EXPECT_FALSE(out.timeout);
  EXPECT_THAT(out.error, HasSubstr("stream ended before the response finished"));
  EXPECT_EQ(out.completion_tokens, 2);
}

TEST_F(OpenAiTargetTest, DroppedConnectionBeforeFinishIsAnError) {
  Serve({.pieces = {Event(TextChunk("a"))}, .end = End::kDrop});
  RequestOutcome out = Send(Options(), Request());
  EXPECT_FALSE(out.success);
  EXPECT_THAT(out.error, HasSubstr("stream ended before the response finished"));
  EXPECT_EQ(out.completion_tokens, 1);
}

TEST_F(OpenAiTargetTest, FinishReasonWithoutDoneSucceeds) {
  Serve({.pieces = {Event(TextChunk("a")), Event(TextChunk("b", "stop"))}, .end = End::kClose});
  RequestOutcome out = Send(Options(), Request());
  EXPECT_TRUE(out.success) << out.error;
  EXPECT_EQ(out.finish_reason, "stop");
}

TEST_F(OpenAiTargetTest, NonStreamingBodyIsReported) {
  Serve({.pieces = {R"({"choices": [{"text": "abc", "finish_reason": "stop"}]})"}});
  RequestOutcome out = Send(Options(), Request());
  EXPECT_FALSE(out.success);
  EXPECT_THAT(out.error, HasSubstr("not an SSE stream"));
  EXPECT_THAT(out.error, HasSubstr("\"text\": \"abc\""));
}

TEST_F(OpenAiTargetTest, StallPastTheTimeoutTimesOut) {
  Serve({.pieces = {Event(TextChunk("a"))}, .end = End::kStall});
  RequestOutcome out = Send(Options(), Request(), absl::Milliseconds(300));
  EXPECT_FALSE(out.success);
  EXPECT_TRUE(out.timeout);
  EXPECT_EQ(out.error, "timed out after 300 ms (1 chunks received)");
  EXPECT_GT(out.ttft_ms, 0);
  EXPECT_GE(out.latency_ms, 250);
}

TEST_F(OpenAiTargetTest, RefusedConnectionNamesTheUrl) {
  RefusingPort refusing;
  ASSERT_GT(refusing.port(), 0);
  const std::string base = "http://127.0.0.1:" + std::to_string(refusing.port()) + "/v1";

  OpenAiTargetOptions options;
  options.base_url = base;
  RequestOutcome out = Send(options, Request(), absl::Seconds(10));
  EXPECT_FALSE(out.success);
  EXPECT_FALSE(out.timeout);
  EXPECT_THAT(out.error, StartsWith("cannot connect to " + base + "/completions: "));
  EXPECT_THAT(out.error, HasSubstr("refused"));
  EXPECT_EQ(out.ttft_ms, -1);
  EXPECT_GE(out.latency_ms, 0);
}

TEST_F(OpenAiTargetTest, ConcurrentSendsAreIndependent) {
  Serve({.pieces = {Event(TextChunk("a")), Event(TextChunk("b", "stop")), Event(UsageChunk(3, 2)), kDone},
         .gap = absl::Milliseconds(20)});
  absl::StatusOr<std::unique_ptr<Target>> target = MakeOpenAiTarget(Options());
  ASSERT_TRUE(target.ok()) << target.status();
  constexpr int kThreads = 6;
  std::vector<RequestOutcome> outs(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] { outs[i] = (*target)->Send(Request(), absl::Seconds(30)); });
  }
  for (std::thread& t : threads) t.join();
  for (const RequestOutcome& out : outs) {
    EXPECT_TRUE(out.success) << out.error;
    EXPECT_EQ(out.completion_tokens, 2);
    EXPECT_EQ(out.itl_ms.size(), 1u);
  }
  EXPECT_EQ(received().size(), static_cast<size_t>(kThreads));
}

absl::StatusOr<std::unique_ptr<Target>> MakeWithUrl(std::string base_url) {
  OpenAiTargetOptions options;
  options.base_url = std::move(base_url);
  return MakeOpenAiTarget(std::move(options));
}

TEST(MakeOpenAiTargetTest, ValidatesTheBaseUrl) {
  absl::StatusOr<std::unique_ptr<Target>> t = MakeWithUrl("ftp://x");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("\"ftp://x\" must start with http:// or https://"));

  t = MakeWithUrl("");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("base URL is empty"));

  t = MakeWithUrl("https://");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("no host"));

  t = MakeWithUrl("HTTPS://api.groq.com/openai/v1/");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->Name(), "HTTPS://api.groq.com/openai/v1");
  EXPECT_TRUE((*t)->AcceptsTokenIds());
}

}  // namespace
}  // namespace tpserve::bench

// HttpTransport driven directly: a test handler per case and raw POSIX sockets as clients, so
// every byte on the wire is the test's (keep-alive, pipelining, chunked and HTTP/1.0 streams,
// deadlines, limits, 100-continue, disconnects, shutdown, many connections).
#include "coordinator/api/http_transport.h"

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/raw_http_client.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

bool WaitFor(const std::function<bool()>& condition, absl::Duration limit = kEventually) {
  const absl::Time deadline = absl::Now() + limit;
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

std::string Get(const std::string& target, const std::string& extra_headers = "") {
  return absl::StrCat("GET ", target, " HTTP/1.1\r\nHost: test\r\n", extra_headers, "\r\n");
}

std::string PostRequest(const std::string& target, const std::string& body) {
  return absl::StrCat("POST ", target, " HTTP/1.1\r\nHost: test\r\nContent-Length: ", body.size(), "\r\n\r\n", body);
}

// What the test's error_body callback makes of a transport error: checked byte for byte.
std::string ErrorBody(int status, const absl::Status& error) {
  return absl::StrCat("{\"status\":", status, ",\"message\":\"", error.message(), "\"}");
}

// Answers every request with "<method> <target> <body>".
void Echo(const std::shared_ptr<HttpExchange>& exchange) {
  const HttpRequest& r = exchange->request();
  exchange->Respond(200, "text/plain", absl::StrCat(r.method, " ", r.target, " ", r.body), {{"X-Path", r.path}});
}

std::string EchoBody(const std::string& method, const std::string& target, const std::string& body = "") {
  return absl::StrCat(method, " ", target, " ", body);
}

// Exchanges the handler keeps (to answer later, or never), and the threads it started.
class Held {
 public:
  ~Held() { JoinThreads(); }
  void Add(std::shared_ptr<HttpExchange> e) {
    std::lock_guard<std::mutex> lock(mu_);
    exchanges_.push_back(std::move(e));
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return exchanges_.size();
  }
  void Clear() {
    std::vector<std::shared_ptr<HttpExchange>> dropped;
    std::lock_guard<std::mutex> lock(mu_);
    dropped.swap(exchanges_);
  }
  void Spawn(std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    threads_.emplace_back(std::move(fn));
  }
  void JoinThreads() {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
  }

 private:
  std::mutex mu_;
  std::vector<std::shared_ptr<HttpExchange>> exchanges_;
  std::vector<std::thread> threads_;
};

HttpTransportOptions LocalOptions() {
  HttpTransportOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.io_threads = 2;
  return o;
}

std::unique_ptr<HttpTransport> StartTransport(HttpTransportOptions options, HttpHandler handler) {
  auto t = std::make_unique<HttpTransport>(std::move(options), std::move(handler), ErrorBody);
  const absl::Status started = t->Start();
  EXPECT_TRUE(started.ok()) << started;
  EXPECT_GT(t->port(), 0);
  return t;
}

// A handler that keeps each exchange unanswered in `held`, notes its arrival in `received`
// and its client's leaving in `gone`.
HttpHandler HoldUnanswered(Held& held, absl::Notification& received, absl::Notification& gone) {
  return [&held, &received, &gone](std::shared_ptr<HttpExchange> e) {
    e->OnClientGone([&gone] { gone.Notify(); });
    held.Add(e);
    received.Notify();
  };
}

TEST(HttpTransportTest, RespondsWithContentLengthAndKeepsTheConnectionAlive) {
  auto server = StartTransport(LocalOptions(), Echo);
  RawHttpClient c(server->port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.Send(Get("/first?x=1")));
  absl::StatusOr<RawHttpResponse> r = c.ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(r->Header("content-type"), "text/plain");
  EXPECT_EQ(r->Header("content-length"), std::to_string(r->body.size()));
  EXPECT_EQ(r->Header("x-path"), "/first");
  EXPECT_FALSE(r->Has("connection"));
  EXPECT_EQ(r->body, EchoBody("GET", "/first?x=1"));

  ASSERT_TRUE(c.Send(PostRequest("/second", "payload")));
  r = c.ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, EchoBody("POST", "/second", "payload"));
  EXPECT_EQ(c.unread(), "");
  EXPECT_FALSE(c.closed_by_server());
}

TEST(HttpTransportTest, AnswersPipelinedRequestsInOrder) {
  auto server = StartTransport(LocalOptions(), Echo);
  RawHttpClient c(server->port());
  ASSERT_TRUE(c.Send(Get("/one") + PostRequest("/two", "2") + Get("/three")));
  for (const std::string& expected :
       {EchoBody("GET", "/one"), EchoBody("POST", "/two", "2"), EchoBody("GET", "/three")}) {
    absl::StatusOr<RawHttpResponse> r = c.ReadResponse();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, expected);
  }
  EXPECT_EQ(c.unread(), "");
}

// Requests answered at once, pipelined by the thousand: each is read as soon as the one before
// is answered, without the stack growing with every request (a client could otherwise crash
// the server by pipelining), and all are answered in order.
TEST(HttpTransportTest, AnswersThousandsOfPipelinedRequests) {
  auto server = StartTransport(LocalOptions(), Echo);
  RawHttpClient c(server->port());
  constexpr int kRequests = 20000;
  std::string all;
  for (int i = 0; i < kRequests; ++i) all += Get(absl::StrCat("/", i));
  std::thread sender([&] { EXPECT_TRUE(c.Send(all)); });  // while the responses are read
  int answered = 0;
  for (int i = 0; i < kRequests; ++i) {
    absl::StatusOr<RawHttpResponse> r = c.ReadResponse();
    if (!r.ok() || r->body != EchoBody("GET", absl::StrCat("/", i))) {
      ADD_FAILURE() << "request " << i << ": " << (r.ok() ? r->body : r.status().ToString());
      break;
    }
    ++answered;
  }
  sender.join();
  EXPECT_EQ(answered, kRequests);
}

// The handler hands /stream to another thread, which streams three pieces; anything else is echoed.
void StreamFromAnotherThread(Held& held, std::shared_ptr<HttpExchange> exchange) {
  if (exchange->request().path != "/stream") return Echo(exchange);
  held.Spawn([exchange] {
    exchange->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    for (const char* piece : {"alpha", "beta\n", "gamma gamma"}) {
      absl::SleepFor(absl::Milliseconds(20));
      exchange->Write(piece);
    }
    exchange->Write("");  // an empty piece is no chunk (it would end the body)
    exchange->End();
  });
}

TEST(HttpTransportTest, StreamsAChunkedResponseFromAnotherThreadThenKeepsAlive) {
  Held held;
  auto server =
      StartTransport(LocalOptions(), [&](std::shared_ptr<HttpExchange> e) { StreamFromAnotherThread(held, e); });
  RawHttpClient c(server->port());
  ASSERT_TRUE(c.Send(Get("/stream")));
  absl::StatusOr<RawHttpResponse> r = c.ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->Header("content-type"), "text/event-stream");
  EXPECT_EQ(r->Header("cache-control"), "no-cache");
  EXPECT_FALSE(r->Has("content-length"));
  EXPECT_TRUE(r->chunked);
  EXPECT_THAT(r->chunks, ::testing::ElementsAre("alpha", "beta\n", "gamma gamma"));

  ASSERT_TRUE(c.Send(Get("/after")));
  r = c.ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body, EchoBody("GET", "/after"));
  EXPECT_FALSE(c.closed_by_server());
  held.JoinThreads();
}

TEST(HttpTransportTest, StreamsInOrderToAClientThatFallsBehind) {
  // 16 MiB queued before the client reads a byte: more than the sockets' buffers hold, so the
  // server must wait for the client to drain them and carry on where each send stopped.
  constexpr int kChunks = 256;
  constexpr size_t kChunkBytes = 64 << 10;
  auto chunk = [](int i) { return std::string(kChunkBytes, static_cast<char>('a' + i % 26)); };
  HttpTransportOptions o = LocalOptions();
  o.max_pending_write_bytes = size_t{64} << 20;
  Held held;
  absl::Notification queued;
  auto server = StartTransport(o, [&](std::shared_ptr<HttpExchange> e) {
    if (e->request().path != "/big") return Echo(e);
    held.Spawn([e, &queued, &chunk] {
      e->StartStream(200, "application/octet-stream");
      for (int i = 0; i < kChunks; ++i) e->Write(chunk(i));
      e->End();
      queued.Notify();
    });
  });
  RawHttpClient c(server->port());
  ASSERT_TRUE(c.Send(Get("/big")));
  ASSERT_TRUE(queued.WaitForNotificationWithTimeout(kEventually));
  absl::StatusOr<RawHttpResponse> r = c.ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->chunks.size(), size_t{kChunks});
  for (int i = 0; i < kChunks; ++i) ASSERT_EQ(r->chunks[i], chunk(i)) << "chunk " << i;
  // The connection is kept alive after it.
  ASSERT_TRUE(c.Send(Get("/after")));
  r = c.ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body, EchoBody("GET", "/after"));
}

TEST(HttpTransportTest, DropsAClientThatReadsNothingOfALongStream) {
  HttpTransportOptions o = LocalOptions();
  o.max_pending_write_bytes = size_t{1} << 20;
  Held held;
  absl::Notification gone;
  auto server = StartTransport(o, [&](std::shared_ptr<HttpExchange> e) {
    e->StartStream(200, "application/octet-stream");
    e->OnClientGone([&gone] { gone.Notify(); });
    held.Spawn([e] {
      for (int i = 0; i < 64; ++i) e->Write(std::string(size_t{256} << 10, 'x'));  // 16 MiB
    });
  });
  RawHttpClient c(server->port());
  ASSERT_TRUE(c.Send(Get("/never-read")));
  EXPECT_TRUE(gone.WaitForNotificationWithTimeout(kEventually));
  EXPECT_TRUE(c.WaitClosed());
  held.JoinThreads();
  held.Clear();
  EXPECT_TRUE(WaitFor([&] { return server->open_connections() == 0; })) << server->open_connections();
}

TEST(HttpTransportTest, Http10StreamIsRawAndEndsWithTheConnection) {
  Held held;
  auto server =
      StartTransport(LocalOptions(), [&](std::shared_ptr<HttpExchange> e) { StreamFromAnotherThread(held, e); });
  RawHttpClient c(server->port());
  ASSERT_TRUE(c.Send("GET /stream HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
  absl::StatusOr<RawHttpResponse> r = c.ReadResponse();  // no length, not chunked: the body ends at the close
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_FALSE(r->Has("transfer-encoding"));
  EXPECT_FALSE(r->Has("content-length"));
  EXPECT_EQ(r->Header("connection"), "close");
  EXPECT_EQ(r->body, "alphabeta\ngamma gamma");
  EXPECT_TRUE(c.closed_by_server());
  held.JoinThreads();

  // A whole response to HTTP/1.0 keeps the connection only when asked to.
  RawHttpClient keep(server->port());
  ASSERT_TRUE(keep.Send("GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
  r = keep.ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->Header("connection"), "keep-alive");
  EXPECT_EQ(r->body, EchoBody("GET", "/a"));
  ASSERT_TRUE(keep.Send("GET /b HTTP/1.0\r\n\r\n"));
  r = keep.ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->Header("connection"), "close");
  EXPECT_EQ(r->body, EchoBody("GET", "/b"));
  EXPECT_TRUE(keep.WaitClosed());
}

// What a request that missed its header or body deadline is answered before the close.
void ExpectRequestTimeout(RawHttpClient& c, const std::string& message) {
  absl::StatusOr<RawHttpResponse> r = c.ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status_line, "HTTP/1.1 408 Request Timeout");
  EXPECT_EQ(r->Header("content-type"), "application/json");
  EXPECT_EQ(r->Header("connection"), "close");
  EXPECT_EQ(r->body, absl::StrCat(R"({"status":408,"message":")", message, R"("})"));
  EXPECT_TRUE(c.WaitClosed());
  EXPECT_EQ(c.unread(), "");
}

TEST(HttpTransportTest, AnswersAClientThatStallsInItsHeadersWith408WhileServingOthers) {
  HttpTransportOptions o = LocalOptions();
  o.header_timeout = absl::Milliseconds(300);
  o.keep_alive_timeout = absl::Seconds(60);
  o.body_timeout = absl::Seconds(60);
  o.io_threads = 1;
  std::atomic<int> handled{0};
  auto server = StartTransport(o, [&](std::shared_ptr<HttpExchange> e) {
    ++handled;
    Echo(e);
  });
  RawHttpClient slow(server->port());
  ASSERT_TRUE(slow.Send("GET /sl"));
  RawHttpClient silent(server->port());  // connected, sends nothing: closed without an answer
  RawHttpClient fast(server->port());
  ASSERT_TRUE(fast.Send(Get("/fast")));
  absl::StatusOr<RawHttpResponse> r = fast.ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body, EchoBody("GET", "/fast"));
  ExpectRequestTimeout(slow, "the request headers did not arrive within 300ms (--http-header-timeout); send them "
                             "without pausing");
  EXPECT_TRUE(silent.WaitClosed());
  EXPECT_EQ(silent.unread(), "");
  EXPECT_EQ(handled.load(), 1);
}

TEST(HttpTransportTest, ClosesAnIdleKeptAliveConnection) {
  HttpTransportOptions o = LocalOptions();
  o.keep_alive_timeout = absl::Milliseconds(200);
  o.header_timeout = absl::Seconds(60);
  o.body_timeout = absl::Seconds(60);
  auto server = StartTransport(o, Echo);
  RawHttpClient c(server->port());
  ASSERT_TRUE(c.Send(Get("/x")));
  absl::StatusOr<RawHttpResponse> r = c.ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body, EchoBody("GET", "/x"));
  EXPECT_TRUE(c.WaitClosed());
  EXPECT_EQ(c.unread(), "");
  EXPECT_TRUE(WaitFor([&] { return server->open_connections() == 0; }));
}

TEST(HttpTransportTest, AnswersAClientThatStallsInItsBodyWith408) {
  HttpTransportOptions o = LocalOptions();
  o.body_timeout = absl::Milliseconds(300);
  o.header_timeout = absl::Seconds(60);
  o.keep_alive_timeout = absl::Seconds(60);
  std::atomic<int> handled{0};
  auto server = StartTransport(o, [&](std::shared_ptr<HttpExchange> e) {
    ++handled;
    Echo(e);
  });
  const std::string message =
      "the request body did not arrive within 300ms of its headers (--http-body-timeout); send the whole body "
      "without pausing";
  {  // 10 of 100 bytes, then nothing
    RawHttpClient c(server->port());
    ASSERT_TRUE(c.Send("POST /b HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\n\r\n0123456789"));
    ExpectRequestTimeout(c, message);
  }
  {  // a chunked body that stops after its first chunk, on a connection that was kept alive
    RawHttpClient c(server->port());
    ASSERT_TRUE(c.Send(Get("/first")));
    absl::StatusOr<RawHttpResponse> r = c.ReadResponse();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->body, EchoBody("GET", "/first"));
    ASSERT_TRUE(c.Send("POST /b HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"));
    ExpectRequestTimeout(c, message);
  }
  EXPECT_EQ(handled.load(), 1);
  EXPECT_TRUE(WaitFor([&] { return server->open_connections() == 0; })) << server->open_connections();
}

TEST(HttpTransportTest, RefusesABodyOverTheLimit) {
  HttpTransportOptions o = LocalOptions();
  o.max_body_bytes = 1024;
  std::atomic<int> handled{0};
  auto server = StartTransport(o, [&](std::shared_ptr<HttpExchange> e) {
    ++handled;
    Echo(e);
  });
  const std::string expected = R"({"status":413,"message":"request body exceeds the limit of 1024 bytes"})";
  {  // by Content-Length, before the body is read
    RawHttpClient c(server->port());
    ASSERT_TRUE(c.Send(PostRequest("/big", std::string(4096, 'x'))));
    absl::StatusOr<RawHttpResponse> r = c.ReadResponse();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status_line, "HTTP/1.1 413 Payload Too Large");
    EXPECT_EQ(r->Header("content-type"), "application/json");
    EXPECT_EQ(r->Header("connection"), "close");
    EXPECT_EQ(r->body, expected);
    EXPECT_TRUE(c.WaitClosed());
    EXPECT_EQ(c.unread(), "");
  }
  {  // chunked: two chunks, each under the limit, together over it
    RawHttpClient c(server->port());
    const std::string chunk = absl::StrCat(absl::Hex(600), "\r\n", std::string(600, 'y'), "\r\n");
    ASSERT_TRUE(c.Send(absl::StrCat("POST /big HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n", chunk,
                                    chunk, "0\r\n\r\n")));
    absl::StatusOr<RawHttpResponse> r = c.ReadResponse();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 413);
    EXPECT_EQ(r->body, expected);
    EXPECT_TRUE(c.WaitClosed());
  }
  {  // a chunked body within the limit is read whole
    RawHttpClient c(server->port());
    ASSERT_TRUE(
        c.Send("POST /small HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
               "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"));
    absl::StatusOr<RawHttpResponse> r = c.ReadResponse();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, EchoBody("POST", "/small", "hello world"));
  }
  EXPECT_EQ(handled.load(), 1);
}

TEST(HttpTransportTest, RefusesHeadersOverTheLimit) {
  HttpTransportOptions o = LocalOptions();
  o.max_header_bytes = 512;
  auto server = StartTransport(o, Echo);
  RawHttpClient c(server->port());
  ASSERT_TRUE(c.Send(Get("/h", absl::StrCat("X-Long: ", std::string(2048, 'h'), "\r\n"))));
  absl::StatusOr<RawHttpResponse> r = c.ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 431);
  EXPECT_EQ(r->body, R"({"status":431,"message":"request headers exceed the limit of 512 bytes"})");
  EXPECT_TRUE(c.WaitClosed());
}

TEST(HttpTransportTest, SendsContinueBeforeTheBodyIsSent) {
  absl::Notification handled;
  auto server = StartTransport(LocalOptions(), [&](std::shared_ptr<HttpExchange> e) {
    handled.Notify();
    Echo(e);
  });
  RawHttpClient c(server->port());
  ASSERT_TRUE(c.Send("POST /e HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"));
  absl::StatusOr<RawHttpResponse> r = c.ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status_line, "HTTP/1.1 100 Continue");
  EXPECT_TRUE(r->headers.empty());
  EXPECT_EQ(c.unread(), "");
  EXPECT_FALSE(handled.HasBeenNotified());
  ASSERT_TRUE(c.Send("hello"));
  r = c.ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, EchoBody("POST", "/e", "hello"));
}

TEST(HttpTransportTest, RefusesConnectionsOverTheLimitUntilOneCloses) {
  HttpTransportOptions o = LocalOptions();
  o.max_connections = 2;
  o.header_timeout = absl::Seconds(60);
  o.keep_alive_timeout = absl::Seconds(60);
  auto server = StartTransport(o, Echo);
  // Two connections, each answered once (so both are surely open), then idle.
  auto a = std::make_unique<RawHttpClient>(server->port());
  RawHttpClient b(server->port());
  for (RawHttpClient* c : {a.get(), &b}) {
    ASSERT_TRUE(c->Send(Get("/held")));
    absl::StatusOr<RawHttpResponse> r = c->ReadResponse();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 200);
  }
  EXPECT_EQ(server->open_connections(), 2);
  {
    RawHttpClient third(server->port());
    ASSERT_TRUE(third.Send(Get("/third")));
    absl::StatusOr<RawHttpResponse> r = third.ReadResponse();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status_line, "HTTP/1.1 503 Service Unavailable");
    EXPECT_EQ(r->Header("connection"), "close");
    EXPECT_EQ(
        r->body,
        R"({"status":503,"message":"the server has reached its limit of 2 connections (--max-connections); retry later"})");
    EXPECT_TRUE(third.WaitClosed());
  }
  a.reset();
  // The server counts a connection closed once it notices; then there is room again.
  ASSERT_TRUE(WaitFor([&] { return server->open_connections() == 1; })) << server->open_connections();
  RawHttpClient next(server->port());
  ASSERT_TRUE(next.Send(Get("/next")));
  absl::StatusOr<RawHttpResponse> r = next.ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, EchoBody("GET", "/next"));
  // The one that stayed is still served.
  ASSERT_TRUE(b.Send(Get("/still")));
  r = b.ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body, EchoBody("GET", "/still"));
}

// Connections that arrive together (taken in one accept batch) are refused only beyond the
// limit: the acceptor counts the open ones as it takes each.
TEST(HttpTransportTest, ServesExactlyTheLimitOfConnectionsArrivingTogether) {
  HttpTransportOptions o = LocalOptions();
  o.max_connections = 4;
  o.header_timeout = absl::Seconds(60);
  o.keep_alive_timeout = absl::Seconds(60);
  absl::Notification blocking;
  // The first request holds the (only) I/O thread while the others connect, so that they
  // wait in the listen queue and are accepted together.
  auto server = StartTransport(o, [&](const std::shared_ptr<HttpExchange>& exchange) {
    if (exchange->request().path == "/hold") {
      blocking.Notify();
      absl::SleepFor(absl::Milliseconds(300));
    }
    Echo(exchange);
  });
  RawHttpClient holder(server->port());
  ASSERT_TRUE(holder.Send(Get("/hold")));
  ASSERT_TRUE(blocking.WaitForNotificationWithTimeout(kEventually));
  std::vector<std::unique_ptr<RawHttpClient>> clients;
  for (int i = 0; i < 8; ++i) clients.push_back(std::make_unique<RawHttpClient>(server->port()));
  for (auto& c : clients) ASSERT_TRUE(c->Send(Get("/together")));
  absl::StatusOr<RawHttpResponse> held = holder.ReadResponse();
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->status, 200);
  int served = 0, refused = 0;
  for (auto& c : clients) {
    absl::StatusOr<RawHttpResponse> r = c->ReadResponse();
    ASSERT_TRUE(r.ok()) << r.status();
    served += r->status == 200 ? 1 : 0;
    refused += r->status == 503 ? 1 : 0;
  }
  EXPECT_EQ(served, 3);  // and the holder: 4
  EXPECT_EQ(refused, 5);
}

TEST(HttpTransportTest, ReportsAClientThatLeavesWhileItsResponseIsPending) {
  Held held;
  absl::Notification received;
  absl::Notification gone;
  auto server = StartTransport(LocalOptions(), HoldUnanswered(held, received, gone));
  RawHttpClient c(server->port());
  ASSERT_TRUE(c.Send(Get("/wait")));
  ASSERT_TRUE(received.WaitForNotificationWithTimeout(kEventually));
  EXPECT_FALSE(gone.HasBeenNotified());
  c.Close();
  EXPECT_TRUE(gone.WaitForNotificationWithTimeout(kEventually));
  held.Clear();
  EXPECT_TRUE(WaitFor([&] { return server->open_connections() == 0; })) << server->open_connections();
}

TEST(HttpTransportTest, ReportsAClientThatLeavesDuringAStream) {
  Held held;
  absl::Notification gone;
  auto server = StartTransport(LocalOptions(), [&](std::shared_ptr<HttpExchange> e) {
    e->StartStream(200, "text/plain");
    e->Write("first");
    e->OnClientGone([&] { gone.Notify(); });
    held.Add(e);
  });
  RawHttpClient c(server->port());
  ASSERT_TRUE(c.Send(Get("/stream")));
  // The head and the first chunk ("5\r\nfirst\r\n") arrive before the client leaves.
  ASSERT_TRUE(WaitFor([&] {
    c.ReadAtLeast(c.unread().size() + 1, absl::Milliseconds(50));
    return absl::StrContains(c.unread(), "\r\n\r\n5\r\nfirst\r\n");
  })) << c.unread();
  EXPECT_THAT(c.unread(), StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(c.unread(), HasSubstr("Transfer-Encoding: chunked\r\n"));
  EXPECT_FALSE(gone.HasBeenNotified());
  c.Close();
  EXPECT_TRUE(gone.WaitForNotificationWithTimeout(kEventually));
  held.Clear();
  EXPECT_TRUE(WaitFor([&] { return server->open_connections() == 0; })) << server->open_connections();
}

TEST(HttpTransportTest, ClosesTheConnectionOfAnExchangeDroppedUnanswered) {
  auto server = StartTransport(LocalOptions(), [](std::shared_ptr<HttpExchange> e) {
    if (e->request().path != "/drop") Echo(e);
  });
  RawHttpClient dropped(server->port());
  ASSERT_TRUE(dropped.Send(Get("/drop")));
  EXPECT_TRUE(dropped.WaitClosed());
  EXPECT_EQ(dropped.unread(), "");
  RawHttpClient other(server->port());
  ASSERT_TRUE(other.Send(Get("/ok")));
  absl::StatusOr<RawHttpResponse> r = other.ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body, EchoBody("GET", "/ok"));
}

TEST(HttpTransportTest, AnswersAMalformedRequestWith400) {
  std::atomic<int> handled{0};
  auto server = StartTransport(LocalOptions(), [&](std::shared_ptr<HttpExchange> e) {
    ++handled;
    Echo(e);
  });
  RawHttpClient c(server->port());
  ASSERT_TRUE(c.Send("GARBAGE\r\n\r\n"));
  absl::StatusOr<RawHttpResponse> r = c.ReadResponse();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status_line, "HTTP/1.1 400 Bad Request");
  EXPECT_THAT(r->body, StartsWith(R"({"status":400,"message":"malformed HTTP request: )"));
  EXPECT_EQ(r->Header("connection"), "close");
  EXPECT_TRUE(c.WaitClosed());
  EXPECT_EQ(handled.load(), 0);
}

TEST(HttpTransportTest, ShutdownClosesPendingExchanges) {
  Held held;
  absl::Notification received;
  absl::Notification gone;
  auto server = StartTransport(LocalOptions(), HoldUnanswered(held, received, gone));
  const int port = server->port();
  RawHttpClient c(port);
  ASSERT_TRUE(c.Send(Get("/pending")));
  ASSERT_TRUE(received.WaitForNotificationWithTimeout(kEventually));
  server->Shutdown();
  EXPECT_TRUE(gone.HasBeenNotified());
  EXPECT_TRUE(c.WaitClosed());
  EXPECT_EQ(c.unread(), "");
  server->Shutdown();
  held.Clear();  // after Shutdown: the exchange's last reference goes with no I/O thread left
  EXPECT_TRUE(WaitFor([&] { return server->open_connections() == 0; })) << server->open_connections();
  RawHttpClient late(port);  // nothing listens any more
  EXPECT_FALSE(late.connected());
}

TEST(HttpTransportTest, ServesManyConcurrentConnectionsOnOneThread) {
  HttpTransportOptions o = LocalOptions();
  o.io_threads = 1;
  o.header_timeout = absl::Seconds(60);  // every connection stays open to the end, however slow the machine
  o.keep_alive_timeout = absl::Seconds(60);
  auto server = StartTransport(o, Echo);
  constexpr int kClients = 200;
  std::vector<std::unique_ptr<RawHttpClient>> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(std::make_unique<RawHttpClient>(server->port()));
    ASSERT_TRUE(clients.back()->connected()) << i;
  }
  for (int i = 0; i < kClients; ++i) ASSERT_TRUE(clients[i]->Send(Get(absl::StrCat("/c/", i)))) << i;
  for (int i = 0; i < kClients; ++i) {
    absl::StatusOr<RawHttpResponse> r = clients[i]->ReadResponse();
    ASSERT_TRUE(r.ok()) << i << ": " << r.status();
    EXPECT_EQ(r->body, EchoBody("GET", absl::StrCat("/c/", i)));
  }
  EXPECT_EQ(server->open_connections(), kClients);
}

}  // namespace
}  // namespace tpserve

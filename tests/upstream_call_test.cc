// The router's backend client (coordinator/router/upstream_call.h) against a scripted HTTP/1.1
// server on a loopback socket: keep-alive connections are reused, a "Connection: close" or cut
// response is never pooled, a pooled connection the server closed is retried once on a new
// one, chunks read together are forwarded together, and the pool's bounds (idle count, idle
// timeout).
#include "coordinator/router/upstream_call.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"

namespace tpserve {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// What the server does with a request: answer and keep the connection, answer with
// "Connection: close" and close it, close it without answering, or send the head and one
// chunk of a stream and wait for the client to close, or send a whole stream of several chunks
// in one write (kept alive).
enum class Action { kAnswer, kAnswerClose, kDropUnanswered, kStreamUntilClosed, kStreamBurst };

// Serves `connections` connections one after another on 127.0.0.1, each request handled by
// `script(connection index, request index on it)`. Records what it saw.
class ScriptedServer {
 public:
  ScriptedServer(int connections, std::function<Action(int, int)> script)
      : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this, connections, script] {
      for (int c = 0; c < connections; ++c) Serve(c, script);
      finished_ = true;
    });
  }
  // A test that failed may leave the server waiting for a connection that never comes: empty
  // ones end it (each is accepted and closed at once).
  ~ScriptedServer() {
    while (!finished_) {
      tcp::socket nudge(io_);
      beast::error_code ec;
      nudge.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_), ec);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    Join();
  }
  // Waits for the server to have served every connection.
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  int port() const { return port_; }
  int requests() const { return requests_; }
  int accepted() const { return accepted_; }
  bool saw_client_close() const { return saw_client_close_; }

 private:
  void Serve(int c, const std::function<Action(int, int)>& script) {
    tcp::socket socket(io_);
    acceptor_.accept(socket);
    ++accepted_;
    beast::flat_buffer buffer;
    for (int r = 0;; ++r) {
      http::request<http::string_body> req;
      beast::error_code ec;
      http::read(socket, buffer, req, ec);
      if (ec) return;  // the client closed it
      ++requests_;
      const Action action = script(c, r);
      if (action == Action::kDropUnanswered) return;
      if (action == Action::kStreamUntilClosed) {
        asio::write(socket, asio::buffer(std::string("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")));
        char byte;
        socket.read_some(asio::buffer(&byte, 1), ec);  // blocks until the client goes
        saw_client_close_ = ec == asio::error::eof || ec == asio::error::connection_reset;
        return;
      }
      if (action == Action::kStreamBurst) {
        asio::write(socket, asio::buffer(std::string("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                                     "3\r\nabc\r\n3\r\ndef\r\n2\r\ngh\r\n1\r\ni\r\n0\r\n\r\n")),
                    ec);
        if (ec) return;
        continue;
      }
      http::response<http::string_body> res(http::status::ok, 11);
      res.body() = "ok" + std::to_string(c) + "." + std::to_string(r);
      res.keep_alive(action == Action::kAnswer);
      res.prepare_payload();
      http::write(socket, res, ec);
      if (ec || action == Action::kAnswerClose) return;
    }
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<int> requests_{0}, accepted_{0};
  std::atomic<bool> saw_client_close_{false};
  std::atomic<bool> finished_{false};
};

// One call's callbacks, as they came.
struct Seen {
  std::vector<std::string> events;  // "opened", "reused", "stale", "head 200"
  std::string body;
  int pieces = 0;  // data callbacks
  std::optional<absl::Status> end;
};

class UpstreamCallTest : public ::testing::Test {
 protected:
  // Runs one POST to `endpoint` to completion (or until `cancel_on_data` cancels it).
  Seen Call(UpstreamEndpoint& endpoint, bool cancel_on_data = false) {
    Seen seen;
    Strand strand = asio::make_strand(io_);
    std::shared_ptr<UpstreamCall> call;
    asio::post(strand, [&] {
      UpstreamRequest request;
      request.endpoint = &endpoint;
      request.target = "/v1/completions";
      request.body = "{}";
      request.connect_timeout = absl::Seconds(5);
      request.response_timeout = absl::Seconds(5);
      call = UpstreamCall::Start(
          strand, std::move(request),
          {[&](bool reused) { seen.events.push_back(reused ? "reused" : "opened"); },
           [&] { seen.events.push_back("stale"); },
           [&](int status, std::string) { seen.events.push_back("head " + std::to_string(status)); },
           [&](std::string piece) {
             seen.body += piece;
             ++seen.pieces;
             if (cancel_on_data) call->Cancel();
           },
           [&](absl::Status status) { seen.end = std::move(status); },
           nullptr});
    });
    io_.restart();
    io_.run_for(std::chrono::seconds(10));  // bounded: a broken client may leave a read pending
    call.reset();
    return seen;
  }

  asio::io_context io_;
};

using ::testing::ElementsAre;

TEST_F(UpstreamCallTest, KeepAliveConnectionsAreReused) {
  ScriptedServer server(1, [](int, int) { return Action::kAnswer; });
  UpstreamEndpoint endpoint("127.0.0.1", server.port(), {});
  for (int r = 0; r < 3; ++r) {
    Seen seen = Call(endpoint);
    ASSERT_TRUE(seen.end.has_value() && seen.end->ok()) << r;
    EXPECT_THAT(seen.events, ElementsAre(r == 0 ? "opened" : "reused", "head 200")) << r;
    EXPECT_EQ(seen.body, "ok0." + std::to_string(r));
    EXPECT_EQ(endpoint.idle_count(), 1u);
  }
  EXPECT_EQ(server.accepted(), 1);
  EXPECT_EQ(server.requests(), 3);
  endpoint.TakeIdle(absl::Now());  // closes it: the server's loop ends
}

TEST_F(UpstreamCallTest, ConnectionCloseIsNotPooled) {
  ScriptedServer server(2, [](int, int) { return Action::kAnswerClose; });
  UpstreamEndpoint endpoint("127.0.0.1", server.port(), {});
  for (int r = 0; r < 2; ++r) {
    Seen seen = Call(endpoint);
    ASSERT_TRUE(seen.end.has_value() && seen.end->ok()) << r;
    EXPECT_THAT(seen.events, ElementsAre("opened", "head 200")) << r;
    EXPECT_EQ(endpoint.idle_count(), 0u);
  }
  EXPECT_EQ(server.accepted(), 2);
}

// The server drops the pooled connection's next request unanswered (as a server whose idle
// timer closed it just then): the call goes on with a new connection, and succeeds.
TEST_F(UpstreamCallTest, AStalePooledConnectionIsRetriedOnceOnANewOne) {
  ScriptedServer server(2, [](int c, int r) { return c == 0 && r == 1 ? Action::kDropUnanswered : Action::kAnswer; });
  UpstreamEndpoint endpoint("127.0.0.1", server.port(), {});
  ASSERT_TRUE(Call(endpoint).end->ok());
  Seen seen = Call(endpoint);
  ASSERT_TRUE(seen.end.has_value());
  EXPECT_TRUE(seen.end->ok()) << *seen.end;
  EXPECT_THAT(seen.events, ElementsAre("reused", "stale", "opened", "head 200"));
  EXPECT_EQ(seen.body, "ok1.0");
  EXPECT_EQ(server.accepted(), 2);
  endpoint.TakeIdle(absl::Now());
}

// A stream cut short by the caller (a client gone): its connection is closed, never pooled.
// The server's one chunk is forwarded as it came, not held until the next one (which never
// comes: it would be forwarded only when the 5 s response timeout ends the read).
TEST_F(UpstreamCallTest, ACancelledStreamClosesItsConnection) {
  ScriptedServer server(1, [](int, int) { return Action::kStreamUntilClosed; });
  UpstreamEndpoint endpoint("127.0.0.1", server.port(), {});
  const absl::Time start = absl::Now();
  Seen seen = Call(endpoint, /*cancel_on_data=*/true);
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  EXPECT_EQ(seen.body, "abc");
  EXPECT_FALSE(seen.end.has_value());  // no callback after Cancel()
  EXPECT_EQ(endpoint.idle_count(), 0u);
  server.Join();
  EXPECT_TRUE(server.saw_client_close());
}

// Chunks that arrived together are forwarded as one piece (one write to the client), not one
// callback per chunk; the connection is pooled after the last chunk.
TEST_F(UpstreamCallTest, ChunksReadTogetherAreForwardedAsOnePiece) {
  ScriptedServer server(1, [](int, int) { return Action::kStreamBurst; });
  UpstreamEndpoint endpoint("127.0.0.1", server.port(), {});
  Seen seen = Call(endpoint);
  ASSERT_TRUE(seen.end.has_value() && seen.end->ok());
  EXPECT_EQ(seen.body, "abcdefghi");
  EXPECT_EQ(seen.pieces, 1);
  EXPECT_EQ(endpoint.idle_count(), 1u);
  endpoint.TakeIdle(absl::Now());  // closes it: the server's loop ends
}

TEST(UpstreamEndpointTest, KeepsAtMostMaxIdleForAtMostTheIdleTimeout) {
  asio::io_context io;
  ConnectionPoolOptions options;
  options.max_idle = 2;
  options.idle_timeout = absl::Seconds(60);
  UpstreamEndpoint endpoint("h", 80, options);
  const absl::Time t0 = absl::Now();
  for (int i = 0; i < 3; ++i) endpoint.PutIdle(std::make_unique<UpstreamConnection>(io.get_executor(), nullptr), t0);
  EXPECT_EQ(endpoint.idle_count(), 2u);
  EXPECT_NE(endpoint.TakeIdle(t0 + absl::Seconds(60)), nullptr);
  EXPECT_EQ(endpoint.TakeIdle(t0 + absl::Seconds(61)), nullptr);  // expired: closed, not reused
  EXPECT_EQ(endpoint.idle_count(), 0u);
  EXPECT_EQ(endpoint.host_header(), "h");
  EXPECT_EQ(UpstreamEndpoint("h", 8000, options).host_header(), "h:8000");
}

}  // namespace
}  // namespace tpserve

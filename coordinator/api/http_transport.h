// An event-driven HTTP/1.1 server (Boost.Beast's parser over Asio): a few I/O threads serve
// every connection; nothing blocks a thread per connection. It reads requests under
// deadlines (idle keep-alive, headers, body), bounds connections, hands each complete
// request to a handler as an HttpExchange, and writes whole or chunked (streamed) responses
// as the handler produces them, from any thread. A client that disconnects while its
// response is pending is noticed at once (the socket becomes readable at EOF) and reported
// to the exchange. The OpenAI routes on top of it are http_server.h. Tested by
// tests/http_transport_test.cc and, through the API, tests/frontend_http_test.cc.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tpserve {

class HttpConnection;  // http_transport.cc
class HttpAcceptor;    // http_acceptor.h

struct HttpTransportOptions {
  std::string host = "0.0.0.0";
  int port = 8000;  // 0 picks a free port (see HttpTransport::port())
  int io_threads = 1;
  // Open connections at most; one more gets a 503 and is closed.
  int max_connections = 4096;
  size_t max_header_bytes = size_t{64} << 10;  // longer headers get a 431
  size_t max_body_bytes = size_t{4} << 20;  // larger bodies get a 413 before they are read
  // A new connection must deliver its first request's headers within header_timeout; a
  // kept-alive connection may idle keep_alive_timeout between requests, then has
  // header_timeout for the headers once the first byte came. The body must arrive within
  // body_timeout of the headers. A connection past a deadline is closed.
  absl::Duration keep_alive_timeout = absl::Seconds(5);
  absl::Duration header_timeout = absl::Seconds(10);
  absl::Duration body_timeout = absl::Seconds(30);
  // A client that reads its response this much slower than it is produced is dropped.
  size_t max_pending_write_bytes = size_t{16} << 20;
};

struct HttpHeader {
  std::string name;
  std::string value;
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent, e.g. "/v1/models?x=1"
  std::string path;    // target without the query
  std::string body;
  std::string content_type;
  std::string authorization;  // the Authorization header's value; empty when absent
  // When the request's first byte arrived (a new connection: when it was accepted).
  absl::Time arrival;
};

// The error responses the transport makes itself (malformed request, body too large, too
// many connections): the API above gives them its own body shape. `status` is the HTTP status.
using HttpErrorBody = std::function<std::string(int status, const absl::Status& error)>;

// One request and its response. Thread-safe: every method may be called from any thread;
// the effects happen in call order on the connection's I/O strand. Respond, StartStream,
// Write, End and OnClientGone run at once when called on the strand (from Post's function,
// or the handler). A response is either whole (Respond) or streamed (StartStream, Write...,
// End). Each call's bytes leave in one send; those of calls made inside Post's function, in
// one send when it returns; those of calls from other threads that queued up before the
// connection's thread got to them, in one send after the last (one trip through its I/O loop
// for all of them). Dropping the last reference without responding closes the connection.
class HttpExchange {
 public:
  HttpExchange(std::shared_ptr<HttpConnection> connection, uint64_t seq, HttpRequest request);
  ~HttpExchange();
  HttpExchange(const HttpExchange&) = delete;
  HttpExchange& operator=(const HttpExchange&) = delete;

  const HttpRequest& request() const { return request_; }

  void Respond(int status, absl::string_view content_type, std::string body,
               std::vector<HttpHeader> headers = {});
  // Status line and headers of a chunked response; then Write() each piece, then End().
  void StartStream(int status, absl::string_view content_type, std::vector<HttpHeader> headers = {});
  void Write(std::string data);
  // Ends the stream, after `last` (written with the end in one piece) if not empty.
  void End(std::string last = "");

  // Runs `fn` on the connection's strand (serialized with the exchange's writes and its
  // client-gone callback); it runs even after the connection closed, but not once
  // HttpTransport::Shutdown() has returned (then every call here is dropped: no thread is left).
  void Post(std::function<void()> fn);
  // Called once, on the strand, if the connection closes before the response ended: the
  // client disconnected, was too slow, or the server shut down; at once if that already
  // happened (unless registered after Shutdown() returned). Never after the whole response
  // was queued.
  void OnClientGone(std::function<void()> fn);

 private:
  // Held until the exchange goes: the connection stays open while its response is pending.
  const std::shared_ptr<HttpConnection> connection_;
  const uint64_t seq_;  // the connection's request number
  const HttpRequest request_;
};

// Called on an I/O thread with each complete request; must not block (long work goes to
// another thread, which answers through the exchange).
using HttpHandler = std::function<void(std::shared_ptr<HttpExchange>)>;

class HttpTransport {
 public:
  HttpTransport(HttpTransportOptions options, HttpHandler handler, HttpErrorBody error_body);
  ~HttpTransport();  // Shutdown()
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Binds, listens and starts the I/O threads. UNAVAILABLE when it cannot bind.
  absl::Status Start();
  int port() const { return port_; }
  // Stops accepting, closes every connection (pending exchanges see their client gone) and
  // joins the I/O threads; exchanges still held afterwards are inert. Idempotent.
  void Shutdown();
  // Connections open now.
  int64_t open_connections() const;

 private:
  friend class HttpConnection;
  struct Shared;  // what connections share with the transport; outlives it while they live
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<HttpAcceptor> acceptor_;
  std::shared_ptr<void> work_guard_;  // keeps the I/O threads running until Shutdown()
  std::vector<std::thread> threads_;
  int port_ = 0;
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace tpserve

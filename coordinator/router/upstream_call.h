// One HTTP/1.1 request from the router to a backend over Boost.Beast's asynchronous client on
// an Asio io_context: no thread waits on it. The response's head is reported once, then each
// piece of the body as it arrives (chunked or not, decoded), then the end, so a streamed
// response is forwarded as it is produced. Connections are kept alive: a call takes an idle one
// from its endpoint's pool where there is one and puts it back when the response was read whole.
// Tested by tests/upstream_call_test.cc and through the router by tests/router_test.sh.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "boost/asio/io_context.hpp"
#include "boost/asio/strand.hpp"
#include "coordinator/router/upstream_endpoint.h"

namespace tpserve {

struct UpstreamRequest {
  UpstreamEndpoint* endpoint = nullptr;  // where to; outlives the call
  std::string method = "POST";           // or "GET" (no body)
  std::string target;         // e.g. "/v1/chat/completions"
  std::string body;           // sent as application/json
  std::string authorization;  // the Authorization header's value; empty: none
  // Until the TCP connection is up; then until the response's head, and between body pieces.
  absl::Duration connect_timeout = absl::Seconds(5);
  absl::Duration response_timeout = absl::Seconds(600);
};

// Called on the call's strand, in this order: connected once a connection is up (reused: taken
// from the pool; may be empty; tells a failure to connect from a connection that broke later),
// head once (unless the call failed before it), data for each body piece, end once (OK: the
// whole response was read; else UNAVAILABLE or DEADLINE_EXCEEDED saying what failed). None after
// Cancel().
//
// A reused connection that fails before any byte of the response (the server had closed it
// while it was idle) is not a failure: `stale` is called and the request is sent once more on a
// new connection (connected again, reused false).
struct UpstreamCallbacks {
  std::function<void(bool reused)> connected;
  std::function<void()> stale;
  std::function<void(int status, std::string content_type)> head;
  std::function<void(std::string piece)> data;
  std::function<void(absl::Status status)> end;
  // Where the call knows the answer's token counts itself (a grpc:// backend's messages carry
  // them whether or not the client asked for a usage chunk): called once before a successful
  // `end`. HTTP backends never call it (their usage is in the body or the stream).
  std::function<void(int64_t prompt_tokens, int64_t completion_tokens)> usage;
};

using Strand = boost::asio::strand<boost::asio::io_context::executor_type>;

class UpstreamCall {
 public:
  // Starts the request; its I/O and callbacks run on `strand`.
  static std::shared_ptr<UpstreamCall> Start(Strand strand, UpstreamRequest request, UpstreamCallbacks callbacks);
  virtual ~UpstreamCall() = default;
  // Closes the connection; no callback runs afterwards. Must be called on the strand.
  virtual void Cancel() = 0;
};

}  // namespace tpserve

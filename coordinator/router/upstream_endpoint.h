// A backend server as the router connects to it (host and port) and its pool of idle HTTP/1.1
// keep-alive connections, shared by every call to that server. Thread-safe. Tested by
// tests/upstream_call_test.cc and tests/router_test.sh.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "boost/beast/core/tcp_stream.hpp"

namespace tpserve {

struct ConnectionPoolOptions {
  // Idle connections kept per endpoint; one put back beyond this is closed.
  size_t max_idle = 32;
  // An idle connection older than this is closed, never reused (at the endpoint's next take or
  // put). Servers close idle connections on their own timers too (vLLM's uvicorn after 5 s,
  // `tpserve serve` after its --keep-alive timeout); a call finds that out and retries.
  absl::Duration idle_timeout = absl::Seconds(60);
};

// An open connection to a backend, used by one call at a time or idle in its endpoint's pool.
struct UpstreamConnection {
  explicit UpstreamConnection(const boost::asio::any_io_executor& executor) : stream(executor) {}
  boost::beast::tcp_stream stream;
  absl::Time idle_since;
};

class UpstreamEndpoint {
 public:
  UpstreamEndpoint(std::string host, int port, ConnectionPoolOptions pool);
  UpstreamEndpoint(const UpstreamEndpoint&) = delete;
  UpstreamEndpoint& operator=(const UpstreamEndpoint&) = delete;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  // The Host header's value: the host, with the port unless it is the scheme's default.
  std::string host_header() const;

  // The most recently idled connection not older than the idle timeout at `now`; null when
  // there is none. Expired ones are closed.
  std::unique_ptr<UpstreamConnection> TakeIdle(absl::Time now);
  // A connection whose last response was read whole, with keep-alive, and nothing more on it.
  // It is closed instead when the pool holds max_idle already.
  void PutIdle(std::unique_ptr<UpstreamConnection> connection, absl::Time now);
  size_t idle_count() const;

 private:
  void DropExpired(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string host_;
  const int port_;
  const ConnectionPoolOptions pool_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<UpstreamConnection>> idle_ ABSL_GUARDED_BY(mu_);  // oldest first
};

}  // namespace tpserve

// A backend server as the router connects to it (host, port, and for https:// its TLS context:
// the CAs it trusts) and its pool of idle HTTP/1.1 keep-alive connections, shared by every call
// to that server. Thread-safe. Tested by tests/upstream_call_test.cc and tests/router_test.sh.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/status/statusor.h"
#include "boost/asio/ssl/context.hpp"
#include "boost/beast/core/tcp_stream.hpp"
#include "boost/beast/ssl/ssl_stream.hpp"
#include "coordinator/router/client_certificate.h"

namespace tpserve {

struct ConnectionPoolOptions {
  // Idle connections kept per endpoint; one put back beyond this is closed. As many as the
  // streams a busy router holds to one server: with fewer, every burst of responses ending
  // together closes connections that the next burst of requests opens again (at 256 streams, 32
  // made 4 of every 10 requests open a new connection).
  size_t max_idle = 1024;
  // An idle connection older than this is closed, never reused (at the endpoint's next take or
  // put). Servers close idle connections on their own timers too (vLLM's uvicorn after 5 s,
  // `tpserve serve` after its --timeout-keep-alive); a call finds that out and retries.
  absl::Duration idle_timeout = absl::Seconds(60);
};

// An open connection to a backend, used by one call at a time or idle in its endpoint's pool:
// plain TCP, or TLS over TCP.
struct UpstreamConnection {
  // `tls`: null for plain TCP.
  UpstreamConnection(const boost::asio::any_io_executor& executor, boost::asio::ssl::context* tls);
  boost::beast::tcp_stream& tcp() { return tls ? tls->next_layer() : *plain; }
  std::optional<boost::beast::tcp_stream> plain;
  std::optional<boost::beast::ssl_stream<boost::beast::tcp_stream>> tls;
  absl::Time idle_since;
};

class UpstreamEndpoint {
 public:
  // Plain HTTP.
  UpstreamEndpoint(std::string host, int port, ConnectionPoolOptions pool);
  // HTTPS (the backend's name checked and sent as SNI, client_certificate.h's BackendTls):
  // loads the CAs (`ca_file`, else the system's store) and the client certificate
  // (ReadClientCertificate). INVALID_ARGUMENT starting with the config key ("tls_ca_file: ",
  // "tls_cert_file: ", "tls_key_file: ") and naming the file when it cannot be read as PEM
  // certificates, or its key (client_certificate.h).
  static absl::StatusOr<std::unique_ptr<UpstreamEndpoint>> Tls(std::string host, int port, BackendTls tls,
                                                               ConnectionPoolOptions pool);
  UpstreamEndpoint(const UpstreamEndpoint&) = delete;
  UpstreamEndpoint& operator=(const UpstreamEndpoint&) = delete;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  // Null for plain HTTP.
  boost::asio::ssl::context* tls_context() const { return tls_context_.get(); }
  const BackendTls& tls_options() const { return tls_; }
  // The name the backend's certificate is checked against and sent as SNI: the configured
  // server name, else the host.
  const std::string& tls_server_name() const { return tls_.server_name.empty() ? host_ : tls_.server_name; }
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
  BackendTls tls_;
  std::unique_ptr<boost::asio::ssl::context> tls_context_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<UpstreamConnection>> idle_ ABSL_GUARDED_BY(mu_);  // oldest first
};

}  // namespace tpserve

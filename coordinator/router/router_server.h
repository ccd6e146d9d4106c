// `tpserve router`: one OpenAI-compatible HTTP door for the models of a RouterConfig, on the same
// event-driven transport as `serve` (coordinator/api/http_transport.h), and with a gRPC port one
// tpserve.v1 door too (router_grpc_server.h), both routed by model name through the same
// candidates (RouterRoutes).
// /health (open), /v1/models (the configured names), /metrics (router_metrics.h; also on a
// metrics port of its own, with /health), and /v1/chat/completions and
// /v1/completions proxied by model name to a backend the model's policy picks, failing over
// to its other backends and its fallback model (proxy_request.h; a grpc:// backend gets the
// request as tpserve.v1 Generate, grpc_relay.h); models with a health_check
// have their backends probed (health_prober.h). With API keys set, every route but /health
// needs one. Tested by tests/router_test.sh, tests/router_grpc_test.* and
// tests/router_grpc_front_test.*.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "coordinator/api/api_keys.h"
#include "coordinator/api/grpc_server_start.h"
#include "coordinator/api/http_transport.h"
#include "coordinator/router/backend_pool.h"
#include "coordinator/router/grpc_backend.h"
#include "coordinator/router/health_prober.h"
#include "coordinator/router/proxy_request.h"
#include "coordinator/router/request_log.h"
#include "coordinator/router/router_config.h"
#include "coordinator/router/router_grpc_server.h"
#include "coordinator/router/router_metrics.h"
#include "coordinator/router/router_routes.h"
#include "coordinator/router/upstream_endpoint.h"

namespace tpserve {

struct RouterOptions {
  // host, port (0: a free one; -1: no HTTP port, gRPC only: then no /health or /metrics), I/O
  // threads, connection limit, deadlines, body limit.
  HttpTransportOptions transport;
  // --grpc-port: the tpserve.v1 gRPC front end on transport.host (0: a free port; -1: off). Its
  // largest request is transport.max_body_bytes.
  int grpc_port = -1;
  // --metrics-port: a listener on transport.host serving GET /metrics and /health only (0: a free
  // port; -1: off), with the HTTP port's key rules (api_keys: /metrics needs one, /health is
  // open); with or without the HTTP port: a gRPC-only router's metrics.
  int metrics_port = -1;
  // --grpc-tls-certfile, --grpc-tls-keyfile, --grpc-tls-client-ca-file: TLS on the gRPC port
  // (default: plaintext).
  GrpcServerTlsOptions grpc_tls;
  // --api-key: every route but /health needs "Authorization: Bearer K" with K one of these,
  // else 401; every gRPC method, the same as metadata (else UNAUTHENTICATED). Empty: no key
  // needed. (Backends' own keys are in the config.)
  std::vector<std::string> api_keys;
  // Threads running the outbound (backend) connections' event loop. (Each backend's timeouts,
  // cooldown and keep-alive pool are in the config: RouterBackend::connection.)
  int proxy_threads = 1;
  // Where warnings (an https:// backend without verification) and health changes (a backend
  // failing or passing its probes again) go; main passes stderr.
  std::function<void(const std::string&)> log = [](const std::string&) {};
  // --request-log: JSON lines, one per proxied request; empty: off.
  std::string request_log;
};

class RouterServer : public RouterRoutes {
 public:
  RouterServer(RouterConfig config, RouterOptions options);
  ~RouterServer() override;  // Shutdown()
  RouterServer(const RouterServer&) = delete;
  RouterServer& operator=(const RouterServer&) = delete;

  // Opens the request log, sets up the backends' endpoints (loading TLS backends' CAs and
  // client certificates), binds and starts serving (HTTP with a port, gRPC with a grpc_port,
  // /metrics and /health with a metrics_port). UNAVAILABLE when it cannot bind or open;
  // INVALID_ARGUMENT naming the backend and the key when its tls_ca_file, tls_cert_file or
  // tls_key_file cannot be loaded (or the key is not the certificate's), or when neither port is on.
  absl::Status Start();
  // The HTTP port bound; -1 when off.
  int port() const { return options_.transport.port < 0 ? -1 : transport_.port(); }
  // The gRPC port bound; -1 when off.
  int grpc_port() const { return grpc_ == nullptr ? -1 : grpc_->port(); }
  // The metrics port bound; -1 when off.
  int metrics_port() const { return metrics_transport_ == nullptr ? -1 : metrics_transport_->port(); }
  // Stops accepting, closes every connection and cancels every gRPC call (cancelling backend
  // requests) and joins the threads. Idempotent.
  void Shutdown();

  // RouterRoutes.
  const std::vector<std::string>& model_names() const override { return model_names_; }
  absl::StatusOr<std::vector<ProxyCandidate>> Candidates(const std::string& model, absl::string_view prompt,
                                                         FrontDoor door) override;
  absl::StatusOr<std::vector<ProxyCandidate>> Backends(const std::string& model) override;

 private:
  // A request to the HTTP port.
  void Handle(std::shared_ptr<HttpExchange> exchange);
  // A request to the metrics port: GET /metrics and /health only, with the HTTP port's key rules.
  void HandleMetricsPort(std::shared_ptr<HttpExchange> exchange);
  // Both ports' shared routes. KeyAccepted: false after answering 401 (every path but /health
  // needs a key when the router has keys). HealthOrMetrics: false, answering nothing, for a path
  // that is neither /health nor /metrics.
  bool KeyAccepted(HttpExchange& exchange) const;
  bool HealthOrMetrics(HttpExchange& exchange) const;
  void Proxy(const std::shared_ptr<HttpExchange>& exchange, std::string path_suffix);
  // `model`'s pool, then its fallback's, and so on (the config has no cycles); NOT_FOUND naming
  // the configured models.
  absl::StatusOr<std::vector<BackendPool*>> PoolChain(const std::string& model) const;

  const RouterOptions options_;
  const std::vector<std::string> model_names_;
  const ApiKeys api_keys_;
  const int64_t started_unix_s_;
  std::map<std::string, std::unique_ptr<BackendPool>> pools_;  // by model name; fixed after construction
  std::unique_ptr<RouterMetrics> metrics_;                      // over pools_
  std::unique_ptr<RequestLog> log_;
  boost::asio::io_context proxy_io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> proxy_work_;
  std::vector<std::thread> proxy_threads_;
  absl::Status MakeEndpoints();

  // One per backend server (scheme, host, port and TLS options), shared by the models listing it; destroyed before
  // proxy_io_ (their idle connections are its sockets). Fixed after Start().
  std::map<std::string, std::unique_ptr<UpstreamEndpoint>> endpoints_;
  std::map<const BackendPool*, std::vector<UpstreamEndpoint*>> endpoint_of_;  // by pool, then backend index
  // The same for grpc:// backends: one channel per server. Their calls are cancelled and
  // finished (GrpcBackend::Shutdown) before proxy_io_ stops. Null entries in grpc_of_ are http(s).
  std::map<std::string, std::unique_ptr<GrpcBackend>> grpc_backends_;
  std::map<const BackendPool*, std::vector<GrpcBackend*>> grpc_of_;
  std::unique_ptr<HealthProber> prober_;  // the models with a health_check; destroyed before proxy_io_
  // The gRPC front end (grpc_port >= 0): stopped (its calls ended) before the backends' channels
  // and proxy_io_.
  std::unique_ptr<RouterGrpcServer> grpc_;
  bool stopped_ = false;
  // The metrics port (metrics_port >= 0), and the HTTP port: last, their threads call into the
  // members above.
  std::unique_ptr<HttpTransport> metrics_transport_;
  HttpTransport transport_;
};

}  // namespace tpserve

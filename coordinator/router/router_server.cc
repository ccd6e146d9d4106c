// RouterServer: routes, model lookup and the candidates of each request. Tested by
// tests/router_test.sh, tests/router_grpc_test.* and tests/router_grpc_front_test.*.
#include "coordinator/router/router_server.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "boost/asio/post.hpp"
#include "boost/asio/strand.hpp"
#include "coordinator/api/openai_json.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

constexpr char kJson[] = "application/json";

void Reply(HttpExchange& exchange, const absl::Status& error, std::vector<HttpHeader> headers = {}) {
  HttpError e = ToHttpError(error);
  exchange.Respond(e.status, kJson, std::move(e.body), std::move(headers));
}

// 405 for a route that takes only `allowed`.
void MethodNotAllowed(HttpExchange& exchange, const char* allowed) {
  const HttpRequest& req = exchange.request();
  nlohmann::ordered_json body = ErrorJson(absl::InvalidArgumentError(
      absl::StrCat("method ", req.method, " is not allowed for ", req.path, "; use ", allowed)));
  exchange.Respond(405, kJson, body.dump(), {{"Allow", allowed}});
}

// 404 for a path the port does not serve; `where` ends the message.
void NoRoute(HttpExchange& exchange, absl::string_view where) {
  const HttpRequest& req = exchange.request();
  nlohmann::ordered_json body =
      ErrorJson(absl::NotFoundError(absl::StrCat("no route for ", req.method, " ", req.path, where)));
  body["error"]["code"] = nullptr;
  exchange.Respond(404, kJson, body.dump());
}

}  // namespace

RouterServer::RouterServer(RouterConfig config, RouterOptions options)
    : options_(std::move(options)),
      model_names_(config.model_names()),
      api_keys_(options_.api_keys),
      started_unix_s_(absl::ToUnixSeconds(absl::Now())),
      proxy_work_(boost::asio::make_work_guard(proxy_io_)),
      transport_(
          options_.transport, [this](std::shared_ptr<HttpExchange> e) { Handle(std::move(e)); },
          [](int, const absl::Status& error) { return ToHttpError(error).body; }) {
  for (auto& [name, model] : config.models) {
    pools_.emplace(name, std::make_unique<BackendPool>(std::move(model)));
  }
  std::vector<FrontDoor> doors;
  if (options_.transport.port >= 0) doors.push_back(FrontDoor::kHttp);
  if (options_.grpc_port >= 0) doors.push_back(FrontDoor::kGrpc);
  metrics_ = std::make_unique<RouterMetrics>(pools_, doors);
}

RouterServer::~RouterServer() { Shutdown(); }

absl::Status RouterServer::Start() {
  if (options_.transport.port < 0 && options_.grpc_port < 0) {
    return absl::InvalidArgumentError("the router needs an HTTP port or a gRPC port (or both); both are off");
  }
  if (!options_.request_log.empty()) {
    absl::StatusOr<std::unique_ptr<RequestLog>> log = RequestLog::Open(options_.request_log);
    if (!log.ok()) return log.status();
    log_ = *std::move(log);
  }
  if (absl::Status s = MakeEndpoints(); !s.ok()) return s;
  std::vector<HealthProbeTarget> probed;
  for (const auto& [name, pool] : pools_) {
    if (!pool->model().health_check.has_value()) continue;
    for (size_t i = 0; i < pool->model().backends.size(); ++i) {
      probed.push_back({pool.get(), i, endpoint_of_.at(pool.get())[i], grpc_of_.at(pool.get())[i],
                        *pool->model().health_check});
    }
  }
  prober_ = std::make_unique<HealthProber>(proxy_io_, std::move(probed), options_.log);
  prober_->Start();
  for (int i = 0; i < std::max(1, options_.proxy_threads); ++i) {
    proxy_threads_.emplace_back([this] { proxy_io_.run(); });
  }
  if (options_.grpc_port >= 0) {
    RouterGrpcOptions g;
    g.listen.address = absl::StrCat(options_.transport.host, ":", options_.grpc_port);
    g.listen.max_receive_message_bytes = options_.transport.max_body_bytes;
    g.listen.tls = options_.grpc_tls;
    g.api_keys = options_.api_keys;
    grpc_ = std::make_unique<RouterGrpcServer>(
        GrpcFrontGenerate::Context{proxy_io_, *this, *metrics_, log_.get()}, std::move(g));
    if (absl::Status s = grpc_->Start(); !s.ok()) return s;
  }
  if (options_.metrics_port >= 0) {
    HttpTransportOptions m = options_.transport;
    m.port = options_.metrics_port;
    m.io_threads = 1;  // a scrape now and then
    metrics_transport_ = std::make_unique<HttpTransport>(
        m, [this](std::shared_ptr<HttpExchange> e) { HandleMetricsPort(std::move(e)); },
        [](int, const absl::Status& error) { return ToHttpError(error).body; });
    if (absl::Status s = metrics_transport_->Start(); !s.ok()) {
      return absl::UnavailableError(absl::StrCat("the metrics port: ", s.message()));
    }
  }
  if (options_.transport.port < 0) return absl::OkStatus();  // gRPC only
  return transport_.Start();
}

absl::Status RouterServer::MakeEndpoints() {
  for (const auto& [name, pool] : pools_) {
    std::vector<UpstreamEndpoint*>& of = endpoint_of_[pool.get()];
    std::vector<GrpcBackend*>& grpc_of = grpc_of_[pool.get()];
    for (size_t i = 0; i < pool->model().backends.size(); ++i) {
      const RouterBackend& b = pool->backend(i);
      const std::string field = absl::StrCat("router config: models[\"", name, "\"].backends[", i, "]");
      const BackendTls& tls = b.tls_options;
      if (b.grpc) {
        // Listings of one server with different TLS options get a channel each. Only a channel
        // made goes into the map: Shutdown stops every one there.
        const std::string key = absl::StrCat(b.tls ? "grpcs://" : "grpc://", b.host, ":", b.port, " ", tls.Key());
        auto g = grpc_backends_.find(key);
        if (g == grpc_backends_.end()) {
          absl::StatusOr<std::unique_ptr<GrpcBackend>> made =
              GrpcBackend::Create(b.host, b.port, b.tls ? std::optional<BackendTls>(tls) : std::nullopt);
          if (!made.ok()) return absl::InvalidArgumentError(absl::StrCat(field, ".", made.status().message()));
          g = grpc_backends_.emplace(key, *std::move(made)).first;
        }
        of.push_back(nullptr);
        grpc_of.push_back(g->second.get());
        continue;
      }
      grpc_of.push_back(nullptr);
      // Listings of one server with different pool options get a pool each.
      const ConnectionPoolOptions pool_options{b.connection.max_idle_connections, b.connection.idle_timeout};
      std::unique_ptr<UpstreamEndpoint>& e =
          endpoints_[absl::StrCat(b.tls ? "https://" : "http://", b.host, ":", b.port, " ", tls.Key(), " ",
                                  pool_options.max_idle, " ", absl::FormatDuration(pool_options.idle_timeout))];
      if (e == nullptr && !b.tls) e = std::make_unique<UpstreamEndpoint>(b.host, b.port, pool_options);
      if (e == nullptr) {
        absl::StatusOr<std::unique_ptr<UpstreamEndpoint>> made = UpstreamEndpoint::Tls(b.host, b.port, tls, pool_options);
        if (!made.ok()) return absl::InvalidArgumentError(absl::StrCat(field, ".", made.status().message()));
        e = *std::move(made);
      }
      if (tls.insecure_skip_verify) {
        options_.log(absl::StrCat("WARNING: ", field, " (", b.url, "): tls_insecure_skip_verify: its certificate ",
                                  "is not verified; anyone between the router and it can read and change the ",
                                  "traffic, its API key included"));
      }
      of.push_back(e.get());
    }
  }
  return absl::OkStatus();
}

void RouterServer::Shutdown() {
  if (stopped_) return;
  stopped_ = true;
  if (metrics_transport_ != nullptr) metrics_transport_->Shutdown();
  transport_.Shutdown();  // exchanges see their client gone: their backend calls are cancelled
  if (grpc_ != nullptr) grpc_->Shutdown();  // the same for gRPC calls; their last reactions run on proxy_io_
  // gRPC calls (and probes) still running are cancelled, their last callbacks run on the proxy
  // threads, before those stop.
  for (auto& [target, backend] : grpc_backends_) backend->Shutdown();
  proxy_work_.reset();
  proxy_io_.stop();
  for (std::thread& t : proxy_threads_) t.join();
}

// On an I/O thread: cheap routes are answered here; a proxied request is parsed and routed here
// too, then runs on the proxy loop (Proxy).
void RouterServer::Handle(std::shared_ptr<HttpExchange> exchange) {
  if (!KeyAccepted(*exchange)) return;
  const HttpRequest& req = exchange->request();
  if (req.path == "/v1/completions" || req.path == "/v1/chat/completions") {
    if (req.method != "POST") return MethodNotAllowed(*exchange, "POST");
    return Proxy(exchange, req.path.substr(3));
  }
  if (req.path == "/v1/models") {
    if (req.method != "GET") return MethodNotAllowed(*exchange, "GET");
    nlohmann::ordered_json data = nlohmann::ordered_json::array();
    for (const std::string& name : model_names_) {
      data.push_back({{"id", name}, {"object", "model"}, {"created", started_unix_s_}, {"owned_by", "tpserve-router"}});
    }
    return exchange->Respond(200, kJson, nlohmann::ordered_json{{"object", "list"}, {"data", data}}.dump());
  }
  if (HealthOrMetrics(*exchange)) return;
  NoRoute(*exchange, "");
}

// On the metrics port's I/O thread.
void RouterServer::HandleMetricsPort(std::shared_ptr<HttpExchange> exchange) {
  if (!KeyAccepted(*exchange) || HealthOrMetrics(*exchange)) return;
  NoRoute(*exchange, " on the router's metrics port (it serves GET /metrics and /health; the API is on its HTTP port)");
}

bool RouterServer::KeyAccepted(HttpExchange& exchange) const {
  const HttpRequest& req = exchange.request();
  if (req.path == "/health") return true;  // /health stays open, as serve's does
  absl::Status key = api_keys_.Check(req.authorization);
  if (!key.ok()) Reply(exchange, key, {{"WWW-Authenticate", "Bearer"}});
  return key.ok();
}

bool RouterServer::HealthOrMetrics(HttpExchange& exchange) const {
  const HttpRequest& req = exchange.request();
  if (req.path != "/health" && req.path != "/metrics") return false;
  if (req.method != "GET") {
    MethodNotAllowed(exchange, "GET");
  } else if (req.path == "/health") {
    exchange.Respond(200, kJson, "{}");
  } else {
    exchange.Respond(200, "text/plain; version=0.0.4; charset=utf-8", metrics_->RenderPrometheus());
  }
  return true;
}

// On the exchange's I/O thread (no hop to another thread to refuse a request, and the
// ProxyRequest watches for the client going away from here): parse the body's model, list the
// candidates, start the ProxyRequest on a strand of the proxy loop.
void RouterServer::Proxy(const std::shared_ptr<HttpExchange>& exchange, std::string path_suffix) {
  std::string model;
  // A request refused before any backend is tried: answered and logged here.
  auto refuse = [&](const absl::Status& error) {
    LogRefusedRequest(log_.get(), model, exchange->request().arrival, error, /*grpc=*/false);
    HttpError e = ToHttpError(error);
    exchange->Respond(e.status, kJson, std::move(e.body));
  };
  nlohmann::json body = nlohmann::json::parse(exchange->request().body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return refuse(absl::InvalidArgumentError("the request body is not a JSON object"));
  }
  if (!body.contains("model") || !body["model"].is_string()) {
    return refuse(absl::InvalidArgumentError(
        absl::StrCat("\"model\" is required: the router serves ", absl::StrJoin(model_names_, ", "))));
  }
  model = body["model"].get<std::string>();
  absl::StatusOr<std::vector<ProxyCandidate>> candidates = Candidates(model, PromptText(body), FrontDoor::kHttp);
  if (!candidates.ok()) return refuse(candidates.status());
  auto request = std::make_shared<ProxyRequest>(boost::asio::make_strand(proxy_io_), exchange, std::move(body), model,
                                                std::move(path_suffix), *std::move(candidates), log_.get(), *metrics_);
  request->Start();
}

absl::StatusOr<std::vector<BackendPool*>> RouterServer::PoolChain(const std::string& model) const {
  auto it = pools_.find(model);
  if (it == pools_.end()) {
    return absl::NotFoundError(absl::StrCat("The model `", model, "` does not exist. Available models: ",
                                            absl::StrJoin(model_names_, ", ")));
  }
  std::vector<BackendPool*> chain;
  for (BackendPool* pool = it->second.get(); pool != nullptr;) {
    chain.push_back(pool);
    const std::string& fallback = pool->model().fallback;
    pool = fallback.empty() ? nullptr : pools_.at(fallback).get();
  }
  return chain;
}

absl::StatusOr<std::vector<ProxyCandidate>> RouterServer::Candidates(const std::string& model,
                                                                     absl::string_view prompt, FrontDoor door) {
  absl::StatusOr<std::vector<BackendPool*>> chain = PoolChain(model);
  if (!chain.ok()) return chain.status();
  // The model's healthy backends in its policy's order, then each fallback's.
  const absl::Time now = absl::Now();
  std::vector<ProxyCandidate> candidates;
  std::vector<std::string> ejected, probe_failing;
  for (BackendPool* pool : *chain) {
    for (size_t i : pool->Order(now, prompt)) {
      candidates.push_back({pool, i, endpoint_of_.at(pool)[i], grpc_of_.at(pool)[i]});
    }
    for (std::string& url : pool->Ejected(now)) ejected.push_back(std::move(url));
    for (std::string& url : pool->ProbeFailing()) probe_failing.push_back(std::move(url));
  }
  if (!candidates.empty()) return candidates;
  metrics_->RequestFinished(model, door, RequestOutcome::kError);
  std::vector<std::string> why;
  if (!ejected.empty()) {
    why.push_back(absl::StrCat("failed recently and ejected for its cooldown_s: ", absl::StrJoin(ejected, ", ")));
  }
  if (!probe_failing.empty()) {
    why.push_back(absl::StrCat("failing its health probe: ", absl::StrJoin(probe_failing, ", ")));
  }
  return absl::UnavailableError(absl::StrCat("every backend of model \"", model, "\" (and its fallbacks) is out of ",
                                             "routing: ", absl::StrJoin(why, "; "), "; retry shortly"));
}

absl::StatusOr<std::vector<ProxyCandidate>> RouterServer::Backends(const std::string& model) {
  absl::StatusOr<std::vector<BackendPool*>> chain = PoolChain(model);
  if (!chain.ok()) return chain.status();
  const absl::Time now = absl::Now();
  std::vector<ProxyCandidate> backends;
  for (BackendPool* pool : *chain) {
    for (size_t i = 0; i < pool->model().backends.size(); ++i) {
      if (pool->Healthy(i, now)) backends.push_back({pool, i, endpoint_of_.at(pool)[i], grpc_of_.at(pool)[i]});
    }
  }
  if (backends.empty()) {
    return absl::UnavailableError(absl::StrCat("every backend of model \"", model,
                                               "\" (and its fallbacks) is out of routing (ejected after a failure, "
                                               "or failing its health probe); retry shortly"));
  }
  return backends;
}

}  // namespace tpserve

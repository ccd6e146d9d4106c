// The router's configuration (`tpserve router --config FILE`): which model names it serves,
// each one's backends (OpenAI-compatible HTTP(S) APIs, or tpserve gRPC ports), routing policy and fallback model,
// parsed from JSON and validated whole before the router listens. Tested by
// tests/router_config_test.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "coordinator/router/client_certificate.h"

namespace tpserve {

// How a model's requests pick one of its backends (coordinator/router/routing_policy.h).
enum class RoutingPolicyKind {
  kRoundRobin,  // "round_robin" (the default): each healthy backend in turn
  kLeastLoad,   // "least_load": the healthy backend with the fewest requests in flight at the router
  // "cache_aware": a request whose prompt shares a long enough prefix with an earlier one goes
  // to the backend that served that one (its prefix cache holds it), unless the load is out of
  // balance; otherwise least_load (BackendPool::Order).
  kCacheAware,
};

// cache_aware's thresholds (SGLang's router's names and defaults).
struct CacheAwareOptions {
  // Route by prefix only where the matched share of the prompt is above this, in [0, 1].
  double cache_threshold = 0.3;
  // The load is out of balance (then least_load decides) when the busiest healthy backend has
  // more than balance_abs_threshold requests in flight beyond the idlest AND more than
  // balance_rel_threshold times its count.
  int64_t balance_abs_threshold = 64;
  double balance_rel_threshold = 1.5;
};

// How the router talks to one backend: its timeouts, its passive ejection and, for http(s)://
// backends, its keep-alive pool. Set per backend object, per model or at the config's top level
// (the nearest one wins; the defaults are below); the field names are the config's keys.
struct BackendConnectionOptions {
  // "connect_timeout_s": until the TCP connection (and TLS handshake) is up; a grpc://
  // backend's channel, until it is ready. Failing it is a `connect` error.
  absl::Duration connect_timeout = absl::Seconds(5);
  // "timeout_s": until the response head (a grpc:// backend's first message), and between
  // body pieces (messages) after it. Failing it is a `timeout` error.
  absl::Duration timeout = absl::Seconds(600);
  // "cooldown_s": a backend that failed (connect, timeout, 5xx, a broken stream) is skipped by
  // every request this long; 0: never skipped (each request may try it again at once).
  absl::Duration cooldown = absl::Seconds(5);
  // "max_idle_connections" (http(s):// only): idle keep-alive connections kept to the backend's
  // server (more are closed); 0: none, each request opens its own connection.
  size_t max_idle_connections = 1024;  // as ConnectionPoolOptions::max_idle (docs/router.md)
  // "idle_timeout_s" (http(s):// only): an idle connection older than this is closed, never
  // reused.
  absl::Duration idle_timeout = absl::Seconds(60);
  // "max_in_flight": requests this router has in flight to the backend at most; a request that
  // finds it full tries the next candidate (then the fallback) as if the backend were busy, and
  // gets 429 when every one is. 0: no cap.
  int64_t max_in_flight = 0;
  // "request_timeout_s": the whole request, from its arrival at the router to the answer's last
  // byte, across every try; none: no bound but each try's timeouts. Past it before anything
  // reached the client: 504 (gRPC: DEADLINE_EXCEEDED); after: the stream ends with an error.
  // The backend being tried when it passes decides (its value, counted against the arrival).
  std::optional<absl::Duration> request_timeout;
  // "max_retries": after a try of this backend failed (or was busy) before anything reached the
  // client, the request moves on to its next candidate only while it has taken fewer retries
  // (moves on) than this; none: no cap (every candidate is tried once). 0: the first failure
  // is the client's answer. Never a second try of one backend within a request.
  std::optional<int64_t> max_retries;
  // "request_usage" (http(s):// backends): a streamed request whose client did not ask for usage
  // is sent with stream_options.include_usage added, so that its tokens are counted and priced;
  // the usage it brings is taken out of the client's stream (StreamUsage::Strip). false: sent as
  // the client sent it (for an API that refuses stream_options): such a stream's tokens are
  // unknown.
  bool request_usage = true;
};

struct RouterBackend {
  std::string url;   // as configured, e.g. "http://node2:8000/v1"; what responses and the log name
  std::string host;  // "node2"
  int port = 80;     // default: 80 for http://, 443 for https://; grpc:// names its port
  // grpc://HOST:PORT (grpcs:// with TLS): `tpserve serve --grpc-port`'s API (proto/tpserve.proto),
  // to which the router relays OpenAI requests (coordinator/router/grpc_relay.h); base_path is
  // empty.
  bool grpc = false;
  // https:// and grpcs://: TLS, the backend's certificate verified against tls_ca_file (a PEM
  // bundle) where set, else the system's CA store, and its name checked against `host`.
  bool tls = false;
  // The backend object's tls_* keys (https:// and grpcs:// only): "tls_ca_file" -> ca_file;
  // "tls_insecure_skip_verify" (https:// only; true: no certificate or name check, the router
  // warns at start); "tls_cert_file" and "tls_key_file": a client certificate chain (PEM, the
  // router's own certificate first) and its private key (PEM, not encrypted), presented to a
  // backend that asks for one (mutual TLS), both or neither, read and checked to match when the
  // router starts; "tls_server_name": the name the backend's certificate must hold and the
  // router sends as SNI, in place of `host` (a backend reached by IP address, or through a name
  // its certificate does not list; an https:// backend's Host header still names `host`).
  BackendTls tls_options;
  std::string base_path;  // the URL's path, ending in "/v1" ("/v1" itself for http://h:p/v1)
  // The "model" sent to this backend; empty: the router's model name, as the client sent it.
  std::string remote_model;
  // The environment variable holding the backend's API key (sent as "Authorization: Bearer"),
  // empty: none. main resolves it into api_key (ResolveBackendApiKeys); nothing below main
  // reads the environment.
  std::string api_key_env;
  std::string api_key;
  // USD per million tokens, where configured (the router's cost metrics and request log, and
  // tpbench compare; not used to route). A backend is priced when both are set (CostUsd).
  std::optional<double> price_input_per_mtok;
  std::optional<double> price_output_per_mtok;
  BackendConnectionOptions connection;
};

// What a request that used `prompt_tokens` and `completion_tokens` cost at backend `b`, in USD;
// none when `b` is not priced (both prices are needed, as tpbench compare prices a backend).
std::optional<double> CostUsd(const RouterBackend& b, int64_t prompt_tokens, int64_t completion_tokens);

// Active health probes of a model's backends: GET `path` (from the server's root: for
// http://h:p/v1, http://h:p/health), or for a grpc:// backend the Stats RPC, every interval; a
// probe that cannot connect, takes longer than timeout or answers other than 2xx (gRPC: OK)
// takes the backend out of routing until one succeeds.
struct HealthCheckOptions {
  absl::Duration interval = absl::Seconds(5);
  absl::Duration timeout = absl::Seconds(2);
  std::string path = "/health";  // vLLM and `tpserve serve` both answer it; http(s):// backends only
  bool path_set = false;         // "path" was configured
};

struct RouterModel {
  std::string name;
  RoutingPolicyKind policy = RoutingPolicyKind::kRoundRobin;
  CacheAwareOptions cache_aware;  // with policy kCacheAware
  // Another configured model whose backends take the request when every backend of this one
  // failed or is ejected; empty: none. The chain has no cycles (validated).
  std::string fallback;
  std::vector<RouterBackend> backends;  // at least one
  std::optional<HealthCheckOptions> health_check;  // "health_check"; none: passive ejection only
};

struct RouterConfig {
  std::map<std::string, RouterModel> models;  // by name; at least one
  std::vector<std::string> model_names() const;
};

// Parses and validates the config's JSON text. INVALID_ARGUMENT naming the field (e.g.
// models["gemma"].backends[1].url) and saying what to change: unknown keys, a backend URL that
// is neither http(s)://HOST[:PORT]/.../v1 nor grpc(s)://HOST:PORT, TLS options on a backend that
// is not https:// or grpcs:// (tls_insecure_skip_verify on a grpcs:// one), tls_cert_file without
// tls_key_file or the other way round, an unknown policy, a health_check key that is unknown or
// a value that is not positive (a "path" in a model whose backends are all grpc://: they are
// probed with the Stats RPC), a fallback that is not a configured model or that leads back to
// the model, a connection option (BackendConnectionOptions) that is not a number in its range,
// or a pool option on a grpc:// backend object. (The TLS files, tls_ca_file, tls_cert_file and
// tls_key_file, are read when the router starts.)
absl::StatusOr<RouterConfig> ParseRouterConfig(absl::string_view json_text);

// Fills every backend's api_key from its api_key_env through `lookup` (main passes getenv).
// INVALID_ARGUMENT naming the backend and the variable when one is unset or empty.
absl::Status ResolveBackendApiKeys(RouterConfig& config,
                                   const std::function<std::optional<std::string>(const std::string&)>& lookup);

}  // namespace tpserve

// ParseRouterConfig: JSON -> RouterConfig, each error naming its field. Tested by
// tests/router_config_test.cc.
#include "coordinator/router/router_config.h"

#include <algorithm>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using Json = nlohmann::json;

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("router config: ", field, ": ", what));
}

// INVALID_ARGUMENT for the first key of `object` not in `known`.
absl::Status CheckKeys(const Json& object, const std::set<std::string>& known, absl::string_view field) {
  for (const auto& [key, value] : object.items()) {
    if (known.count(key) == 0) {
      return Invalid(field, absl::StrCat("unknown key \"", key, "\" (known: ", absl::StrJoin(known, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

// grpc://HOST:PORT or grpcs://HOST:PORT (tpserve serve --grpc-port, with TLS for grpcs://): the
// port is required, no path.
absl::Status ParseGrpcUrl(const std::string& url, absl::string_view field, RouterBackend& b) {
  b.grpc = true;
  b.tls = absl::StartsWith(url, "grpcs://");
  const std::string scheme = b.tls ? "grpcs://" : "grpc://";
  std::string authority = url.substr(scheme.size());
  while (absl::EndsWith(authority, "/")) authority.pop_back();
  if (authority.find('/') != std::string::npos) {
    return Invalid(field, absl::StrCat("\"", url, "\": a ", scheme, " backend is ", scheme,
                                       "HOST:PORT, with no path (the router speaks tpserve.v1.TpServe to it)"));
  }
  const size_t colon = authority.rfind(':');
  const bool bracketed = absl::StartsWith(authority, "[");
  if (colon == std::string::npos || (bracketed && authority.rfind(']') > colon) ||
      !absl::SimpleAtoi(authority.substr(colon + 1), &b.port) || b.port <= 0 || b.port > 65535) {
    return Invalid(field, absl::StrCat("\"", url, "\": a ", scheme, " backend needs its port, 1..65535 (", scheme,
                                       "HOST:PORT, the backend's --grpc-port)"));
  }
  b.host = authority.substr(0, colon);
  if (b.host.empty()) return Invalid(field, absl::StrCat("\"", url, "\" names no host"));
  return absl::OkStatus();
}

absl::Status ParseUrl(const std::string& url, absl::string_view field, RouterBackend& b) {
  b.url = url;
  if (absl::StartsWith(url, "grpc://") || absl::StartsWith(url, "grpcs://")) return ParseGrpcUrl(url, field, b);
  constexpr absl::string_view kHttp = "http://", kHttps = "https://";
  b.tls = absl::StartsWith(url, kHttps);
  if (!b.tls && !absl::StartsWith(url, kHttp)) {
    return Invalid(field, absl::StrCat("\"", url, "\" is not an http(s)://HOST:PORT/v1 URL (an OpenAI API) or a ",
                                       "grpc(s)://HOST:PORT one (tpserve's gRPC port)"));
  }
  b.port = b.tls ? 443 : 80;
  const std::string rest = url.substr(b.tls ? kHttps.size() : kHttp.size());
  const size_t slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  b.base_path = slash == std::string::npos ? "" : rest.substr(slash);
  while (absl::EndsWith(b.base_path, "/")) b.base_path.pop_back();
  if (!absl::EndsWith(b.base_path, "/v1")) {
    return Invalid(field, absl::StrCat("\"", url, "\": the URL must be the OpenAI API root, ending in /v1 (e.g. ",
                                       "http://HOST:8000/v1)"));
  }
  const size_t colon = authority.rfind(':');
  b.host = authority.substr(0, colon);
  if (colon != std::string::npos) {
    if (!absl::SimpleAtoi(authority.substr(colon + 1), &b.port) || b.port <= 0 || b.port > 65535) {
      return Invalid(field, absl::StrCat("\"", url, "\": the port is not a number in 1..65535"));
    }
  }
  if (b.host.empty()) return Invalid(field, absl::StrCat("\"", url, "\" names no host"));
  return absl::OkStatus();
}

// The TLS options of a backend object: "tls_ca_file", "tls_insecure_skip_verify" (https:// only),
// "tls_cert_file" with "tls_key_file", and "tls_server_name"; each applies to https:// and
// grpcs:// backends only.
absl::Status ParseTls(const Json& j, const std::string& field, RouterBackend& b) {
  for (const char* key :
       {"tls_ca_file", "tls_insecure_skip_verify", "tls_cert_file", "tls_key_file", "tls_server_name"}) {
    if (j.contains(key) && !b.tls) {
      return Invalid(absl::StrCat(field, ".", key),
                     absl::StrCat("applies to https:// and grpcs:// backends only (url is \"", b.url, "\")"));
    }
  }
  if (b.grpc && j.contains("tls_insecure_skip_verify")) {
    return Invalid(field + ".tls_insecure_skip_verify",
                   "is not available for grpcs:// backends (gRPC's TLS always verifies the certificate); give "
                   "tls_ca_file, the CA that signed the backend's certificate");
  }
  // The file-valued keys: a non-empty path each.
  for (auto [key, member, what] :
       {std::tuple{"tls_ca_file", &BackendTls::ca_file, "a PEM file of CA certificates"},
        std::tuple{"tls_cert_file", &BackendTls::cert_file,
                   "a PEM file of the router's client certificate (chain)"},
        std::tuple{"tls_key_file", &BackendTls::key_file,
                   "a PEM file of the client certificate's private key"}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_string() || j[key].get<std::string>().empty()) {
      return Invalid(absl::StrCat(field, ".", key), absl::StrCat("must be the path of ", what));
    }
    b.tls_options.*member = j[key].get<std::string>();
  }
  if (b.tls_options.cert_file.empty() != b.tls_options.key_file.empty()) {
    const bool cert = !b.tls_options.cert_file.empty();
    return Invalid(absl::StrCat(field, ".", cert ? "tls_key_file" : "tls_cert_file"),
                   cert ? "is required with tls_cert_file: give the client certificate's private key too (or "
                          "neither)"
                        : "is required with tls_key_file: give the client certificate that key belongs to too "
                          "(or neither)");
  }
  if (j.contains("tls_server_name")) {
    const Json& v = j["tls_server_name"];
    if (!v.is_string() || v.get<std::string>().empty() ||
        v.get<std::string>().find_first_of(" \t\r\n/") != std::string::npos) {
      return Invalid(field + ".tls_server_name",
                     "must be the host name (or IP address) the backend's certificate holds, e.g. "
                     "\"backend.example.com\"");
    }
    b.tls_options.server_name = v.get<std::string>();
  }
  if (j.contains("tls_insecure_skip_verify")) {
    if (!j["tls_insecure_skip_verify"].is_boolean()) {
      return Invalid(field + ".tls_insecure_skip_verify", "must be true or false");
    }
    b.tls_options.insecure_skip_verify = j["tls_insecure_skip_verify"].get<bool>();
    if (b.tls_options.insecure_skip_verify && !b.tls_options.ca_file.empty()) {
      return Invalid(field + ".tls_insecure_skip_verify",
                     "contradicts tls_ca_file (nothing is verified); keep one of them");
    }
  }
  return absl::OkStatus();
}

// A positive number of seconds.
absl::StatusOr<absl::Duration> ParseSeconds(const Json& v, const std::string& field) {
  if (!v.is_number() || !(v.get<double>() > 0) || !(v.get<double>() <= 86400)) {
    return Invalid(field, "must be a number of seconds > 0 (at most 86400)");
  }
  return absl::Seconds(v.get<double>());
}

// The connection options' keys (BackendConnectionOptions), accepted at the top level, in a
// model and in a backend object.
const std::set<std::string>& ConnectionKeys() {
  static const std::set<std::string> keys = {"connect_timeout_s", "timeout_s", "cooldown_s", "max_idle_connections",
                                             "idle_timeout_s", "max_in_flight", "max_retries", "request_usage",
                                             "request_timeout_s"};
  return keys;
}

// `keys` plus the connection options' keys.
std::set<std::string> WithConnectionKeys(std::set<std::string> keys) {
  keys.insert(ConnectionKeys().begin(), ConnectionKeys().end());
  return keys;
}

// The connection options `j` (an object: the top level, a model or a backend) sets over
// `inherited`; `field`: its name ("" at the top level). `grpc_backend`: `j` is a grpc://
// backend's object, where the pool's options do not apply.
absl::StatusOr<BackendConnectionOptions> ParseConnectionOptions(const Json& j, const std::string& field,
                                                                BackendConnectionOptions inherited,
                                                                bool grpc_backend) {
  BackendConnectionOptions o = inherited;
  auto name = [&](const char* key) { return field.empty() ? std::string(key) : absl::StrCat(field, ".", key); };
  for (auto [key, member] : {std::pair{"connect_timeout_s", &BackendConnectionOptions::connect_timeout},
                              std::pair{"timeout_s", &BackendConnectionOptions::timeout},
                              std::pair{"idle_timeout_s", &BackendConnectionOptions::idle_timeout}}) {
    if (!j.contains(key)) continue;
    absl::StatusOr<absl::Duration> d = ParseSeconds(j[key], name(key));
    if (!d.ok()) return d.status();
    o.*member = *d;
  }
  if (j.contains("request_timeout_s")) {
    absl::StatusOr<absl::Duration> d = ParseSeconds(j["request_timeout_s"], name("request_timeout_s"));
    if (!d.ok()) return d.status();
    o.request_timeout = *d;
  }
  if (j.contains("cooldown_s")) {
    const Json& v = j["cooldown_s"];
    if (!v.is_number() || !(v.get<double>() >= 0) || !(v.get<double>() <= 86400)) {
      return Invalid(name("cooldown_s"), "must be a number of seconds >= 0 (at most 86400; 0: a failed backend is "
                                         "not ejected)");
    }
    o.cooldown = absl::Seconds(v.get<double>());
  }
  // Whole numbers from 0 to `max`; `what`: what the number counts, for the error.
  auto count = [&](const char* key, int64_t max, const char* what) -> absl::StatusOr<std::optional<int64_t>> {
    if (!j.contains(key)) return std::nullopt;
    const Json& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > max) {
      return Invalid(name(key), absl::StrCat("must be a whole number in 0..", max, " (", what, ")"));
    }
    return v.get<int64_t>();
  };
  absl::StatusOr<std::optional<int64_t>> in_flight =
      count("max_in_flight", 1000000, "requests in flight to the backend at most; 0: no cap");
  if (!in_flight.ok()) return in_flight.status();
  if (in_flight->has_value()) o.max_in_flight = **in_flight;
  absl::StatusOr<std::optional<int64_t>> retries =
      count("max_retries", 1000, "further tries after a request's first failed one; 0: none; leave it out for every "
                                 "candidate once");
  if (!retries.ok()) return retries.status();
  if (retries->has_value()) o.max_retries = **retries;
  absl::StatusOr<std::optional<int64_t>> idle =
      count("max_idle_connections", 65536, "idle keep-alive connections kept; 0: none");
  if (!idle.ok()) return idle.status();
  if (idle->has_value()) o.max_idle_connections = static_cast<size_t>(**idle);
  if (j.contains("request_usage")) {
    if (!j["request_usage"].is_boolean()) {
      return Invalid(name("request_usage"), "must be true or false (false: a stream's usage is not asked of the "
                                            "backend for a client that did not ask for it)");
    }
    o.request_usage = j["request_usage"].get<bool>();
  }
  if (grpc_backend) {
    for (const char* key : {"max_idle_connections", "idle_timeout_s"}) {
      if (j.contains(key)) {
        return Invalid(name(key), "applies to http(s):// backends only: a grpc:// backend's calls share one HTTP/2 "
                                  "connection; leave it out");
      }
    }
    if (j.contains("request_usage")) {
      return Invalid(name("request_usage"), "applies to http(s):// backends only: a grpc:// backend's messages "
                                            "always carry their usage; leave it out");
    }
  }
  return o;
}

absl::StatusOr<HealthCheckOptions> ParseHealthCheck(const Json& j, const std::string& field) {
  if (!j.is_object()) return Invalid(field, "must be an object {\"interval_s\": 5, \"timeout_s\": 2, \"path\": \"/health\"}");
  if (absl::Status s = CheckKeys(j, {"interval_s", "timeout_s", "path"}, field); !s.ok()) return s;
  HealthCheckOptions h;
  if (j.contains("interval_s")) {
    absl::StatusOr<absl::Duration> d = ParseSeconds(j["interval_s"], field + ".interval_s");
    if (!d.ok()) return d.status();
    h.interval = *d;
  }
  if (j.contains("timeout_s")) {
    absl::StatusOr<absl::Duration> d = ParseSeconds(j["timeout_s"], field + ".timeout_s");
    if (!d.ok()) return d.status();
    h.timeout = *d;
  }
  if (j.contains("path")) {
    if (!j["path"].is_string() || !absl::StartsWith(j["path"].get<std::string>(), "/")) {
      return Invalid(field + ".path", "must be a path from the server's root, starting with / (e.g. \"/health\")");
    }
    h.path = j["path"].get<std::string>();
    h.path_set = true;
  }
  return h;
}

// `model_connection`: the model's connection options (over the top level's), which the backend's
// own override.
absl::StatusOr<RouterBackend> ParseBackend(const Json& j, const std::string& field,
                                           const BackendConnectionOptions& model_connection) {
  RouterBackend b;
  b.connection = model_connection;
  if (j.is_string()) {
    if (absl::Status s = ParseUrl(j.get<std::string>(), field, b); !s.ok()) return s;
    return b;
  }
  if (!j.is_object()) return Invalid(field, "must be a URL string or an object with \"url\"");
  if (absl::Status s = CheckKeys(j,
                                 WithConnectionKeys({"url", "model", "api_key_env", "price_per_mtok", "tls_ca_file",
                                                     "tls_insecure_skip_verify", "tls_cert_file",
                                                     "tls_key_file", "tls_server_name"}),
                                 field);
      !s.ok()) {
    return s;
  }
  if (!j.contains("url") || !j["url"].is_string()) return Invalid(field + ".url", "a URL string is required");
  if (absl::Status s = ParseUrl(j["url"].get<std::string>(), field + ".url", b); !s.ok()) return s;
  if (absl::Status s = ParseTls(j, field, b); !s.ok()) return s;
  absl::StatusOr<BackendConnectionOptions> connection = ParseConnectionOptions(j, field, model_connection, b.grpc);
  if (!connection.ok()) return connection.status();
  b.connection = *connection;
  if (j.contains("model")) {
    if (!j["model"].is_string() || j["model"].get<std::string>().empty()) {
      return Invalid(field + ".model", "must be a non-empty string (the backend's own model name)");
    }
    b.remote_model = j["model"].get<std::string>();
  }
  if (j.contains("api_key_env")) {
    if (!j["api_key_env"].is_string() || j["api_key_env"].get<std::string>().empty()) {
      return Invalid(field + ".api_key_env", "must be the name of an environment variable holding the key");
    }
    b.api_key_env = j["api_key_env"].get<std::string>();
  }
  if (j.contains("price_per_mtok")) {
    const Json& p = j["price_per_mtok"];
    const std::string pf = field + ".price_per_mtok";
    if (!p.is_object()) return Invalid(pf, "must be an object {\"input\": USD, \"output\": USD}");
    if (absl::Status s = CheckKeys(p, {"input", "output"}, pf); !s.ok()) return s;
    for (const char* key : {"input", "output"}) {
      if (!p.contains(key)) continue;
      if (!p[key].is_number() || p[key].get<double>() < 0) {
        return Invalid(absl::StrCat(pf, ".", key), "must be a number >= 0 (USD per million tokens)");
      }
      (std::string(key) == "input" ? b.price_input_per_mtok : b.price_output_per_mtok) = p[key].get<double>();
    }
  }
  return b;
}

absl::StatusOr<RouterModel> ParseModel(const std::string& name, const Json& j,
                                       const BackendConnectionOptions& top_connection) {
  const std::string field = absl::StrCat("models[\"", name, "\"]");
  RouterModel m;
  m.name = name;
  if (!j.is_object()) return Invalid(field, "must be an object with \"backends\"");
  if (absl::Status s = CheckKeys(j,
                                 WithConnectionKeys({"backends", "policy", "fallback", "cache_threshold",
                                                     "balance_abs_threshold", "balance_rel_threshold",
                                                     "health_check"}),
                                 field);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<BackendConnectionOptions> connection =
      ParseConnectionOptions(j, field, top_connection, /*grpc_backend=*/false);
  if (!connection.ok()) return connection.status();
  if (j.contains("policy")) {
    const Json& p = j["policy"];
    const std::string policy = p.is_string() ? p.get<std::string>() : p.dump();
    if (policy == "round_robin") {
      m.policy = RoutingPolicyKind::kRoundRobin;
    } else if (policy == "least_load") {
      m.policy = RoutingPolicyKind::kLeastLoad;
    } else if (policy == "cache_aware") {
      m.policy = RoutingPolicyKind::kCacheAware;
    } else {
      return Invalid(field + ".policy",
                     absl::StrCat(policy, " is not one of \"round_robin\", \"least_load\", \"cache_aware\""));
    }
  }
  for (const char* key : {"cache_threshold", "balance_abs_threshold", "balance_rel_threshold"}) {
    if (!j.contains(key)) continue;
    const std::string f = absl::StrCat(field, ".", key);
    if (m.policy != RoutingPolicyKind::kCacheAware) return Invalid(f, "applies to \"policy\": \"cache_aware\" only");
    if (!j[key].is_number()) return Invalid(f, "must be a number");
    const double v = j[key].get<double>();
    if (std::string(key) == "cache_threshold") {
      if (!(v >= 0.0 && v <= 1.0)) return Invalid(f, "must be in [0, 1]");
      m.cache_aware.cache_threshold = v;
    } else if (std::string(key) == "balance_abs_threshold") {
      if (!(v >= 0.0) || v != static_cast<double>(static_cast<int64_t>(v))) {
        return Invalid(f, "must be a whole number >= 0");
      }
      m.cache_aware.balance_abs_threshold = static_cast<int64_t>(v);
    } else {
      if (!(v >= 1.0)) return Invalid(f, "must be >= 1");
      m.cache_aware.balance_rel_threshold = v;
    }
  }
  if (j.contains("fallback")) {
    if (!j["fallback"].is_string() || j["fallback"].get<std::string>().empty()) {
      return Invalid(field + ".fallback", "must be the name of another configured model");
    }
    m.fallback = j["fallback"].get<std::string>();
  }
  if (j.contains("health_check")) {
    absl::StatusOr<HealthCheckOptions> h = ParseHealthCheck(j["health_check"], field + ".health_check");
    if (!h.ok()) return h.status();
    m.health_check = *std::move(h);
  }
  if (!j.contains("backends") || !j["backends"].is_array() || j["backends"].empty()) {
    return Invalid(field + ".backends", "a non-empty list of backends is required");
  }
  for (size_t i = 0; i < j["backends"].size(); ++i) {
    absl::StatusOr<RouterBackend> b =
        ParseBackend(j["backends"][i], absl::StrCat(field, ".backends[", i, "]"), *connection);
    if (!b.ok()) return b.status();
    m.backends.push_back(*std::move(b));
  }
  if (m.health_check.has_value() && m.health_check->path_set &&
      std::all_of(m.backends.begin(), m.backends.end(), [](const RouterBackend& b) { return b.grpc; })) {
    return Invalid(field + ".health_check.path",
                   "applies to http(s):// backends only, and every backend of this model is grpc:// (probed with "
                   "the Stats RPC); leave \"path\" out");
  }
  return m;
}

}  // namespace

std::optional<double> CostUsd(const RouterBackend& b, int64_t prompt_tokens, int64_t completion_tokens) {
  if (!b.price_input_per_mtok.has_value() || !b.price_output_per_mtok.has_value()) return std::nullopt;
  return (static_cast<double>(prompt_tokens) * *b.price_input_per_mtok +
          static_cast<double>(completion_tokens) * *b.price_output_per_mtok) /
         1e6;
}

std::vector<std::string> RouterConfig::model_names() const {
  std::vector<std::string> names;
  for (const auto& [name, model] : models) names.push_back(name);
  return names;
}

absl::StatusOr<RouterConfig> ParseRouterConfig(absl::string_view json_text) {
  Json root = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError("router config: not valid JSON");
  if (!root.is_object()) return Invalid("(top level)", "must be an object {\"models\": {...}}");
  if (absl::Status s = CheckKeys(root, WithConnectionKeys({"models"}), "(top level)"); !s.ok()) return s;
  // The connection options at the top level: every model's defaults.
  absl::StatusOr<BackendConnectionOptions> connection =
      ParseConnectionOptions(root, "", BackendConnectionOptions{}, /*grpc_backend=*/false);
  if (!connection.ok()) return connection.status();
  if (!root.contains("models") || !root["models"].is_object() || root["models"].empty()) {
    return Invalid("models", "an object mapping at least one model name to its backends is required");
  }
  RouterConfig config;
  for (const auto& [name, value] : root["models"].items()) {
    if (name.empty()) return Invalid("models", "a model name is empty");
    absl::StatusOr<RouterModel> m = ParseModel(name, value, *connection);
    if (!m.ok()) return m.status();
    config.models.emplace(name, *std::move(m));
  }
  for (const auto& [name, model] : config.models) {
    if (!model.fallback.empty() && config.models.count(model.fallback) == 0) {
      return Invalid(absl::StrCat("models[\"", name, "\"].fallback"),
                     absl::StrCat("\"", model.fallback, "\" is not a configured model (configured: ",
                                  absl::StrJoin(config.model_names(), ", "), ")"));
    }
  }
  for (const auto& [name, model] : config.models) {
    if (model.fallback.empty()) continue;
    const std::string field = absl::StrCat("models[\"", name, "\"].fallback");
    std::vector<std::string> chain = {name};
    for (std::string next = model.fallback; !next.empty(); next = config.models.at(next).fallback) {
      const bool seen = std::find(chain.begin(), chain.end(), next) != chain.end();
      chain.push_back(next);
      if (seen) {
        return Invalid(field, absl::StrCat("the fallbacks form a cycle: ", absl::StrJoin(chain, " -> ")));
      }
    }
  }
  return config;
}

absl::Status ResolveBackendApiKeys(RouterConfig& config,
                                   const std::function<std::optional<std::string>(const std::string&)>& lookup) {
  for (auto& [name, model] : config.models) {
    for (size_t i = 0; i < model.backends.size(); ++i) {
      RouterBackend& b = model.backends[i];
      if (b.api_key_env.empty()) continue;
      std::optional<std::string> key = lookup(b.api_key_env);
      if (!key.has_value() || key->empty()) {
        return absl::InvalidArgumentError(absl::StrCat("router config: models[\"", name, "\"].backends[", i,
                                                       "].api_key_env: $", b.api_key_env,
                                                       " is not set (or empty); export the backend's API key in it"));
      }
      b.api_key = *std::move(key);
    }
  }
  return absl::OkStatus();
}

}  // namespace tpserve

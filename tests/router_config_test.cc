// `tpserve router`'s config (coordinator/router/router_config.h): the example config parses to
// what it says, the connection options' defaults and overrides, the cost of a request at a
// backend's prices, and every config error is INVALID_ARGUMENT naming its field; BackendPool's
// policies (round_robin, least_load, cache_aware) and passive ejection for each backend's
// cooldown.
#include "coordinator/router/router_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "coordinator/router/backend_pool.h"

namespace tpserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kExample[] = R"({"models": {
   "gemma-4-31b": {"policy": "least_load", "fallback": "cloud-llama",
                   "backends": ["http://node1:8001/v1", "http://node2:8000/v1/"]},
   "cloud-llama": {"backends": [{"url": "http://cloud:9000/openai/v1", "model": "llama-3.3-70b-versatile",
                                 "api_key_env": "GROQ_API_KEY", "price_per_mtok": {"input": 0.59, "output": 0.79}}]}}})";

TEST(RouterConfigTest, ParsesTheExample) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfig(kExample);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->model_names(), ElementsAre("cloud-llama", "gemma-4-31b"));
  const RouterModel& g = c->models.at("gemma-4-31b");
  EXPECT_EQ(g.policy, RoutingPolicyKind::kLeastLoad);
  EXPECT_EQ(g.fallback, "cloud-llama");
  ASSERT_EQ(g.backends.size(), 2u);
  EXPECT_EQ(g.backends[0].host, "node1");
  EXPECT_EQ(g.backends[0].port, 8001);
  EXPECT_EQ(g.backends[0].base_path, "/v1");
  EXPECT_EQ(g.backends[1].base_path, "/v1");  // the trailing slash dropped
  EXPECT_TRUE(g.backends[0].remote_model.empty());
  const RouterModel& l = c->models.at("cloud-llama");
  EXPECT_EQ(l.policy, RoutingPolicyKind::kRoundRobin);
  const RouterBackend& b = l.backends[0];
  EXPECT_EQ(b.port, 9000);
  EXPECT_EQ(b.base_path, "/openai/v1");
  EXPECT_EQ(b.remote_model, "llama-3.3-70b-versatile");
  EXPECT_EQ(b.api_key_env, "GROQ_API_KEY");
  EXPECT_EQ(b.price_input_per_mtok, 0.59);
  EXPECT_EQ(b.price_output_per_mtok, 0.79);
  EXPECT_EQ(ParseRouterConfig(R"({"models": {"m": {"backends": ["http://h/v1"]}}})")->models.at("m").backends[0].port,
            80);
  EXPECT_FALSE(g.backends[0].tls);
}

TEST(RouterConfigTest, GrpcsBackendsAreGrpcWithTlsAndTakeTheCaFile) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfig(R"({"models": {"m": {"backends": [
      "grpcs://node1:50051", {"url": "grpcs://[::1]:50052/", "tls_ca_file": "/etc/ca.pem"}, "grpc://node2:50051"]}}})");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<RouterBackend>& b = c->models.at("m").backends;
  EXPECT_TRUE(b[0].grpc);
  EXPECT_TRUE(b[0].tls);
  EXPECT_EQ(b[0].host, "node1");
  EXPECT_EQ(b[0].port, 50051);
  EXPECT_TRUE(b[0].tls_options.ca_file.empty());  // the system's CAs
  EXPECT_TRUE(b[1].tls);
  EXPECT_EQ(b[1].host, "[::1]");
  EXPECT_EQ(b[1].port, 50052);
  EXPECT_EQ(b[1].tls_options.ca_file, "/etc/ca.pem");
  EXPECT_TRUE(b[2].grpc);
  EXPECT_FALSE(b[2].tls);
}

TEST(RouterConfigTest, ConnectionOptionsDefaultAndAreOverriddenTopModelBackend) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfig(R"({"timeout_s": 120, "cooldown_s": 0, "max_retries": 2,
    "models": {
      "plain": {"backends": ["http://p/v1"]},
      "tuned": {"connect_timeout_s": 0.5, "max_idle_connections": 4, "request_timeout_s": 30.5,
                "backends": ["http://t/v1",
                             {"url": "http://u/v1", "timeout_s": 2.5, "cooldown_s": 30, "max_idle_connections": 0,
                              "idle_timeout_s": 7, "max_in_flight": 3, "max_retries": 0, "request_usage": false,
                              "request_timeout_s": 90},
                             {"url": "grpc://g:50051", "connect_timeout_s": 1}]}}})");
  ASSERT_TRUE(c.ok()) << c.status();
  // The built-in defaults, where nothing is set.
  const BackendConnectionOptions d = ParseRouterConfig(R"({"models": {"m": {"backends": ["http://h/v1"]}}})")
                                         ->models.at("m")
                                         .backends[0]
                                         .connection;
  EXPECT_EQ(d.connect_timeout, absl::Seconds(5));
  EXPECT_EQ(d.timeout, absl::Seconds(600));
  EXPECT_EQ(d.cooldown, absl::Seconds(5));
  EXPECT_EQ(d.max_idle_connections, 1024u);
  EXPECT_EQ(d.idle_timeout, absl::Seconds(60));
  EXPECT_EQ(d.max_in_flight, 0);
  EXPECT_FALSE(d.max_retries.has_value());  // every candidate once
  EXPECT_TRUE(d.request_usage);
  EXPECT_FALSE(d.request_timeout.has_value());  // no bound on the whole request
  // The top level's over the defaults.
  const BackendConnectionOptions& p = c->models.at("plain").backends[0].connection;
  EXPECT_EQ(p.connect_timeout, absl::Seconds(5));
  EXPECT_EQ(p.timeout, absl::Seconds(120));
  EXPECT_EQ(p.cooldown, absl::ZeroDuration());
  EXPECT_EQ(p.max_idle_connections, 1024u);
  // The model's over the top level's.
  const std::vector<RouterBackend>& t = c->models.at("tuned").backends;
  EXPECT_EQ(t[0].connection.connect_timeout, absl::Milliseconds(500));
  EXPECT_EQ(t[0].connection.timeout, absl::Seconds(120));
  EXPECT_EQ(t[0].connection.max_idle_connections, 4u);
  EXPECT_EQ(t[0].connection.idle_timeout, absl::Seconds(60));
  // The backend's over the model's.
  EXPECT_EQ(t[1].connection.connect_timeout, absl::Milliseconds(500));
  EXPECT_EQ(t[1].connection.timeout, absl::Milliseconds(2500));
  EXPECT_EQ(t[1].connection.cooldown, absl::Seconds(30));
  EXPECT_EQ(t[1].connection.max_idle_connections, 0u);
  EXPECT_EQ(t[1].connection.idle_timeout, absl::Seconds(7));
  EXPECT_EQ(t[1].connection.max_in_flight, 3);
  EXPECT_EQ(t[0].connection.max_in_flight, 0);
  EXPECT_EQ(p.max_retries, 2);
  EXPECT_EQ(t[0].connection.max_retries, 2);
  EXPECT_EQ(t[1].connection.max_retries, 0);
  EXPECT_FALSE(t[1].connection.request_usage);
  EXPECT_TRUE(t[0].connection.request_usage);
  EXPECT_FALSE(p.request_timeout.has_value());
  EXPECT_EQ(t[0].connection.request_timeout, absl::Milliseconds(30500));
  EXPECT_EQ(t[1].connection.request_timeout, absl::Seconds(90));
  EXPECT_EQ(t[2].connection.connect_timeout, absl::Seconds(1));
  EXPECT_EQ(t[2].connection.timeout, absl::Seconds(120));
  EXPECT_EQ(t[2].connection.max_idle_connections, 4u);  // the model's; a grpc:// backend does not use it
}

TEST(RouterConfigTest, CostIsTokensTimesPricesWhenBothPricesAreSet) {
  RouterBackend b;
  EXPECT_FALSE(CostUsd(b, 1000, 500).has_value());
  b.price_input_per_mtok = 2.0;
  EXPECT_FALSE(CostUsd(b, 1000, 500).has_value());  // as tpbench compare: both prices, or unpriced
  b.price_output_per_mtok = 10.0;
  EXPECT_DOUBLE_EQ(*CostUsd(b, 1000, 500), 0.007);  // 1000 x $2 / 1M + 500 x $10 / 1M
  EXPECT_DOUBLE_EQ(*CostUsd(b, 0, 0), 0.0);
}

TEST(RouterConfigTest, ParsesGrpcBackends) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfig(R"({"models": {"m": {
      "health_check": {"path": "/ready"},
      "backends": ["grpc://node3:50051", {"url": "grpc://[::1]:7000/", "model": "gemma", "api_key_env": "K"},
                   "http://h/v1"]}}})");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<RouterBackend>& b = c->models.at("m").backends;
  EXPECT_TRUE(b[0].grpc);
  EXPECT_FALSE(b[0].tls);
  EXPECT_EQ(b[0].host, "node3");
  EXPECT_EQ(b[0].port, 50051);
  EXPECT_EQ(b[0].base_path, "");
  EXPECT_EQ(b[0].url, "grpc://node3:50051");
  EXPECT_EQ(b[1].host, "[::1]");
  EXPECT_EQ(b[1].port, 7000);
  EXPECT_EQ(b[1].remote_model, "gemma");
  EXPECT_EQ(b[1].api_key_env, "K");
  EXPECT_FALSE(b[2].grpc);
  // The probe's path is for the http backend; the grpc ones are probed with Stats.
  EXPECT_EQ(c->models.at("m").health_check->path, "/ready");
}

TEST(RouterConfigTest, ParsesHttpsBackends) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfig(R"({"models": {"m": {"backends": [
      "https://api.groq.com/openai/v1",
      {"url": "https://h:8443/v1", "tls_ca_file": "/etc/ca.pem"},
      {"url": "https://h2/v1", "tls_insecure_skip_verify": true}]}}})");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<RouterBackend>& b = c->models.at("m").backends;
  EXPECT_TRUE(b[0].tls);
  EXPECT_EQ(b[0].host, "api.groq.com");
  EXPECT_EQ(b[0].port, 443);
  EXPECT_EQ(b[0].base_path, "/openai/v1");
  EXPECT_TRUE(b[0].tls_options.ca_file.empty());
  EXPECT_FALSE(b[0].tls_options.insecure_skip_verify);
  EXPECT_EQ(b[1].port, 8443);
  EXPECT_EQ(b[1].tls_options.ca_file, "/etc/ca.pem");
  EXPECT_TRUE(b[2].tls_options.insecure_skip_verify);
}

TEST(RouterConfigTest, TlsBackendsTakeAClientCertificateAndAServerName) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfig(R"({"models": {"m": {"backends": [
      {"url": "https://10.0.0.7:8443/v1", "tls_ca_file": "/etc/ca.pem", "tls_cert_file": "/etc/router.pem",
       "tls_key_file": "/etc/router.key", "tls_server_name": "backend.internal"},
      {"url": "grpcs://10.0.0.8:50051", "tls_cert_file": "/etc/router.pem", "tls_key_file": "/etc/router.key",
       "tls_server_name": "replica.internal"},
      "https://h/v1"]}}})");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<RouterBackend>& b = c->models.at("m").backends;
  EXPECT_EQ(b[0].host, "10.0.0.7");  // what the router connects to; the name checked is another
  EXPECT_EQ(b[0].tls_options.cert_file, "/etc/router.pem");
  EXPECT_EQ(b[0].tls_options.key_file, "/etc/router.key");
  EXPECT_EQ(b[0].tls_options.server_name, "backend.internal");
  EXPECT_TRUE(b[1].grpc);
  EXPECT_EQ(b[1].tls_options.cert_file, "/etc/router.pem");
  EXPECT_EQ(b[1].tls_options.key_file, "/etc/router.key");
  EXPECT_EQ(b[1].tls_options.server_name, "replica.internal");
  EXPECT_TRUE(b[1].tls_options.ca_file.empty());
  EXPECT_TRUE(b[2].tls_options.cert_file.empty());  // no client certificate, the URL's host checked
  EXPECT_TRUE(b[2].tls_options.key_file.empty());
  EXPECT_TRUE(b[2].tls_options.server_name.empty());
}

TEST(RouterConfigTest, ParsesHealthChecks) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfig(R"({"models": {
      "a": {"health_check": {}, "backends": ["http://h/v1"]},
      "b": {"health_check": {"interval_s": 0.5, "timeout_s": 0.25, "path": "/ready"}, "backends": ["http://h/v1"]},
      "c": {"backends": ["http://h/v1"]}}})");
  ASSERT_TRUE(c.ok()) << c.status();
  const std::optional<HealthCheckOptions>& a = c->models.at("a").health_check;
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->interval, absl::Seconds(5));
  EXPECT_EQ(a->timeout, absl::Seconds(2));
  EXPECT_EQ(a->path, "/health");
  const std::optional<HealthCheckOptions>& b = c->models.at("b").health_check;
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->interval, absl::Milliseconds(500));
  EXPECT_EQ(b->timeout, absl::Milliseconds(250));
  EXPECT_EQ(b->path, "/ready");
  EXPECT_FALSE(c->models.at("c").health_check.has_value());
}

TEST(RouterConfigTest, ResolvesBackendKeysFromTheLookup) {
  RouterConfig c = *ParseRouterConfig(kExample);
  absl::Status unset = ResolveBackendApiKeys(c, [](const std::string&) { return std::nullopt; });
  EXPECT_EQ(unset.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unset.message(), HasSubstr("models[\"cloud-llama\"].backends[0].api_key_env: $GROQ_API_KEY is not set"));
  ASSERT_TRUE(ResolveBackendApiKeys(c, [](const std::string& name) {
                return name == "GROQ_API_KEY" ? std::optional<std::string>("k1") : std::nullopt;
              }).ok());
  EXPECT_EQ(c.models.at("cloud-llama").backends[0].api_key, "k1");
  EXPECT_TRUE(c.models.at("gemma-4-31b").backends[0].api_key.empty());
}

struct BadConfig {
  const char* json;
  const char* message;  // a substring of the error
};

class RouterConfigErrorTest : public ::testing::TestWithParam<BadConfig> {};

TEST_P(RouterConfigErrorTest, IsInvalidArgumentNamingTheField) {
  absl::StatusOr<RouterConfig> c = ParseRouterConfig(GetParam().json);
  ASSERT_FALSE(c.ok()) << GetParam().json;
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Errors, RouterConfigErrorTest,
    ::testing::Values(
        BadConfig{"{", "not valid JSON"},
        BadConfig{"[]", "must be an object"},
        BadConfig{R"({"model": {}})", "unknown key \"model\""},
        BadConfig{R"({})", "models: an object mapping at least one model name"},
        BadConfig{R"({"models": {}})", "models: an object mapping at least one model name"},
        BadConfig{R"({"models": {"m": []}})", "models[\"m\"]: must be an object"},
        BadConfig{R"({"models": {"m": {}}})", "models[\"m\"].backends: a non-empty list"},
        BadConfig{R"({"models": {"m": {"backends": []}}})", "models[\"m\"].backends: a non-empty list"},
        BadConfig{R"({"models": {"m": {"backends": ["http://h/v1"], "weights": 1}}})", "unknown key \"weights\""},
        BadConfig{R"({"models": {"m": {"backends": ["grpcs://h"]}}})",
                  "backends[0]: \"grpcs://h\": a grpcs:// backend needs its port, 1..65535 (grpcs://HOST:PORT"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "grpcs://h:1", "tls_insecure_skip_verify": true}]}}})",
                  "backends[0].tls_insecure_skip_verify: is not available for grpcs:// backends"},
        BadConfig{R"({"models": {"m": {"backends": ["grpc://h"]}}})",
                  "backends[0]: \"grpc://h\": a grpc:// backend needs its port, 1..65535"},
        BadConfig{R"({"models": {"m": {"backends": ["grpc://[::1]"]}}})", "a grpc:// backend needs its port"},
        BadConfig{R"({"models": {"m": {"backends": ["grpc://h:0"]}}})", "a grpc:// backend needs its port"},
        BadConfig{R"({"models": {"m": {"backends": ["grpc://:50051"]}}})", "\"grpc://:50051\" names no host"},
        BadConfig{R"({"models": {"m": {"backends": ["grpc://h:50051/v1"]}}})",
                  "a grpc:// backend is grpc://HOST:PORT, with no path"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "grpc://h:1", "tls_ca_file": "ca.pem"}]}}})",
                  "backends[0].tls_ca_file: applies to https:// and grpcs:// backends only"},
        BadConfig{R"({"models": {"m": {"health_check": {"path": "/ready"}, "backends": ["grpc://h:1"]}}})",
                  "models[\"m\"].health_check.path: applies to http(s):// backends only"},
        BadConfig{R"({"models": {"m": {"backends": ["h:8000/v1"]}}})", "is not an http(s)://HOST:PORT/v1 URL"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "http://h/v1", "tls_ca_file": "ca.pem"}]}}})",
                  "backends[0].tls_ca_file: applies to https:// and grpcs:// backends only"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "http://h/v1", "tls_insecure_skip_verify": true}]}}})",
                  "backends[0].tls_insecure_skip_verify: applies to https:// and grpcs:// backends only"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "https://h/v1", "tls_ca_file": ""}]}}})",
                  "backends[0].tls_ca_file: must be the path of a PEM file"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "https://h/v1", "tls_insecure_skip_verify": "yes"}]}}})",
                  "backends[0].tls_insecure_skip_verify: must be true or false"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "https://h/v1", "tls_ca_file": "ca.pem",
                                                       "tls_insecure_skip_verify": true}]}}})",
                  "tls_insecure_skip_verify: contradicts tls_ca_file"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "http://h/v1", "tls_cert_file": "c.pem",
                                                       "tls_key_file": "c.key"}]}}})",
                  "backends[0].tls_cert_file: applies to https:// and grpcs:// backends only (url is \"http://h/v1\")"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "grpc://h:1", "tls_key_file": "c.key"}]}}})",
                  "backends[0].tls_key_file: applies to https:// and grpcs:// backends only"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "grpc://h:1", "tls_server_name": "b.test"}]}}})",
                  "backends[0].tls_server_name: applies to https:// and grpcs:// backends only"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "http://h/v1", "tls_server_name": "b.test"}]}}})",
                  "backends[0].tls_server_name: applies to https:// and grpcs:// backends only"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "https://h/v1", "tls_cert_file": "c.pem"}]}}})",
                  "backends[0].tls_key_file: is required with tls_cert_file"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "grpcs://h:1", "tls_key_file": "c.key"}]}}})",
                  "backends[0].tls_cert_file: is required with tls_key_file"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "grpcs://h:1", "tls_cert_file": "",
                                                       "tls_key_file": "c.key"}]}}})",
                  "backends[0].tls_cert_file: must be the path of a PEM file"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "https://h/v1", "tls_cert_file": "c.pem",
                                                       "tls_key_file": 7}]}}})",
                  "backends[0].tls_key_file: must be the path of a PEM file"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "https://h/v1", "tls_server_name": ""}]}}})",
                  "backends[0].tls_server_name: must be the host name (or IP address)"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "grpcs://h:1", "tls_server_name": "a b"}]}}})",
                  "backends[0].tls_server_name: must be the host name (or IP address)"},
        BadConfig{R"({"models": {"m": {"backends": ["http://h:8000"]}}})", "must be the OpenAI API root, ending in /v1"},
        BadConfig{R"({"models": {"m": {"backends": ["http://h:80x/v1"]}}})", "the port is not a number"},
        BadConfig{R"({"models": {"m": {"backends": ["http://h:0/v1"]}}})", "the port is not a number"},
        BadConfig{R"({"models": {"m": {"backends": ["http://:80/v1"]}}})", "names no host"},
        BadConfig{R"({"models": {"m": {"backends": [7]}}})", "backends[0]: must be a URL string or an object"},
        BadConfig{R"({"models": {"m": {"backends": [{"model": "x"}]}}})", "backends[0].url: a URL string is required"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "http://h/v1", "key": "x"}]}}})",
                  "backends[0]: unknown key \"key\""},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "http://h/v1", "model": ""}]}}})",
                  "backends[0].model: must be a non-empty string"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "http://h/v1", "api_key_env": 3}]}}})",
                  "backends[0].api_key_env: must be the name of an environment variable"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "http://h/v1", "price_per_mtok": 1}]}}})",
                  "backends[0].price_per_mtok: must be an object"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "http://h/v1", "price_per_mtok": {"input": -1}}]}}})",
                  "backends[0].price_per_mtok.input: must be a number >= 0"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "http://h/v1", "price_per_mtok": {"cached": 1}}]}}})",
                  "price_per_mtok: unknown key \"cached\""},
        BadConfig{R"({"models": {"m": {"cache_threshold": 0.5, "backends": ["http://h/v1"]}}})",
                  "models[\"m\"].cache_threshold: applies to \"policy\": \"cache_aware\" only"},
        BadConfig{R"({"models": {"m": {"policy": "cache_aware", "cache_threshold": 1.5, "backends": ["http://h/v1"]}}})",
                  "models[\"m\"].cache_threshold: must be in [0, 1]"},
        BadConfig{R"({"models": {"m": {"policy": "cache_aware", "balance_abs_threshold": 2.5,
                                        "backends": ["http://h/v1"]}}})",
                  "balance_abs_threshold: must be a whole number >= 0"},
        BadConfig{R"({"models": {"m": {"policy": "cache_aware", "balance_rel_threshold": 0.5,
                                        "backends": ["http://h/v1"]}}})",
                  "balance_rel_threshold: must be >= 1"},
        BadConfig{R"({"models": {"m": {"health_check": true, "backends": ["http://h/v1"]}}})",
                  "models[\"m\"].health_check: must be an object"},
        BadConfig{R"({"models": {"m": {"health_check": {"interval": 5}, "backends": ["http://h/v1"]}}})",
                  "models[\"m\"].health_check: unknown key \"interval\" (known: interval_s, path, timeout_s)"},
        BadConfig{R"({"models": {"m": {"health_check": {"interval_s": 0}, "backends": ["http://h/v1"]}}})",
                  "models[\"m\"].health_check.interval_s: must be a number of seconds > 0"},
        BadConfig{R"({"models": {"m": {"health_check": {"timeout_s": -1}, "backends": ["http://h/v1"]}}})",
                  "models[\"m\"].health_check.timeout_s: must be a number of seconds > 0"},
        BadConfig{R"({"models": {"m": {"health_check": {"timeout_s": "2"}, "backends": ["http://h/v1"]}}})",
                  "models[\"m\"].health_check.timeout_s: must be a number of seconds > 0"},
        BadConfig{R"({"models": {"m": {"health_check": {"path": "health"}, "backends": ["http://h/v1"]}}})",
                  "models[\"m\"].health_check.path: must be a path from the server's root, starting with /"},
        BadConfig{R"({"timeout_s": "30", "models": {"m": {"backends": ["http://h/v1"]}}})",
                  "router config: timeout_s: must be a number of seconds > 0"},
        BadConfig{R"({"models": {"m": {"connect_timeout_s": 0, "backends": ["http://h/v1"]}}})",
                  "models[\"m\"].connect_timeout_s: must be a number of seconds > 0"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "http://h/v1", "timeout_s": -5}]}}})",
                  "models[\"m\"].backends[0].timeout_s: must be a number of seconds > 0"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "http://h/v1", "timeout_s": 100000}]}}})",
                  "models[\"m\"].backends[0].timeout_s: must be a number of seconds > 0 (at most 86400)"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "http://h/v1", "idle_timeout_s": 0}]}}})",
                  "models[\"m\"].backends[0].idle_timeout_s: must be a number of seconds > 0"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "http://h/v1", "idle_timeout_s": true}]}}})",
                  "models[\"m\"].backends[0].idle_timeout_s: must be a number of seconds > 0"},
        BadConfig{R"({"models": {"m": {"cooldown_s": -1, "backends": ["http://h/v1"]}}})",
                  "models[\"m\"].cooldown_s: must be a number of seconds >= 0"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "http://h/v1", "cooldown_s": "5s"}]}}})",
                  "models[\"m\"].backends[0].cooldown_s: must be a number of seconds >= 0"},
        BadConfig{R"({"models": {"m": {"max_idle_connections": 2.5, "backends": ["http://h/v1"]}}})",
                  "models[\"m\"].max_idle_connections: must be a whole number in 0..65536"},
        BadConfig{R"({"max_idle_connections": -1, "models": {"m": {"backends": ["http://h/v1"]}}})",
                  "router config: max_idle_connections: must be a whole number in 0..65536"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "grpc://h:1", "max_idle_connections": 8}]}}})",
                  "models[\"m\"].backends[0].max_idle_connections: applies to http(s):// backends only"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "grpc://h:1", "idle_timeout_s": 8}]}}})",
                  "models[\"m\"].backends[0].idle_timeout_s: applies to http(s):// backends only"},
        BadConfig{R"({"timeout": 30, "models": {"m": {"backends": ["http://h/v1"]}}})",
                  "(top level): unknown key \"timeout\" (known: connect_timeout_s, cooldown_s, idle_timeout_s, "
                  "max_idle_connections, max_in_flight, max_retries, models, request_timeout_s, request_usage, "
                  "timeout_s)"},
        BadConfig{R"({"models": {"m": {"max_in_flight": 1.5, "backends": ["http://h/v1"]}}})",
                  "models[\"m\"].max_in_flight: must be a whole number in 0..1000000"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "grpc://h:1", "max_in_flight": -2}]}}})",
                  "models[\"m\"].backends[0].max_in_flight: must be a whole number in 0..1000000"},
        BadConfig{R"({"models": {"m": {"max_retries": -1, "backends": ["http://h/v1"]}}})",
                  "models[\"m\"].max_retries: must be a whole number in 0..1000 (further tries after a request's "
                  "first failed one"},
        BadConfig{R"({"max_retries": "2", "models": {"m": {"backends": ["http://h/v1"]}}})",
                  "router config: max_retries: must be a whole number in 0..1000"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "grpc://h:1", "request_timeout_s": 0}]}}})",
                  "models[\"m\"].backends[0].request_timeout_s: must be a number of seconds > 0 (at most 86400)"},
        BadConfig{R"({"request_timeout_s": "60", "models": {"m": {"backends": ["http://h/v1"]}}})",
                  "router config: request_timeout_s: must be a number of seconds > 0"},
        BadConfig{R"({"models": {"m": {"request_usage": "no", "backends": ["http://h/v1"]}}})",
                  "models[\"m\"].request_usage: must be true or false"},
        BadConfig{R"({"models": {"m": {"backends": [{"url": "grpc://h:1", "request_usage": false}]}}})",
                  "models[\"m\"].backends[0].request_usage: applies to http(s):// backends only"},
        BadConfig{R"({"models": {"m": {"policy": "random", "backends": ["http://h/v1"]}}})",
                  "models[\"m\"].policy: random is not one of"},
        BadConfig{R"({"models": {"m": {"fallback": "x", "backends": ["http://h/v1"]}}})",
                  "models[\"m\"].fallback: \"x\" is not a configured model (configured: m)"},
        BadConfig{R"({"models": {"m": {"fallback": "", "backends": ["http://h/v1"]}}})",
                  "models[\"m\"].fallback: must be the name of another configured model"},
        BadConfig{R"({"models": {"m": {"fallback": "m", "backends": ["http://h/v1"]}}})",
                  "the fallbacks form a cycle: m -> m"},
        BadConfig{R"({"models": {"a": {"fallback": "b", "backends": ["http://h/v1"]},
                                  "b": {"fallback": "c", "backends": ["http://h/v1"]},
                                  "c": {"fallback": "b", "backends": ["http://h/v1"]}}})",
                  "the fallbacks form a cycle: a -> b -> c -> b"}));

RouterModel ThreeBackends(RoutingPolicyKind policy) {
  RouterConfig c = *ParseRouterConfig(
      R"({"models": {"m": {"backends": ["http://a:1/v1", "http://b:1/v1", "http://c:1/v1"]}}})");
  RouterModel m = c.models.at("m");
  m.policy = policy;
  return m;
}

TEST(BackendPoolTest, RoundRobinStartsOneFurtherEachRequest) {
  BackendPool pool(ThreeBackends(RoutingPolicyKind::kRoundRobin));
  const absl::Time now = absl::Now();
  EXPECT_THAT(pool.Order(now), ElementsAre(0, 1, 2));
  EXPECT_THAT(pool.Order(now), ElementsAre(1, 2, 0));
  EXPECT_THAT(pool.Order(now), ElementsAre(2, 0, 1));
  EXPECT_THAT(pool.Order(now), ElementsAre(0, 1, 2));
}

TEST(BackendPoolTest, LeastLoadPutsTheFewestInFlightFirst) {
  BackendPool pool(ThreeBackends(RoutingPolicyKind::kLeastLoad));
  const absl::Time now = absl::Now();
  pool.Begin(0);
  pool.Begin(0);
  pool.Begin(1);
  EXPECT_THAT(pool.Order(now), ElementsAre(2, 1, 0));
  pool.End(0);
  pool.End(0);
  EXPECT_EQ(pool.in_flight(0), 0);
  EXPECT_THAT(pool.Order(now), ElementsAre(2, 0, 1));  // ties (0, 2) in round-robin order from 1
}

TEST(BackendPoolTest, BackendsFailingTheirProbeAreSkippedUntilOnePasses) {
  BackendPool pool(ThreeBackends(RoutingPolicyKind::kRoundRobin));
  const absl::Time now = absl::Now();
  EXPECT_FALSE(pool.SetProbeFailing(1, false));  // every backend starts passing
  EXPECT_TRUE(pool.SetProbeFailing(1, true));
  EXPECT_FALSE(pool.SetProbeFailing(1, true));  // no change: nothing to log
  EXPECT_THAT(pool.Order(now), ElementsAre(0, 2));
  EXPECT_THAT(pool.Order(now + absl::Hours(1)), ElementsAre(2, 0));  // no cooldown: until a probe passes
  EXPECT_FALSE(pool.Healthy(1, now));
  EXPECT_TRUE(pool.Healthy(0, now));
  EXPECT_THAT(pool.ProbeFailing(), ElementsAre("http://b:1/v1"));
  EXPECT_TRUE(pool.Ejected(now).empty());
  EXPECT_TRUE(pool.SetProbeFailing(1, false));
  EXPECT_THAT(pool.Order(now), ElementsAre(2, 0, 1));
  EXPECT_TRUE(pool.Healthy(1, now));
  pool.Eject(2, now);  // passive ejection is independent of the probes
  EXPECT_FALSE(pool.Healthy(2, now));
  EXPECT_TRUE(pool.ProbeFailing().empty());
}

TEST(BackendPoolTest, EachBackendIsEjectedForItsOwnCooldown) {
  RouterConfig c = *ParseRouterConfig(R"({"models": {"m": {"cooldown_s": 30, "backends": [
      "http://a:1/v1", {"url": "http://b:1/v1", "cooldown_s": 0}, {"url": "http://c:1/v1", "cooldown_s": 0.5}]}}})");
  BackendPool pool(c.models.at("m"));
  const absl::Time now = absl::Now();
  for (size_t i = 0; i < 3; ++i) pool.Eject(i, now);
  EXPECT_THAT(pool.Ejected(now), ElementsAre("http://a:1/v1", "http://c:1/v1"));  // b: cooldown 0, never out
  EXPECT_THAT(pool.Ejected(now + absl::Milliseconds(499)), ElementsAre("http://a:1/v1", "http://c:1/v1"));
  EXPECT_THAT(pool.Ejected(now + absl::Milliseconds(500)), ElementsAre("http://a:1/v1"));
  EXPECT_THAT(pool.Ejected(now + absl::Seconds(29)), ElementsAre("http://a:1/v1"));
  EXPECT_TRUE(pool.Ejected(now + absl::Seconds(30)).empty());
}

TEST(BackendPoolTest, EjectedBackendsAreSkippedForTheCooldown) {
  BackendPool pool(ThreeBackends(RoutingPolicyKind::kRoundRobin));
  const absl::Time now = absl::Now();
  pool.Eject(1, now);
  EXPECT_THAT(pool.Order(now), ElementsAre(0, 2));
  EXPECT_THAT(pool.Ejected(now + absl::Seconds(4)), ElementsAre("http://b:1/v1"));
  EXPECT_THAT(pool.Order(now + absl::Seconds(4)), ElementsAre(2, 0));
  EXPECT_THAT(pool.Order(now + absl::Seconds(5)), ElementsAre(2, 0, 1));
  EXPECT_TRUE(pool.Ejected(now + absl::Seconds(5)).empty());
}

}  // namespace
}  // namespace tpserve

namespace tpserve {
namespace {

// A chat body with a shared system prompt of `system_bytes` and a user turn of its own.
nlohmann::json Chat(size_t system_bytes, const std::string& user) {
  return {{"model", "m"},
          {"messages", {{{"role", "system"}, {"content", std::string(system_bytes, 's')}},
                        {{"role", "user"}, {"content", user}}}}};
}

TEST(BackendPoolTest, PromptTextCoversChatsAndPrompts) {
  EXPECT_EQ(PromptText(Chat(3, "hi")), "system\nsss\nuser\nhi\n");
  EXPECT_EQ(PromptText({{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}},
                                                                         {{"type", "text"}, {"text", "b"}}}}}}}}),
            "user\nab\n");
  EXPECT_EQ(PromptText({{"prompt", "once upon"}}), "once upon");
  EXPECT_EQ(PromptText({{"prompt", {"first", "second"}}}), "first");
  EXPECT_EQ(PromptText({{"prompt", {1, 22, 333}}}), "1 22 333 ");
}

// Requests sharing a long prefix (a system prompt) stick to the backend that took the first
// of them; a prompt that shares too little goes by load; an ejected holder is passed over;
// out-of-balance load overrides the match.
TEST(BackendPoolTest, CacheAwareFollowsSharedPrefixesWithinTheBalanceBounds) {
  const absl::Time now = absl::Now();
  RouterModel m = ThreeBackends(RoutingPolicyKind::kCacheAware);
  m.cache_aware.balance_abs_threshold = 2;
  BackendPool pool(m);
  // Two different long system prompts, first seen while everything is idle: least_load's order
  // (round-robin among ties) puts them on different backends.
  const std::string a = PromptText(Chat(4000, "question 1")), b = PromptText(Chat(4000, "q"));
  std::string b_prompt = b;
  b_prompt[10] = 'x';  // a different system prompt from byte 10 on
  const size_t first_a = pool.Order(now, a).front();
  const size_t first_b = pool.Order(now, b_prompt).front();
  EXPECT_NE(first_a, first_b);
  // The same system prompt with other user turns: the same backend, whatever the rotation.
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(pool.Order(now, PromptText(Chat(4000, "question " + std::to_string(i + 2)))).front(), first_a) << i;
  }
  // A 4,100-byte prompt that shares no whole 128-byte step with the others (below the 30%
  // threshold) goes by load.
  std::string mostly_new = PromptText(Chat(100, std::string(4000, 'u')));
  pool.Begin(first_a);  // first_a is now the busiest, but within the balance bounds
  const size_t by_load = pool.Order(now, mostly_new).front();
  EXPECT_NE(by_load, first_a) << "a 3% match must not pull a request to a busier backend";
  EXPECT_EQ(pool.Order(now, a).front(), first_a) << "within the bounds, the match wins over load";
  // Out of balance (3 more in flight than the idlest, and more than 1.5x): least_load decides.
  pool.Begin(first_a);
  pool.Begin(first_a);
  EXPECT_NE(pool.Order(now, a).front(), first_a);
  pool.End(first_a);
  pool.End(first_a);
  pool.End(first_a);
  // The holder ejected: another backend, then (after the cooldown) the new holder keeps it.
  pool.Eject(first_a, now);
  const size_t moved = pool.Order(now, a).front();
  EXPECT_NE(moved, first_a);
  EXPECT_EQ(pool.Order(now + absl::Seconds(6), a).front(), moved);
}

}  // namespace
}  // namespace tpserve

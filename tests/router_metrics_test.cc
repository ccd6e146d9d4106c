// RouterMetrics (coordinator/router/router_metrics.h): every configured backend and model has
// its series at zero before traffic (a priced backend's cost too; the front doors that are
// open, and only they); each event moves exactly its series (a known request's tokens and cost
// to the exact number); the in-flight and health gauges follow the pools at scrape time. The
// proxy's calls into it are checked end to end by tests/router_test.sh and
// tests/router_knobs_test.sh.
#include "coordinator/router/router_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/router/backend_pool.h"
#include "coordinator/router/proxy_core.h"
#include "coordinator/router/router_config.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kConfig[] = R"({"cooldown_s": 60, "models": {
   "gemma": {"fallback": "mid", "backends": ["http://a:1/v1", "http://b:2/v1", "http://a:1/v1"]},
   "mid": {"fallback": "cloud", "backends": ["http://m:3/v1"]},
   "cloud": {"backends": [{"url": "http://c:4/v1", "price_per_mtok": {"input": 3, "output": 15}}]}}})";

// The value of the series `name{labels}` in a fresh scrape of `metrics`; "absent" when there is
// none, "duplicate" when there are several.
std::string SeriesValue(const RouterMetrics& metrics, const std::string& series) {
  std::istringstream text(metrics.RenderPrometheus());
  std::string line, found = "absent";
  while (std::getline(text, line)) {
    if (line.rfind(series + " ", 0) == 0) found = found == "absent" ? line.substr(series.size() + 1) : "duplicate";
  }
  return found;
}

class RouterMetricsTest : public ::testing::Test {
 protected:
  RouterMetricsTest() {
    RouterConfig config = *ParseRouterConfig(kConfig);
    for (auto& [name, model] : config.models) pools_.emplace(name, std::make_unique<BackendPool>(std::move(model)));
    metrics_ = std::make_unique<RouterMetrics>(pools_, std::vector<FrontDoor>{FrontDoor::kHttp, FrontDoor::kGrpc});
  }
  BackendPool& pool(const std::string& name) { return *pools_.at(name); }

  std::string Value(const std::string& series) const { return SeriesValue(*metrics_, series); }

  std::map<std::string, std::unique_ptr<BackendPool>> pools_;
  std::unique_ptr<RouterMetrics> metrics_;
};

constexpr char kA[] = R"(model="gemma",backend="http://a:1/v1")";
constexpr char kB[] = R"(model="gemma",backend="http://b:2/v1")";

TEST_F(RouterMetricsTest, EverySeriesStartsAtZeroAndHealthy) {
  for (const char* backend : {kA, kB}) {
    const std::string l = backend;
    EXPECT_EQ(Value("tpserve_router_backend_requests_total{" + l + "}"), "0");
    for (const char* kind : {"connect", "timeout", "http_5xx", "stream_broken", "busy"}) {
      EXPECT_EQ(Value("tpserve_router_backend_errors_total{" + l + ",kind=\"" + kind + "\"}"), "0") << kind;
    }
    EXPECT_EQ(Value("tpserve_router_backend_retries_total{" + l + "}"), "0");
    for (const char* c : {"opened", "reused", "stale"}) {
      EXPECT_EQ(Value("tpserve_router_backend_connections_" + std::string(c) + "_total{" + l + "}"), "0") << c;
    }
    EXPECT_EQ(Value("tpserve_router_backend_turned_away_total{" + l + "}"), "0");
    EXPECT_EQ(Value("tpserve_router_backend_requests_in_flight{" + l + "}"), "0");
    EXPECT_EQ(Value("tpserve_router_backend_healthy{" + l + "}"), "1");
    EXPECT_EQ(Value("tpserve_router_backend_time_to_first_byte_seconds_count{" + l + "}"), "0");
    EXPECT_EQ(Value("tpserve_router_backend_request_latency_seconds_count{" + l + "}"), "0");
    EXPECT_EQ(Value("tpserve_router_backend_prompt_tokens_total{" + l + "}"), "0");
    EXPECT_EQ(Value("tpserve_router_backend_completion_tokens_total{" + l + "}"), "0");
    EXPECT_EQ(Value("tpserve_router_backend_requests_without_usage_total{" + l + "}"), "0");
    EXPECT_EQ(Value("tpserve_router_backend_cost_usd_total{" + l + "}"), "absent");  // not priced
  }
  EXPECT_EQ(Value(R"(tpserve_router_backend_requests_total{model="cloud",backend="http://c:4/v1"})"), "0");
  EXPECT_EQ(Value(R"(tpserve_router_backend_cost_usd_total{model="cloud",backend="http://c:4/v1"})"), "0");
  for (const char* door : {"http", "grpc"}) {
    for (const char* outcome : {"success", "error", "client_gone"}) {
      EXPECT_EQ(Value(absl::StrCat(R"(tpserve_router_requests_total{model="gemma",door=")", door, R"(",outcome=")",
                                   outcome, "\"}")),
                "0");
    }
  }
  EXPECT_EQ(Value(R"(tpserve_router_grpc_model_info_total{outcome="success"})"), "0");
  EXPECT_EQ(Value(R"(tpserve_router_grpc_model_info_total{outcome="error"})"), "0");
  // The whole fallback chain, and only it.
  EXPECT_EQ(Value(R"(tpserve_router_fallbacks_total{model="gemma",fallback="mid"})"), "0");
  EXPECT_EQ(Value(R"(tpserve_router_fallbacks_total{model="gemma",fallback="cloud"})"), "0");
  EXPECT_EQ(Value(R"(tpserve_router_fallbacks_total{model="mid",fallback="cloud"})"), "0");
  EXPECT_EQ(Value(R"(tpserve_router_fallbacks_total{model="cloud",fallback="gemma"})"), "absent");
  EXPECT_THAT(metrics_->RenderPrometheus(), HasSubstr("# TYPE tpserve_router_backend_time_to_first_byte_seconds histogram"));
}

TEST_F(RouterMetricsTest, EventsMoveTheirSeries) {
  BackendPool& g = pool("gemma");
  metrics_->BackendStarted(g, 1);
  metrics_->BackendFailed(g, 1, BackendErrorKind::kConnect, /*moved_on=*/true);
  metrics_->BackendStarted(g, 1);
  metrics_->BackendFailed(g, 1, BackendErrorKind::kHttp5xx, /*moved_on=*/false);
  metrics_->BackendStarted(g, 1);
  metrics_->BackendFailed(g, 1, BackendErrorKind::kStreamBroken, /*moved_on=*/true);
  metrics_->BackendFailed(g, 1, BackendErrorKind::kTimeout, /*moved_on=*/false);
  const std::string b = kB;
  EXPECT_EQ(Value("tpserve_router_backend_requests_total{" + b + "}"), "3");
  EXPECT_EQ(Value("tpserve_router_backend_errors_total{" + b + ",kind=\"connect\"}"), "1");
  EXPECT_EQ(Value("tpserve_router_backend_errors_total{" + b + ",kind=\"http_5xx\"}"), "1");
  EXPECT_EQ(Value("tpserve_router_backend_errors_total{" + b + ",kind=\"stream_broken\"}"), "1");
  EXPECT_EQ(Value("tpserve_router_backend_errors_total{" + b + ",kind=\"timeout\"}"), "1");
  EXPECT_EQ(Value("tpserve_router_backend_retries_total{" + b + "}"), "2");
  EXPECT_EQ(Value("tpserve_router_backend_requests_total{" + std::string(kA) + "}"), "0");

  metrics_->BackendConnection(g, 1, /*reused=*/false);
  metrics_->BackendConnection(g, 1, /*reused=*/true);
  metrics_->BackendConnection(g, 1, /*reused=*/true);
  metrics_->BackendStaleConnection(g, 1);
  EXPECT_EQ(Value("tpserve_router_backend_connections_opened_total{" + b + "}"), "1");
  EXPECT_EQ(Value("tpserve_router_backend_connections_reused_total{" + b + "}"), "2");
  EXPECT_EQ(Value("tpserve_router_backend_connections_stale_total{" + b + "}"), "1");
  EXPECT_EQ(Value("tpserve_router_backend_connections_reused_total{" + std::string(kA) + "}"), "0");

  metrics_->BackendFirstByte(g, 1, absl::Milliseconds(30));
  metrics_->BackendAnswered(g, 1, absl::Milliseconds(700));
  EXPECT_EQ(Value("tpserve_router_backend_time_to_first_byte_seconds_count{" + b + "}"), "1");
  EXPECT_EQ(Value("tpserve_router_backend_time_to_first_byte_seconds_sum{" + b + "}"), "0.03");
  EXPECT_EQ(Value("tpserve_router_backend_time_to_first_byte_seconds_bucket{" + b + ",le=\"0.02\"}"), "0");
  EXPECT_EQ(Value("tpserve_router_backend_time_to_first_byte_seconds_bucket{" + b + ",le=\"0.04\"}"), "1");
  EXPECT_EQ(Value("tpserve_router_backend_request_latency_seconds_sum{" + b + "}"), "0.7");
  EXPECT_EQ(Value("tpserve_router_backend_request_latency_seconds_bucket{" + b + ",le=\"0.5\"}"), "0");
  EXPECT_EQ(Value("tpserve_router_backend_request_latency_seconds_bucket{" + b + ",le=\"0.75\"}"), "1");

  metrics_->RequestFinished("gemma", FrontDoor::kHttp, RequestOutcome::kSuccess);
  metrics_->RequestFinished("gemma", FrontDoor::kHttp, RequestOutcome::kSuccess);
  metrics_->RequestFinished("gemma", FrontDoor::kGrpc, RequestOutcome::kSuccess);
  metrics_->RequestFinished("gemma", FrontDoor::kHttp, RequestOutcome::kClientGone);
  metrics_->RequestFinished("mid", FrontDoor::kGrpc, RequestOutcome::kError);
  EXPECT_EQ(Value(R"(tpserve_router_requests_total{model="gemma",door="http",outcome="success"})"), "2");
  EXPECT_EQ(Value(R"(tpserve_router_requests_total{model="gemma",door="grpc",outcome="success"})"), "1");
  EXPECT_EQ(Value(R"(tpserve_router_requests_total{model="gemma",door="http",outcome="client_gone"})"), "1");
  EXPECT_EQ(Value(R"(tpserve_router_requests_total{model="gemma",door="http",outcome="error"})"), "0");
  EXPECT_EQ(Value(R"(tpserve_router_requests_total{model="mid",door="grpc",outcome="error"})"), "1");
  EXPECT_EQ(Value(R"(tpserve_router_requests_total{model="mid",door="http",outcome="error"})"), "0");

  metrics_->ModelInfoFinished(true);
  metrics_->ModelInfoFinished(true);
  metrics_->ModelInfoFinished(false);
  EXPECT_EQ(Value(R"(tpserve_router_grpc_model_info_total{outcome="success"})"), "2");
  EXPECT_EQ(Value(R"(tpserve_router_grpc_model_info_total{outcome="error"})"), "1");

  metrics_->FallbackTaken("gemma", "cloud");
  EXPECT_EQ(Value(R"(tpserve_router_fallbacks_total{model="gemma",fallback="cloud"})"), "1");
  EXPECT_EQ(Value(R"(tpserve_router_fallbacks_total{model="gemma",fallback="mid"})"), "0");
  EXPECT_EQ(Value(R"(tpserve_router_fallbacks_total{model="mid",fallback="cloud"})"), "0");
}

// A request of 1,000 prompt and 400 completion tokens answered by the priced backend ($3 and $15
// per million) costs 1000 x 3 / 1e6 + 400 x 15 / 1e6 = 0.003 + 0.006 = $0.009; an unpriced
// backend counts the tokens and no cost.
TEST_F(RouterMetricsTest, UsageCountsTokensAndPricesThem) {
  const std::string c = R"(model="cloud",backend="http://c:4/v1")";
  EXPECT_EQ(metrics_->BackendUsage(pool("cloud"), 0, 1000, 400), 0.009);
  EXPECT_EQ(metrics_->BackendUsage(pool("cloud"), 0, 2000, 0), 0.006);
  EXPECT_EQ(Value("tpserve_router_backend_prompt_tokens_total{" + c + "}"), "3000");
  EXPECT_EQ(Value("tpserve_router_backend_completion_tokens_total{" + c + "}"), "400");
  EXPECT_EQ(Value("tpserve_router_backend_cost_usd_total{" + c + "}"), "0.015");
  const std::string b = kB;
  EXPECT_FALSE(metrics_->BackendUsage(pool("gemma"), 1, 7, 5).has_value());
  metrics_->BackendUsageUnknown(pool("gemma"), 1);
  EXPECT_EQ(Value("tpserve_router_backend_prompt_tokens_total{" + b + "}"), "7");
  EXPECT_EQ(Value("tpserve_router_backend_completion_tokens_total{" + b + "}"), "5");
  EXPECT_EQ(Value("tpserve_router_backend_requests_without_usage_total{" + b + "}"), "1");
  EXPECT_EQ(Value("tpserve_router_backend_requests_without_usage_total{" + c + "}"), "0");
}

// Only the front doors that are open have series: an HTTP-only router has no door="grpc" and
// no ModelInfo counter.
TEST(RouterMetricsDoorsTest, OnlyOpenDoorsHaveSeries) {
  RouterConfig config = *ParseRouterConfig(kConfig);
  std::map<std::string, std::unique_ptr<BackendPool>> pools;
  for (auto& [name, model] : config.models) pools.emplace(name, std::make_unique<BackendPool>(std::move(model)));
  const std::string http_only = RouterMetrics(pools, {FrontDoor::kHttp}).RenderPrometheus();
  EXPECT_THAT(http_only, HasSubstr(R"(tpserve_router_requests_total{model="gemma",door="http",outcome="success"} 0)"));
  EXPECT_THAT(http_only, Not(HasSubstr(R"(door="grpc")")));
  EXPECT_THAT(http_only, Not(HasSubstr("tpserve_router_grpc_model_info_total")));
  const std::string grpc_only = RouterMetrics(pools, {FrontDoor::kGrpc}).RenderPrometheus();
  EXPECT_THAT(grpc_only, HasSubstr(R"(tpserve_router_requests_total{model="gemma",door="grpc",outcome="success"} 0)"));
  EXPECT_THAT(grpc_only, Not(HasSubstr(R"(door="http")")));
  EXPECT_THAT(grpc_only, HasSubstr(R"(tpserve_router_grpc_model_info_total{outcome="success"} 0)"));
}

TEST_F(RouterMetricsTest, GaugesFollowThePoolsAtScrapeTime) {
  BackendPool& g = pool("gemma");
  const std::string b = kB;
  g.Begin(1);
  g.Begin(1);
  EXPECT_EQ(Value("tpserve_router_backend_requests_in_flight{" + b + "}"), "2");
  g.End(1);
  EXPECT_EQ(Value("tpserve_router_backend_requests_in_flight{" + b + "}"), "1");
  g.End(1);
  EXPECT_EQ(Value("tpserve_router_backend_requests_in_flight{" + b + "}"), "0");
  g.Eject(1, absl::Now());  // for the config's 60 s cooldown
  EXPECT_EQ(Value("tpserve_router_backend_healthy{" + b + "}"), "0");
  EXPECT_EQ(Value("tpserve_router_backend_healthy{" + std::string(kA) + "}"), "1");
  g.Eject(1, absl::Now() - absl::Seconds(61));  // the cooldown is over
  EXPECT_EQ(Value("tpserve_router_backend_healthy{" + b + "}"), "1");
}

// A request that finds a backend at its max_in_flight passes it over (ProxyCore::Next): counted
// on that backend as turned away, not as a try; the next candidate takes the request.
TEST(RouterMetricsProxyTest, ARequestTurnedAwayByMaxInFlightIsCountedOnTheFullBackend) {
  RouterConfig config = *ParseRouterConfig(R"({"models": {"m": {"backends": [
      {"url": "http://full:1/v1", "max_in_flight": 1}, "http://free:2/v1"]}}})");
  std::map<std::string, std::unique_ptr<BackendPool>> pools;
  for (auto& [name, model] : config.models) pools.emplace(name, std::make_unique<BackendPool>(std::move(model)));
  RouterMetrics metrics(pools, {FrontDoor::kHttp});
  BackendPool* m = pools.at("m").get();
  const std::vector<ProxyCandidate> candidates = {{m, 0}, {m, 1}};
  auto value = [&](const std::string& series) { return SeriesValue(metrics, series); };
  const std::string full = R"(model="m",backend="http://full:1/v1")", free = R"(model="m",backend="http://free:2/v1")";

  ProxyCore first("m", FrontDoor::kHttp, candidates, absl::Now(), nullptr, metrics);
  ASSERT_NE(first.Next(), nullptr);
  EXPECT_EQ(first.url(), "http://full:1/v1");  // its one place taken
  ProxyCore second("m", FrontDoor::kHttp, candidates, absl::Now(), nullptr, metrics);
  ASSERT_NE(second.Next(), nullptr);
  EXPECT_EQ(second.url(), "http://free:2/v1");
  EXPECT_EQ(value("tpserve_router_backend_turned_away_total{" + full + "}"), "1");
  EXPECT_EQ(value("tpserve_router_backend_turned_away_total{" + free + "}"), "0");
  EXPECT_EQ(value("tpserve_router_backend_requests_total{" + full + "}"), "0");  // not a try
  first.EndTry();
  ProxyCore third("m", FrontDoor::kHttp, candidates, absl::Now(), nullptr, metrics);
  ASSERT_NE(third.Next(), nullptr);
  EXPECT_EQ(third.url(), "http://full:1/v1");  // the place is free again
  EXPECT_EQ(value("tpserve_router_backend_turned_away_total{" + full + "}"), "1");
}

// max_retries caps the moves on from failed tries before the first byte (ProxyCore::TryFailed):
// with 0 the first failure is the answer (no retry counted, the others not tried); with 1 one
// move on; unset, every candidate once.
TEST(RouterMetricsProxyTest, MaxRetriesStopsTheTriesAndNamesWhatWasNotTried) {
  RouterConfig config = *ParseRouterConfig(R"({"cooldown_s": 0, "models": {
      "none": {"max_retries": 0, "backends": ["http://a:1/v1", "http://b:2/v1", "http://c:3/v1"]},
      "one": {"max_retries": 1, "backends": ["http://a:1/v1", "http://b:2/v1", "http://c:3/v1"]},
      "all": {"backends": ["http://a:1/v1", "http://b:2/v1", "http://c:3/v1"]}}})");
  std::map<std::string, std::unique_ptr<BackendPool>> pools;
  for (auto& [name, model] : config.models) pools.emplace(name, std::make_unique<BackendPool>(std::move(model)));
  RouterMetrics metrics(pools, {FrontDoor::kHttp});
  // Fails every candidate it is given; returns the URLs tried and what the client gets.
  auto fail_all = [&](const std::string& model, BackendErrorKind kind) {
    BackendPool* p = pools.at(model).get();
    ProxyCore core(model, FrontDoor::kHttp, {{p, 0}, {p, 1}, {p, 2}}, absl::Now(), nullptr, metrics);
    std::vector<std::string> tried;
    while (core.Next() != nullptr) {
      core.BeginTry();
      tried.push_back(core.url());
      core.TryFailed("connecting: refused", kind, /*eject=*/kind != BackendErrorKind::kBusy);
    }
    return std::pair{tried, core.Exhausted()};
  };
  auto retries = [&](const std::string& model, const std::string& url) {
    return SeriesValue(metrics, "tpserve_router_backend_retries_total{model=\"" + model + "\",backend=\"" + url + "\"}");
  };

  auto [none_tried, none] = fail_all("none", BackendErrorKind::kConnect);
  EXPECT_EQ(none_tried, std::vector<std::string>{"http://a:1/v1"});
  EXPECT_EQ(none.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(none.message(),
            "model \"none\" (and its fallbacks): failed, and its max_retries (0) allows no further try (not tried: "
            "http://b:2/v1, http://c:3/v1): http://a:1/v1: connecting: refused");
  EXPECT_EQ(retries("none", "http://a:1/v1"), "0");

  auto [one_tried, one] = fail_all("one", BackendErrorKind::kConnect);
  EXPECT_EQ(one_tried, (std::vector<std::string>{"http://a:1/v1", "http://b:2/v1"}));
  EXPECT_THAT(one.message(), HasSubstr("max_retries (1) allows no further try (not tried: http://c:3/v1)"));
  EXPECT_EQ(retries("one", "http://a:1/v1"), "1");
  EXPECT_EQ(retries("one", "http://b:2/v1"), "0");

  // Busy tries count as retries too, and a stop among busy ones is still the 429's code.
  auto [busy_tried, busy] = fail_all("none", BackendErrorKind::kBusy);
  EXPECT_EQ(busy_tried.size(), 1u);
  EXPECT_EQ(busy.code(), absl::StatusCode::kResourceExhausted);

  auto [all_tried, all] = fail_all("all", BackendErrorKind::kConnect);
  EXPECT_EQ(all_tried.size(), 3u);
  EXPECT_THAT(all.message(), HasSubstr("every backend of model \"all\" (and its fallbacks) failed: "));
  EXPECT_EQ(retries("all", "http://a:1/v1"), "1");
  EXPECT_EQ(retries("all", "http://c:3/v1"), "0");  // nothing left to move on to
}

// A URL listed twice in one model is one series (not two with the same labels): its tries and
// in-flight requests add up over both entries.
TEST_F(RouterMetricsTest, ARepeatedUrlIsOneSeries) {
  BackendPool& g = pool("gemma");
  const std::string a = kA;
  metrics_->BackendStarted(g, 0);
  metrics_->BackendStarted(g, 2);
  g.Begin(0);
  g.Begin(2);
  EXPECT_EQ(Value("tpserve_router_backend_requests_total{" + a + "}"), "2");
  EXPECT_EQ(Value("tpserve_router_backend_requests_in_flight{" + a + "}"), "2");
}

}  // namespace
}  // namespace tpserve

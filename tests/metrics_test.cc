// MetricsRegistry: Prometheus text rendering of counters, gauges and histograms, labels,
// names with colons, escaping, collectors and number formatting.
#include "coordinator/api/metrics.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

TEST(MetricsTest, RendersCountersAndGaugesWithLabels) {
  MetricsRegistry r(MetricLabels{{"model_name", "m"}});
  Counter& stop = r.AddCounter("x_requests_total", "Requests.", {{"reason", "stop"}});
  Counter& length = r.AddCounter("x_requests_total", "Requests.", {{"reason", "length"}});
  Gauge& g = r.AddGauge("x_running", "Running \\ now\nhere.");
  stop.Increment();
  stop.Increment(2);
  length.Set(5);
  g.Set(0.25);
  const std::string text = r.Render();
  EXPECT_EQ(text,
            "# HELP x_requests_total Requests.\n"
            "# TYPE x_requests_total counter\n"
            "x_requests_total{model_name=\"m\",reason=\"stop\"} 3\n"
            "x_requests_total{model_name=\"m\",reason=\"length\"} 5\n"
            "# HELP x_running Running \\\\ now\\nhere.\n"
            "# TYPE x_running gauge\n"
            "x_running{model_name=\"m\"} 0.25\n");
}

// Prometheus allows colons in metric names (not in label names); vLLM's names use them.
TEST(MetricsTest, AcceptsColonsInMetricNames) {
  MetricsRegistry r;
  r.AddCounter("vllm:prompt_tokens_total", "Prompt tokens.", {{"model_name", "m"}}).Increment(7);
  EXPECT_THAT(r.Render(), HasSubstr("# TYPE vllm:prompt_tokens_total counter\n"
                                    "vllm:prompt_tokens_total{model_name=\"m\"} 7\n"));
}

TEST(MetricsTest, EscapesLabelValues) {
  MetricsRegistry r;
  r.AddGauge("g", "h", {{"path", "a\"b\\c\nd"}}).Set(1);
  EXPECT_THAT(r.Render(), HasSubstr("g{path=\"a\\\"b\\\\c\\nd\"} 1\n"));
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  MetricsRegistry r;
  Histogram& h = r.AddHistogram("lat_seconds", "Latency.", {0.1, 1.0});
  h.Observe(0.0625);
  h.Observe(0.1);  // le is inclusive
  h.Observe(0.5);
  h.Observe(7);
  EXPECT_EQ(r.Render(),
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{le=\"0.1\"} 2\n"
            "lat_seconds_bucket{le=\"1\"} 3\n"
            "lat_seconds_bucket{le=\"+Inf\"} 4\n"
            "lat_seconds_sum " + FormatMetricValue(0.0625 + 0.1 + 0.5 + 7) + "\n"
            "lat_seconds_count 4\n");
}

TEST(MetricsTest, AHistogramAliasRendersItsSourcesValues) {
  MetricsRegistry r;
  Histogram& h = r.AddHistogram("new_seconds", "New.", {1.0});
  r.AddHistogramAlias("old_seconds", "Old.", h);
  h.Observe(0.5);
  h.Observe(2);
  EXPECT_EQ(r.Render(),
            "# HELP new_seconds New.\n"
            "# TYPE new_seconds histogram\n"
            "new_seconds_bucket{le=\"1\"} 1\n"
            "new_seconds_bucket{le=\"+Inf\"} 2\n"
            "new_seconds_sum 2.5\n"
            "new_seconds_count 2\n"
            "# HELP old_seconds Old.\n"
            "# TYPE old_seconds histogram\n"
            "old_seconds_bucket{le=\"1\"} 1\n"
            "old_seconds_bucket{le=\"+Inf\"} 2\n"
            "old_seconds_sum 2.5\n"
            "old_seconds_count 2\n");
}

TEST(MetricsTest, CollectorsRunBeforeRendering) {
  MetricsRegistry r;
  Gauge& g = r.AddGauge("g", "h");
  int scrapes = 0;
  r.AddCollector([&] { g.Set(++scrapes); });
  EXPECT_THAT(r.Render(), HasSubstr("g 1\n"));
  EXPECT_THAT(r.Render(), HasSubstr("g 2\n"));
}

TEST(MetricsTest, FormatsNumbersAsPrometheusDoes) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(-3), "-3");
  EXPECT_EQ(FormatMetricValue(123456789012.0), "123456789012");
  EXPECT_EQ(FormatMetricValue(0.5), "0.5");
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatMetricValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::quiet_NaN()), "NaN");
}

}  // namespace
}  // namespace tpserve

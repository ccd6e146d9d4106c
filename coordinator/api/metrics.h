// A small Prometheus metrics registry: counters, gauges and histograms with labels,
// rendered in the text exposition format (version 0.0.4). Tested by tests/metrics_test.cc.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace tpserve {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// Monotonic. Set() is for mirroring a total that is kept elsewhere (read at scrape time).
class Counter {
 public:
  void Increment(double v = 1) { value_.fetch_add(v, std::memory_order_relaxed); }
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  // `upper_bounds` ascending; the +Inf bucket is implicit.
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double v);

  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<uint64_t> cumulative_counts;  // one per bound, then +Inf (== count)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  const std::vector<double> upper_bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> bucket_counts_ ABSL_GUARDED_BY(mu_);  // not cumulative; last is +Inf
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

// Metrics are owned by the registry and live as long as it does. A name registered again
// with other labels adds a series to the same family (same type required). Names and
// label names must match Prometheus' rules; a bad one is a programming error (CHECK).
class MetricsRegistry {
 public:
  // Labels added to every series, e.g. {{"model_name", "gemma-4-31b"}}.
  explicit MetricsRegistry(MetricLabels const_labels = {});
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  Counter& AddCounter(absl::string_view name, absl::string_view help, MetricLabels labels = {});
  Gauge& AddGauge(absl::string_view name, absl::string_view help, MetricLabels labels = {});
  Histogram& AddHistogram(absl::string_view name, absl::string_view help,
                          std::vector<double> upper_bounds, MetricLabels labels = {});
  // A second name for `source` (registered here): rendered from its values, observed once.
  void AddHistogramAlias(absl::string_view name, absl::string_view help, const Histogram& source,
                         MetricLabels labels = {});
  // Runs at the start of every Render(), e.g. to copy an engine's statistics into gauges.
  void AddCollector(std::function<void()> collect);

  std::string Render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series {
    MetricLabels labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
    const Histogram* histogram_alias = nullptr;  // AddHistogramAlias: another series' values
  };
  struct Family {
    std::string name;
    std::string help;
    Type type;
    std::vector<Series> series;
  };
  Series& AddSeries(absl::string_view name, absl::string_view help, Type type, MetricLabels labels)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const MetricLabels const_labels_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Family>> families_ ABSL_GUARDED_BY(mu_);  // registration order
  std::vector<std::function<void()>> collectors_ ABSL_GUARDED_BY(mu_);
};

// Prometheus' number syntax: integers exactly, others in the fewest digits that read
// back exactly, "+Inf", "-Inf", "NaN".
std::string FormatMetricValue(double v);

}  // namespace tpserve

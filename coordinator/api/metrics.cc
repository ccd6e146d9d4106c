// MetricsRegistry and its Prometheus text rendering. Tested by tests/metrics_test.cc.
#include "coordinator/api/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/base.h"

namespace tpserve {
namespace {

bool IsValidName(absl::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                    (allow_colon && c == ':') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

// HELP text escapes backslash and newline; label values also escape the double quote.
std::string Escape(absl::string_view s, bool quote) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

// {a="x",b="y"} with `extra` (e.g. le) last; empty when there are no labels.
std::string LabelSet(const MetricLabels& a, const MetricLabels& b, absl::string_view extra = {}) {
  std::string out;
  for (const MetricLabels* labels : {&a, &b}) {
    for (const auto& [name, value] : *labels) {
      absl::StrAppend(&out, out.empty() ? "" : ",", name, "=\"", Escape(value, true), "\"");
    }
  }
  if (!extra.empty()) absl::StrAppend(&out, out.empty() ? "" : ",", extra);
  return out.empty() ? out : absl::StrCat("{", out, "}");
}

}  // namespace

std::string FormatMetricValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 9.007199254740992e15) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  // The shortest of 15..17 significant digits that reads back as `v` (0.1, not
  // 0.10000000000000001).
  char buf[32];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), bucket_counts_(upper_bounds_.size() + 1, 0) {
  TP_CHECK(std::is_sorted(upper_bounds_.begin(), upper_bounds_.end()));
}

void Histogram::Observe(double v) {
  // Buckets are "less than or equal": the first bound >= v.
  const size_t bucket =
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), v) - upper_bounds_.begin();
  absl::MutexLock lock(&mu_);
  ++bucket_counts_[bucket];
  sum_ += v;
  ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.upper_bounds = upper_bounds_;
  absl::MutexLock lock(&mu_);
  uint64_t running = 0;
  for (uint64_t c : bucket_counts_) {
    running += c;
    s.cumulative_counts.push_back(running);
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

MetricsRegistry::MetricsRegistry(MetricLabels const_labels) : const_labels_(std::move(const_labels)) {
  for (const auto& label : const_labels_) TP_CHECK(IsValidName(label.first, false));
}

MetricsRegistry::Series& MetricsRegistry::AddSeries(absl::string_view name, absl::string_view help,
                                                    Type type, MetricLabels labels) {
  TP_CHECK(IsValidName(name, true));
  for (const auto& label : labels) TP_CHECK(IsValidName(label.first, false) && label.first != "le");
  Family* family = nullptr;
  for (auto& f : families_) {
    if (f->name == name) family = f.get();
  }
  if (family == nullptr) {
    families_.push_back(std::make_unique<Family>(Family{std::string(name), std::string(help), type, {}}));
    family = families_.back().get();
  }
  TP_CHECK(family->type == type);
  family->series.push_back(Series{std::move(labels), nullptr, nullptr, nullptr, nullptr});
  return family->series.back();
}

Counter& MetricsRegistry::AddCounter(absl::string_view name, absl::string_view help, MetricLabels labels) {
  absl::MutexLock lock(&mu_);
  Series& s = AddSeries(name, help, Type::kCounter, std::move(labels));
  s.counter = std::make_unique<Counter>();
  return *s.counter;
}

Gauge& MetricsRegistry::AddGauge(absl::string_view name, absl::string_view help, MetricLabels labels) {
  absl::MutexLock lock(&mu_);
  Series& s = AddSeries(name, help, Type::kGauge, std::move(labels));
  s.gauge = std::make_unique<Gauge>();
  return *s.gauge;
}

Histogram& MetricsRegistry::AddHistogram(absl::string_view name, absl::string_view help,
                                         std::vector<double> upper_bounds, MetricLabels labels) {
  absl::MutexLock lock(&mu_);
  Series& s = AddSeries(name, help, Type::kHistogram, std::move(labels));
  s.histogram = std::make_unique<Histogram>(std::move(upper_bounds));
  return *s.histogram;
}

void MetricsRegistry::AddHistogramAlias(absl::string_view name, absl::string_view help, const Histogram& source,
                                        MetricLabels labels) {
  absl::MutexLock lock(&mu_);
  AddSeries(name, help, Type::kHistogram, std::move(labels)).histogram_alias = &source;
}

void MetricsRegistry::AddCollector(std::function<void()> collect) {
  absl::MutexLock lock(&mu_);
  collectors_.push_back(std::move(collect));
}

std::string MetricsRegistry::Render() const {
  std::vector<std::function<void()>> collectors;
  {
    absl::MutexLock lock(&mu_);
    collectors = collectors_;
  }
  for (const auto& collect : collectors) collect();  // unlocked: they set our metrics

  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& family : families_) {
    const std::string& name = family->name;
    absl::StrAppend(&out, "# HELP ", name, " ", Escape(family->help, false), "\n");
    const char* type = family->type == Type::kCounter ? "counter"
                       : family->type == Type::kGauge ? "gauge"
                                                      : "histogram";
    absl::StrAppend(&out, "# TYPE ", name, " ", type, "\n");
    for (const Series& s : family->series) {
      if (s.counter != nullptr) {
        absl::StrAppend(&out, name, LabelSet(const_labels_, s.labels), " ",
                        FormatMetricValue(s.counter->value()), "\n");
      } else if (s.gauge != nullptr) {
        absl::StrAppend(&out, name, LabelSet(const_labels_, s.labels), " ",
                        FormatMetricValue(s.gauge->value()), "\n");
      } else {
        const Histogram::Snapshot h = (s.histogram != nullptr ? *s.histogram : *s.histogram_alias).snapshot();
        for (size_t i = 0; i <= h.upper_bounds.size(); ++i) {
          const std::string le = i < h.upper_bounds.size() ? FormatMetricValue(h.upper_bounds[i]) : "+Inf";
          absl::StrAppend(&out, name, "_bucket", LabelSet(const_labels_, s.labels, absl::StrCat("le=\"", le, "\"")),
                          " ", h.cumulative_counts[i], "\n");
        }
        absl::StrAppend(&out, name, "_sum", LabelSet(const_labels_, s.labels), " ", FormatMetricValue(h.sum), "\n");
        absl::StrAppend(&out, name, "_count", LabelSet(const_labels_, s.labels), " ", h.count, "\n");
      }
    }
  }
  return out;
}

}  // namespace tpserve

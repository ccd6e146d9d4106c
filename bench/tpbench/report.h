// `tpbench report`: turns one or more runs into a Markdown report with hand-written SVG
// plots and published cloud baselines. Deterministic (same runs -> same bytes); tested
// by tests/tpbench_core_test.cc.
#ifndef TPSERVE_BENCH_TPBENCH_REPORT_H_
#define TPSERVE_BENCH_TPBENCH_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/tpbench/metrics.h"
#include "bench/tpbench/record.h"

namespace tpserve::bench {

// A published figure for a hosted model (not measured by tpbench), for comparison.
struct Baseline {
  std::string provider;             // required
  std::string model;                // required
  std::string hardware;             // optional, e.g. "8x H100"
  double output_tokens_per_s = -1;  // per user, as published; -1 when not given
  double ttft_ms = -1;              // -1 when not given
  std::string source_url;           // required: where the figure was published
  std::string date;                 // required: when it was published / read
  std::string notes;
};

// Reads {"baselines": [{"provider": ..., "model": ..., "source_url": ..., "date": ...,
// "hardware": ..., "output_tokens_per_s": ..., "ttft_ms": ..., "notes": ...}, ...]}.
absl::StatusOr<std::vector<Baseline>> ReadBaselines(const std::string& path);

struct ReportRun {
  RunRecord run;
  std::vector<RequestRecord> requests;
  std::string label;  // e.g. "tpserve-grpc tp=2 nodes=1"; empty: DefaultRunLabel(run)
};

// The run's "label" (tpbench run --label) if it has one, else
// "<api> tp=<tp_size> nodes=<nodes>[ netem=<extra["netem"]>]".
std::string DefaultRunLabel(const RunRecord& run);

// Reads <run_dir>/run.json and <run_dir>/requests.jsonl; the label is the default one.
absl::StatusOr<ReportRun> LoadReportRun(const std::string& run_dir);

// Writes <out_dir>/report.md and its SVG plots (creating out_dir if needed) and returns
// the Markdown. `slo` adds goodput columns when any objective is set.
absl::StatusOr<std::string> WriteReport(const std::vector<ReportRun>& runs,
                                        const std::vector<Baseline>& baselines, const SloSpec& slo,
                                        const std::string& out_dir);

}  // namespace tpserve::bench

#endif  // TPSERVE_BENCH_TPBENCH_REPORT_H_

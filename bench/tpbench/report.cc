// `tpbench report`: Markdown tables per run, SVG plots across runs (drawn by hand: no
// plotting tools on the benchmark hosts), a scaling comparison and cloud baselines.
// Tested by tests/tpbench_core_test.cc (content, well-formed SVG, byte-for-byte determinism).
#include "bench/tpbench/report.h"

#include "bench/tpbench/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kernels/base.h"
#include "nlohmann/json.hpp"

namespace tpserve::bench {
namespace {

// "NVIDIA H200 x 8", or the CPU's name alone where no GPU serves.
std::string DeviceText(const RunRecord& r) {
  if (r.gpu_model.empty() || r.gpu_model == "unknown") return "unknown";
  if (r.gpu_count <= 0) return r.gpu_count == 0 ? absl::StrCat(r.gpu_model, " (no GPU)") : r.gpu_model;
  return absl::StrCat(r.gpu_model, " x ", r.gpu_count);
}

using Json = nlohmann::json;

// ---- Formatting ----------------------------------------------------------------------

std::string Pct(double share) { return share < 0 ? "-" : Fmt(100 * share, 1); }

// A distribution's statistic, or "-" when the sample is empty.
std::string Stat(const Distribution& d, double Distribution::*field, int decimals) {
  return d.count > 0 ? Fmt(d.*field, decimals) : "-";
}

bool IsClosedLoop(const LevelSummary& l) { return l.concurrency > 0 || l.request_rate <= 0; }

std::string LevelHeader(const std::vector<LevelSummary>& levels) {
  const bool all_closed = std::all_of(levels.begin(), levels.end(), IsClosedLoop);
  const bool all_open = std::none_of(levels.begin(), levels.end(), IsClosedLoop);
  return all_closed ? "Concurrency" : all_open ? "Rate (req/s)" : "Level";
}

std::string LevelCell(const std::vector<LevelSummary>& levels, const LevelSummary& l) {
  const std::string header = LevelHeader(levels);
  if (header == "Concurrency") return absl::StrCat(l.concurrency);
  if (header == "Rate (req/s)") return absl::StrFormat("%g", l.request_rate);
  return LevelName(l.concurrency, l.request_rate);
}

// ---- Report sections -----------------------------------------------------------------

struct RunView {
  const ReportRun* in = nullptr;
  std::string label;
  std::vector<LevelSummary> levels;
  WarmupSummary warmup;
};

const LevelSummary* FindConcurrency(const RunView& v, int concurrency) {
  for (const LevelSummary& l : v.levels) {
    if (l.concurrency == concurrency && l.requests > 0) return &l;
  }
  return nullptr;
}

// "2 (layers 0-4 | 5; 2 micro-batches)": the stages and, where the server said, their
// layers and the steps it keeps in flight.
std::string PipelineText(const RunRecord& r) {
  if (r.pp_size <= 0) return "unknown";
  std::vector<std::string> parts;
  if (!r.pipeline_stages.empty()) parts.push_back(r.pipeline_stages);
  if (r.pp_size > 1 && r.pipeline_micro_batches > 0) {
    parts.push_back(absl::StrCat(r.pipeline_micro_batches, r.pipeline_micro_batches == 1 ? " micro-batch" : " micro-batches"));
  }
  if (parts.empty()) return absl::StrCat(r.pp_size);
  return absl::StrCat(r.pp_size, " (", absl::StrJoin(parts, "; "), ")");
}

std::string EnvironmentTable(const RunView& v) {
  const RunRecord& r = v.in->run;
  auto or_unknown = [](const std::string& s) { return s.empty() ? std::string("unknown") : s; };
  std::string warmup = "-";
  if (r.warmup_ms >= 0) {
    warmup = absl::StrCat(Fmt(r.warmup_ms, 1), " ms");
  } else if (v.warmup.count > 0) {
    warmup = absl::StrCat(Fmt(v.warmup.first_latency_ms, 1), " ms");
  }
  if (v.warmup.count > 0) {
    absl::StrAppend(&warmup, " (", v.warmup.count, " warm-up request",
                    v.warmup.count == 1 ? "" : "s", "; first ",
                    v.warmup.first_success ? "succeeded" : "failed", ", TTFT ",
                    Fmt(v.warmup.first_ttft_ms, 1), " ms)");
  }
  std::vector<std::vector<std::string>> rows = {
      {"Run id", or_unknown(r.run_id)},
      {"Target", absl::StrCat(r.target, " (", or_unknown(r.api), ")")},
      {"Model", or_unknown(r.model)},
      {"Weights", or_unknown(r.weights_source)},
      {"Engine version", or_unknown(r.engine_version)},
      {"tpbench version", or_unknown(r.tpbench_version)},
      {"Dtype", or_unknown(r.dtype)},
      {"Weights as held (quantization)", or_unknown(r.quantization)},
      {"KV cache dtype", or_unknown(r.kv_cache_dtype)},
      {"GPU driver", or_unknown(r.driver_version)},
      {"CUDA", or_unknown(r.cuda_version)},
      {"Kernels", or_unknown(r.kernels)},
      {"Speculative decoding", r.speculative_config.empty() ? "none" : r.speculative_config},
      {"Device", DeviceText(r)},
      {"Nodes", absl::StrCat(r.nodes)},
      {"Tensor parallel", r.tp_size > 0 ? absl::StrCat(r.tp_size) : "unknown"},
      {"Pipeline parallel", PipelineText(r)},
      {"Max model len", r.max_model_len > 0 ? absl::StrCat(r.max_model_len) : "unknown"},
      {"Max num seqs", r.max_num_seqs > 0 ? absl::StrCat(r.max_num_seqs) : "unknown"},
      {"Workload", or_unknown(r.workload)},
      {"ignore_eos", r.ignore_eos ? "true" : "false"},
      {"Server load time", r.load_time_s >= 0 ? absl::StrCat(Fmt(r.load_time_s, 1), " s")
                                              : "- (not started by tpbench)"},
      {"Warm-up latency", warmup},
      {"Start / end", absl::StrCat(or_unknown(r.start_time), " / ", or_unknown(r.end_time))},
  };
  int64_t peak_rss_bytes = 0;
  for (const LevelRecord& l : r.levels) peak_rss_bytes = std::max(peak_rss_bytes, l.server.peak_rss_bytes);
  if (peak_rss_bytes > 0) {
    rows.push_back({"Server memory (rank 0 peak RSS)", absl::StrCat(Fmt(peak_rss_bytes / 1048576.0, 0), " MiB")});
  }
  for (const auto& [k, val] : r.extra) rows.push_back({absl::StrCat("extra: ", k), val});
  return MarkdownTable({"Item", "Value"}, rows, /*numeric=*/false);
}

std::string SloText(const SloSpec& slo) {
  std::vector<std::string> parts;
  if (slo.ttft_ms > 0) parts.push_back(absl::StrCat("TTFT <= ", Fmt(slo.ttft_ms, 1), " ms"));
  if (slo.tpot_ms > 0) parts.push_back(absl::StrCat("TPOT <= ", Fmt(slo.tpot_ms, 1), " ms"));
  if (slo.e2e_ms > 0) parts.push_back(absl::StrCat("E2E <= ", Fmt(slo.e2e_ms, 1), " ms"));
  return absl::StrJoin(parts, ", ");
}

std::string ThroughputTable(const std::vector<LevelSummary>& levels, const SloSpec& slo) {
  const bool queue = std::any_of(levels.begin(), levels.end(),
                                 [](const LevelSummary& l) { return l.server_queue_ms.count > 0; });
  const bool steps = std::any_of(levels.begin(), levels.end(),
                                 [](const LevelSummary& l) { return l.server.available; });
  const bool spec = std::any_of(levels.begin(), levels.end(),
                                [](const LevelSummary& l) { return l.server.spec_drafts > 0; });
  const bool pipeline = std::any_of(levels.begin(), levels.end(),
                                    [](const LevelSummary& l) { return l.server.pipeline_ms > 0; });
  std::vector<std::string> header = {LevelHeader(levels),
                                     "Requests",
                                     "Error %",
                                     "Timeout %",
                                     "Output tok/s",
                                     "Round tok/s median / max",
                                     "Req/s",
                                     "Per-user tok/s median"};
  if (slo.any()) header.push_back("Goodput req/s");
  if (queue) header.push_back("Queue median ms");
  if (steps) {
    header.push_back(pipeline ? "Step compute / all-reduce / pipeline / sched %"
                              : "Step compute / all-reduce / sched %");
  }
  if (spec) header.push_back("Mean acceptance length");
  std::vector<std::vector<std::string>> rows;
  for (const LevelSummary& l : levels) {
    const Distribution& rt = l.round_output_throughput;
    std::vector<std::string> row = {
        LevelCell(levels, l),
        absl::StrCat(l.requests),
        Fmt(100 * l.error_rate, 1),
        Fmt(100 * l.timeout_rate, 1),
        Fmt(l.output_throughput, 1),
        rt.count > 0 ? absl::StrCat(Fmt(rt.median, 1), " / ", Fmt(rt.max, 1)) : "-",
        Fmt(l.request_throughput, 2),
        Stat(l.per_user_tokens_per_s, &Distribution::median, 1)};
    if (slo.any()) row.push_back(Fmt(l.goodput, 2));
    if (queue) row.push_back(Stat(l.server_queue_ms, &Distribution::median, 1));
    if (steps) {
      row.push_back(l.compute_share < 0
                        ? "-"
                        : absl::StrCat(Pct(l.compute_share), " / ", Pct(l.allreduce_share), " / ",
                                       pipeline ? absl::StrCat(Pct(l.pipeline_share), " / ") : "",
                                       Pct(l.scheduling_share)));
    }
    if (spec) {
      row.push_back(l.server.spec_drafts > 0
                        ? Fmt(1.0 + static_cast<double>(l.server.spec_accepted_tokens) / l.server.spec_drafts, 2)
                        : "-");
    }
    rows.push_back(std::move(row));
  }
  std::string out = MarkdownTable(header, rows, /*numeric=*/true);
  if (slo.any())
    absl::StrAppend(&out, "\nGoodput counts successful requests with ", SloText(slo), ".\n");
  return out;
}

std::string LatencyTable(const std::vector<LevelSummary>& levels) {
  std::vector<std::vector<std::string>> rows;
  for (const LevelSummary& l : levels) {
    rows.push_back({LevelCell(levels, l), Stat(l.ttft_ms, &Distribution::median, 1),
                    Stat(l.ttft_ms, &Distribution::p95, 1), Stat(l.ttft_ms, &Distribution::p99, 1),
                    Stat(l.tpot_ms, &Distribution::median, 2),
                    Stat(l.tpot_ms, &Distribution::p95, 2),
                    Stat(l.itl_ms, &Distribution::median, 2), Stat(l.itl_ms, &Distribution::p95, 2),
                    Stat(l.e2e_ms, &Distribution::median, 1), Stat(l.e2e_ms, &Distribution::p95, 1),
                    Stat(l.e2e_ms, &Distribution::max, 1)});
  }
  return MarkdownTable({LevelHeader(levels), "TTFT median", "TTFT P95", "TTFT P99", "TPOT median",
                "TPOT P95", "ITL median", "ITL P95", "E2E median", "E2E P95", "E2E max"},
               rows, /*numeric=*/true);
}

std::string ErrorTable(const std::vector<LevelSummary>& levels) {
  std::vector<std::vector<std::string>> rows;
  for (const LevelSummary& l : levels) {
    for (const auto& [reason, count] : l.error_reasons) {
      rows.push_back({LevelName(l.concurrency, l.request_rate), reason, absl::StrCat(count)});
    }
  }
  if (rows.empty()) return "";
  return absl::StrCat("Failed requests by reason (timeouts included):\n\n",
                      MarkdownTable({"Level", "Reason", "Count"}, rows, /*numeric=*/false));
}

std::string BackendTable(const std::vector<LevelSummary>& by_backend) {
  std::vector<std::vector<std::string>> rows;
  for (const LevelSummary& l : by_backend) {
    rows.push_back({LevelName(l.concurrency, l.request_rate), l.backend, absl::StrCat(l.requests),
                    absl::StrCat(l.errors + l.timeouts), Stat(l.ttft_ms, &Distribution::median, 1),
                    Stat(l.ttft_ms, &Distribution::p95, 1), Stat(l.tpot_ms, &Distribution::median, 2),
                    Fmt(l.output_throughput, 1)});
  }
  return MarkdownTable({"Level", "Backend", "Requests", "Errors", "TTFT median ms", "TTFT P95 ms", "TPOT median ms",
                "Output tok/s"},
               rows, /*numeric=*/false);
}

struct ChartFile {
  std::string name, svg;
};

// Throughput and P95 latency charts, against concurrency (log2) and/or request rate.
std::vector<ChartFile> LevelCharts(const std::vector<RunView>& views) {
  struct Metric {
    const char* file;
    const char* title;
    const char* y_label;
    double (*value)(const LevelSummary&);  // < 0: no point
  };
  const Metric metrics[] = {
      {"output_throughput", "Output throughput", "output tokens/s",
       [](const LevelSummary& l) { return l.successes > 0 ? l.output_throughput : -1.0; }},
      {"ttft_p95", "P95 time to first token", "TTFT P95 (ms)",
       [](const LevelSummary& l) { return l.ttft_ms.count > 0 ? l.ttft_ms.p95 : -1.0; }},
      {"tpot_p95", "P95 time per output token", "TPOT P95 (ms)",
       [](const LevelSummary& l) { return l.tpot_ms.count > 0 ? l.tpot_ms.p95 : -1.0; }},
      {"comm_share", "All-reduce + pipeline share of rank 0's step", "% of step time",
       [](const LevelSummary& l) {
         return l.allreduce_share < 0 ? -1.0 : 100 * (l.allreduce_share + l.pipeline_share);
       }},
  };
  std::vector<ChartFile> files;
  for (const bool closed : {true, false}) {
    bool any_level = false;
    for (const RunView& v : views) {
      for (const LevelSummary& l : v.levels) any_level |= IsClosedLoop(l) == closed;
    }
    if (!any_level) continue;
    for (const Metric& m : metrics) {
      LineChart chart;
      chart.title = absl::StrCat(m.title, closed ? " vs concurrency" : " vs request rate");
      chart.x_label = closed ? "concurrency (log2 scale)" : "request rate (req/s)";
      chart.y_label = m.y_label;
      chart.log2_x = closed;
      for (size_t i = 0; i < views.size(); ++i) {
        Series s{absl::StrCat(i + 1, ": ", views[i].label), static_cast<int>(i), {}};
        for (const LevelSummary& l : views[i].levels) {
          const double y = m.value(l);
          if (IsClosedLoop(l) != closed || y < 0) continue;
          s.points.push_back({closed ? l.concurrency : l.request_rate, y});
        }
        if (!s.points.empty()) chart.series.push_back(std::move(s));
      }
      if (chart.series.empty()) continue;  // e.g. every request failed
      files.push_back({absl::StrCat(m.file, closed ? "_vs_concurrency" : "_vs_rate", ".svg"),
                       RenderLineChart(chart)});
    }
  }
  return files;
}

// A run's pipeline stages; unknown (0: records from before pipelines, HTTP targets) counts as one.
int Stages(const RunRecord& r) { return std::max(1, r.pp_size); }

// One row per concurrency in `levels`, one column per run: value(level) or "-".
std::string ByConcurrencyTable(const std::vector<RunView>& views, const std::set<int>& levels,
                               const std::function<std::string(const LevelSummary&)>& value) {
  std::vector<std::string> header = {"Concurrency"};
  for (size_t i = 0; i < views.size(); ++i) header.push_back(absl::StrCat(i + 1, ": ", views[i].label));
  std::vector<std::vector<std::string>> rows;
  for (int c : levels) {
    std::vector<std::string> row = {absl::StrCat(c)};
    for (const RunView& v : views) {
      const LevelSummary* l = FindConcurrency(v, c);
      row.push_back(l == nullptr ? "-" : value(*l));
    }
    rows.push_back(std::move(row));
  }
  return MarkdownTable(header, rows, /*numeric=*/true);
}

// Compares runs of different layouts (tp_size, pp_size, nodes): every run at the highest
// concurrency they share, then each metric at every concurrency side by side.
std::string ScalingSection(const std::vector<RunView>& views, std::vector<ChartFile>* files) {
  std::set<std::tuple<int, int, int>> layouts;
  for (const RunView& v : views) layouts.insert({v.in->run.tp_size, Stages(v.in->run), v.in->run.nodes});
  if (layouts.size() < 2) return "";
  const bool pipeline = std::any_of(views.begin(), views.end(),
                                    [](const RunView& v) { return Stages(v.in->run) > 1; });

  std::string out = "## Scaling\n\n";
  std::set<int> shared, any;
  for (const LevelSummary& l : views[0].levels) {
    if (l.concurrency > 0 && l.requests > 0) shared.insert(l.concurrency);
  }
  for (const RunView& v : views) {
    std::set<int> mine;
    for (int c : shared) {
      if (FindConcurrency(v, c) != nullptr) mine.insert(c);
    }
    shared = std::move(mine);
    for (const LevelSummary& l : v.levels) {
      if (l.concurrency > 0 && l.requests > 0) any.insert(l.concurrency);
    }
  }
  if (shared.empty()) {
    return absl::StrCat(out,
                        "The runs share no concurrency level, so they cannot be compared.\n\n");
  }
  const int c = *shared.rbegin();
  absl::StrAppend(&out, "Every run at concurrency ", c,
                  ", the highest level all runs share.\n\n![](scaling.svg)\n\n");
  std::vector<Bar> bars;
  std::vector<std::vector<std::string>> rows;
  const double base = FindConcurrency(views[0], c)->output_throughput;
  for (size_t i = 0; i < views.size(); ++i) {
    const RunRecord& r = views[i].in->run;
    const LevelSummary& l = *FindConcurrency(views[i], c);
    bars.push_back(
        {absl::StrCat(i + 1, ": ", views[i].label), l.output_throughput, static_cast<int>(i)});
    std::vector<std::string> row = {absl::StrCat(i + 1, ": ", views[i].label), absl::StrCat(r.tp_size)};
    if (pipeline) row.push_back(r.pp_size > 0 ? absl::StrCat(r.pp_size) : "-");
    row.insert(row.end(), {absl::StrCat(r.nodes), Fmt(l.output_throughput, 1),
                           base > 0 ? absl::StrCat(Fmt(l.output_throughput / base, 2), "x") : "-",
                           Stat(l.ttft_ms, &Distribution::median, 1),
                           Stat(l.tpot_ms, &Distribution::median, 2), Pct(l.allreduce_share)});
    if (pipeline) {
      row.push_back(Pct(l.pipeline_share));
      row.push_back(l.pipeline_bubble < 0 ? "-" : Pct(l.pipeline_bubble));
    }
    rows.push_back(std::move(row));
  }
  files->push_back(
      {"scaling.svg", RenderBarChart(absl::StrCat("Output throughput at concurrency ", c),
                                     "output tokens/s", bars)});
  std::vector<std::string> header = {"Run", "TP"};
  if (pipeline) header.push_back("PP");
  header.insert(header.end(),
                {"Nodes", "Output tok/s", "vs run 1", "TTFT median ms", "TPOT median ms", "All-reduce %"});
  if (pipeline) header.insert(header.end(), {"Pipeline %", "Bubble %"});
  absl::StrAppend(&out, MarkdownTable(header, rows, /*numeric=*/true), "\n");
  if (pipeline) {
    absl::StrAppend(&out,
                    "All-reduce % and Pipeline % are shares of rank 0's step time: its own "
                    "all-reduces, and its time blocked on the stage-to-stage transfers (waiting "
                    "for the last stage's output, for its sends to be taken). Bubble % is the "
                    "share of all stages' time spent idle: 1 - their summed computing / (stages x "
                    "rank 0's step time). Servers before 2026-12-03 ran one step at a time and "
                    "counted the later stages' work differently.\n\n");
  }
  if (any.size() > 1) {
    auto comm = [](const LevelSummary& l) {
      if (l.allreduce_share < 0) return std::string("-");
      return l.pipeline_share > 0 ? absl::StrCat(Pct(l.allreduce_share), " + ", Pct(l.pipeline_share))
                                  : Pct(l.allreduce_share);
    };
    absl::StrAppend(
        &out, "Layouts side by side at every concurrency:\n\nOutput tok/s:\n\n",
        ByConcurrencyTable(views, any, [](const LevelSummary& l) { return Fmt(l.output_throughput, 1); }),
        "\nTPOT median ms:\n\n",
        ByConcurrencyTable(views, any, [](const LevelSummary& l) { return Stat(l.tpot_ms, &Distribution::median, 2); }),
        "\nTTFT median ms:\n\n",
        ByConcurrencyTable(views, any, [](const LevelSummary& l) { return Stat(l.ttft_ms, &Distribution::median, 1); }),
        pipeline ? "\nAll-reduce % + pipeline % of rank 0's step:\n\n" : "\nAll-reduce % of rank 0's step:\n\n",
        ByConcurrencyTable(views, any, comm), "\n");
  }
  return out;
}

// True when `target` names the provider (one of its words of 4+ letters is in the URL).
bool TargetIsProvider(const std::string& target, const std::string& provider) {
  const std::string t = absl::AsciiStrToLower(target);
  std::string word;
  for (char ch : absl::AsciiStrToLower(provider) + " ") {
    if (absl::ascii_isalnum(static_cast<unsigned char>(ch))) {
      word += ch;
      continue;
    }
    if (word.size() >= 4 && t.find(word) != std::string::npos) return true;
    word.clear();
  }
  return false;
}

std::string BaselineSection(const std::vector<RunView>& views,
                            const std::vector<Baseline>& baselines) {
  if (baselines.empty()) return "";
  std::string out = "## Cloud baselines\n\n";
  std::vector<std::vector<std::string>> rows;
  const RunView* best = nullptr;
  const LevelSummary* best_level = nullptr;
  for (const RunView& v : views) {
    const LevelSummary* l = FindConcurrency(v, 1);
    if (l == nullptr || l->per_user_tokens_per_s.count == 0) continue;
    if (best_level == nullptr ||
        l->per_user_tokens_per_s.median > best_level->per_user_tokens_per_s.median) {
      best = &v;
      best_level = l;
    }
  }
  if (best != nullptr) {
    const RunRecord& r = best->in->run;
    rows.push_back({absl::StrCat("measured here: ", best->label), r.model,
                    DeviceText(r),
                    Fmt(best_level->per_user_tokens_per_s.median, 1),
                    Stat(best_level->ttft_ms, &Distribution::median, 1), r.start_time.substr(0, 10),
                    "this report", "best run at concurrency 1"});
  }
  std::vector<std::string> measured;
  for (const Baseline& b : baselines) {
    rows.push_back({b.provider, b.model, b.hardware, Fmt(b.output_tokens_per_s, 1),
                    Fmt(b.ttft_ms, 1), b.date, absl::StrCat("[source](", Ascii(b.source_url), ")"),
                    b.notes});
    for (size_t i = 0; i < views.size(); ++i) {
      if (TargetIsProvider(views[i].in->run.target, b.provider)) {
        measured.push_back(absl::StrCat(Ascii(b.provider), " (run ", i + 1, ")"));
        break;
      }
    }
  }
  absl::StrAppend(&out,
                  "Single user (concurrency 1): median output tokens/s per user and median "
                  "TTFT. The provider rows are published figures from the linked sources, "
                  "not measured here");
  if (!measured.empty()) {
    absl::StrAppend(&out, ", except ", absl::StrJoin(measured, ", "),
                    ", which a run in this report targeted");
  }
  out += ".";
  if (best == nullptr) {
    out += " No run here has a successful concurrency-1 level to compare with.";
  }
  absl::StrAppend(&out, "\n\n",
                  MarkdownTable({"Source", "Model", "Hardware", "Output tok/s per user", "TTFT ms", "Date",
                         "Link", "Notes"},
                        rows, /*numeric=*/false),
                  "\n");
  return out;
}

absl::Status WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", path.string(), "; choose a writable output directory"));
  }
  return absl::OkStatus();
}

absl::Status BaselineString(const Json& j, const std::string& where, const char* name,
                            bool required, std::string* out) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) {
    if (!required) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": required field \"", name, "\" is missing"));
  }
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": field \"", name, "\" must be a string, got ", it->type_name()));
  }
  *out = it->get<std::string>();
  return absl::OkStatus();
}

absl::Status BaselineNumber(const Json& j, const std::string& where, const char* name,
                            double* out) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": field \"", name, "\" must be a number, got ", it->type_name()));
  }
  *out = it->get<double>();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Baseline>> ReadBaselines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open baselines file ", path));
  const Json j = Json::parse(in, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  if (!j.is_object() || !j.contains("baselines") || !j["baselines"].is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected an object {\"baselines\": [ ... ]}"));
  }
  std::vector<Baseline> out;
  const Json& list = j["baselines"];
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = absl::StrCat(path, ": baselines[", i, "]");
    const Json& e = list[i];
    if (!e.is_object())
      return absl::InvalidArgumentError(absl::StrCat(where, " must be an object"));
    Baseline b;
    TP_RETURN_IF_ERROR(BaselineString(e, where, "provider", true, &b.provider));
    TP_RETURN_IF_ERROR(BaselineString(e, where, "model", true, &b.model));
    TP_RETURN_IF_ERROR(BaselineString(e, where, "hardware", false, &b.hardware));
    TP_RETURN_IF_ERROR(BaselineNumber(e, where, "output_tokens_per_s", &b.output_tokens_per_s));
    TP_RETURN_IF_ERROR(BaselineNumber(e, where, "ttft_ms", &b.ttft_ms));
    TP_RETURN_IF_ERROR(BaselineString(e, where, "source_url", true, &b.source_url));
    TP_RETURN_IF_ERROR(BaselineString(e, where, "date", true, &b.date));
    TP_RETURN_IF_ERROR(BaselineString(e, where, "notes", false, &b.notes));
    out.push_back(std::move(b));
  }
  return out;
}

std::string DefaultRunLabel(const RunRecord& run) {
  if (auto it = run.extra.find("label"); it != run.extra.end() && !it->second.empty()) return it->second;
  std::vector<std::string> parts;
  if (!run.api.empty()) parts.push_back(run.api);
  if (run.tp_size > 0) parts.push_back(absl::StrCat("tp=", run.tp_size));
  if (run.pp_size > 1) parts.push_back(absl::StrCat("pp=", run.pp_size));
  parts.push_back(absl::StrCat("nodes=", run.nodes));
  if (auto it = run.extra.find("netem"); it != run.extra.end() && !it->second.empty()) {
    parts.push_back(absl::StrCat("netem=", it->second));
  }
  return absl::StrJoin(parts, " ");
}

absl::StatusOr<ReportRun> LoadReportRun(const std::string& run_dir) {
  const std::filesystem::path dir(run_dir);
  ReportRun r;
  TP_ASSIGN_OR_RETURN(r.run, ReadRunRecord((dir / "run.json").string()));
  TP_ASSIGN_OR_RETURN(r.requests, ReadRequestRecords((dir / "requests.jsonl").string()));
  r.label = DefaultRunLabel(r.run);
  return r;
}

absl::StatusOr<std::string> WriteReport(const std::vector<ReportRun>& runs,
                                        const std::vector<Baseline>& baselines, const SloSpec& slo,
                                        const std::string& out_dir) {
  if (runs.empty())
    return absl::InvalidArgumentError("no runs to report; pass at least one run directory");
  std::vector<RunView> views;
  for (const ReportRun& r : runs) {
    views.push_back({&r, r.label.empty() ? DefaultRunLabel(r.run) : r.label,
                     SummarizeLevels(r.run, r.requests, slo), SummarizeWarmup(r.requests)});
  }

  std::string md = "# tpbench report\n\n";
  absl::StrAppend(&md,
                  "Metric definitions: [docs/bench.md](docs/bench.md) in the tpserve tree. "
                  "Latencies in ms; levels exclude warm-up requests.\n\n");
  for (size_t i = 0; i < views.size(); ++i) {
    absl::StrAppend(&md, "- Run ", i + 1, ": ", MarkdownCell(views[i].label), " (",
                    MarkdownCell(runs[i].run.run_id), ")\n");
  }
  md += "\n";
  for (size_t i = 0; i < views.size(); ++i) {
    const RunView& v = views[i];
    absl::StrAppend(&md, "## Run ", i + 1, ": ", MarkdownCell(v.label), "\n\n", EnvironmentTable(v), "\n");
    if (v.levels.empty()) {
      md += "No levels were recorded.\n\n";
      continue;
    }
    absl::StrAppend(&md, "Throughput:\n\n", ThroughputTable(v.levels, slo), "\nLatency (ms):\n\n",
                    LatencyTable(v.levels), "\n");
    if (std::string errors = ErrorTable(v.levels); !errors.empty())
      absl::StrAppend(&md, errors, "\n");
    if (AnsweringBackends(v.in->requests).size() > 1) {
      absl::StrAppend(&md, "By backend (as the router named it in x-tpserve-backend; output tok/s is the backend's "
                      "share of the level's):\n\n", BackendTable(SummarizeByBackend(v.in->run, v.in->requests, slo)), "\n");
    }
  }

  std::vector<ChartFile> files = LevelCharts(views);
  if (!files.empty()) {
    md += "## Plots\n\n";
    for (const ChartFile& f : files) absl::StrAppend(&md, "![](", f.name, ")\n\n");
  }
  md += ScalingSection(views, &files);
  md += BaselineSection(views, baselines);

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create report directory ", out_dir,
                                                    ": ", ec.message(), "; choose another --out"));
  }
  for (const ChartFile& f : files) {
    TP_RETURN_IF_ERROR(WriteFile(std::filesystem::path(out_dir) / f.name, f.svg));
  }
  TP_RETURN_IF_ERROR(WriteFile(std::filesystem::path(out_dir) / "report.md", md));
  return md;
}

}  // namespace tpserve::bench

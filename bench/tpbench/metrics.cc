// tpbench's per-level metrics, following vLLM's benchmarks/benchmark_serving.py
// (calculate_metrics). Tested by tests/tpbench_core_test.cc with hand-computed numbers.
#include "bench/tpbench/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tpserve::bench {
namespace {

// Rates are written by the same client that reads them, so equal levels have equal
// doubles; the tolerance only guards against a hand-edited run.json.
bool SameLevel(int c1, double r1, int c2, double r2) {
  return c1 == c2 && std::fabs(r1 - r2) <= 1e-9 * std::max(1.0, std::fabs(r1));
}

double SafeDiv(double num, double den) { return den > 0 ? num / den : 0; }

LevelSummary SummarizeOne(int concurrency, double rate, const LevelRecord* level,
                          const std::vector<const RequestRecord*>& records, const SloSpec& slo) {
  LevelSummary s;
  s.concurrency = concurrency;
  s.request_rate = rate;
  s.requests = static_cast<int64_t>(records.size());

  std::vector<double> ttft, tpot, itl, e2e, per_user, queue;
  double first_send_s = std::numeric_limits<double>::infinity();
  double last_end_s = -std::numeric_limits<double>::infinity();
  // round -> {output tokens of successes, first send, last end}
  std::map<int, std::tuple<int64_t, double, double>> rounds;

  for (const RequestRecord* r : records) {
    const RequestOutcome& o = r->outcome;
    const double end_s = r->send_time_s + o.latency_ms / 1000.0;
    first_send_s = std::min(first_send_s, r->send_time_s);
    last_end_s = std::max(last_end_s, end_s);
    auto [it, inserted] = rounds.try_emplace(r->round, 0, r->send_time_s, end_s);
    auto& [round_tokens, round_start_s, round_end_s] = it->second;
    round_start_s = std::min(round_start_s, r->send_time_s);
    round_end_s = std::max(round_end_s, end_s);
    if (o.server_queue_ms >= 0) queue.push_back(o.server_queue_ms);

    if (!o.success) {
      if (o.timeout) {
        ++s.timeouts;
      } else {
        ++s.errors;
      }
      ++s.error_reasons[o.error.empty() ? std::string("(no reason given)") : o.error];
      continue;
    }
    ++s.successes;
    s.output_tokens += o.completion_tokens;
    round_tokens += o.completion_tokens;
    if (o.prompt_tokens >= 0) {
      s.input_tokens += o.prompt_tokens;
    } else if (r->expected_prompt_tokens >= 0) {
      s.input_tokens += r->expected_prompt_tokens;
    }
    if (o.ttft_ms >= 0) ttft.push_back(o.ttft_ms);
    // vLLM counts TPOT as 0 for goodput when a request produced <= 1 token.
    double request_tpot_ms = 0;
    if (o.completion_tokens > 1) {
      request_tpot_ms = (o.latency_ms - o.ttft_ms) / (o.completion_tokens - 1);
      tpot.push_back(request_tpot_ms);
      if (request_tpot_ms > 0) per_user.push_back(1000.0 / request_tpot_ms);
    }
    itl.insert(itl.end(), o.itl_ms.begin(), o.itl_ms.end());
    e2e.push_back(o.latency_ms);
    if (slo.any()) {
      const bool good = (slo.ttft_ms <= 0 || o.ttft_ms <= slo.ttft_ms) &&
                        (slo.tpot_ms <= 0 || request_tpot_ms <= slo.tpot_ms) &&
                        (slo.e2e_ms <= 0 || o.latency_ms <= slo.e2e_ms);
      if (good) ++s.good_requests;
    }
  }

  s.rounds = static_cast<int>(rounds.size());
  s.error_rate = SafeDiv(static_cast<double>(s.errors), static_cast<double>(s.requests));
  s.timeout_rate = SafeDiv(static_cast<double>(s.timeouts), static_cast<double>(s.requests));
  if (level != nullptr) {
    s.duration_s = level->end_s - level->start_s;
  } else if (!records.empty()) {
    s.duration_s = last_end_s - first_send_s;
  }
  s.request_throughput = SafeDiv(static_cast<double>(s.successes), s.duration_s);
  s.output_throughput = SafeDiv(static_cast<double>(s.output_tokens), s.duration_s);
  s.total_token_throughput =
      SafeDiv(static_cast<double>(s.input_tokens + s.output_tokens), s.duration_s);
  if (slo.any()) s.goodput = SafeDiv(static_cast<double>(s.good_requests), s.duration_s);

  std::vector<double> round_tput;
  for (const auto& [round, acc] : rounds) {
    const auto& [tokens, start_s, end_s] = acc;
    round_tput.push_back(SafeDiv(static_cast<double>(tokens), end_s - start_s));
  }
  s.ttft_ms = Summarize(std::move(ttft));
  s.tpot_ms = Summarize(std::move(tpot));
  s.itl_ms = Summarize(std::move(itl));
  s.e2e_ms = Summarize(std::move(e2e));
  s.per_user_tokens_per_s = Summarize(std::move(per_user));
  s.round_output_throughput = Summarize(std::move(round_tput));
  s.server_queue_ms = Summarize(std::move(queue));

  if (level != nullptr && level->server.available) {
    s.server = level->server;
    // The four parts of rank 0's step: the server counts compute as the forward's time
    // less its all-reduce and pipeline time, and scheduling as the rest of the step.
    const double sum_ms =
        s.server.compute_ms + s.server.allreduce_ms + s.server.pipeline_ms + s.server.scheduling_ms;
    if (sum_ms > 0) {
      s.compute_share = s.server.compute_ms / sum_ms;
      s.allreduce_share = s.server.allreduce_ms / sum_ms;
      s.pipeline_share = s.server.pipeline_ms / sum_ms;
      s.scheduling_share = s.server.scheduling_ms / sum_ms;
    }
    if (s.server.steps > 0) s.mean_step_ms = sum_ms / static_cast<double>(s.server.steps);
  }
  return s;
}

// Formats a number for the console table: "-" when absent (negative).
std::string Num(double v, int decimals) {
  if (v < 0) return "-";
  return absl::StrFormat("%.*f", decimals, v);
}

// Groups the requests by level ((concurrency, rate)) and, with `by_backend`, by the backend
// that answered; a level of `run` without requests still gets a (zero) summary, not split.
std::vector<LevelSummary> SummarizeGroups(const RunRecord& run, const std::vector<RequestRecord>& requests,
                                          const SloSpec& slo, bool by_backend) {
  struct Group {
    int concurrency;
    double rate;
    std::string backend;
    std::vector<const RequestRecord*> members;
  };
  // Keys are (concurrency, rate) as found first; SameLevel merges near-equal rates.
  std::vector<Group> groups;
  auto group_for = [&groups](int c, double rate, const std::string& backend) -> Group& {
    for (Group& g : groups) {
      if (SameLevel(g.concurrency, g.rate, c, rate) && g.backend == backend) return g;
    }
    groups.push_back({c, rate, backend, {}});
    return groups.back();
  };
  if (!by_backend) {
    for (const LevelRecord& l : run.levels) group_for(l.concurrency, l.request_rate, "");
  }
  for (const RequestRecord& r : requests) {
    if (r.round < 0) continue;
    const std::string backend =
        !by_backend ? std::string() : r.outcome.backend.empty() ? std::string(kNoBackend) : r.outcome.backend;
    group_for(r.concurrency, r.request_rate, backend).members.push_back(&r);
  }
  std::sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
    return std::tie(a.concurrency, a.rate, a.backend) < std::tie(b.concurrency, b.rate, b.backend);
  });

  std::vector<LevelSummary> out;
  out.reserve(groups.size());
  for (const Group& g : groups) {
    const LevelRecord* level = nullptr;
    for (const LevelRecord& l : run.levels) {
      if (SameLevel(l.concurrency, l.request_rate, g.concurrency, g.rate)) {
        level = &l;
        break;
      }
    }
    out.push_back(SummarizeOne(g.concurrency, g.rate, level, g.members, slo));
    LevelSummary& s = out.back();
    s.backend = g.backend;
    if (by_backend) {
      // One server's step time is not any backend's share of it.
      s.server = ServerStepTime();
      s.compute_share = s.allreduce_share = s.pipeline_share = s.scheduling_share = -1;
      s.mean_step_ms = -1;
      continue;
    }
    const double sum_ms =
        s.server.compute_ms + s.server.allreduce_ms + s.server.pipeline_ms + s.server.scheduling_ms;
    if (run.pp_size > 1 && s.server.stages_busy_ms > 0 && sum_ms > 0) {
      s.pipeline_bubble = std::max(0.0, 1.0 - s.server.stages_busy_ms / (run.pp_size * sum_ms));
    }
  }
  return out;
}

}  // namespace

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double q = std::clamp(p, 0.0, 100.0) / 100.0;
  const double index = static_cast<double>(sorted.size() - 1) * q;
  const size_t lo = static_cast<size_t>(std::floor(index));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double t = index - static_cast<double>(lo);
  const double a = sorted[lo], b = sorted[hi];
  if (a == b) return a;
  // numpy's _lerp: interpolate from whichever end is nearer, for monotonicity. The
  // product goes through a volatile so that no compiler fuses it into an FMA (the build
  // uses -march=native): NumPy rounds it separately, and we match NumPy to the bit.
  const double diff = b - a;
  volatile double step = t >= 0.5 ? diff * (1 - t) : diff * t;
  return t >= 0.5 ? b - step : a + step;
}

Distribution Summarize(std::vector<double> values) {
  Distribution d;
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  d.count = static_cast<int64_t>(n);
  double sum = 0;
  for (double v : values) sum += v;
  d.mean = sum / static_cast<double>(n);
  d.median = n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  d.p90 = Percentile(values, 90);
  d.p95 = Percentile(values, 95);
  d.p99 = Percentile(values, 99);
  d.min = values.front();
  d.max = values.back();
  return d;
}

std::vector<LevelSummary> SummarizeLevels(const RunRecord& run,
                                          const std::vector<RequestRecord>& requests,
                                          const SloSpec& slo) {
  return SummarizeGroups(run, requests, slo, /*by_backend=*/false);
}

std::vector<LevelSummary> SummarizeByBackend(const RunRecord& run, const std::vector<RequestRecord>& requests,
                                             const SloSpec& slo) {
  return SummarizeGroups(run, requests, slo, /*by_backend=*/true);
}

std::vector<std::string> AnsweringBackends(const std::vector<RequestRecord>& requests) {
  std::set<std::string> backends;
  for (const RequestRecord& r : requests) {
    if (r.round >= 0 && !r.outcome.backend.empty()) backends.insert(r.outcome.backend);
  }
  return {backends.begin(), backends.end()};
}

WarmupSummary SummarizeWarmup(const std::vector<RequestRecord>& requests) {
  WarmupSummary w;
  const RequestRecord* first = nullptr;
  for (const RequestRecord& r : requests) {
    if (r.round >= 0) continue;
    ++w.count;
    if (first == nullptr || r.seq < first->seq) first = &r;
  }
  if (first != nullptr) {
    w.first_success = first->outcome.success;
    w.first_latency_ms = first->outcome.latency_ms;
    w.first_ttft_ms = first->outcome.ttft_ms;
  }
  return w;
}

nlohmann::json ToJson(const Distribution& d) {
  return nlohmann::json{{"count", d.count}, {"mean", d.mean}, {"median", d.median}, {"p90", d.p90},
                        {"p95", d.p95},     {"p99", d.p99},   {"max", d.max},       {"min", d.min}};
}

nlohmann::json ToJson(const LevelSummary& s) {
  nlohmann::json reasons = nlohmann::json::object();
  for (const auto& [reason, count] : s.error_reasons) reasons[reason] = count;
  nlohmann::json j{{"concurrency", s.concurrency},
                   {"request_rate", s.request_rate},
                   {"rounds", s.rounds},
                   {"requests", s.requests},
                   {"successes", s.successes},
                   {"errors", s.errors},
                   {"timeouts", s.timeouts},
                   {"error_rate", s.error_rate},
                   {"timeout_rate", s.timeout_rate},
                   {"duration_s", s.duration_s},
                   {"input_tokens", s.input_tokens},
                   {"output_tokens", s.output_tokens},
                   {"request_throughput", s.request_throughput},
                   {"output_throughput", s.output_throughput},
                   {"total_token_throughput", s.total_token_throughput},
                   {"good_requests", s.good_requests},
                   {"goodput", s.goodput},
                   {"ttft_ms", ToJson(s.ttft_ms)},
                   {"tpot_ms", ToJson(s.tpot_ms)},
                   {"itl_ms", ToJson(s.itl_ms)},
                   {"e2e_ms", ToJson(s.e2e_ms)},
                   {"per_user_tokens_per_s", ToJson(s.per_user_tokens_per_s)},
                   {"round_output_throughput", ToJson(s.round_output_throughput)},
                   {"server_queue_ms", ToJson(s.server_queue_ms)},
                   {"error_reasons", std::move(reasons)}};
  if (!s.backend.empty()) j["backend"] = s.backend;
  if (s.server.available) {
    j["server"] = {{"steps", s.server.steps},
                   {"compute_ms", s.server.compute_ms},
                   {"allreduce_ms", s.server.allreduce_ms},
                   {"scheduling_ms", s.server.scheduling_ms},
                   {"pipeline_ms", s.server.pipeline_ms},
                   {"preemptions", s.server.preemptions},
                   {"prefix_cache_hit_rate", s.server.prefix_cache_hit_rate},
                   {"compute_share", s.compute_share},
                   {"allreduce_share", s.allreduce_share},
                   {"pipeline_share", s.pipeline_share},
                   {"pipeline_bubble", s.pipeline_bubble},
                   {"stages_busy_ms", s.server.stages_busy_ms},
                   {"scheduling_share", s.scheduling_share},
                   {"mean_step_ms", s.mean_step_ms}};
    if (s.server.spec_drafts > 0) {
      // vLLM's mean acceptance length: tokens per verifying sequence-step.
      j["server"]["spec_decode"] = {
          {"drafts", s.server.spec_drafts},
          {"draft_tokens", s.server.spec_draft_tokens},
          {"accepted_tokens", s.server.spec_accepted_tokens},
          {"acceptance_rate", static_cast<double>(s.server.spec_accepted_tokens) / s.server.spec_draft_tokens},
          {"mean_acceptance_length", 1.0 + static_cast<double>(s.server.spec_accepted_tokens) / s.server.spec_drafts}};
    }
  }
  return j;
}

std::string LevelName(int concurrency, double request_rate) {
  if (concurrency > 0 || request_rate <= 0) return absl::StrCat("c=", concurrency);
  return absl::StrCat("r=", absl::StrFormat("%g", request_rate), "/s");
}

// err% counts every failure, timeouts included; the report splits them.
std::string FormatLevelTable(const std::vector<LevelSummary>& levels) {
  constexpr char kRow[] = "%-9s %6s %6s %9s %7s %9s %9s %9s %9s %9s %10s %10s\n";
  std::string out =
      absl::StrFormat(kRow, "level", "reqs", "err%", "tok/s", "req/s", "TTFTp50", "TTFTp95",
                      "TPOTp50", "TPOTp95", "E2Ep95", "rnd tok/s", "rnd max");
  out += absl::StrFormat(kRow, "", "", "", "", "", "ms", "ms", "ms", "ms", "ms", "median", "");
  for (const LevelSummary& s : levels) {
    const bool rounds = s.round_output_throughput.count > 0;
    out += absl::StrFormat(
        kRow, LevelName(s.concurrency, s.request_rate), absl::StrCat(s.requests),
        Num(100 * (s.error_rate + s.timeout_rate), 1), Num(s.output_throughput, 1),
        Num(s.request_throughput, 2), s.ttft_ms.count ? Num(s.ttft_ms.median, 1) : "-",
        s.ttft_ms.count ? Num(s.ttft_ms.p95, 1) : "-",
        s.tpot_ms.count ? Num(s.tpot_ms.median, 2) : "-",
        s.tpot_ms.count ? Num(s.tpot_ms.p95, 2) : "-", s.e2e_ms.count ? Num(s.e2e_ms.p95, 1) : "-",
        rounds ? Num(s.round_output_throughput.median, 1) : "-",
        rounds ? Num(s.round_output_throughput.max, 1) : "-");
  }
  return out;
}

std::string FormatBackendTable(const std::vector<LevelSummary>& by_backend) {
  constexpr char kRow[] = "%-9s %-32s %6s %6s %9s %9s %9s %9s\n";
  std::string out = absl::StrFormat(kRow, "level", "backend", "reqs", "errors", "tok/s", "TTFTp50", "TTFTp95", "TPOTp50");
  out += absl::StrFormat(kRow, "", "", "", "", "", "ms", "ms", "ms");
  for (const LevelSummary& s : by_backend) {
    out += absl::StrFormat(kRow, LevelName(s.concurrency, s.request_rate), s.backend, absl::StrCat(s.requests),
                           absl::StrCat(s.errors + s.timeouts), Num(s.output_throughput, 1),
                           s.ttft_ms.count ? Num(s.ttft_ms.median, 1) : "-",
                           s.ttft_ms.count ? Num(s.ttft_ms.p95, 1) : "-",
                           s.tpot_ms.count ? Num(s.tpot_ms.median, 2) : "-");
  }
  return out;
}

}  // namespace tpserve::bench

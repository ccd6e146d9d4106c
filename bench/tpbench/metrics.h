// tpbench's metrics: per-level summaries of request records, with vLLM's definitions
// (`vllm bench serve`) wherever a name coincides. Tested against hand-computed fixtures
// by tests/tpbench_core_test.cc.
#ifndef TPSERVE_BENCH_TPBENCH_METRICS_H_
#define TPSERVE_BENCH_TPBENCH_METRICS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bench/tpbench/record.h"
#include "nlohmann/json.hpp"

namespace tpserve::bench {

// Service-level objectives for goodput; 0 means "not set". A request is good when it
// succeeded and every set objective holds with <= (vLLM: `--goodput ttft:X tpot:Y e2el:Z`).
struct SloSpec {
  double ttft_ms = 0;
  double tpot_ms = 0;
  double e2e_ms = 0;
  bool any() const { return ttft_ms > 0 || tpot_ms > 0 || e2e_ms > 0; }
};

// Summary statistics of one sample; all zero (count 0) when the sample is empty, as
// vLLM's `np.percentile(x or 0, p)` gives 0 for an empty list.
struct Distribution {
  int64_t count = 0;
  double mean = 0, median = 0, p90 = 0, p95 = 0, p99 = 0, max = 0, min = 0;
};

// NumPy's default percentile (method="linear"): p in [0, 100] of an ascending `sorted`;
// 0 when empty.
double Percentile(const std::vector<double>& sorted, double p);
// Sorts `values` and summarizes them (median as np.median: mean of the middle two).
Distribution Summarize(std::vector<double> values);

// One load level (closed-loop concurrency or open-loop rate) of one run.
struct LevelSummary {
  // One backend's share of the level (SummarizeByBackend); empty: every request of the level.
  std::string backend;
  int concurrency = 0;
  double request_rate = 0;
  int rounds = 0;  // distinct round numbers seen

  int64_t requests = 0, successes = 0;
  int64_t errors = 0;                       // failed and not a timeout
  int64_t timeouts = 0;                     // the per-request timeout fired
  double error_rate = 0, timeout_rate = 0;  // of requests, in [0, 1]

  // The level's wall time: the run record's end_s - start_s for this level, else the
  // span from the first send to the last request's end.
  double duration_s = 0;
  int64_t input_tokens = 0;           // successes: prompt_tokens, else expected_prompt_tokens
  int64_t output_tokens = 0;          // successes: completion_tokens
  double request_throughput = 0;      // successes / s
  double output_throughput = 0;       // output tokens / s
  double total_token_throughput = 0;  // (input + output) tokens / s
  int64_t good_requests = 0;
  double goodput = -1;  // good requests / s; -1 when no SLO was given

  Distribution ttft_ms;                          // successes with a first token
  Distribution tpot_ms;                          // successes with completion_tokens > 1
  Distribution itl_ms;                           // every inter-chunk gap of every success, pooled
  Distribution e2e_ms;                           // latency of successes
  Distribution per_user_tokens_per_s;            // 1000 / TPOT of each success with TPOT > 0
  Distribution round_output_throughput;          // tokens/s of each round, one sample per round
  Distribution server_queue_ms;                  // where the target reports it (>= 0)
  std::map<std::string, int64_t> error_reasons;  // failure message -> count (timeouts too)

  // Server step time over the level, when the target reports it (server.available).
  ServerStepTime server;
  // Rank 0's step time split four ways, each a share of their sum (the step's wall time):
  // compute, all-reduce, pipeline (blocked on the transfers between stages: waiting for the
  // last stage's output, the later stages' compute included where it is not overlapped)
  // and scheduling.
  double compute_share = -1, allreduce_share = -1, pipeline_share = -1, scheduling_share = -1;
  // With pipeline stages (S of them): 1 - stages_busy / (S x rank 0's step time), the
  // share of the stages' time spent idle; -1 where not reported.
  double pipeline_bubble = -1;
  double mean_step_ms = -1;  // (compute + allreduce + pipeline + scheduling) / steps
};

// The warm-up requests (round == -1), which no level includes.
struct WarmupSummary {
  int64_t count = 0;
  bool first_success = false;
  double first_latency_ms = -1;  // of the first warm-up request (lowest seq)
  double first_ttft_ms = -1;
};

// Groups `requests` by (concurrency, request_rate), ignoring warm-up; a level in `run`
// without requests still gets a (zero) summary. Ordered by (concurrency, rate).
std::vector<LevelSummary> SummarizeLevels(const RunRecord& run,
                                          const std::vector<RequestRecord>& requests,
                                          const SloSpec& slo);
WarmupSummary SummarizeWarmup(const std::vector<RequestRecord>& requests);

// The backends that answered a level's requests (RequestOutcome::backend, as a router names it),
// sorted, warm-up excluded; a request no backend was named for is not counted.
std::vector<std::string> AnsweringBackends(const std::vector<RequestRecord>& requests);

// Each level split by the backend that answered: one summary per (level, backend), ordered as
// SummarizeLevels' levels then by backend; requests that named no backend (e.g. a router's 502)
// are a group with backend "(none)". Durations are the level's, so a backend's throughput is its
// share of the level's. The server's step time is not split (it is one server's, or none).
std::vector<LevelSummary> SummarizeByBackend(const RunRecord& run, const std::vector<RequestRecord>& requests,
                                             const SloSpec& slo);

nlohmann::json ToJson(const Distribution& d);
nlohmann::json ToJson(const LevelSummary& s);

// "c=8" for closed-loop levels, "r=2.5/s" for open-loop ones.
std::string LevelName(int concurrency, double request_rate);

// A fixed-width console table, one line per level, printed at the end of `tpbench run`.
std::string FormatLevelTable(const std::vector<LevelSummary>& levels);
// The same for SummarizeByBackend's summaries: level, backend, requests, errors (timeouts
// included), TTFT p50/p95, TPOT p50, output tokens/s.
std::string FormatBackendTable(const std::vector<LevelSummary>& by_backend);

// What a request that named no backend is grouped under.
inline constexpr char kNoBackend[] = "(none)";

}  // namespace tpserve::bench

#endif  // TPSERVE_BENCH_TPBENCH_METRICS_H_

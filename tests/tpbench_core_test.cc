// tpbench's pure core: record JSON round trips and errors, metrics against numbers worked
// out by hand (NumPy's percentile rule, vLLM's TPOT/goodput), baselines and the report.
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/tpbench/metrics.h"
#include "bench/tpbench/record.h"
#include "bench/tpbench/report.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tpserve::bench {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr double kTol = 1e-9;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "tpbench_core_test_XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

RequestRecord Req(int64_t seq, int concurrency, int round, double send_time_s, double ttft_ms,
                  double latency_ms, int completion_tokens, int prompt_tokens,
                  std::vector<double> itl_ms) {
  RequestRecord r;
  r.seq = seq;
  r.concurrency = concurrency;
  r.round = round;
  r.send_time_s = send_time_s;
  r.outcome.success = true;
  r.outcome.ttft_ms = ttft_ms;
  r.outcome.latency_ms = latency_ms;
  r.outcome.completion_tokens = completion_tokens;
  r.outcome.prompt_tokens = prompt_tokens;
  r.outcome.itl_ms = std::move(itl_ms);
  return r;
}

RequestRecord Failed(int64_t seq, int concurrency, int round, double send_time_s, double latency_ms,
                     bool timeout, std::string error) {
  RequestRecord r;
  r.seq = seq;
  r.concurrency = concurrency;
  r.round = round;
  r.send_time_s = send_time_s;
  r.outcome.success = false;
  r.outcome.timeout = timeout;
  r.outcome.error = std::move(error);
  r.outcome.latency_ms = latency_ms;
  return r;
}

// Concurrency 2, two rounds, level [10 s, 20 s] in the run record. Per request:
//   seq 2 r0 send 10.0 ttft 100 lat 1000 tok 10 prompt 50  -> TPOT 900/9   = 100, ends 11.0
//   seq 3 r0 send 10.5 ttft 200 lat 2600 tok 21 expect 40  -> TPOT 2400/20 = 120, ends 13.1
//   seq 7 r0 send 11.0 failed "HTTP 503" lat 10                              ends 11.01
//   seq 4 r1 send 12.0 ttft 300 lat 1300 tok 5  prompt 60  -> TPOT 1000/4  = 250, ends 13.3
//   seq 5 r1 send 12.2 ttft 50  lat 50   tok 1  prompt 60  -> no TPOT (1 token), ends 12.25
//   seq 6 r1 send 12.5 timeout lat 3000                                      ends 15.5
std::vector<RequestRecord> LevelTwoRequests() {
  std::vector<RequestRecord> v;
  v.push_back(Req(2, 2, 0, 10.0, 100, 1000, 10, 50, {50, 150}));
  v.back().outcome.server_queue_ms = 5;
  v.push_back(Req(3, 2, 0, 10.5, 200, 2600, 21, -1, {80, 120, 100}));
  v.back().expected_prompt_tokens = 40;
  v.back().outcome.server_queue_ms = 15;
  v.push_back(Req(4, 2, 1, 12.0, 300, 1300, 5, 60, {250}));
  v.back().outcome.server_queue_ms = 25;
  v.push_back(Req(5, 2, 1, 12.2, 50, 50, 1, 60, {}));
  v.push_back(Failed(6, 2, 1, 12.5, 3000, /*timeout=*/true, "timed out after 3 s"));
  v.push_back(Failed(7, 2, 0, 11.0, 10, /*timeout=*/false, "HTTP 503"));
  return v;
}

LevelRecord LevelTwoRecord(double duration_s) {
  LevelRecord l;
  l.concurrency = 2;
  l.rounds = 2;
  l.start_s = 10;
  l.end_s = 10 + duration_s;
  l.server.available = true;
  l.server.steps = 100;
  l.server.compute_ms = 700;
  l.server.allreduce_ms = 200;
  l.server.scheduling_ms = 100;
  return l;
}

// Two warm-up requests (round -1), the first (lowest seq) listed second.
std::vector<RequestRecord> WarmupRequests() {
  std::vector<RequestRecord> v;
  v.push_back(Req(1, 1, -1, 0.9, 20, 300, 5, 10, {}));
  v.push_back(Req(0, 1, -1, 0.0, 500, 900, 5, 10, {}));
  return v;
}

// ---- Percentiles -------------------------------------------------------------------

TEST(PercentileTest, FollowsNumpyLinearRule) {
  EXPECT_EQ(Percentile({}, 50), 0);
  EXPECT_EQ(Percentile({7}, 0), 7);
  EXPECT_EQ(Percentile({7}, 99), 7);
  EXPECT_EQ(Percentile({7}, 100), 7);
  // Two elements: index = p/100 * 1.
  EXPECT_EQ(Percentile({1, 3}, 0), 1);
  EXPECT_EQ(Percentile({1, 3}, 25), 1.5);
  EXPECT_EQ(Percentile({1, 3}, 50), 2);
  EXPECT_EQ(Percentile({1, 3}, 100), 3);
  // np.percentile([1,2,3,4], 95): index 3 * 0.95 = 2.85 -> 3 + 0.85 * 1 = 3.85.
  EXPECT_NEAR(Percentile({1, 2, 3, 4}, 95), 3.85, kTol);
  // np.percentile([10,20,30,40,50], 99): index 3.96 -> 40 + 0.96 * 10 = 49.6.
  EXPECT_NEAR(Percentile({10, 20, 30, 40, 50}, 99), 49.6, kTol);
  EXPECT_NEAR(Percentile({10, 20, 30, 40, 50}, 10), 14, kTol);  // index 0.4
  // Bit-exact with NumPy: np.percentile([0, 0, 0, 0.1, 0.3], 90) is 0.22000000000000003
  // (the product 0.2 * 0.6 rounded before the subtraction); a fused multiply-add gives 0.22.
  EXPECT_EQ(Percentile({0, 0, 0, 0.1, 0.3}, 90), 0.22000000000000003);
}

TEST(PercentileTest, SummarizeSortsAndUsesNumpyMedian) {
  const Distribution empty = Summarize({});
  EXPECT_EQ(empty.count, 0);
  EXPECT_EQ(empty.mean, 0);
  EXPECT_EQ(empty.p99, 0);
  EXPECT_EQ(empty.max, 0);

  const Distribution d = Summarize({4, 1, 3, 2});
  EXPECT_EQ(d.count, 4);
  EXPECT_EQ(d.mean, 2.5);
  EXPECT_EQ(d.median, 2.5);       // mean of the middle two
  EXPECT_NEAR(d.p90, 3.7, kTol);  // index 2.7
  EXPECT_NEAR(d.p95, 3.85, kTol);
  EXPECT_NEAR(d.p99, 3.97, kTol);
  EXPECT_EQ(d.min, 1);
  EXPECT_EQ(d.max, 4);

  const Distribution one = Summarize({5});
  EXPECT_EQ(one.count, 1);
  EXPECT_EQ(one.median, 5);
  EXPECT_EQ(one.p99, 5);
}

// ---- Metrics -----------------------------------------------------------------------

TEST(MetricsTest, LevelMatchesHandComputedNumbers) {
  RunRecord run;
  run.levels.push_back(LevelTwoRecord(10));
  std::vector<RequestRecord> requests = LevelTwoRequests();
  for (RequestRecord& r : WarmupRequests()) requests.push_back(r);

  const std::vector<LevelSummary> levels = SummarizeLevels(run, requests, SloSpec{});
  ASSERT_EQ(levels.size(), 1u);  // warm-up (concurrency 1, round -1) makes no level
  const LevelSummary& s = levels[0];
  EXPECT_EQ(s.concurrency, 2);
  EXPECT_EQ(s.rounds, 2);
  EXPECT_EQ(s.requests, 6);
  EXPECT_EQ(s.successes, 4);
  EXPECT_EQ(s.errors, 1);
  EXPECT_EQ(s.timeouts, 1);
  EXPECT_NEAR(s.error_rate, 1.0 / 6, kTol);
  EXPECT_NEAR(s.timeout_rate, 1.0 / 6, kTol);
  EXPECT_EQ(s.error_reasons.size(), 2u);
  EXPECT_EQ(s.error_reasons.at("HTTP 503"), 1);
  EXPECT_EQ(s.error_reasons.at("timed out after 3 s"), 1);

  // Duration from the level record: 10 s. Output 10+21+5+1 = 37 tokens; input
  // 50 + 40 (expected, not reported) + 60 + 60 = 210.
  EXPECT_EQ(s.duration_s, 10);
  EXPECT_EQ(s.output_tokens, 37);
  EXPECT_EQ(s.input_tokens, 210);
  EXPECT_NEAR(s.request_throughput, 0.4, kTol);
  EXPECT_NEAR(s.output_throughput, 3.7, kTol);
  EXPECT_NEAR(s.total_token_throughput, 24.7, kTol);
  EXPECT_EQ(s.goodput, -1);  // no SLO

  // TTFT sorted [50, 100, 200, 300]: median (100+200)/2; p95 index 2.85 -> 200 + 0.85*100.
  EXPECT_EQ(s.ttft_ms.count, 4);
  EXPECT_NEAR(s.ttft_ms.mean, 162.5, kTol);
  EXPECT_NEAR(s.ttft_ms.median, 150, kTol);
  EXPECT_NEAR(s.ttft_ms.p90, 270, kTol);
  EXPECT_NEAR(s.ttft_ms.p95, 285, kTol);
  EXPECT_NEAR(s.ttft_ms.p99, 297, kTol);
  EXPECT_EQ(s.ttft_ms.min, 50);
  EXPECT_EQ(s.ttft_ms.max, 300);

  // TPOT [100, 120, 250] (the 1-token request has none): p95 index 1.9 -> 120 + 0.9*130.
  EXPECT_EQ(s.tpot_ms.count, 3);
  EXPECT_NEAR(s.tpot_ms.mean, 470.0 / 3, kTol);
  EXPECT_NEAR(s.tpot_ms.median, 120, kTol);
  EXPECT_NEAR(s.tpot_ms.p95, 237, kTol);

  // ITL pooled, sorted [50, 80, 100, 120, 150, 250]: median 110; p95 index 4.75 -> 225.
  EXPECT_EQ(s.itl_ms.count, 6);
  EXPECT_NEAR(s.itl_ms.median, 110, kTol);
  EXPECT_NEAR(s.itl_ms.p95, 225, kTol);

  // E2E of successes [50, 1000, 1300, 2600]: median 1150; p95 index 2.85 -> 2405.
  EXPECT_EQ(s.e2e_ms.count, 4);
  EXPECT_NEAR(s.e2e_ms.median, 1150, kTol);
  EXPECT_NEAR(s.e2e_ms.p95, 2405, kTol);
  EXPECT_EQ(s.e2e_ms.max, 2600);

  // Per user: 1000/100, 1000/120, 1000/250 -> sorted [4, 8.33, 10], median 8.33.
  EXPECT_EQ(s.per_user_tokens_per_s.count, 3);
  EXPECT_NEAR(s.per_user_tokens_per_s.median, 1000.0 / 120, kTol);
  EXPECT_NEAR(s.per_user_tokens_per_s.max, 10, kTol);

  // Round 0: 31 tokens over [10.0, 13.1] = 10 tok/s. Round 1: 6 tokens over
  // [12.0, 15.5] (the timeout ends last) = 6/3.5. Median of two = their mean.
  EXPECT_EQ(s.round_output_throughput.count, 2);
  EXPECT_NEAR(s.round_output_throughput.max, 10, 1e-6);
  EXPECT_NEAR(s.round_output_throughput.min, 6 / 3.5, 1e-6);
  EXPECT_NEAR(s.round_output_throughput.median, (10 + 6 / 3.5) / 2, 1e-6);

  // Queue time only where reported: [5, 15, 25].
  EXPECT_EQ(s.server_queue_ms.count, 3);
  EXPECT_EQ(s.server_queue_ms.median, 15);

  // Server split of 700 + 200 + 100 ms over 100 steps.
  EXPECT_TRUE(s.server.available);
  EXPECT_NEAR(s.compute_share, 0.7, kTol);
  EXPECT_NEAR(s.allreduce_share, 0.2, kTol);
  EXPECT_NEAR(s.scheduling_share, 0.1, kTol);
  EXPECT_NEAR(s.mean_step_ms, 10, kTol);
}

// With pipeline stages the step splits four ways: 700 compute + 200 all-reduce + 300
// pipeline + 100 scheduling = 1300 ms over 100 steps.
TEST(MetricsTest, PipelineShareIsAPartOfTheStep) {
  RunRecord run;
  run.levels.push_back(LevelTwoRecord(10));
  run.levels[0].server.pipeline_ms = 300;
  const LevelSummary s = SummarizeLevels(run, LevelTwoRequests(), SloSpec{})[0];
  EXPECT_NEAR(s.compute_share, 700.0 / 1300, kTol);
  EXPECT_NEAR(s.allreduce_share, 200.0 / 1300, kTol);
  EXPECT_NEAR(s.pipeline_share, 300.0 / 1300, kTol);
  EXPECT_NEAR(s.scheduling_share, 100.0 / 1300, kTol);
  EXPECT_NEAR(s.mean_step_ms, 13, kTol);
  const nlohmann::json j = ToJson(s);
  EXPECT_NEAR(j["server"]["pipeline_ms"].get<double>(), 300, kTol);
  EXPECT_NEAR(j["server"]["pipeline_share"].get<double>(), 300.0 / 1300, kTol);

  // Without stages the pipeline share is 0, not absent.
  run.levels[0].server.pipeline_ms = 0;
  const LevelSummary one = SummarizeLevels(run, LevelTwoRequests(), SloSpec{})[0];
  EXPECT_EQ(one.pipeline_share, 0);
}

TEST(MetricsTest, GoodputCountsRequestsMeetingEverySlo) {
  RunRecord run;
  run.levels.push_back(LevelTwoRecord(10));
  const std::vector<RequestRecord> requests = LevelTwoRequests();

  // TTFT <= 250 and TPOT <= 150: seq 2 (100, 100), seq 3 (200, 120), seq 5 (50, TPOT
  // counted 0 as in vLLM) are good; seq 4 (TTFT 300) is not. 3 / 10 s.
  SloSpec slo;
  slo.ttft_ms = 250;
  slo.tpot_ms = 150;
  LevelSummary s = SummarizeLevels(run, requests, slo)[0];
  EXPECT_EQ(s.good_requests, 3);
  EXPECT_NEAR(s.goodput, 0.3, kTol);

  // Adding E2E <= 1500 drops seq 3 (2600 ms): 2 / 10 s.
  slo.e2e_ms = 1500;
  s = SummarizeLevels(run, requests, slo)[0];
  EXPECT_EQ(s.good_requests, 2);
  EXPECT_NEAR(s.goodput, 0.2, kTol);

  // The bound is inclusive (vLLM: slo >= value): TTFT <= 300 lets seq 4 in.
  slo = SloSpec{};
  slo.ttft_ms = 300;
  s = SummarizeLevels(run, requests, slo)[0];
  EXPECT_EQ(s.good_requests, 4);
}

TEST(MetricsTest, LevelsAreOrderedAndDurationFallsBackToRequestSpan) {
  RunRecord run;
  run.levels.push_back(LevelTwoRecord(10));
  std::vector<RequestRecord> requests = LevelTwoRequests();
  // Concurrency 4, not in the run record: span from 20.0 to max(21.0, 22.5) = 2.5 s.
  requests.push_back(Req(20, 4, 0, 20.0, 10, 1000, 10, 5, {}));
  requests.push_back(Req(21, 4, 0, 20.5, 10, 2000, 10, 5, {}));
  // An open-loop level (concurrency 0, 2.5 req/s) sorts first.
  RequestRecord open = Req(30, 0, 0, 30.0, 10, 500, 4, 5, {});
  open.request_rate = 2.5;
  requests.push_back(open);
  // A level in the run record with no requests still gets a row.
  LevelRecord empty;
  empty.concurrency = 8;
  empty.start_s = 40;
  empty.end_s = 41;
  run.levels.push_back(empty);

  const std::vector<LevelSummary> levels = SummarizeLevels(run, requests, SloSpec{});
  ASSERT_EQ(levels.size(), 4u);
  EXPECT_EQ(levels[0].concurrency, 0);
  EXPECT_EQ(levels[0].request_rate, 2.5);
  EXPECT_EQ(levels[1].concurrency, 2);
  EXPECT_EQ(levels[2].concurrency, 4);
  EXPECT_NEAR(levels[2].duration_s, 2.5, kTol);
  EXPECT_NEAR(levels[2].output_throughput, 8, kTol);
  EXPECT_NEAR(levels[2].request_throughput, 0.8, kTol);
  EXPECT_FALSE(levels[2].server.available);
  EXPECT_EQ(levels[2].allreduce_share, -1);
  EXPECT_EQ(levels[3].concurrency, 8);
  EXPECT_EQ(levels[3].requests, 0);
  EXPECT_EQ(levels[3].output_throughput, 0);
  EXPECT_EQ(levels[3].ttft_ms.count, 0);
}

TEST(MetricsTest, WarmupIsSummarizedSeparately) {
  std::vector<RequestRecord> requests = LevelTwoRequests();
  for (RequestRecord& r : WarmupRequests()) requests.push_back(r);
  const WarmupSummary w = SummarizeWarmup(requests);
  EXPECT_EQ(w.count, 2);
  EXPECT_TRUE(w.first_success);
  EXPECT_EQ(w.first_latency_ms, 900);  // seq 0, not the one listed first
  EXPECT_EQ(w.first_ttft_ms, 500);
  EXPECT_EQ(SummarizeWarmup(LevelTwoRequests()).count, 0);
}

// LevelTwoRequests behind a router: seq 2 and 4 answered by b1, 3, 5 and 6 (the timeout) by
// b2, the HTTP 503 (seq 7) named no backend; a warm-up request answered by b3.
std::vector<RequestRecord> RoutedRequests() {
  std::vector<RequestRecord> v = LevelTwoRequests();
  for (RequestRecord& r : v) {
    if (r.seq == 2 || r.seq == 4) r.outcome.backend = "http://b1/v1";
    if (r.seq == 3 || r.seq == 5 || r.seq == 6) r.outcome.backend = "http://b2/v1";
  }
  v.push_back(WarmupRequests()[0]);
  v.back().outcome.backend = "http://b3/v1";
  return v;
}

TEST(MetricsTest, ByBackendSplitsEachLevel) {
  RunRecord run;
  run.levels.push_back(LevelTwoRecord(10));
  const std::vector<RequestRecord> requests = RoutedRequests();
  EXPECT_EQ(AnsweringBackends(requests), (std::vector<std::string>{"http://b1/v1", "http://b2/v1"}));
  EXPECT_TRUE(AnsweringBackends(LevelTwoRequests()).empty());

  const std::vector<LevelSummary> split = SummarizeByBackend(run, requests, SloSpec{});
  ASSERT_EQ(split.size(), 3u);
  const LevelSummary& none = split[0];
  EXPECT_EQ(none.backend, kNoBackend);
  EXPECT_EQ(none.requests, 1);
  EXPECT_EQ(none.errors, 1);

  // b1: TTFT [100, 300] -> median 200, p95 100 + 0.95 * 200; TPOT [100, 250]; 15 tokens / 10 s.
  const LevelSummary& b1 = split[1];
  EXPECT_EQ(b1.backend, "http://b1/v1");
  EXPECT_EQ(b1.concurrency, 2);
  EXPECT_EQ(b1.requests, 2);
  EXPECT_EQ(b1.errors + b1.timeouts, 0);
  EXPECT_NEAR(b1.ttft_ms.median, 200, kTol);
  EXPECT_NEAR(b1.ttft_ms.p95, 290, kTol);
  EXPECT_NEAR(b1.tpot_ms.median, 175, kTol);
  EXPECT_NEAR(b1.output_throughput, 1.5, kTol);
  EXPECT_FALSE(b1.server.available);  // one server's step time is no backend's share
  EXPECT_EQ(b1.compute_share, -1);

  // b2: TTFT [50, 200] -> median 125, p95 50 + 0.95 * 150; TPOT [120]; 22 tokens / 10 s; 1 timeout.
  const LevelSummary& b2 = split[2];
  EXPECT_EQ(b2.backend, "http://b2/v1");
  EXPECT_EQ(b2.requests, 3);
  EXPECT_EQ(b2.timeouts, 1);
  EXPECT_NEAR(b2.ttft_ms.median, 125, kTol);
  EXPECT_NEAR(b2.ttft_ms.p95, 192.5, kTol);
  EXPECT_NEAR(b2.tpot_ms.median, 120, kTol);
  EXPECT_NEAR(b2.output_throughput, 2.2, kTol);

  // The shares add up to the level.
  const LevelSummary all = SummarizeLevels(run, requests, SloSpec{})[0];
  EXPECT_EQ(all.backend, "");
  EXPECT_EQ(none.requests + b1.requests + b2.requests, all.requests);
  EXPECT_NEAR(b1.output_throughput + b2.output_throughput, all.output_throughput, kTol);

  EXPECT_EQ(ToJson(b1)["backend"], "http://b1/v1");
  EXPECT_FALSE(ToJson(all).contains("backend"));
  const std::string table = FormatBackendTable(split);
  EXPECT_THAT(table, HasSubstr("http://b2/v1"));
  EXPECT_THAT(table, HasSubstr("c=2       (none)"));
}

TEST(MetricsTest, JsonAndConsoleTable) {
  RunRecord run;
  run.levels.push_back(LevelTwoRecord(10));
  SloSpec slo;
  slo.ttft_ms = 250;
  const LevelSummary s = SummarizeLevels(run, LevelTwoRequests(), slo)[0];
  const nlohmann::json j = ToJson(s);
  EXPECT_EQ(j["concurrency"], 2);
  EXPECT_NEAR(j["ttft_ms"]["p95"].get<double>(), 285, kTol);
  EXPECT_NEAR(j["goodput"].get<double>(), 0.3, kTol);
  EXPECT_EQ(j["error_reasons"]["HTTP 503"], 1);
  EXPECT_NEAR(j["server"]["allreduce_share"].get<double>(), 0.2, kTol);
  EXPECT_FALSE(j["server"].contains("spec_decode"));  // no speculative decoding in the level

  // With speculation: 40 verifying sequence-steps kept 60 of 100 draft tokens.
  RunRecord spec_run = run;
  spec_run.levels[0].server.spec_drafts = 40;
  spec_run.levels[0].server.spec_draft_tokens = 100;
  spec_run.levels[0].server.spec_accepted_tokens = 60;
  const nlohmann::json sj = ToJson(SummarizeLevels(spec_run, LevelTwoRequests(), slo)[0]);
  EXPECT_NEAR(sj["server"]["spec_decode"]["mean_acceptance_length"].get<double>(), 2.5, kTol);
  EXPECT_NEAR(sj["server"]["spec_decode"]["acceptance_rate"].get<double>(), 0.6, kTol);

  const std::string table = FormatLevelTable({s});
  // 2 failures of 6 = 33.3 %, 3.7 tok/s, 0.40 req/s, TTFT p50 150.0, p95 285.0.
  EXPECT_THAT(table, HasSubstr("c=2"));
  EXPECT_THAT(table, HasSubstr(" 33.3 "));
  EXPECT_THAT(table, HasSubstr(" 3.7 "));
  EXPECT_THAT(table, HasSubstr(" 0.40 "));
  EXPECT_THAT(table, HasSubstr(" 150.0 "));
  EXPECT_THAT(table, HasSubstr(" 285.0 "));
  EXPECT_EQ(LevelName(0, 2.5), "r=2.5/s");
}

// ---- Records -----------------------------------------------------------------------

RunRecord FullRun() {
  RunRecord r;
  r.run_id = "run-1";
  r.target = "grpc://localhost:50051";
  r.api = "tpserve-grpc";
  r.model = "gemma";
  r.weights_source = "/models/gemma";
  r.engine_version = "tpserve 0.1.0 (abc123)";
  r.tpbench_version = "tpbench 0.1.0";
  r.dtype = "bf16";
  r.quantization = "q4_k+q6_k";
  r.kv_cache_dtype = "fp8_e4m3";
  r.driver_version = "550.54";
  r.cuda_version = "12.4";
  r.kernels = "cuda: tuned+pdl, CUDA graphs";
  r.speculative_config = R"({"method":"ngram","num_speculative_tokens":4})";
  r.gpu_model = "NVIDIA H200";
  r.gpu_count = 2;
  r.nodes = 1;
  r.tp_size = 1;
  r.pp_size = 2;
  r.pipeline_stages = "layers 0-4 | 5";
  r.max_model_len = 8192;
  r.max_num_seqs = 64;
  r.workload = "random in=128 out=64 range=0.0";
  r.ignore_eos = true;
  r.load_time_s = 31.5;
  r.warmup_ms = 900;
  r.start_time = "2025-01-02T03:04:05.000Z";
  r.end_time = "2025-01-02T03:14:05.000Z";
  r.levels.push_back(LevelTwoRecord(10));
  r.levels.back().server.preemptions = 3;
  r.levels.back().server.pipeline_ms = 150;
  r.levels.back().server.prefix_cache_hit_rate = 0.25;
  r.extra["host0"] = "node-a";
  return r;
}

TEST(RecordTest, RequestRoundTrip) {
  RequestRecord r = LevelTwoRequests()[1];
  r.timestamp = "2025-01-02T03:04:05.123Z";
  r.target = "http://localhost:8000/v1";
  r.request_rate = 0.5;
  r.max_tokens = 64;
  r.outcome.finish_reason = "length";
  r.outcome.backend = "http://node2:8000/v1";
  r.outcome.output_text = "caf\xc3\xa9 au lait";
  r.outcome.output_token_ids = std::vector<int32_t>{5, 0, 262143};
  r.prompt_index = 7;
  const std::string line = ToJson(r).dump();
  const absl::StatusOr<RequestRecord> back = RequestRecordFromJson(nlohmann::json::parse(line));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ToJson(*back), ToJson(r));
  EXPECT_EQ(back->seq, 3);
  EXPECT_EQ(back->timestamp, r.timestamp);
  EXPECT_EQ(back->expected_prompt_tokens, 40);
  EXPECT_EQ(back->outcome.prompt_tokens, -1);
  EXPECT_EQ(back->outcome.itl_ms, (std::vector<double>{80, 120, 100}));
  EXPECT_EQ(back->outcome.server_queue_ms, 15);
  EXPECT_EQ(back->outcome.finish_reason, "length");
  EXPECT_EQ(back->outcome.backend, "http://node2:8000/v1");
  EXPECT_EQ(back->outcome.output_text, "caf\xc3\xa9 au lait");
  EXPECT_EQ(back->outcome.output_token_ids, (std::vector<int32_t>{5, 0, 262143}));
  EXPECT_EQ(back->prompt_index, 7);

  // Not kept: no output fields; no backend: null, read back as empty.
  const nlohmann::json plain = ToJson(LevelTwoRequests()[1]);
  EXPECT_FALSE(plain.contains("output_text"));
  EXPECT_FALSE(plain.contains("output_token_ids"));
  EXPECT_TRUE(plain["backend"].is_null());
  const absl::StatusOr<RequestRecord> plain_back = RequestRecordFromJson(plain);
  ASSERT_TRUE(plain_back.ok()) << plain_back.status();
  EXPECT_EQ(plain_back->outcome.backend, "");
  EXPECT_FALSE(plain_back->outcome.output_text.has_value());
  EXPECT_FALSE(plain_back->outcome.output_token_ids.has_value());
}

TEST(RecordTest, RequestOptionalFieldsDefault) {
  const nlohmann::json j = nlohmann::json::parse(
      R"({"seq": 1, "send_time_s": 0.5, "concurrency": 1, "round": 0, "success": true,
          "latency_ms": 10, "ttft_ms": 2, "completion_tokens": 3})");
  const absl::StatusOr<RequestRecord> r = RequestRecordFromJson(j);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outcome.prompt_tokens, -1);
  EXPECT_EQ(r->outcome.server_queue_ms, -1);
  EXPECT_EQ(r->expected_prompt_tokens, -1);
  EXPECT_TRUE(r->outcome.itl_ms.empty());
}

TEST(RecordTest, RequestErrorsNameTheField) {
  nlohmann::json j = ToJson(LevelTwoRequests()[0]);
  j.erase("latency_ms");
  absl::StatusOr<RequestRecord> r = RequestRecordFromJson(j);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("\"latency_ms\" is missing"));

  j = ToJson(LevelTwoRequests()[0]);
  j["success"] = "yes";
  r = RequestRecordFromJson(j);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("\"success\" must be a boolean"));

  j = ToJson(LevelTwoRequests()[0]);
  j["concurrency"] = 1.5;
  r = RequestRecordFromJson(j);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("\"concurrency\" must be an integer"));

  j = ToJson(LevelTwoRequests()[0]);
  j["itl_ms"] = nlohmann::json::array({1, "x"});
  r = RequestRecordFromJson(j);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("itl_ms[1]"));
}

TEST(RecordTest, ReadRequestRecordsSkipsBlankLinesAndNamesBadLine) {
  TempDir dir;
  const fs::path path = dir.path() / "requests.jsonl";
  const std::vector<RequestRecord> v = LevelTwoRequests();
  WriteAll(path, ToJson(v[0]).dump() + "\n\n" + ToJson(v[1]).dump() + "\n");
  absl::StatusOr<std::vector<RequestRecord>> read = ReadRequestRecords(path.string());
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 2u);
  EXPECT_EQ((*read)[1].seq, 3);

  WriteAll(path, ToJson(v[0]).dump() + "\n\n{\"seq\": 1,\n");
  read = ReadRequestRecords(path.string());
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(path.string() + ":3:"));

  nlohmann::json missing = ToJson(v[0]);
  missing.erase("round");
  WriteAll(path, ToJson(v[0]).dump() + "\n" + missing.dump() + "\n");
  read = ReadRequestRecords(path.string());
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()), HasSubstr(":2:"));
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("\"round\""));

  read = ReadRequestRecords((dir.path() / "absent.jsonl").string());
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(std::string(read.status().message()), HasSubstr("absent.jsonl"));
}

TEST(RecordTest, RunRoundTripAndErrors) {
  const RunRecord run = FullRun();
  TempDir dir;
  const fs::path path = dir.path() / "run.json";
  WriteAll(path, ToJson(run).dump(2));
  absl::StatusOr<RunRecord> back = ReadRunRecord(path.string());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ToJson(*back), ToJson(run));
  EXPECT_EQ(back->gpu_model, "NVIDIA H200");
  EXPECT_EQ(back->kernels, "cuda: tuned+pdl, CUDA graphs");
  EXPECT_EQ(back->quantization, "q4_k+q6_k");
  EXPECT_EQ(back->kv_cache_dtype, "fp8_e4m3");
  EXPECT_EQ(back->speculative_config, R"({"method":"ngram","num_speculative_tokens":4})");
  EXPECT_EQ(back->levels[0].server.spec_accepted_tokens, 0);
  EXPECT_EQ(back->max_model_len, 8192);
  ASSERT_EQ(back->levels.size(), 1u);
  EXPECT_EQ(back->levels[0].end_s, 20);
  EXPECT_EQ(back->levels[0].server.allreduce_ms, 200);
  EXPECT_EQ(back->levels[0].server.pipeline_ms, 150);
  EXPECT_EQ(back->pp_size, 2);
  EXPECT_EQ(back->pipeline_stages, "layers 0-4 | 5");
  EXPECT_EQ(back->levels[0].server.preemptions, 3);
  EXPECT_EQ(back->extra.at("host0"), "node-a");

  // A record written before pipeline stages existed reads as unknown (0) and none.
  nlohmann::json j = ToJson(run);
  j.erase("pp_size");
  j.erase("pipeline_stages");
  j.erase("quantization");
  j.erase("kv_cache_dtype");
  j["levels"][0]["server"].erase("pipeline_ms");
  absl::StatusOr<RunRecord> old = RunRecordFromJson(j);
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->pp_size, 0);
  EXPECT_EQ(old->pipeline_stages, "");
  EXPECT_EQ(old->quantization, "") << "unknown in a record from before the field";
  EXPECT_EQ(old->levels[0].server.pipeline_ms, 0);
  j["pp_size"] = "two";
  EXPECT_THAT(std::string(RunRecordFromJson(j).status().message()), HasSubstr("pp_size"));

  j = ToJson(run);
  j["levels"][0].erase("end_s");
  absl::StatusOr<RunRecord> bad = RunRecordFromJson(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("levels[0].end_s"));

  j = ToJson(run);
  j["levels"][0]["server"]["steps"] = "many";
  bad = RunRecordFromJson(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("levels[0].server.steps"));

  j = ToJson(run);
  j["extra"]["netem"] = 5;
  bad = RunRecordFromJson(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("extra.netem"));

  j = ToJson(run);
  j.erase("api");
  WriteAll(path, j.dump());
  bad = ReadRunRecord(path.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr(path.string()));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("\"api\""));

  bad = ReadRunRecord((dir.path() / "nope.json").string());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("nope.json"));
}

// ---- Baselines and report ----------------------------------------------------------

TEST(ReportTest, ReadsBaselinesAndRejectsMissingFields) {
  TempDir dir;
  const fs::path path = dir.path() / "baselines.json";
  WriteAll(path, R"({"baselines": [
      {"provider": "Together AI", "model": "gemma-2-27b", "hardware": "H100",
       "output_tokens_per_s": 80.5, "ttft_ms": 350, "source_url": "https://example.com/a",
       "date": "2025-01-01", "notes": "median"},
      {"provider": "Groq", "model": "gemma-2-9b", "source_url": "https://example.com/b",
       "date": "2025-02-01"}]})");
  absl::StatusOr<std::vector<Baseline>> b = ReadBaselines(path.string());
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->size(), 2u);
  EXPECT_EQ((*b)[0].provider, "Together AI");
  EXPECT_EQ((*b)[0].output_tokens_per_s, 80.5);
  EXPECT_EQ((*b)[0].ttft_ms, 350);
  EXPECT_EQ((*b)[0].notes, "median");
  EXPECT_EQ((*b)[1].output_tokens_per_s, -1);
  EXPECT_EQ((*b)[1].hardware, "");

  WriteAll(path, R"({"baselines": [{"provider": "A", "model": "m", "source_url": "u",
                                   "date": "d"}, {"provider": "B", "model": "m",
                                   "source_url": "u"}]})");
  b = ReadBaselines(path.string());
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("baselines[1]"));
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("\"date\""));

  WriteAll(path, R"({"baselines": [{"provider": "A", "model": "m", "source_url": "u",
                                   "date": "d", "ttft_ms": "fast"}]})");
  b = ReadBaselines(path.string());
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("\"ttft_ms\""));
}

// Concurrency 1 for the report: TPOT 400/10 = 40 and 500/10 = 50 ms (per user 25 and 20
// tok/s, median 22.5); 22 tokens in the level's 2 s = 11 tok/s; the round spans
// [1.0, 2.06] s = 22/1.06 = 20.75 tok/s.
ReportRun MakeReportRun(int tp_size, double level_two_duration_s) {
  ReportRun r;
  r.run = FullRun();
  r.run.run_id = absl::StrCat("run-tp", tp_size);
  r.run.tp_size = tp_size;
  r.run.pp_size = 1;
  r.run.pipeline_stages = "";
  r.run.gpu_count = tp_size;
  r.run.levels = {LevelTwoRecord(level_two_duration_s)};
  LevelRecord one;
  one.concurrency = 1;
  one.rounds = 1;
  one.start_s = 1;
  one.end_s = 3;
  r.run.levels.insert(r.run.levels.begin(), one);
  r.requests = WarmupRequests();
  r.requests.push_back(Req(10, 1, 0, 1.0, 40, 440, 11, 50, {40, 40}));
  r.requests.push_back(Req(11, 1, 0, 1.5, 60, 560, 11, 50, {50, 50}));
  for (RequestRecord& q : LevelTwoRequests()) r.requests.push_back(q);
  r.requests.back().outcome.error = "HTTP 503 | caf\xc3\xa9";  // pipe and non-ASCII
  return r;
}

bool IsAscii(const std::string& s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) > 0x7e) return false;
  }
  return true;
}

TEST(ReportTest, WritesTablesPlotsAndBaselines) {
  const std::vector<ReportRun> runs = {MakeReportRun(1, 10), MakeReportRun(2, 5)};
  Baseline cloud;
  cloud.provider = "Together AI";
  cloud.model = "gemma-2-27b";
  cloud.hardware = "H100";
  cloud.output_tokens_per_s = 80.5;
  cloud.ttft_ms = 350;
  cloud.source_url = "https://example.com/a";
  cloud.date = "2025-01-01";
  SloSpec slo;
  slo.ttft_ms = 250;
  slo.tpot_ms = 150;
  TempDir dir;
  const absl::StatusOr<std::string> md = WriteReport(runs, {cloud}, slo, dir.path().string());
  ASSERT_TRUE(md.ok()) << md.status();
  EXPECT_EQ(ReadAll(dir.path() / "report.md"), *md);
  EXPECT_TRUE(IsAscii(*md));

  EXPECT_THAT(*md, HasSubstr("## Run 1: tpserve-grpc tp=1 nodes=1\n"));
  EXPECT_THAT(*md, HasSubstr("## Run 2: tpserve-grpc tp=2 nodes=1\n"));
  EXPECT_THAT(*md, HasSubstr("[docs/bench.md](docs/bench.md)"));
  EXPECT_THAT(*md, HasSubstr("| Device | NVIDIA H200 x 2 |\n"));
  EXPECT_THAT(*md, HasSubstr("| Server load time | 31.5 s |\n"));
  EXPECT_THAT(*md, HasSubstr("| Warm-up latency | 900.0 ms (2 warm-up requests; first succeeded, "
                             "TTFT 500.0 ms) |\n"));

  // Throughput rows, run 1. Concurrency 2 (see LevelTwoRequests): errors 1/6, timeouts
  // 1/6, 37 tokens / 10 s, rounds 5.86 / 10.0 tok/s, 0.4 req/s, per-user median 8.33,
  // goodput 3 / 10 s, queue median 15, step split 70/20/10.
  EXPECT_THAT(*md, HasSubstr("| Concurrency | Requests | Error % | Timeout % | Output tok/s | "
                             "Round tok/s median / max | Req/s | Per-user tok/s median | "
                             "Goodput req/s | Queue median ms | "
                             "Step compute / all-reduce / sched % |\n"));
  EXPECT_THAT(*md, HasSubstr("| 1 | 2 | 0.0 | 0.0 | 11.0 | 20.8 / 20.8 | 1.00 | 22.5 | 1.00 | - "
                             "| - |\n"));
  EXPECT_THAT(*md, HasSubstr("| 2 | 6 | 16.7 | 16.7 | 3.7 | 5.9 / 10.0 | 0.40 | 8.3 | 0.30 | "
                             "15.0 | 70.0 / 20.0 / 10.0 |\n"));
  // Run 2 has the same requests in 5 s.
  EXPECT_THAT(*md, HasSubstr("| 2 | 6 | 16.7 | 16.7 | 7.4 | 5.9 / 10.0 | 0.80 | 8.3 | 0.60 | "));
  EXPECT_THAT(*md, HasSubstr("Goodput counts successful requests with TTFT <= 250.0 ms, "
                             "TPOT <= 150.0 ms."));

  // Latency row: TTFT 150/285/297, TPOT 120/237, ITL 110/225, E2E 1150/2405/2600.
  EXPECT_THAT(*md, HasSubstr("| 2 | 150.0 | 285.0 | 297.0 | 120.00 | 237.00 | 110.00 | 225.00 | "
                             "1150.0 | 2405.0 | 2600.0 |\n"));
  // Error reasons, with the pipe escaped and non-ASCII replaced.
  EXPECT_THAT(*md, HasSubstr("| c=2 | HTTP 503 \\| caf?? | 1 |\n"));
  EXPECT_THAT(*md, HasSubstr("| c=2 | timed out after 3 s | 1 |\n"));

  // Scaling: concurrency 2 is the highest shared level; 7.4 / 3.7 = 2.00x.
  EXPECT_THAT(*md, HasSubstr("## Scaling"));
  EXPECT_THAT(*md, HasSubstr("| 1: tpserve-grpc tp=1 nodes=1 | 1 | 1 | 3.7 | 1.00x | 150.0 | "
                             "120.00 | 20.0 |\n"));
  EXPECT_THAT(*md, HasSubstr("| 2: tpserve-grpc tp=2 nodes=1 | 2 | 1 | 7.4 | 2.00x | 150.0 | "
                             "120.00 | 20.0 |\n"));

  // Baselines beside our best single-user figures (22.5 tok/s, TTFT median 50).
  EXPECT_THAT(*md, HasSubstr("## Cloud baselines"));
  EXPECT_THAT(
      *md, HasSubstr("| measured here: tpserve-grpc tp=1 nodes=1 | gemma | NVIDIA H200 x 1 "
                     "| 22.5 | 50.0 | 2025-01-02 | this report | best run at concurrency 1 |\n"));
  EXPECT_THAT(*md, HasSubstr("| Together AI | gemma-2-27b | H100 | 80.5 | 350.0 | 2025-01-01 | "
                             "[source](https://example.com/a) | - |\n"));
  EXPECT_THAT(*md, HasSubstr("not measured here."));

  for (const char* name : {"output_throughput_vs_concurrency.svg", "ttft_p95_vs_concurrency.svg",
                           "tpot_p95_vs_concurrency.svg", "scaling.svg"}) {
    SCOPED_TRACE(name);
    EXPECT_THAT(*md, HasSubstr(absl::StrCat("![](", name, ")")));
    const std::string svg = ReadAll(dir.path() / name);
    ASSERT_FALSE(svg.empty());
    EXPECT_EQ(svg.rfind("<svg", 0), 0u);
    EXPECT_THAT(svg, HasSubstr("</svg>\n"));
    EXPECT_TRUE(IsAscii(svg));
    if (std::string(name) == "scaling.svg") {
      EXPECT_THAT(svg, HasSubstr("<rect"));
    } else {
      EXPECT_THAT(svg, HasSubstr("<polyline"));
      EXPECT_THAT(svg, HasSubstr("1: tpserve-grpc tp=1 nodes=1"));  // legend
      EXPECT_THAT(svg, HasSubstr(">2</text>"));                     // log2 tick
    }
  }
  EXPECT_FALSE(fs::exists(dir.path() / "output_throughput_vs_rate.svg"));
}

// A run behind a router that spread the requests over two backends gets a by-backend table;
// a run answered by one backend (or by a server directly) does not.
TEST(ReportTest, SplitsARunByBackendWhenSeveralAnswered) {
  ReportRun routed;
  routed.run = FullRun();
  routed.run.levels = {LevelTwoRecord(10)};
  routed.requests = RoutedRequests();
  ReportRun single = routed;
  single.run.run_id = "single";
  for (RequestRecord& r : single.requests) r.outcome.backend = "http://b1/v1";
  TempDir dir;
  const absl::StatusOr<std::string> md = WriteReport({routed}, {}, SloSpec{}, dir.path().string());
  ASSERT_TRUE(md.ok()) << md.status();
  EXPECT_THAT(*md, HasSubstr("By backend (as the router named it in x-tpserve-backend"));
  EXPECT_THAT(*md, HasSubstr("| c=2 | (none) | 1 | 1 | - | - | - | 0.0 |\n"));
  EXPECT_THAT(*md, HasSubstr("| c=2 | http://b1/v1 | 2 | 0 | 200.0 | 290.0 | 175.00 | 1.5 |\n"));
  EXPECT_THAT(*md, HasSubstr("| c=2 | http://b2/v1 | 3 | 1 | 125.0 | 192.5 | 120.00 | 2.2 |\n"));
  const absl::StatusOr<std::string> one = WriteReport({single}, {}, SloSpec{}, dir.path().string());
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_THAT(*one, Not(HasSubstr("By backend")));
}

// TP 4 over two nodes beside TP 2 x PP 2 over two nodes: the layout in the labels, the
// environment and the scaling table, the pipeline share beside the all-reduce share.
TEST(ReportTest, ComparesPipelineAndTensorParallelLayouts) {
  std::vector<ReportRun> runs = {MakeReportRun(4, 10), MakeReportRun(2, 5)};
  runs[0].run.nodes = 2;
  runs[1].run.nodes = 2;
  runs[1].run.pp_size = 2;
  runs[1].run.pipeline_stages = "layers 0-4 | 5";
  runs[1].run.levels[1].server.pipeline_ms = 300;  // 700 / 200 / 300 / 100 of 1300 ms
  // Both stages computed 1560 ms of 2 x 1300: a bubble of 40%.
  runs[1].run.levels[1].server.stages_busy_ms = 1560;
  for (ReportRun& r : runs) r.label = "";
  TempDir dir;
  const absl::StatusOr<std::string> md = WriteReport(runs, {}, SloSpec{}, dir.path().string());
  ASSERT_TRUE(md.ok()) << md.status();
  EXPECT_THAT(*md, HasSubstr("## Run 1: tpserve-grpc tp=4 nodes=2\n"));
  EXPECT_THAT(*md, HasSubstr("## Run 2: tpserve-grpc tp=2 pp=2 nodes=2\n"));
  EXPECT_THAT(*md, HasSubstr("| Pipeline parallel | 1 |\n"));
  EXPECT_THAT(*md, HasSubstr("| Pipeline parallel | 2 (layers 0-4 \\| 5) |\n"));
  // Run 1 has no pipeline time, so its split stays three-way.
  EXPECT_THAT(*md, HasSubstr("| Step compute / all-reduce / sched % |\n"));
  EXPECT_THAT(*md, HasSubstr("| Step compute / all-reduce / pipeline / sched % |\n"));
  EXPECT_THAT(*md, HasSubstr(" | 70.0 / 20.0 / 10.0 |\n"));
  EXPECT_THAT(*md, HasSubstr(" | 53.8 / 15.4 / 23.1 / 7.7 |\n"));

  EXPECT_THAT(*md, HasSubstr("| Run | TP | PP | Nodes | Output tok/s | vs run 1 | TTFT median ms | "
                             "TPOT median ms | All-reduce % | Pipeline % | Bubble % |\n"));
  EXPECT_THAT(*md, HasSubstr("| 1: tpserve-grpc tp=4 nodes=2 | 4 | 1 | 2 | 3.7 | 1.00x | 150.0 | "
                             "120.00 | 20.0 | 0.0 | - |\n"));
  EXPECT_THAT(*md, HasSubstr("| 2: tpserve-grpc tp=2 pp=2 nodes=2 | 2 | 2 | 2 | 7.4 | 2.00x | "
                             "150.0 | 120.00 | 15.4 | 23.1 | 40.0 |\n"));
  EXPECT_THAT(*md, HasSubstr("Bubble % is the share of all stages' time spent idle"));

  // Side by side at every concurrency; concurrency 1 has no server counters.
  EXPECT_THAT(*md, HasSubstr("| Concurrency | 1: tpserve-grpc tp=4 nodes=2 | "
                             "2: tpserve-grpc tp=2 pp=2 nodes=2 |\n"));
  EXPECT_THAT(*md, HasSubstr("Output tok/s:\n\n"));
  EXPECT_THAT(*md, HasSubstr("| 2 | 3.7 | 7.4 |\n"));
  EXPECT_THAT(*md, HasSubstr("All-reduce % + pipeline % of rank 0's step:\n\n"));
  EXPECT_THAT(*md, HasSubstr("| 1 | - | - |\n| 2 | 20.0 | 15.4 + 23.1 |\n"));

  const std::string svg = ReadAll(dir.path() / "comm_share_vs_concurrency.svg");
  EXPECT_THAT(svg, HasSubstr("<polyline"));
  EXPECT_THAT(svg, HasSubstr("2: tpserve-grpc tp=2 pp=2 nodes=2"));
}

TEST(ReportTest, OmitsScalingForOneLayoutAndNamesMeasuredProvider) {
  std::vector<ReportRun> runs = {MakeReportRun(1, 10)};
  runs[0].run.target = "https://api.together.xyz/v1";
  runs[0].run.extra["netem"] = "delay 5ms";
  runs[0].label = "";
  Baseline cloud;
  cloud.provider = "Together AI";
  cloud.model = "m";
  cloud.source_url = "https://example.com";
  cloud.date = "2025-01-01";
  TempDir dir;
  const absl::StatusOr<std::string> md = WriteReport(runs, {cloud}, SloSpec{}, dir.path().string());
  ASSERT_TRUE(md.ok()) << md.status();
  EXPECT_THAT(*md, Not(HasSubstr("## Scaling")));
  EXPECT_THAT(*md, Not(HasSubstr("Goodput")));
  EXPECT_FALSE(fs::exists(dir.path() / "scaling.svg"));
  EXPECT_THAT(*md, HasSubstr("## Run 1: tpserve-grpc tp=1 nodes=1 netem=delay 5ms\n"));
  EXPECT_THAT(*md, HasSubstr("except Together AI (run 1)"));
}

TEST(ReportTest, RunWhereEveryRequestFailedHasNoPlots) {
  ReportRun dead;
  dead.run.run_id = "dead";
  dead.run.api = "tpserve-grpc";
  dead.run.target = "grpc://127.0.0.1:1";
  for (int i = 0; i < 3; ++i) dead.requests.push_back(Failed(i, 1, 0, 0, 1, false, "refused"));
  TempDir dir;
  const absl::StatusOr<std::string> md = WriteReport({dead}, {}, SloSpec{}, dir.path().string());
  ASSERT_TRUE(md.ok()) << md.status();
  EXPECT_THAT(*md, HasSubstr("| 1 | 3 | 100.0 | 0.0 | 0.0 |"));
  EXPECT_THAT(*md, HasSubstr("| c=1 | refused | 3 |\n"));
  EXPECT_THAT(*md, Not(HasSubstr("## Plots")));
  EXPECT_FALSE(fs::exists(dir.path() / "output_throughput_vs_concurrency.svg"));
}

TEST(ReportTest, IsDeterministic) {
  const std::vector<ReportRun> runs = {MakeReportRun(1, 10), MakeReportRun(2, 5)};
  TempDir a, b;
  const absl::StatusOr<std::string> md_a = WriteReport(runs, {}, SloSpec{}, a.path().string());
  const absl::StatusOr<std::string> md_b = WriteReport(runs, {}, SloSpec{}, b.path().string());
  ASSERT_TRUE(md_a.ok() && md_b.ok());
  EXPECT_EQ(*md_a, *md_b);
  EXPECT_THAT(*md_a, Not(HasSubstr("Cloud baselines")));
  int files = 0;
  for (const auto& entry : fs::directory_iterator(a.path())) {
    ++files;
    EXPECT_EQ(ReadAll(entry.path()), ReadAll(b.path() / entry.path().filename())) << entry.path();
  }
  EXPECT_EQ(files, 6);  // report.md, four level charts, scaling.svg
}

TEST(ReportTest, LoadsRunDirectoryAndReportsBadOutputDirectory) {
  TempDir dir;
  const ReportRun r = MakeReportRun(2, 5);
  WriteAll(dir.path() / "run.json", ToJson(r.run).dump());
  std::string lines;
  for (const RequestRecord& q : r.requests) lines += ToJson(q).dump() + "\n";
  WriteAll(dir.path() / "requests.jsonl", lines);
  const absl::StatusOr<ReportRun> loaded = LoadReportRun(dir.path().string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->label, "tpserve-grpc tp=2 nodes=1");
  EXPECT_EQ(loaded->requests.size(), r.requests.size());

  // A regular file where the output directory should be.
  const absl::StatusOr<std::string> md =
      WriteReport({*loaded}, {}, SloSpec{}, (dir.path() / "run.json").string());
  EXPECT_FALSE(md.ok());
  EXPECT_FALSE(WriteReport({}, {}, SloSpec{}, dir.path().string()).ok());
}

}  // namespace
}  // namespace tpserve::bench
